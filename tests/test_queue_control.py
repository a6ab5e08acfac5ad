"""Queue control on a real server: pause and a running limit enforced inside the claim
statements (claim and the worker's settle_complete_and_claim), race-free across concurrent
claimers, and a resumed queue's idle workers woken by its notification."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgq_core import JobSpec, Queue, ops
from pgq_core.worker import JobContext, Worker

LEASE = timedelta(seconds=30)


def running_count(queue: Queue, name: str = "q") -> int:
    row = queue.conn.execute(
        sql.SQL("SELECT count(*) FROM {}.jobs WHERE queue = %s AND status = 'running'").format(
            sql.Identifier(queue.schema)
        ),
        [name],
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_paused_queue_claims_nothing_and_resume_lets_it_claim(queue: Queue) -> None:
    queue.enqueue_many([JobSpec("q", {}) for _ in range(5)] + [JobSpec("other", {})])
    paused_at = queue.pause("q", "deploy")
    assert queue.claim("q", 10, LEASE, "w") == []
    settled, claimed = queue.run(ops.complete_and_claim([], "q", 10, LEASE, "w"))
    assert claimed == [] and settled.applied == []
    assert len(queue.claim("other", 10, LEASE, "w")) == 1  # other queues are untouched

    [stats] = [s for s in queue.stats() if s.queue == "q"]
    assert (stats.paused, stats.paused_at, stats.pause_reason) == (True, paused_at, "deploy")
    assert stats.paused_by and stats.paused_by.startswith("operator:")

    assert queue.resume("q") == paused_at
    assert queue.resume("q") is None  # not paused any more
    assert len(queue.claim("q", 10, LEASE, "w")) == 5
    assert not next(s for s in queue.stats() if s.queue == "q").paused


def test_a_paused_queue_with_no_jobs_is_listed(queue: Queue) -> None:
    queue.pause("empty")
    assert [(s.queue, s.paused, s.ready) for s in queue.stats()] == [("empty", True, 0)]


def test_settle_still_completes_on_a_paused_queue(queue: Queue) -> None:
    queue.enqueue_many([JobSpec("q", {}) for _ in range(4)])
    held = [(j.id, j.fence) for j in queue.claim("q", 2, LEASE, "w")]
    queue.pause("q")
    settled, claimed = queue.run(ops.complete_and_claim(held, "q", 2, LEASE, "w"))
    assert sorted(settled.applied) == sorted(i for i, _ in held) and claimed == []


def test_a_limit_caps_running_jobs_and_settling_frees_slots(queue: Queue) -> None:
    queue.enqueue_many([JobSpec("q", {}) for _ in range(20)])
    assert queue.set_limit("q", 3) is None
    first = queue.claim("q", 10, LEASE, "w")
    assert len(first) == 3
    assert queue.claim("q", 10, LEASE, "w2") == []
    # completing two in the hot path lets the same statement claim two more, never more
    held = [(j.id, j.fence) for j in first[:2]]
    settled, claimed = queue.run(ops.complete_and_claim(held, "q", 10, LEASE, "w"))
    assert len(settled.applied) == 2 and len(claimed) == 2
    assert running_count(queue) == 3
    assert queue.set_limit("q", 5) == 3
    assert len(queue.claim("q", 10, LEASE, "w")) == 2
    assert queue.set_limit("q", None) == 5
    assert len(queue.claim("q", 10, LEASE, "w")) == 10
    assert [s.limit for s in queue.stats()] == [None]


def test_limit_zero_claims_nothing(queue: Queue) -> None:
    queue.enqueue("q", {})
    queue.set_limit("q", 0)
    assert queue.claim("q", 10, LEASE, "w") == []
    assert [s.limit for s in queue.stats()] == [0]


def test_negative_limit_is_refused(queue: Queue) -> None:
    with pytest.raises(ValueError):
        queue.set_limit("q", -1)


def test_eight_concurrent_claimers_never_exceed_the_limit(dsn: str, schema: str) -> None:
    """8 threads claim and complete as fast as they can from a queue limited to 3; a watcher
    samples the running count all along. Never more than 3, and every job gets done."""
    jobs = 300
    with Queue.connect(dsn, schema) as setup:
        setup.enqueue_many([JobSpec("q", {"i": i}) for i in range(jobs)])
        setup.set_limit("q", 3)
    stop = threading.Event()
    peak = [0]
    done = [0]
    errors: list[BaseException] = []
    lock = threading.Lock()

    def watcher() -> None:
        with Queue.connect(dsn, schema) as q:
            while not stop.is_set():
                peak[0] = max(peak[0], running_count(q))

    def claimer(n: int) -> None:
        try:
            with Queue.connect(dsn, schema) as q:
                held: list[tuple[int, int]] = []
                idle_rounds = 0
                while idle_rounds < 50:
                    settled, claimed = q.run(ops.complete_and_claim(held, "q", 2, LEASE, f"w{n}"))
                    with lock:
                        done[0] += len(settled.applied) + len(settled.already_done)
                    # a busy row (another session's claim locked it for a moment) is
                    # settled again next round, as the worker does
                    busy = set(settled.busy)
                    held = [(i, f) for i, f in held if i in busy]
                    held += [(j.id, j.fence) for j in claimed]
                    idle_rounds = 0 if claimed or held else idle_rounds + 1
                    if not claimed:
                        time.sleep(0.002)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    watch = threading.Thread(target=watcher)
    watch.start()
    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    watch.join(10)
    assert not errors, errors
    assert done[0] == jobs
    assert 1 <= peak[0] <= 3


def test_concurrent_plain_claims_never_exceed_the_limit(dsn: str, schema: str) -> None:
    """8 threads each claim once, at the same moment, from a queue limited to 3."""
    with Queue.connect(dsn, schema) as setup:
        setup.enqueue_many([JobSpec("q", {}) for _ in range(50)])
        setup.set_limit("q", 3)
    barrier = threading.Barrier(8)
    got: list[int] = []
    lock = threading.Lock()

    def claim(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            q = Queue(conn, schema)
            barrier.wait()
            claimed = q.claim("q", 2, LEASE, f"w{n}")
            with lock:
                got.append(len(claimed))

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(got) == 3
    with Queue.connect(dsn, schema) as q:
        assert running_count(q) == 3


async def test_an_idle_worker_on_a_paused_queue_backs_off_and_resume_wakes_it(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Paused: the worker's claims return nothing, so it idles with its usual backoff (no busy
    polling). Its poll interval here is 30 s, so only the resume's NOTIFY can start it within
    the 10 s waited (how fast is not asserted here: speed is a benchmark's)."""
    queue.pause("q")
    queue.enqueue_many([JobSpec("q", {"i": i}) for i in range(3)])
    seen: list[int] = []

    async def handler(ctx: JobContext) -> None:
        seen.append(ctx.id)

    worker = Worker(dsn, ["q"], handler, schema=schema, poll_interval=30.0)
    task = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 10
        while worker.state != "running" and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)  # LISTEN is up and the first claims came back empty
        assert seen == [] and worker.snapshot().done == 0
        assert worker.idle_interval >= 30.0  # idle: the next poll is a long way off

        queue.enqueue("q", {"i": "while paused"})  # its notification finds the queue paused
        await asyncio.sleep(0.3)
        assert seen == []

        resumed = time.monotonic()
        queue.resume("q")
        while worker.snapshot().done < 4 and time.monotonic() - resumed < 10:
            await asyncio.sleep(0.01)
        assert worker.snapshot().done == 4
    finally:
        worker.stop(immediately=True)
        await asyncio.wait_for(task, 30)


def test_upgrade_from_version_1_keeps_jobs_and_adds_queue_control(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import secrets

    from pgq_core.migrate import migrate, migrations

    migrate_mod = importlib.import_module("pgq_core.migrate")  # the package exports the function

    name = f"t_{secrets.token_hex(5)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            with monkeypatch.context() as m:
                m.setattr(migrate_mod, "migrations", lambda: migrations()[:1])
                assert migrate(conn, name) == [1]
            q = Queue(conn, name)
            # version 1's data, written as version 1 had it: three jobs, one failed once (new
            # code enqueues and claims only after migrating)
            ids = conn.execute(
                sql.SQL(
                    "INSERT INTO {}.jobs (queue, payload)"
                    " SELECT 'q', '{{}}' FROM generate_series(1, 3) RETURNING id"
                ).format(sql.Identifier(name))
            ).fetchall()
            first = min(int(r[0]) for r in ids)
            conn.execute(
                sql.SQL("UPDATE {}.jobs SET attempts = 1, last_error = %s WHERE id = %s").format(
                    sql.Identifier(name)
                ),
                ["KeyError: 'a'", first],
            )
            assert migrate(conn, name) == [v for v, _, _ in migrations()][1:]
            assert len(q.claim("q", 2, LEASE, "w")) == 2
            assert migrate(conn, name) == []
            q.set_limit("q", 2)
            assert len(q.claim("q", 3, LEASE, "w")) == 0  # two still running
            assert [g.pattern for g in q.errors()] == ["KeyError: <str>"]
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


async def test_async_queue_offers_the_same_operations(aqueue: Any) -> None:
    from pgq_core.filters import JobFilter

    await aqueue.enqueue_many([JobSpec("q", {"i": i}) for i in range(3)])
    await aqueue.pause("q", "why")
    assert await aqueue.claim("q", 10, LEASE, "w") == []
    assert await aqueue.resume("q") is not None
    assert await aqueue.set_limit("q", 1) is None
    assert len(await aqueue.claim("q", 10, LEASE, "w")) == 1
    where = JobFilter(queue="q")
    assert await aqueue.count_matching(where) == 3
    assert await aqueue.count_matching(where, "kill") == 3
    assert len(await aqueue.jobs_matching(where, 2)) == 2
    killed = await aqueue.bulk("kill", where, batch=2)
    assert len(killed) == 3
    [group] = await aqueue.errors()
    assert (group.dead, group.pattern) == (3, "killed by operator")
    assert len(await aqueue.bulk("requeue", JobFilter(error_group=group.group))) == 3
    assert len(await aqueue.bulk("kill", where)) == 3
    assert len(await aqueue.bulk("delete", where)) == 3
    assert (await aqueue.health()).notify_usage >= 0
