"""`pgq metrics`, the Prometheus exporter: loaded only when run, so prometheus_client is never
imported by `pgq --help` or any other command."""

from __future__ import annotations

import re
import signal
import sys
import threading
from datetime import timedelta
from typing import Any

import click
import psycopg

from pgq_core.config import connect_options, describe, schema_name
from pgq_core.extras import require
from pgq_core.text import printable

from .options import at_most
from .session import settings

_LISTEN = re.compile(r"(?:\[(?P<bracketed>[^\[\]]*)\]|(?P<host>[^\[\]]*)):(?P<port>[0-9]{1,5})")


def _listen_address(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, int]:
    """`HOST:PORT`, `[IPv6]:PORT` or `:PORT` (all addresses); port 0 picks a free one. The
    port is ASCII digits (`str.isdigit` also takes ² and ٣), brackets come in whole pairs."""
    found = _LISTEN.fullmatch(value)
    if found is None or int(found["port"]) > 65535:
        raise click.BadParameter(f"not HOST:PORT: {value!r}", ctx, param)
    host = found["bracketed"] if found["bracketed"] is not None else found["host"]
    return host or "0.0.0.0", int(found["port"])


@click.command("metrics")
@click.option(
    "--listen",
    default="127.0.0.1:9187",
    show_default=True,
    callback=_listen_address,
    help="HOST:PORT to serve /metrics on (:PORT for every address; port 0: any free port).",
)
@click.option(
    "--scrape-timeout",
    default="5s",
    show_default=True,
    callback=at_most(timedelta(minutes=5)),
    help="Statement timeout of each scrape's reads.",
)
@click.pass_context
def metrics_command(
    ctx: click.Context, listen: tuple[str, int], scrape_timeout: timedelta
) -> None:
    """Serve Prometheus metrics of the queue, read from the database on every scrape.

    \b
    pgq_jobs{queue,status}            ready, scheduled, running, expiring, dead, done
    pgq_oldest_due_age_seconds{queue} age of the oldest due ready job
    pgq_jobs_completed_total{queue}   completions ever (rate() gives throughput)
    pgq_expired_leases{queue}         running jobs past their lease, awaiting the reaper
    pgq_jobs_stuck{queue}             live lease, running past 3x the p99 run time and 60s
    pgq_job_wait_seconds{queue,window,quantile}  due to claimed, done jobs (5m, 1h)
    pgq_job_run_seconds{queue,window,quantile}   claimed to done, done jobs (5m, 1h)
    pgq_job_latency_jobs{queue,window}           done jobs those are over (at most 20,000)
    pgq_workers_holding_jobs{queue}   distinct workers holding running jobs
    pgq_workers_connected             pgq worker processes connected to the database
    pgq_xmin_horizon_age_seconds      oldest snapshot held open (vacuum cannot clean behind it)
    pgq_table_bytes, pgq_index_bytes, pgq_dead_tuples {table}
    pgq_server_standby                1 if the server read is a standby (--read-dsn)
    pgq_replica_lag_seconds           how far that standby is behind its primary
    pgq_up                            1 if the scrape read the database
    """
    require("metrics", "pgq metrics")
    from prometheus_client import CollectorRegistry, start_http_server

    from pgq_core.exporter import QueueCollector

    group = settings(ctx)
    read_dsn = group.read_dsn
    dsn, schema = (
        (read_dsn, schema_name(group.schema)) if read_dsn is not None
        else (group.target().dsn, group.target().schema)
    )

    def connect() -> psycopg.Connection[Any]:
        options = connect_options(dsn, reader=read_dsn is not None)
        return psycopg.connect(dsn, autocommit=True, **options)

    collector = QueueCollector(
        connect, schema, timeout=scrape_timeout, dsn=dsn, reader=read_dsn is not None
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    host, port = listen
    try:
        server, _thread = start_http_server(port, host, registry=registry)
    except OSError as exc:
        raise click.UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    bound = int(server.server_port)
    click.echo(
        f"pgq metrics: schema {schema} of {printable(describe(dsn))} "
        f"on http://{host}:{bound}/metrics",
        err=True,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        done.wait()
    finally:
        server.shutdown()
        server.server_close()
        collector.close()
    sys.exit(0)
