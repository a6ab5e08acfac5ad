"""pgq through a real PgBouncer in transaction mode (PGQ_POOLED=1): no prepared statements, no
session settings left on shared server sessions, LISTEN on a direct connection or none.

Skipped when no `pgbouncer` binary is installed (Debian: `apt-get install pgbouncer`). As root
it runs in a user namespace (`unshare --user`): PgBouncer refuses to run as root."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import POOL_SIZE

from pgq_core import JobSpec, Queue
from pgq_tui.source import PgSource

TESTS = Path(__file__).resolve().parent
BAD = ("prepared statement", "bind message", "Traceback", "ERROR")


@pytest.fixture
def pooled_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQ_POOLED", "1")
    monkeypatch.delenv("PGQ_LISTEN_DSN", raising=False)


def _env(dsn: str, schema: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PGQ_DSN=dsn, PGQ_SCHEMA=schema, PGQ_POOLED="1")
    env.pop("PGQ_LISTEN_DSN", None)
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return env


def _pgq(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pgq_cli", *args],
        env=env, capture_output=True, text=True, input=stdin,
    )
    assert done.returncode == 0, done.stderr
    for bad in BAD:
        assert bad not in done.stderr, done.stderr
    return done.stdout


@pytest.mark.slow
def test_operator_commands_through_the_pool(bouncer: str, queue: Queue, schema: str) -> None:
    env = _env(bouncer, schema)
    lines = "".join(f'{{"n": {i}}}\n' for i in range(20_000))
    _pgq(env, "enqueue", "ops", "--file", "-", stdin=lines)
    assert queue.stats()[0].ready == 20_000
    ids = [j.id for j in queue.jobs("ops", limit=40)]
    for start in range(0, 36, 12):  # the "requeue with 12 ids": several times over
        _pgq(env, "kill", *map(str, ids[start : start + 12]))
        _pgq(env, "requeue", *map(str, ids[start : start + 12]))
    _pgq(env, "kill", *map(str, ids[36:40]))
    for _ in range(8):
        _pgq(env, "stats")
        _pgq(env, "jobs", "--queue", "ops", "--status", "dead")
        _pgq(env, "show", str(ids[0]))
    stats = queue.stats()[0]
    assert (stats.ready, stats.dead) == (19_996, 4)


def test_queue_api_repeats_statements_through_the_pool(
    bouncer: str, schema: str, pooled_env: None
) -> None:
    """Past psycopg's prepare threshold (5) on several clients at once: nothing prepared."""
    clients = [Queue.connect(bouncer, schema) for _ in range(4)]
    try:
        for n in range(12):
            for q in clients:
                job_id = q.enqueue("api", {"n": n})
                q.kill([job_id])
                assert q.requeue([job_id]) == [job_id]
                q.stats()
    finally:
        for q in clients:
            q.close()


def _worker(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pgq_cli", "worker", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=TESTS,
        )


@pytest.mark.slow
def test_eight_workers_drain_ten_thousand_jobs_through_a_pool_of_five(
    bouncer: str, dsn: str, queue: Queue, schema: str, tmp_path: Path
) -> None:
    queue.enqueue_many(JobSpec("drain", {"n": i}) for i in range(10_000))
    env = _env(bouncer, schema, PGQ_LISTEN_DSN=dsn)
    procs = [
        _worker(
            env, tmp_path / f"w{i}.log", "drain", "--handler", "handlers_for_tests:noop",
            "--concurrency", "25", "--burst",
        )
        for i in range(8)
    ]  # fmt: skip
    try:
        for p in procs:
            assert p.wait(240) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    stats = queue.stats()[0]
    assert (stats.done, stats.ready, stats.running, stats.dead) == (10_000, 0, 0, 0)
    for i in range(8):
        log = (tmp_path / f"w{i}.log").read_text()
        for bad in (*BAD, "WARNING"):
            assert bad not in log, log
        assert "polling alone" not in log
    with psycopg.connect(bouncer, prepare_threshold=None, autocommit=True) as conn:
        for _ in range(POOL_SIZE * 2):  # every server session of the pool: no worker setting
            row = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()
            assert row == ("auto",)


def test_pooled_without_a_listen_dsn_polls_alone_and_says_so_once(
    bouncer: str, queue: Queue, schema: str, tmp_path: Path
) -> None:
    queue.enqueue_many(JobSpec("poll", {}) for _ in range(50))
    log = tmp_path / "w.log"
    proc = _worker(
        _env(bouncer, schema), log, "poll", "--handler", "handlers_for_tests:noop", "--burst"
    )
    assert proc.wait(60) == 0
    text = log.read_text()
    assert text.count("no LISTEN, polling alone") == 1, text
    assert queue.stats()[0].done == 50


async def test_dashboard_source_through_the_pool(
    bouncer: str, dsn: str, queue: Queue, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQ_POOLED", "1")
    monkeypatch.setenv("PGQ_LISTEN_DSN", dsn)
    source = PgSource(bouncer, schema)
    heard: list[str] = []

    async def listen() -> None:
        async for name in source.notifications():
            heard.append(name)

    task = asyncio.create_task(listen())
    try:
        await asyncio.sleep(0.5)
        ids = [queue.enqueue("dash", {}) for _ in range(8)]
        for _ in range(6):
            stats = await source.stats()
            assert stats[0].ready == 8
            await source.jobs("dash", None, 50)
            await source.job(ids[0])
        assert await source.kill(ids[:2]) == ids[:2]
        assert await source.requeue(ids[:2]) == ids[:2]
        async with asyncio.timeout(5):
            while len(heard) < 2:  # the enqueues' (coalesced by the notifier), the requeue's
                await asyncio.sleep(0.05)
        assert set(heard) == {"dash"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await source.close()


async def test_dashboard_source_pooled_without_listen_dsn_never_listens(
    bouncer: str, schema: str, pooled_env: None
) -> None:
    source = PgSource(bouncer, schema)
    gen: Any = source.notifications()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await gen.__anext__()
    await gen.aclose()
    await source.close()
