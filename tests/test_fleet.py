"""The fleet (tests/chaos/fleet.py): workers through a real PgBouncer under SIGKILL and SIGSTOP
(a short run whose checks pass), the fleet's handler under a stale fence, and the checker
failing on a tampered effects table, a lost job and a stale completion."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from chaos.fleet import Fleet, check
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from support import Pgq

from pgq_bench import handlers
from pgq_core import LeaseLost, Queue
from pgq_core.worker import JobContext

TESTS = Path(__file__).resolve().parent


def _fleet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m chaos.fleet ARGS` from the repository root, as its docstring says to run it."""
    paths = [str(TESTS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return subprocess.run(
        [sys.executable, "-m", "chaos.fleet", *args],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(env or {})},
        cwd=TESTS.parent, capture_output=True, text=True, timeout=600, check=False,
    )


def _has_pgbouncer() -> bool:
    return bool(shutil.which("pgbouncer")) or Path("/usr/sbin/pgbouncer").exists()


def _q(schema: str, text: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


@pytest.mark.slow
def test_fleet_short_run_passes_its_checks(dsn: str) -> None:
    if not _has_pgbouncer():
        pytest.skip("pgbouncer is not installed")
    result = _fleet(
        "25s", "--dsn", dsn, "--workers", "3", "--concurrency", "5", "--rate", "50",
        "--kill-every", "2s", "--lease", "2s", "--random-state", "3", "--json",
    )  # fmt: skip
    assert result.stdout, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == 0, json.dumps(data["checks"], indent=1)
    assert data["passed"] is True
    assert set(data["checks"]) == {
        "no_job_lost", "no_effect_applied_twice", "no_stale_completion",
        "effects_match_done_jobs", "no_worker_exited_by_itself",
    }  # fmt: skip
    assert all(c["passed"] for c in data["checks"].values())
    enqueued = data["producer"]["enqueued"]
    # enough jobs for the kills to land among them; the rate itself is a figure, not a check
    # (a machine at load 20 produced 633 and 729 of the 1,250 asked)
    assert enqueued > 0.2 * 25 * 50
    assert data["checks"]["no_job_lost"]["done"] == enqueued
    assert data["kills"]["count"] >= 6
    assert data["workers"]["starts"] == {
        w: 1 + data["kills"]["by_worker"].get(w, 0) for w in ("fleet-w1", "fleet-w2", "fleet-w3")
    }, "a killed worker comes back under the same id"
    assert data["checks"]["no_worker_exited_by_itself"]["exit_codes_at_sigterm"] == [0, 0, 0]
    assert len(data["stops"]) >= 1
    for stop in data["stops"]:
        assert stop["stopped_s"] >= 2 + 2 * 1 + 1 - 0.2  # lease + 2 reap intervals + 1 s
    assert data["drain"]["drained"] is True
    figures = data["figures"]
    assert figures["jobs_claimed"] == enqueued
    assert 0 < figures["pickup_p50_ms"] <= figures["pickup_p99_ms"]
    assert figures["throughput_jobs_s"] > 0
    assert data["fleet"]["pgbouncer"]["pool_mode"] == "transaction"
    assert data["pool"]["transactions"] > enqueued
    assert data["workers"]["logs"]["counts"]["Traceback"] == 0
    assert data["workers"]["logs"]["counts"]["prepared statement"] == 0
    password = conninfo_to_dict(dsn).get("password")
    if password:
        assert str(password) not in result.stdout + result.stderr
    with psycopg.connect(dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'fleet\\_%'")
        assert left.fetchone() == (0,), "the throwaway schema is dropped"


@pytest.mark.slow
def test_a_worker_terminated_right_after_its_start_exits_zero(
    dsn: str, queue: Queue, tmp_path: Path
) -> None:
    """The fleet's last SIGTERM may come just after a killed worker was started again: it is
    sent once the worker has taken over its signals, so the worker stops cleanly (it died
    with -15 while still importing, failing the short run's exit-code check)."""
    env = dict(os.environ, PGQ_DSN=dsn, PGQ_SCHEMA=queue.schema)
    fleet = Fleet(env, ["--handler", handlers.FENCED_EFFECT_SPEC], tmp_path, 2)
    for slot in fleet.slots:
        fleet.start(slot)
    assert fleet.terminate_all() == [0, 0]


def test_fleet_without_pgbouncer_is_one_line() -> None:
    result = _fleet("10s", env={"PGQ_PGBOUNCER": "/nonexistent/pgbouncer"})
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("fleet: error: pgbouncer not found"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_bench_no_longer_runs_the_fleet(pgq: Pgq) -> None:
    """The fleet is a chaos run kept with its tests, not a `pgq bench` mode."""
    result = pgq("bench", "--fleet", "10s")
    assert result.exit_code == 2 and "No such option '--fleet'" in result.output


@pytest.fixture
def effects(queue: Queue) -> Queue:
    queue.conn.execute(_q(queue.schema, handlers.EFFECTS_TABLE))
    return queue


def _ctx(queue: Queue, worker: str) -> JobContext:
    (job,) = queue.claim("fleet", 1, timedelta(seconds=30), worker)
    return JobContext(job, worker, queue.schema)


def _expire_and_reap(queue: Queue) -> None:
    queue.conn.execute(
        _q(queue.schema, "UPDATE {s}.jobs SET lease_until = now() - interval '1s' "
           "WHERE status = 'running'")
    )  # fmt: skip
    assert queue.reap()


def test_fenced_effect_with_a_stale_fence_rolls_back(
    effects: Queue, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQ_DSN", dsn)
    monkeypatch.delenv("PGQ_POOLED", raising=False)
    handlers._local.__dict__.clear()
    job_id = effects.enqueue("fleet", {"sleep": 0})
    first = _ctx(effects, "a")
    _expire_and_reap(effects)
    second = _ctx(effects, "b")
    handlers.fenced_effect(second)
    with pytest.raises(LeaseLost):
        handlers.fenced_effect(first)
    row = effects.conn.execute(
        _q(effects.schema, "SELECT job_id, fence, worker, fences FROM {s}.effects")
    ).fetchall()
    assert row == [(job_id, 2, "b", [2])]
    assert check(effects.conn, effects.schema, [job_id])["passed"] is True
    handlers._local.conn.close()


def _run_jobs(queue: Queue, dsn: str, n: int) -> list[int]:
    """n jobs, each claimed and completed with its effect, as the fleet's handler does."""
    ids = [queue.enqueue("fleet", {}) for _ in range(n)]
    apply = _q(queue.schema, handlers.APPLY_EFFECT)
    with psycopg.connect(dsn, autocommit=True) as c:
        for job in queue.claim("fleet", n, timedelta(seconds=30), "w"):
            with c.transaction():
                c.execute(apply, {"id": job.id, "fence": job.fence, "worker": "w"})
                Queue(c, queue.schema).complete(job.id, job.fence, worker="w", conn=c)
    return ids


def test_checker_fails_on_an_effect_applied_twice(effects: Queue, dsn: str) -> None:
    ids = _run_jobs(effects, dsn, 3)
    assert check(effects.conn, effects.schema, ids)["passed"] is True
    # A second committed application of job 0's effect, as a second completer would make.
    effects.conn.execute(
        _q(effects.schema, "UPDATE {s}.effects SET fences = fences || fence WHERE job_id = %s"),
        [ids[0]],
    )
    verdict = check(effects.conn, effects.schema, ids)
    assert verdict["passed"] is False
    twice_name = "no_effect_applied_twice"
    twice = verdict["checks"][twice_name]
    assert (twice["passed"], twice["effects_with_several_fences"]) == (False, 1)
    assert twice["sample"] == [{"job_id": ids[0], "fences": [1, 1]}]
    others = {k: c["passed"] for k, c in verdict["checks"].items() if k != twice_name}
    assert all(others.values()), others


def test_checker_fails_on_a_second_or_stale_completion(effects: Queue, dsn: str) -> None:
    ids = _run_jobs(effects, dsn, 2)
    effects.conn.execute(
        _q(effects.schema, "INSERT INTO {s}.job_events (job_id, event, fence, worker) "
           "VALUES (%s, 'completed', 0, 'ghost')"),
        [ids[1]],
    )  # fmt: skip
    checks = check(effects.conn, effects.schema, ids)["checks"]
    assert checks["no_effect_applied_twice"]["jobs_completed_twice"] == 1
    assert checks["no_stale_completion"]["passed"] is False
    assert checks["no_stale_completion"]["sample"] == [[ids[1], 0, 1]]


def test_checker_fails_on_lost_and_unfinished_jobs(effects: Queue, dsn: str) -> None:
    ids = _run_jobs(effects, dsn, 2)
    ready = effects.enqueue("fleet", {})
    lost = check(effects.conn, effects.schema, [*ids, ready, 10**9])["checks"]["no_job_lost"]
    assert (lost["passed"], lost["missing"], lost["unfinished"]) == (False, 1, 1)
    effects.conn.execute(
        _q(effects.schema, "UPDATE {s}.jobs SET status = 'dead', last_error = 'x' WHERE id = %s"),
        [ready],
    )
    dead = check(effects.conn, effects.schema, [*ids, ready])["checks"]["no_job_lost"]
    assert (dead["passed"], dead["dead"], dead["dead_sample"][0]["last_error"]) == (False, 1, "x")
    # A done job without its effect, and an effect without a done job.
    effects.conn.execute(_q(effects.schema, "DELETE FROM {s}.effects WHERE job_id = %s"), [ids[0]])
    effects.conn.execute(
        _q(effects.schema, "INSERT INTO {s}.effects (job_id, fence, worker, fences) "
           "VALUES (%s, 0, 'w', '{{0}}')"),
        [ready],
    )  # fmt: skip
    match = check(effects.conn, effects.schema, ids)["checks"]["effects_match_done_jobs"]
    assert (match["done_without_effect"], match["effect_without_done_job"]) == (1, 1)
