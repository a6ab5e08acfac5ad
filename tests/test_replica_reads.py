"""Reads from a standby (`--read-dsn`), on a real primary and its streaming standby: the read
commands and the exporter say where they read and how far behind, writes still reach the
primary, and a standby reached by mistake is named, not taken for the primary."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from handlers_for_tests import noop
from prometheus_client.core import Metric
from replication import SCHEMA, Pair, running_pair
from support import ENV, link_connects, until

from pgq_cli.cli import main
from pgq_cli.session import Settings
from pgq_core import Queue
from pgq_core.exporter import QueueCollector
from pgq_core.worker import Worker

RUN_ENV = {**ENV, "PGQ_READ_DSN": None}


@pytest.fixture
def pair() -> Iterator[Pair]:
    with running_pair() as found:
        yield found


def pgq(*args: str) -> tuple[int, str]:
    result = CliRunner(env=RUN_ENV).invoke(main, ["--schema", SCHEMA, *args], prog_name="pgq")
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def test_read_commands_read_the_standby_and_say_how_far_behind(pair: Pair) -> None:
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        job_id = queue.enqueue("mail", {"n": 1})
    pair.caught_up()
    standby = f"127.0.0.1:{pair.standby.port}"
    both = ["--dsn", pair.primary.dsn, "--read-dsn", pair.standby.dsn]

    code, out = pgq(*both, "stats")
    assert code == 0, out
    first = out.splitlines()[0]
    assert first.startswith(f"read from standby {standby}, "), out
    assert first.endswith(" s behind the primary"), out
    assert "mail" in out

    code, out = pgq(*both, "stats", "--json")
    assert code == 0, out
    (row,) = json.loads(out)
    assert row["queue"] == "mail" and row["ready"] == 1
    where = row["read_from"]
    assert where["standby"] is True and where["address"] == standby
    assert where["port"] == pair.standby.port and where["timeline"] is None
    assert isinstance(where["lag_seconds"], float) and where["lag_seconds"] >= 0

    code, out = pgq(*both, "jobs", "--json")
    assert code == 0 and json.loads(out)[0]["read_from"]["standby"] is True, out
    code, out = pgq(*both, "show", str(job_id), "--json")
    assert code == 0 and json.loads(out)["read_from"]["address"] == standby, out
    code, out = pgq(*both, "latency", "--json")
    assert code == 0 and json.loads(out)["read_from"]["standby"] is True, out
    code, out = pgq(*both, "health")
    assert code == 0 and out.startswith(f"read from standby {standby}, "), out
    code, out = pgq(*both, "health", "--json")
    assert code == 0 and json.loads(out)["read_from"]["standby"] is True, out

    # a write goes to --dsn, the primary, and the standby shows it once replayed
    code, out = pgq(*both, "pause", "mail")
    assert code == 0, out
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        assert next(s for s in queue.stats() if s.queue == "mail").paused
    pair.caught_up()
    code, out = pgq(*both, "stats", "--json")
    assert json.loads(out)[0]["paused"] is True, out


def test_a_primary_given_as_read_dsn_is_said_to_be_no_standby(pair: Pair) -> None:
    code, out = pgq("--dsn", pair.primary.dsn, "--read-dsn", pair.primary.dsn, "stats")
    assert code == 0, out
    assert out.splitlines()[0] == (
        f"read from 127.0.0.1:{pair.primary.port} (not a standby: the primary's own figures)"
    ), out


def test_a_readers_session_is_read_only_and_never_asks_for_the_writable_host(
    pair: Pair,
) -> None:
    """Of both hosts, the reader takes the standby (prefer-standby), where the writer's
    connection takes the primary; every transaction of a reader starts read-only."""
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in (pair.primary, pair.standby))
    cluster = f"postgresql://postgres@{hosts}/postgres"
    group = Settings(pair.dsn, SCHEMA, read_dsn=cluster)
    with group.reader() as q:
        role = q.server_role()
        assert role.standby and role.port == pair.standby.port
        row = q.conn.execute("SHOW default_transaction_read_only").fetchone()
        assert row == ("on",)
    with group.queue() as q:
        role = q.server_role()
        assert not role.standby and role.port == pair.primary.port and role.timeline == 1
    # the standby's lag is 0 once replay caught up with what it received
    pair.caught_up()
    with group.reader() as q:
        assert q.server_role().lag_seconds == 0


def test_health_on_a_standby_names_it_unless_asked_to_read_one(pair: Pair) -> None:
    pair.caught_up()
    code, out = pgq("--dsn", pair.standby.dsn, "health")
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1, out
    assert lines[0].startswith(
        f"pgq: error: this server is a standby (read-only, in recovery) at "
        f"127.0.0.1:{pair.standby.port}, "
    ), out
    assert "--read-dsn" in lines[0]
    code, out = pgq("--read-dsn", pair.standby.dsn, "--dsn", pair.primary.dsn, "health")
    assert code == 0 and "read from standby" in out, out


def test_a_burst_worker_on_a_standby_stops_with_one_line(pair: Pair) -> None:
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        queue.enqueue("mail", {})
    pair.caught_up()
    code, out = pgq(
        "--dsn", pair.standby.dsn, "worker", "mail", "--burst",
        "--handler", "handlers_for_tests:noop",
    )
    errors = [line for line in out.splitlines() if line.startswith("pgq: error:")]
    assert code == 1, out
    assert errors == [
        f"pgq: error: the server (127.0.0.1:{pair.standby.port}) is a read-only standby (in "
        "recovery): a --burst worker can claim nothing there; name the primary, or every host "
        "of the cluster with target_session_attrs=read-write"
    ], out


def _samples(metrics: list[Metric]) -> dict[str, float]:
    return {s.name: s.value for m in metrics for s in m.samples if not s.labels}


def test_the_exporter_reads_the_standby_and_exports_its_lag(pair: Pair) -> None:
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        queue.enqueue("mail", {})
    pair.caught_up()

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(pair.standby.dsn, autocommit=True)

    collector = QueueCollector(connect, SCHEMA, reader=True)
    try:
        got = _samples(list(collector.collect()))
        assert got["pgq_up"] == 1
        assert got["pgq_server_standby"] == 1
        assert got["pgq_replica_lag_seconds"] >= 0
        assert collector._queue is not None
        row = collector._queue.conn.execute("SHOW default_transaction_read_only").fetchone()
        assert row == ("on",)
    finally:
        collector.close()

    primary = QueueCollector(lambda: psycopg.connect(pair.primary.dsn, autocommit=True), SCHEMA)
    try:
        got = _samples(list(primary.collect()))
        assert got["pgq_server_standby"] == 0 and "pgq_replica_lag_seconds" not in got
    finally:
        primary.close()


async def test_a_worker_on_a_standby_waits_saying_so_once_then_works_once_promoted(
    pair: Pair, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not --burst: the worker waits for the server to take writes, says so once (not at every
    reconnect), and claims once the standby is promoted."""
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        job_id = queue.enqueue("mail", {})
    pair.caught_up()
    caplog.set_level(logging.INFO, logger="pgq")
    worker = Worker(pair.standby.dsn, ["mail"], noop, schema=SCHEMA, poll_interval=0.2)
    tries = link_connects(monkeypatch)
    running = asyncio.create_task(worker.run())
    try:
        # the first connection and three reconnects (after 0.25, 0.5 and 1 s of backoff)
        await until(lambda: tries() >= 4, what="three reconnects to the standby")
        said = [r.getMessage() for r in caplog.records if "read-only standby" in r.getMessage()]
        assert len(said) == 1, said
        assert f"the server (127.0.0.1:{pair.standby.port}) is a read-only standby" in said[0]
        assert not [r for r in caplog.records if "reachable again" in r.getMessage()]
        downs = [r for r in caplog.records if "database unavailable" in r.getMessage()]
        assert len(downs) == 1, [r.getMessage() for r in downs]
        pair.fail_over()
        with Queue.connect(pair.standby.dsn, SCHEMA) as queue:
            for _ in range(600):
                if queue.job(job_id).status == "done":
                    break
                await asyncio.sleep(0.05)
            assert queue.job(job_id).status == "done"
        said = [r.getMessage() for r in caplog.records if "read-only standby" in r.getMessage()]
        assert len(said) == 1, said
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
