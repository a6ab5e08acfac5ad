"""What `pgq bench` runs once its options are parsed: pick the mode, run it on a throwaway
server, print tables or JSON. The click command itself lives in `pgq_cli.cli` and imports this
package only when it runs, so no other `pgq` command loads the bench."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from pgq_core.config import check_schema

from .cluster import missing as cluster_missing
from .common import installed_bytecode, server
from .drain import Options, print_tables, run_bench
from .failover import FailoverOptions, print_failover, run_failover
from .pickup import PickupOptions, print_pickup, run_pickup
from .producers import ProducersOptions, print_producers, run_producers
from .same_resources import SameResourcesOptions, print_same_resources, run_same_resources
from .scale import ScaleOptions, print_scale, run_stats_scale
from .soak import SoakOptions, print_soak, run_soak
from .views import ViewsOptions, print_views, run_views_scale

#: --jobs when not given: per side in the default run, per run with --same-resources.
DEFAULT_JOBS = 20_000
DEFAULT_SAME_RESOURCES_JOBS = 10_000
DEFAULT_PRODUCERS_JOBS = 8_000
#: --pickup: the busy phase's jobs, and the worker's concurrency (`pgq worker`'s default).
DEFAULT_PICKUP_BUSY_JOBS = 2_000
DEFAULT_PICKUP_CONCURRENCY = 10
#: --workers and --concurrency when not given: the drain's.
DEFAULT_WORKERS = 4
DEFAULT_CONCURRENCY = 50
#: --failover: the scenario of the failover test (3 workers at C = 10, 5,000 jobs).
FAILOVER_WORKERS = 3
FAILOVER_CONCURRENCY = 10
FAILOVER_JOBS = 5_000
#: --soak's --rate when not given.
SOAK_RATE = 200.0
#: --handler both: the pgq side runs once with each.
HANDLER_KINDS = {"sync": ("sync",), "async": ("async",), "both": ("sync", "async")}


def run_command(
    dsn: str | None,
    schema: str | None,
    *,
    jobs: int | None,
    workers: int | None,
    batch: int,
    concurrency: int | None,
    payload_bytes: int,
    latency_samples: int,
    rounds: int,
    stats_scale: bool,
    done_jobs: int,
    done_last_hour: int | None,
    ready_jobs: int,
    running_jobs: int,
    dead_jobs: int,
    repeat: int,
    same_resources: bool,
    concurrency_levels: tuple[int, ...],
    handler_kind: str,
    peers: bool = False,
    db_work: bool = False,
    pickup: bool = False,
    producers: int | None = None,
    soak: timedelta | None = None,
    rate: float | None = None,
    json_lines: str = "soak.jsonl",
    soak_sample: timedelta | None = None,
    lease: timedelta | None = None,
    failover: bool = False,
    failovers: int = 10,
    synchronous: bool = False,
    lag: timedelta | None = None,
    random_state: int | None = None,
    view_queues: int = 0,
    big_errors: int = 0,
    error_bytes: int = 1_000_000,
    idle_seconds: float = 20.0,
    views_python: str | None = None,
    as_json: bool = False,
) -> None:
    """`pgq bench` with its parsed options: the default run, --stats-scale, --same-resources,
    --producers, --soak or --failover.

    `schema` is only checked: every run uses throwaway schemas of its own (--failover: a
    cluster of its own, `dsn` unused). A --failover whose checks fail exits 1
    after its report. --peers and --db-work imply --same-resources."""
    same_resources = same_resources or peers or db_work
    modes = [stats_scale, same_resources, producers is not None, soak is not None, pickup,
             failover]  # fmt: skip
    if sum(modes) > 1:
        raise click.UsageError(
            "--stats-scale, --same-resources (--peers, --db-work), --producers, --soak, "
            "--pickup and --failover are separate runs: pick one"
        )
    if synchronous and not failover:
        raise click.UsageError("--sync is an option of --failover")
    views = bool(view_queues or big_errors)
    if views and not stats_scale:
        raise click.UsageError("--queues and --big-errors are options of --stats-scale")
    if done_last_hour is not None and done_last_hour > done_jobs:
        raise click.UsageError("--done-last-hour must not exceed --done")
    if soak is not None and soak.total_seconds() <= 0:
        raise click.UsageError("--soak must be longer than 0s")
    if schema:
        check_schema(schema)
    console = Console(stderr=as_json)
    installed_bytecode()

    def say(message: str) -> None:
        console.print(f"[dim]· {message}[/dim]")

    result: dict[str, Any]
    if failover:
        reason = cluster_missing()
        if reason:
            raise click.ClickException(f"--failover needs a Patroni cluster: {reason}")
        failover_opts = FailoverOptions(
            failovers=failovers,
            jobs=jobs or FAILOVER_JOBS,
            workers=workers or FAILOVER_WORKERS,
            concurrency=concurrency or FAILOVER_CONCURRENCY,
            synchronous=synchronous,
            lag=(lag if lag is not None else timedelta(milliseconds=200)).total_seconds(),
            lease=(lease or timedelta(seconds=30)).total_seconds(),
            seed=random_state,
        )
        result = run_failover(failover_opts, say)
        if as_json:
            click.echo(json.dumps(result, default=str, indent=2))
        else:
            print_failover(result, console)
        if not result["passed"]:
            if as_json:
                say("failover FAILED: see \"checks\"")
            raise click.exceptions.Exit(1)
        return

    with server(dsn, statement_stats=same_resources and db_work) as (target, embedded):
        if soak is not None:
            sample = (soak_sample or timedelta(minutes=1)).total_seconds()
            soak_opts = SoakOptions(
                soak.total_seconds(), rate or SOAK_RATE, max(sample, 1.0), Path(json_lines)
            )
            result = run_soak(target, embedded, soak_opts, say)
        elif producers is not None:
            total = jobs or DEFAULT_PRODUCERS_JOBS
            popts = ProducersOptions(producers, total, payload_bytes, rounds)
            result = run_producers(target, embedded, popts, say)
        elif pickup:
            pickup_opts = PickupOptions(
                samples=latency_samples,
                busy_jobs=jobs or DEFAULT_PICKUP_BUSY_JOBS,
                concurrency=concurrency or DEFAULT_PICKUP_CONCURRENCY,
                handlers=HANDLER_KINDS[handler_kind],
                payload_bytes=payload_bytes,
            )
            result = run_pickup(target, embedded, pickup_opts, say)
        elif views:
            views_opts = ViewsOptions(
                view_queues,
                big_errors,
                error_bytes,
                idle_seconds,
                python=views_python or sys.executable,
            )
            result = run_views_scale(target, embedded, views_opts, say)
        elif stats_scale:
            recent = done_jobs // 10 if done_last_hour is None else done_last_hour
            scale = ScaleOptions(done_jobs, ready_jobs, running_jobs, dead_jobs, repeat, recent)
            result = run_stats_scale(target, embedded, scale, say)
        elif same_resources:
            opts = SameResourcesOptions(
                jobs=jobs or DEFAULT_SAME_RESOURCES_JOBS,
                levels=concurrency_levels,
                handlers=HANDLER_KINDS[handler_kind],
                batch=batch,
                payload_bytes=payload_bytes,
                peers=peers,
                db_work=db_work,
            )
            result = run_same_resources(target, embedded, opts, say)
        else:
            result = run_bench(
                target,
                embedded,
                Options(
                    jobs or DEFAULT_JOBS,
                    workers or DEFAULT_WORKERS,
                    batch,
                    concurrency or DEFAULT_CONCURRENCY,
                    payload_bytes,
                    latency_samples,
                    rounds,
                ),
                say,
            )
    if as_json:
        click.echo(json.dumps(result, default=str, indent=2))
    elif soak is not None:
        print_soak(result, say)
    elif producers is not None:
        print_producers(result, console)
    elif pickup:
        print_pickup(result, console)
    elif views:
        print_views(result, console)
    elif stats_scale:
        print_scale(result, console)
    elif same_resources:
        print_same_resources(result, console)
    else:
        print_tables(result, console)

