"""Prometheus metrics: the exporter (`pgq metrics`) and the worker's own (`--metrics-port`),
scraped over real HTTP and checked against SQL counts on the real database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from pgq_core import JobSpec, Queue, migrate
from pgq_core.exporter import QueueCollector
from pgq_core.worker import Worker
from pgq_core.worker.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of http://127.0.0.1:port/metrics by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def sql_counts(queue: Queue) -> dict[tuple[str, str], int]:
    """(queue, status) -> count, by plain SQL over every row (what the gauges must say)."""
    q = sql.SQL(
        "SELECT queue, CASE WHEN status = 'ready' AND run_at > now() THEN 'scheduled' "
        "ELSE status END, count(*) FROM {}.jobs GROUP BY 1, 2"
    ).format(sql.Identifier(queue.schema))
    return {(r[0], r[1]): int(r[2]) for r in queue.conn.execute(q).fetchall()}


@contextlib.contextmanager
def served(collector: QueueCollector) -> Iterator[int]:
    """`collector` behind a real HTTP endpoint on a free port (yielded), closed afterwards."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, _ = start_http_server(0, "127.0.0.1", registry=registry)
    try:
        yield int(server.server_port)
    finally:
        server.shutdown()
        server.server_close()
        collector.close()


@pytest.fixture
def exporter(dsn: str, schema: str) -> Iterator[int]:
    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=True)

    with served(QueueCollector(connect, schema, timeout=timedelta(seconds=5))) as port:
        yield port


def make_mix(queue: Queue) -> None:
    """q1: 3 ready, 2 scheduled, 2 running (one lease expired), 1 done, 1 dead; q2: 1 ready."""
    queue.enqueue_many(JobSpec("q1", {"n": i}) for i in range(7))
    queue.enqueue_many(JobSpec("q1", {}, delay=timedelta(hours=1)) for _ in range(2))
    queue.enqueue("q2", {})
    [expired] = queue.claim("q1", 1, timedelta(milliseconds=1), "worker-a")
    [running] = queue.claim("q1", 1, timedelta(minutes=5), "worker-b")
    [done] = queue.claim("q1", 1, timedelta(minutes=5), "worker-b")
    queue.complete(done.id, done.fence)
    dead_id = queue.enqueue("q1", {}, max_attempts=1)
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET run_at = now() - interval '1 day' WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        [dead_id],
    )
    [dead] = queue.claim("q1", 1, timedelta(minutes=5), "worker-c")
    assert dead.id == dead_id
    queue.fail(dead.id, dead.fence, "boom")
    time.sleep(0.05)
    assert {expired.id, running.id} <= {lease.id for lease in queue.leases()}


def test_exporter_gauges_match_sql_counts(queue: Queue, exporter: int) -> None:
    make_mix(queue)
    got = scrape(exporter)
    counts = sql_counts(queue)
    for name in ("q1", "q2"):
        for status in ("ready", "scheduled", "running", "dead", "done"):
            key = ("pgq_jobs", (("queue", name), ("status", status)))
            assert got[key] == counts.get((name, status), 0), (name, status)
    assert got[("pgq_jobs", (("queue", "q1"), ("status", "expiring")))] == 1
    assert got[("pgq_expired_leases", (("queue", "q1"),))] == 1
    assert got[("pgq_workers_holding_jobs", (("queue", "q1"),))] == 2
    assert got[("pgq_jobs_completed_total", (("queue", "q1"),))] == 1
    oldest = queue.conn.execute(
        sql.SQL(
            "SELECT extract(epoch FROM now() - min(run_at)) FROM {}.jobs "
            "WHERE queue = 'q1' AND status = 'ready' AND run_at <= now()"
        ).format(sql.Identifier(queue.schema))
    ).fetchone()
    assert oldest is not None
    assert got[("pgq_oldest_due_age_seconds", (("queue", "q1"),))] == pytest.approx(
        float(oldest[0]), abs=2.0
    )
    assert got[("pgq_up", ())] == 1
    assert got[("pgq_workers_connected", ())] >= 0
    assert got[("pgq_xmin_horizon_age_seconds", ())] >= 0
    assert got[("pgq_table_bytes", (("table", "jobs"),))] > 0
    assert ("pgq_dead_tuples", (("table", "job_events"),)) in got


def test_exporter_sees_an_open_transaction_in_the_xmin_horizon(
    queue: Queue, exporter: int, dsn: str
) -> None:
    with psycopg.connect(dsn) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1").fetchone()
        time.sleep(1.2)
        got = scrape(exporter)
        assert got[("pgq_xmin_horizon_age_seconds", ())] >= 1.0
        assert got[("pgq_xmin_horizon_age_xids", ())] >= 0
        holder.rollback()


def test_exporter_reports_down_and_recovers(queue: Queue, dsn: str, schema: str) -> None:
    state = {"fail": True}

    def connect() -> psycopg.Connection[Any]:
        if state["fail"]:
            return psycopg.connect("host=127.0.0.1 port=1 connect_timeout=1")
        return psycopg.connect(dsn, autocommit=True)

    with served(QueueCollector(connect, schema)) as port:
        got = scrape(port)
        assert got[("pgq_up", ())] == 0
        assert not [k for k in got if k[0] == "pgq_jobs"]
        state["fail"] = False
        queue.enqueue("q", {})
        got = scrape(port)
        assert got[("pgq_up", ())] == 1
        assert got[("pgq_jobs", (("queue", "q"), ("status", "ready")))] == 1


def test_exporter_reports_down_for_a_schema_not_migrated_yet(
    dsn: str, schema: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A scrape of a schema that is not (or no longer) migrated is `pgq_up 0` and one log
    line: before, SchemaMissing escaped into the HTTP server (a 500 and a traceback on every
    scrape, e.g. while a deploy has not run `pgq migrate` yet)."""
    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=True)

    with served(QueueCollector(connect, schema)) as port:
        got = scrape(port)
        assert got[("pgq_up", ())] == 0
        assert not [k for k in got if k[0] == "pgq_jobs"]
        failed = [r.getMessage() for r in caplog.records if r.name == "pgq.metrics"]
        assert len(failed) == 1 and "pgq migrate" in failed[0], failed
        with psycopg.connect(dsn, autocommit=True) as admin:
            migrate(admin, schema)
        assert scrape(port)[("pgq_up", ())] == 1


def _stderr_port(proc: subprocess.Popen[bytes], log: Path, pattern: str) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(pattern, log.read_text())
        if match:
            return int(match.group(1))
        if proc.poll() is not None:
            raise AssertionError(log.read_text())
        time.sleep(0.1)
    raise AssertionError(f"no port in: {log.read_text()}")


def _env(dsn: str, schema: str) -> dict[str, str]:
    env = dict(os.environ, PGQ_DSN=dsn, PGQ_SCHEMA=schema)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return env


def test_pgq_metrics_command_serves_the_figures(
    queue: Queue, dsn: str, schema: str, tmp_path: Path
) -> None:
    queue.enqueue_many(JobSpec("cli", {}) for _ in range(4))
    log = tmp_path / "metrics.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgq_cli", "metrics", "--listen", "127.0.0.1:0"],
            env=_env(dsn, schema),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        port = _stderr_port(proc, log, r"http://127\.0\.0\.1:(\d+)/metrics")
        got = scrape(port)
        assert got[("pgq_jobs", (("queue", "cli"), ("status", "ready")))] == 4
        assert "password" not in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_pgq_metrics_rejects_a_bad_listen_address(dsn: str, schema: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pgq_cli", "metrics", "--listen", "nowhere"],
        env=_env(dsn, schema),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("pgq: error:") and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("listen", [":\u00b2", ":\u0663", "[::1:9187", "::1]:9187", "[::1]x:1"])
def test_pgq_metrics_takes_only_an_ascii_port_and_whole_brackets(listen: str) -> None:
    """Before: a superscript digit was "unexpected ValueError" (exit 1); an Arabic-Indic 3 was
    read as port 3 on every address; an unclosed bracket was served as if closed. (The option's
    own check: a value it lets through would start serving.)"""
    import click

    from pgq_cli.metrics_cli import _listen_address

    with pytest.raises(click.BadParameter, match="not HOST:PORT"):
        _listen_address(click.Context(click.Command("metrics")), click.Option(["--listen"]), listen)


@pytest.mark.parametrize(
    ("listen", "expected"),
    [(":0", ("0.0.0.0", 0)), ("[::1]:9187", ("::1", 9187)), ("h.example:80", ("h.example", 80))],
)
def test_pgq_metrics_listen_forms(listen: str, expected: tuple[str, int]) -> None:
    import click

    from pgq_cli.metrics_cli import _listen_address

    ctx = click.Context(click.Command("metrics"))
    assert _listen_address(ctx, click.Option(["--listen"]), listen) == expected


async def test_worker_metrics_match_sql(queue: Queue, dsn: str, schema: str) -> None:
    queue.enqueue_many(JobSpec("wm", {"n": i}) for i in range(30))
    queue.enqueue_many(JobSpec("wm", {"fail": True}, max_attempts=1) for _ in range(5))

    def handler(ctx: Any) -> None:
        if ctx.payload.get("fail"):
            raise RuntimeError("no")

    metrics = WorkerMetrics()
    worker = Worker(  # no buffer: each step claims at most 5 jobs
        dsn, ["wm"], handler, schema=schema, concurrency=5, metrics=metrics, prefetch=0
    )
    port = metrics.serve(0)
    task = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 30
        while worker.snapshot().done + worker.snapshot().failed < 35:
            assert time.monotonic() < deadline, worker.snapshot()
            await asyncio.sleep(0.05)
        got = await asyncio.to_thread(scrape, port)
    finally:
        worker.stop()
        await task
        metrics.close()
    counts = sql_counts(queue)
    wid = (("worker", worker.id),)
    assert got[("pgq_worker_jobs_total", (("outcome", "done"), *wid))] == counts[("wm", "done")]
    assert got[("pgq_worker_jobs_total", (("outcome", "failed"), *wid))] == counts[("wm", "dead")]
    assert got[("pgq_worker_dead_jobs_total", wid)] == counts[("wm", "dead")] == 5
    assert got[("pgq_worker_jobs_total", (("outcome", "lost"), *wid))] == 0
    assert got[("pgq_worker_claimed_jobs_total", wid)] == 35
    assert got[("pgq_worker_state", (("state", "running"), *wid))] == 1
    assert got[("pgq_worker_concurrency", wid)] == 5
    steps = sum(
        v for (name, _labels), v in got.items() if name == "pgq_worker_step_seconds_count"
    )
    assert steps >= 35 / 5
    assert got[("pgq_worker_held_jobs", wid)] == 0


def test_worker_cli_metrics_port(queue: Queue, dsn: str, schema: str, tmp_path: Path) -> None:
    queue.enqueue_many(JobSpec("wc", {}) for _ in range(10))
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "pgq_cli", "worker", "wc",
                "--handler", "handlers_for_tests:noop", "--metrics-port", "0",
            ],
            env=_env(dsn, schema),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=TESTS,
        )
    try:
        port = _stderr_port(proc, log, r"metrics on http://127\.0\.0\.1:(\d+)/metrics")
        deadline = time.monotonic() + 30
        while True:
            got = scrape(port)
            done = [v for (n, lab), v in got.items()
                    if n == "pgq_worker_jobs_total" and ("outcome", "done") in lab]
            if done and done[0] == 10:
                break
            assert time.monotonic() < deadline, got
            time.sleep(0.2)
        assert sql_counts(queue)[("wc", "done")] == 10
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_alert_rules_are_valid_yaml_with_the_promised_alerts() -> None:
    doc = yaml.safe_load((ROOT / "deploy" / "prometheus" / "pgq-alerts.yml").read_text())
    rules = [rule for group in doc["groups"] for rule in group["rules"]]
    names = {rule["alert"] for rule in rules}
    assert {"PgqBacklogAge", "PgqDeadJobsRising", "PgqNoWorkerAlive", "PgqXminHorizonOld"} <= names
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert rule["expr"].strip() and rule["labels"]["severity"]
        assert re.findall(r"pgq_\w+", rule["expr"]), rule["alert"]
    exported = (ROOT / "pgq_core" / "exporter.py").read_text() + (
        ROOT / "pgq_core" / "worker" / "metrics.py"
    ).read_text()
    for rule in rules:
        for metric in re.findall(r"pgq_\w+", rule["expr"]):
            base = metric.removesuffix("_total")
            assert f'"{base}"' in exported, f"{rule['alert']} uses unknown metric {metric}"


def test_help_and_worker_import_do_not_load_prometheus_client() -> None:
    code = (
        "import sys\n"
        "import pgq_core.worker\n"
        "from pgq_cli.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'prometheus_client']\n"
        "print(bad, file=sys.stderr); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "metrics" in done.stdout and "config" in done.stdout


async def test_worker_metrics_count_schedule_slots_enqueued_and_skipped(
    queue: Queue, dsn: str, schema: str
) -> None:
    """A skipped slot is a warning line and a counter: the worker's snapshot and
    `pgq_worker_schedule_slots_total{outcome="skipped"}` count the slots it passed over."""
    queue.add_schedule("gap", "elsewhere", "* * * * * *")
    queue.conn.execute(
        sql.SQL(
            "UPDATE {}.schedules SET created_at = created_at - interval '10 minutes',"
            " last_slot = date_trunc('second', now()) - interval '30 seconds' WHERE name = 'gap'"
        ).format(sql.Identifier(schema))
    )
    metrics = WorkerMetrics()
    worker = Worker(dsn, ["wm"], lambda ctx: None, schema=schema, metrics=metrics)
    port = metrics.serve(0)
    task = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 30
        while worker.snapshot().slots_skipped == 0:
            assert time.monotonic() < deadline, worker.snapshot()
            await asyncio.sleep(0.05)
        got = await asyncio.to_thread(scrape, port)
    finally:
        worker.stop()
        await task
        metrics.close()
    wid = (("worker", worker.id),)
    skipped = got[("pgq_worker_schedule_slots_total", (("outcome", "skipped"), *wid))]
    enqueued = got[("pgq_worker_schedule_slots_total", (("outcome", "enqueued"), *wid))]
    assert 28 <= skipped <= 40, skipped  # the 29 or so seconds between, counted once
    assert enqueued >= 1
