"""The worker runtime, in-process, against a real PostgreSQL: batching, capacity, failures,
lost leases, transactional completion, burst exit, graceful stop, LISTEN wake-ups."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from pgproxy import PgProxy
from prometheus_client import CollectorRegistry
from psycopg import sql
from support import TIMEOUT, events, make_worker, retry_wait, running, status_counts, until

from pgq_core import DontRetry, JobSpec, PgqError, Queue, fenced_write
from pgq_core.worker import JobContext, Worker, load_handler
from pgq_core.worker.metrics import WorkerMetrics


@pytest.mark.fresh_schema  # reads row versions (xmin)
async def test_burst_drains_and_settles_in_batches(dsn: str, schema: str, queue: Queue) -> None:
    queue.enqueue_many([JobSpec("q", {"i": i}) for i in range(300)])
    seen: list[int] = []

    async def handler(ctx: JobContext) -> None:
        seen.append(ctx.id)

    worker = make_worker(dsn, schema, handler, concurrency=20, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)

    assert worker.state == "stopped"
    assert status_counts(queue) == {"done": 300}
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 300
    snap = worker.snapshot()
    assert (snap.done, snap.failed, snap.lost, snap.running) == (300, 0, 0, ())
    # Rows settled by one statement share its transaction id: far fewer than one per job.
    transactions = queue.conn.execute(
        sql.SQL("SELECT count(DISTINCT xmin::text) FROM {}.jobs").format(sql.Identifier(schema))
    ).fetchone()
    assert transactions is not None and transactions[0] <= 300 // 5
    completed_by = queue.conn.execute(
        sql.SQL("SELECT DISTINCT worker FROM {}.job_events WHERE event = 'completed'").format(
            sql.Identifier(schema)
        )
    ).fetchall()
    assert completed_by == [(worker.id,)]


@pytest.mark.parametrize("prefetch", [0, 3])
async def test_never_holds_more_jobs_than_it_can_run_and_buffer(
    dsn: str, schema: str, queue: Queue, prefetch: int
) -> None:
    queue.enqueue_many([JobSpec("q", {}) for _ in range(40)])
    worker: Worker

    async def handler(ctx: JobContext) -> None:
        await asyncio.sleep(0.02)

    worker = make_worker(dsn, schema, handler, concurrency=4, burst=True, prefetch=prefetch)
    held_in_db: list[int] = []
    task = asyncio.create_task(worker.run())
    with psycopg.connect(dsn, autocommit=True) as probe:
        count = sql.SQL("SELECT count(*) FROM {}.jobs WHERE status = 'running'").format(
            sql.Identifier(schema)
        )
        while not task.done():
            row = probe.execute(count).fetchone()
            assert row is not None
            held_in_db.append(int(row[0]))
            snap = worker.snapshot()
            assert len(snap.running) <= 4 and snap.buffered <= prefetch
            await asyncio.sleep(0.005)
    await task
    assert max(held_in_db) <= 4 + prefetch
    if prefetch:
        assert max(held_in_db) > 4, "the buffer was used"
    assert status_counts(queue) == {"done": 40}


async def test_sync_handler_runs_in_threads(dsn: str, schema: str, queue: Queue) -> None:
    ids = queue.enqueue_many([JobSpec("q", {"n": n}) for n in range(10)])
    threads: set[str] = set()

    def handler(ctx: JobContext) -> None:
        threads.add(threading.current_thread().name)
        assert ctx.payload["n"] == ids.index(ctx.id)
        assert (ctx.fence, ctx.attempts, ctx.max_attempts, ctx.queue) == (1, 1, 5, "q")

    worker = make_worker(dsn, schema, handler, concurrency=3, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert status_counts(queue) == {"done": 10}
    assert threads and all(t.startswith("pgq-job-") for t in threads)


async def test_raising_fails_the_job_with_its_error_and_backoff(
    dsn: str, schema: str, queue: Queue
) -> None:
    retried = queue.enqueue("q", {"kind": "retry"}, max_attempts=3)
    final = queue.enqueue("q", {"kind": "last"}, max_attempts=1)

    async def handler(ctx: JobContext) -> None:
        raise ValueError(f"boom {ctx.payload['kind']}")

    worker = make_worker(dsn, schema, handler, burst=True, retry_base=60.0)
    await asyncio.wait_for(worker.run(), TIMEOUT)

    snap = worker.snapshot()
    assert (snap.done, snap.failed, snap.lost) == (0, 2, 0)
    job = queue.job(retried)
    assert (job.status, job.attempts, job.last_error) == ("ready", 1, "ValueError: boom retry")
    assert job.run_at.timestamp() > time.time() + 30  # 60 s * 2**1, less up to 25 % jitter
    dead = queue.job(final)
    assert (dead.status, dead.last_error) == ("dead", "ValueError: boom last")
    assert [e[0] for e in events(queue, final)] == ["enqueued", "claimed", "dead"]


async def test_a_jobs_own_backoff_wins_over_the_workers(
    dsn: str, schema: str, queue: Queue
) -> None:
    own = queue.enqueue("q", {}, max_attempts=3, backoff_base=100, backoff_cap=150)
    base_only = queue.enqueue("q", {}, max_attempts=3, backoff_base=10)
    workers = queue.enqueue("q", {}, max_attempts=3)

    async def handler(ctx: JobContext) -> None:
        raise ConnectionError("down")

    worker = make_worker(dsn, schema, handler, burst=True, retry_base=40.0)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    columns = sql.SQL("SELECT backoff_base, backoff_cap FROM {}.jobs WHERE id = %s").format(
        sql.Identifier(schema)
    )
    assert queue.conn.execute(columns, [own]).fetchone() == (100.0, 150.0)
    assert queue.conn.execute(columns, [workers]).fetchone() == (None, None)
    # attempt 1 failed: min(cap, base * 2**1), less up to a quarter at random
    assert 150 * 0.75 - 1 <= retry_wait(queue, own) <= 150
    assert 20 * 0.75 - 1 <= retry_wait(queue, base_only) <= 20
    assert 80 * 0.75 - 1 <= retry_wait(queue, workers) <= 80
    with pytest.raises(ValueError, match="backoff_base must be from 0 to"):
        queue.enqueue("q", {}, backoff_base=400 * 86400)
    with pytest.raises(ValueError, match="backoff_cap must be from 0 to"):
        queue.enqueue("q", {}, backoff_cap=float("nan"))
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_backoff_check"):
        queue.conn.execute(  # plain SQL meets the same bounds
            sql.SQL("INSERT INTO {}.jobs (queue, payload, backoff_cap) VALUES ('q', '{{}}', -1)")
            .format(sql.Identifier(schema))
        )


async def test_a_handler_raising_dont_retry_makes_its_job_dead_at_once(
    dsn: str, schema: str, queue: Queue
) -> None:
    plain = queue.enqueue("q", {"n": 1})
    caused = queue.enqueue("q", {"n": 2})
    other = queue.enqueue("q", {"n": 3}, max_attempts=2)

    def handler(ctx: JobContext) -> None:
        if ctx.payload["n"] == 1:
            raise DontRetry("the account is closed")
        if ctx.payload["n"] == 2:
            try:
                {}["missing"]
            except KeyError as exc:
                raise DontRetry("no such field") from exc
        raise ConnectionError("down")

    metrics = WorkerMetrics(CollectorRegistry())
    worker = make_worker(dsn, schema, handler, burst=True, retry_base=0.0, metrics=metrics)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    for job_id, error in [
        (plain, "DontRetry: the account is closed"),
        (caused, "KeyError: 'missing' (not retried: no such field)"),
    ]:
        job = queue.job(job_id)
        assert (job.status, job.attempts, job.max_attempts, job.last_error) == (
            "dead", 1, 5, error
        )
        assert [e[0] for e in events(queue, job_id)] == ["enqueued", "claimed", "dead"]
    assert (queue.job(other).status, queue.job(other).attempts) == ("dead", 2)  # retried once
    dead = metrics.registry.get_sample_value("pgq_worker_dead_jobs_total", {"worker": worker.id})
    assert dead == 3


async def test_a_burst_worker_runs_a_retry_due_at_once_before_it_exits(
    dsn: str, schema: str, queue: Queue
) -> None:
    """It exited once its last job was settled, without claiming again: a failure retried at
    once (backoff 0) was left ready (the test failed before)."""
    job_id = queue.enqueue("q", {}, max_attempts=3)

    async def handler(ctx: JobContext) -> None:
        if ctx.attempts < 3:
            raise ConnectionError(f"attempt {ctx.attempts}")

    worker = make_worker(dsn, schema, handler, burst=True, retry_base=0.0)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    job = queue.job(job_id)
    assert (job.status, job.attempts) == ("done", 3)
    assert [e[0] for e in events(queue, job_id)] == (
        ["enqueued"] + ["claimed", "failed"] * 2 + ["claimed", "completed"]
    )


async def test_operator_kill_cancels_the_async_handler_at_the_next_heartbeat(
    dsn: str, schema: str, queue: Queue
) -> None:
    job_id = queue.enqueue("q", {})
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        if ctx.id != job_id:
            return
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = make_worker(dsn, schema, handler, lease=timedelta(seconds=3))
    async with running(worker):
        await asyncio.wait_for(started.wait(), TIMEOUT)
        assert [r.id for r in worker.snapshot().running] == [job_id]
        assert queue.kill([job_id]) == [job_id]
        await asyncio.wait_for(cancelled.wait(), TIMEOUT)
        await until(lambda: worker.snapshot().lost == 1, what="lost counted")
        assert worker.snapshot().running == ()
        # The worker goes on: a new job is done.
        after = queue.enqueue("q", {})
        await until(lambda: queue.job(after).status == "done", what="next job done")

    history = queue.job(job_id).history
    assert [(e.event, e.fence) for e in history] == [
        ("enqueued", 0),
        ("claimed", 1),
        ("killed", 2),
        ("stale", 1),
    ]
    stale = history[-1]
    assert stale.worker == worker.id and stale.detail == "heartbeat rejected: stale fence"
    # Seen at a heartbeat (every lease / 3 = 1 s), not by waiting for the lease to run out.
    assert (stale.at - history[2].at).total_seconds() < 3
    assert queue.job(job_id).status == "dead"


async def test_sync_handler_is_told_through_ctx_lost(dsn: str, schema: str, queue: Queue) -> None:
    job_id = queue.enqueue("q", {})
    saw_lost = threading.Event()
    started = threading.Event()

    def handler(ctx: JobContext) -> str:
        started.set()
        while not ctx.lost:
            time.sleep(0.01)
        saw_lost.set()
        return "thrown away"

    worker = make_worker(dsn, schema, handler, lease=timedelta(seconds=1.5))
    async with running(worker):
        await until(started.is_set, what="handler start")
        queue.kill([job_id])
        await until(saw_lost.is_set, what="handler sees ctx.lost")
        await until(lambda: worker.snapshot().lost == 1, what="lost counted")
        assert worker.snapshot().done == 0
    assert queue.job(job_id).status == "dead"


async def test_completion_with_a_stale_fence_is_discarded_and_recorded(
    dsn: str, schema: str, queue: Queue
) -> None:
    job_id = queue.enqueue("q", {})
    started = asyncio.Event()
    release = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        started.set()
        await release.wait()

    # one slot, no buffer: this worker cannot claim the job again once it is reaped
    worker = make_worker(dsn, schema, handler, concurrency=1, prefetch=0)
    async with running(worker):
        await asyncio.wait_for(started.wait(), TIMEOUT)
        # Another worker takes the job over: lease expired, reaped, claimed with fence 2.
        queue.conn.execute(
            sql.SQL("UPDATE {}.jobs SET lease_until = now() - interval '1 second'").format(
                sql.Identifier(schema)
            )
        )
        assert queue.reap() == [(job_id, "ready")]
        [taken] = queue.claim("q", 1, worker="other")
        assert taken.fence == 2
        release.set()
        await until(lambda: worker.snapshot().lost == 1, what="completion rejected")
        assert worker.snapshot().done == 0

    job = queue.job(job_id)
    assert (job.status, job.fence, job.worker) == ("running", 2, "other")
    assert [(e.event, e.fence, e.worker) for e in job.history][-2:] == [
        ("claimed", 2, "other"),
        ("stale", 1, worker.id),
    ]
    assert job.history[-1].detail == "complete rejected: stale fence"


async def test_handler_completes_its_own_job_in_its_transaction(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.conn.execute(
        sql.SQL("CREATE TABLE {}.effects (job_id bigint PRIMARY KEY, fence bigint)").format(
            sql.Identifier(schema)
        )
    )
    ids = queue.enqueue_many([JobSpec("q", {}) for _ in range(5)])

    def handler(ctx: JobContext) -> None:
        with psycopg.connect(dsn) as conn, conn.transaction():
            fenced_write(conn, "effects", {"job_id": ctx.id}, {}, ctx.fence, schema=schema)
            ctx.complete(conn)

    worker = make_worker(dsn, schema, handler, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert worker.snapshot().done == 5
    for job_id in ids:
        assert [e[0] for e in events(queue, job_id)] == ["enqueued", "claimed", "completed"]
    rows = queue.conn.execute(
        sql.SQL(
            "SELECT count(*) FROM {s}.effects e JOIN {s}.jobs j ON j.id = e.job_id "
            "WHERE j.status = 'done' AND e.fence = j.fence"
        ).format(s=sql.Identifier(schema))
    ).fetchone()
    assert rows == (5,)


async def test_burst_exits_at_once_on_empty_queues(dsn: str, schema: str) -> None:
    worker = make_worker(dsn, schema, lambda ctx: None, queues=["a", "b"], burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert worker.snapshot().state == "stopped"


async def test_burst_runs_what_its_last_handler_enqueued_before_exiting(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A chain of jobs, each enqueuing the next and returning: the burst ends only once the
    last link is done. Before, the settle that completed a link (a step that claimed nothing,
    since a job was still held when it was planned) counted as 'queues drained', leaving the
    next link ready (this test failed 6 runs in 6)."""
    queue.enqueue("q", {"left": 5})

    def handler(ctx: JobContext) -> None:
        if ctx.payload["left"]:
            with Queue.connect(dsn, schema) as producer:
                producer.enqueue("q", {"left": ctx.payload["left"] - 1})

    worker = make_worker(dsn, schema, handler, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert status_counts(queue) == {"done": 6}


async def test_several_queues_are_all_drained(dsn: str, schema: str, queue: Queue) -> None:
    queue.enqueue_many([JobSpec(q, {}) for q in ("a", "b", "c") for _ in range(15)])
    queue.enqueue("not-mine", {})
    done: list[str] = []

    async def handler(ctx: JobContext) -> None:
        done.append(ctx.queue)

    worker = make_worker(dsn, schema, handler, queues=["a", "b", "c"], concurrency=4, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert sorted(done) == ["a"] * 15 + ["b"] * 15 + ["c"] * 15
    assert status_counts(queue) == {"done": 45, "ready": 1}


async def test_graceful_stop_finishes_quick_jobs_and_hands_back_the_rest(
    dsn: str, schema: str, queue: Queue
) -> None:
    quick = queue.enqueue_many([JobSpec("q", {"sleep": 0.2}) for _ in range(3)])
    slow = queue.enqueue("q", {"sleep": 3600})
    started: set[int] = set()
    cancelled: set[int] = set()

    async def handler(ctx: JobContext) -> None:
        started.add(ctx.id)
        try:
            await asyncio.sleep(ctx.payload["sleep"])
        except asyncio.CancelledError:
            cancelled.add(ctx.id)
            raise

    worker = make_worker(dsn, schema, handler, concurrency=4, grace=1.0)
    task = asyncio.create_task(worker.run())
    await until(lambda: len(started) == 4, what="4 jobs running")
    worker.stop()
    await until(lambda: worker.state == "draining" or task.done(), what="draining")
    await asyncio.wait_for(task, TIMEOUT)

    assert cancelled == {slow}
    assert all(queue.job(i).status == "done" for i in quick)
    job = queue.job(slow)
    assert (job.status, job.attempts, job.lease_until) == ("ready", 0, None)
    assert [(e.event, e.worker) for e in job.history][-1] == ("released", worker.id)
    assert worker.snapshot().done == 3


async def test_stop_from_another_thread(dsn: str, schema: str) -> None:
    worker = make_worker(dsn, schema, lambda ctx: None)
    task = asyncio.create_task(worker.run())
    await until(lambda: worker.state == "running", what="running")
    threading.Thread(target=worker.stop).start()
    await asyncio.wait_for(task, TIMEOUT)
    assert worker.state == "stopped"


async def test_notification_wakes_an_idle_worker(dsn: str, schema: str, queue: Queue) -> None:
    done = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        done.set()

    # Polling alone would take a minute: only LISTEN/NOTIFY can make this pass.
    worker = make_worker(dsn, schema, handler, poll_interval=60.0)
    listening = sql.SQL(
        "SELECT count(*) FROM pg_stat_activity WHERE query = {}"
    ).format(sql.Literal(f'LISTEN "{schema}_jobs"'))

    def listener_connected() -> bool:
        row = queue.conn.execute(listening).fetchone()
        return row is not None and row[0] == 1

    async with running(worker):
        await until(lambda: worker.statements >= 1, what="first claim")
        await until(listener_connected, what="the worker LISTENs")
        queue.enqueue("q", {})
        await asyncio.wait_for(done.wait(), TIMEOUT)


async def test_idle_polling_backs_off(dsn: str, schema: str) -> None:
    worker = make_worker(
        dsn, schema, lambda ctx: None, poll_interval=0.01, max_poll_interval=0.32
    )
    async with running(worker):
        await until(lambda: worker.idle_interval >= 0.32, what="backoff to the cap")
        before = worker.statements
        await asyncio.sleep(1.0)
        # Without backoff a 10 ms poll would have claimed ~100 times.
        assert worker.statements - before <= 6


async def test_snapshot_lists_running_jobs_with_fences(dsn: str, schema: str, queue: Queue) -> None:
    ids = queue.enqueue_many([JobSpec("q", {}) for _ in range(2)])
    gate = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        await gate.wait()

    worker = make_worker(dsn, schema, handler, concurrency=5)
    async with running(worker):
        await until(lambda: len(worker.snapshot().running) == 2, what="2 running")
        snap = worker.snapshot()
        assert snap.state == "running" and snap.concurrency == 5 and snap.queues == ("q",)
        assert sorted((r.id, r.fence, r.attempts, r.queue) for r in snap.running) == [
            (i, 1, 1, "q") for i in ids
        ]
        assert all(abs(r.started_at - time.time()) < 60 for r in snap.running)
        gate.set()
        await until(lambda: worker.snapshot().done == 2, what="done")


def test_load_handler(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_jobs.py").write_text(
        "async def send(ctx):\n    return 1\n\nclass Box:\n    def run(self, ctx):\n"
        "        return 2\n\nbox = Box()\nnot_callable = 3\n"
    )
    monkeypatch.chdir(tmp_path)  # load_handler makes the current directory importable
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load_handler("my_jobs:send").__name__ == "send"
    assert load_handler("my_jobs:box.run")(None) == 2  # type: ignore[arg-type]
    for spec, message in [
        ("my_jobs", "use MODULE:CALLABLE"),
        ("my_jobs:", "use MODULE:CALLABLE"),
        ("no_such_module_xyz:f", "cannot import handler module 'no_such_module_xyz'"),
        ("my_jobs:missing", "has no attribute 'missing'"),
        ("my_jobs:not_callable", "is not callable"),
    ]:
        with pytest.raises(PgqError, match=message):
            load_handler(spec)


def test_worker_rejects_bad_settings(dsn: str) -> None:
    with pytest.raises(PgqError):
        Worker(dsn, [], lambda ctx: None)
    with pytest.raises(PgqError):
        Worker(dsn, ["q"], lambda ctx: None, concurrency=0)
    with pytest.raises(PgqError):
        Worker(dsn, ["q"], lambda ctx: None, lease=timedelta(0))


async def test_unreachable_database_at_start_is_one_clear_error() -> None:
    worker = Worker(
        "postgresql://u:secret-pw@127.0.0.1:1/db?connect_timeout=2", ["q"], lambda ctx: None
    )
    with pytest.raises(PgqError, match="database unavailable") as info:
        await worker.run()
    assert "secret-pw" not in str(info.value)


async def test_cancelling_run_hands_held_jobs_back(dsn: str, schema: str, queue: Queue) -> None:
    job_id = queue.enqueue("q", {})
    started = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(3600)

    worker = make_worker(dsn, schema, handler)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), TIMEOUT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    job = queue.job(job_id)
    assert (job.status, job.history[-1].event) == ("ready", "released")


async def test_heartbeats_keep_a_long_job_past_its_lease(
    dsn: str, schema: str, queue: Queue
) -> None:
    job_id = queue.enqueue("q", {})

    async def handler(ctx: JobContext) -> None:
        await asyncio.sleep(3.0)  # three leases long

    # A second worker reaps every 0.5 s: only the heartbeats keep the job from it.
    reaper = make_worker(dsn, schema, lambda ctx: None, queues=["other"], reap_interval=0.5)
    worker = make_worker(dsn, schema, handler, lease=timedelta(seconds=1), burst=True)
    async with running(reaper):
        await asyncio.wait_for(worker.run(), TIMEOUT)
    job = queue.job(job_id)
    assert (job.status, job.fence, job.attempts) == ("done", 1, 1)
    assert [e.event for e in job.history] == ["enqueued", "claimed", "completed"]
    assert worker.snapshot().lost == 0


async def test_a_completion_committed_unseen_counts_as_done(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection breaks after the completing statement committed, before its reply: the
    jobs count as done once (not lost, no stale event), and anything that statement claimed is
    handed back at once, its attempt not counted."""
    ids = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
    gate = threading.Event()
    proxy = PgProxy(dsn)
    caplog.set_level("INFO", logger="pgq.worker")

    def handler(ctx: JobContext) -> None:
        gate.wait(TIMEOUT)

    worker = make_worker(proxy.dsn, schema, handler, concurrency=3, reap_interval=3600)
    try:
        async with running(worker):
            await until(lambda: len(worker.snapshot().running) == 3, what="three jobs running")
            later = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
            proxy.lose_next_reply(f"pgq main {worker.id}")
            gate.set()
            await until(lambda: worker.snapshot().done == 6, what="every job done")
    finally:
        proxy.close()
    assert proxy.lost_replies == 1
    snap = worker.snapshot()
    assert (snap.done, snap.failed, snap.lost) == (6, 0, 0)
    for job_id in ids:
        assert [e.event for e in queue.job(job_id).history] == ["enqueued", "claimed", "completed"]
    for job_id in later:
        assert queue.job(job_id).status == "done"
    assert "database reachable again" in caplog.text


async def test_a_lost_claim_reply_costs_no_attempt(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """The reply to a committed claim never arrives: the worker hands those rows back as soon
    as it reconnects (they are running under its id, yet it does not hold them), so even with
    max_attempts=1 every job runs once and none dies unstarted."""
    proxy = PgProxy(dsn)
    ran: list[int] = []
    caplog.set_level("INFO", logger="pgq.worker")
    worker = make_worker(
        proxy.dsn, schema, lambda ctx: ran.append(ctx.id), concurrency=5, reap_interval=3600
    )
    try:
        async with running(worker):
            await until(lambda: worker.statements >= 1, what="first claim")
            proxy.lose_next_rows(f"pgq main {worker.id}")  # an idle poll's reply goes through
            ids = queue.enqueue_many([JobSpec("q", {}, max_attempts=1) for _ in range(5)])
            await until(lambda: worker.snapshot().done == 5, what="every job done")
    finally:
        proxy.close()
    assert proxy.lost_replies == 1
    assert sorted(ran) == sorted(ids)
    released = 0
    for job_id in ids:
        job = queue.job(job_id)
        assert (job.status, job.attempts) == ("done", 1)
        events_ = [e.event for e in job.history]
        released += events_.count("released")
        assert events_[-1] == "completed"
    assert released >= 1
    assert "claimed while the connection broke" in caplog.text


@pytest.mark.fresh_schema  # reads row versions (xmin)
async def test_failures_and_completions_settle_together(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A step with failures and completions settles both in one transaction."""
    ids = queue.enqueue_many([JobSpec("q", {"n": n}, max_attempts=1) for n in range(40)])
    release = asyncio.Event()
    finished = 0

    async def handler(ctx: JobContext) -> None:
        nonlocal finished
        finished += 1
        if finished == 10:
            release.set()
        await release.wait()
        if ctx.payload["n"] % 2:
            raise RuntimeError(f"odd {ctx.payload['n']}")

    worker = make_worker(dsn, schema, handler, concurrency=10, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    snap = worker.snapshot()
    assert (snap.done, snap.failed, snap.lost) == (20, 20, 0)
    shared = queue.conn.execute(
        sql.SQL(
            "SELECT count(*) FROM (SELECT xmin::text FROM {}.jobs GROUP BY 1"
            " HAVING count(*) FILTER (WHERE status = 'dead') > 0"
            " AND count(*) FILTER (WHERE status = 'done') > 0) x"
        ).format(sql.Identifier(schema))
    ).fetchone()
    assert shared is not None and shared[0] >= 1
    for n, job_id in enumerate(ids):
        job = queue.job(job_id)
        if n % 2:
            assert (job.status, job.last_error) == ("dead", f"RuntimeError: odd {n}")
        else:
            assert (job.status, job.last_error) == ("done", None)


async def test_logs_are_quiet_and_never_show_the_password(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    queue.enqueue_many([JobSpec("q", {}) for _ in range(50)])
    password = conninfo_to_dict(dsn).get("password") or "s3cret-pw"  # embedded: its own
    with_password = make_conninfo(dsn, password=password)
    caplog.set_level("INFO", logger="pgq.worker")
    worker = make_worker(with_password, schema, lambda ctx: None, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert worker.snapshot().done == 50
    assert str(password) not in caplog.text
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages  # started, drained, stopped: nothing per job or poll
    assert messages[0].startswith(f"worker {worker.id} started: queues q, concurrency 10")


async def test_async_handler_completes_its_own_job_in_its_transaction(
    dsn: str, schema: str, queue: Queue
) -> None:
    job_id = queue.enqueue("q", {})

    async def handler(ctx: JobContext) -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            await ctx.complete_async(conn)

    worker = make_worker(dsn, schema, handler, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert worker.snapshot().done == 1
    assert [e[0] for e in events(queue, job_id)] == ["enqueued", "claimed", "completed"]


async def test_after_a_lost_connection_held_jobs_are_kept_or_given_up(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    kept, stolen = queue.enqueue_many([JobSpec("q", {}) for _ in range(2)])
    started: set[int] = set()
    gate = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        started.add(ctx.id)
        await gate.wait()

    caplog.set_level("INFO", logger="pgq.worker")
    worker = make_worker(dsn, schema, handler)
    async with running(worker):
        await until(lambda: started == {kept, stolen}, what="both jobs running")
        # While the worker is cut off, one of its jobs is reaped and claimed elsewhere.
        queue.conn.execute(
            sql.SQL("UPDATE {}.jobs SET lease_until = now() - interval '1 s' WHERE id = %s").format(
                sql.Identifier(schema)
            ),
            (stolen,),
        )
        queue.conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"pgq main {worker.id}",),
        )
        assert queue.reap() == [(stolen, "ready")]
        [other] = queue.claim("q", 1, worker="other")
        assert other.id == stolen
        await until(lambda: worker.state == "disconnected" or worker.snapshot().lost, what="loss")
        await until(lambda: worker.snapshot().lost == 1, what="the stolen job given up")
        assert [r.id for r in worker.snapshot().running] == [kept]
        gate.set()
        await until(lambda: worker.snapshot().done == 1, what="the kept job completed")

    assert queue.job(kept).status == "done"
    assert (queue.job(stolen).status, queue.job(stolen).worker) == ("running", "other")
    assert caplog.text.count("database unavailable") <= 1


# -- the buffer: jobs claimed ahead of the free slots -----------------------------------------


def running_rows(queue: Queue) -> dict[int, tuple[Any, Any]]:
    rows = queue.conn.execute(
        sql.SQL(
            "SELECT id, claimed_at, lease_until FROM {}.jobs WHERE status = 'running'"
        ).format(sql.Identifier(queue.schema))
    ).fetchall()
    return {int(i): (claimed, until_) for i, claimed, until_ in rows}


async def test_a_freed_slot_starts_a_buffered_job_and_buffered_leases_are_kept(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Buffered jobs are held like running ones: their leases outlive three lease lengths
    only through the heartbeats (a second worker reaps every 0.5 s), and each runs once."""
    ids = queue.enqueue_many([JobSpec("q", {"i": i}) for i in range(4)])
    gate = asyncio.Event()
    ran: list[int] = []

    async def handler(ctx: JobContext) -> None:
        if not ran:
            ran.append(ctx.id)
            await gate.wait()
            return
        ran.append(ctx.id)

    reaper = make_worker(dsn, schema, lambda ctx: None, queues=["other"], reap_interval=0.5)
    worker = make_worker(
        dsn, schema, handler, concurrency=1, prefetch=3, lease=timedelta(seconds=1), burst=True
    )
    async with running(reaper):
        task = asyncio.create_task(worker.run())
        await until(
            lambda: worker.snapshot().buffered == 3 and ran, what="one job running, 3 buffered"
        )
        first = running_rows(queue)
        assert sorted(first) == sorted(ids) and ran == [ids[0]]
        await asyncio.sleep(3.0)
        later = running_rows(queue)
        assert sorted(later) == sorted(ids), "no buffered job was reaped"
        assert all(later[i][1] > first[i][1] for i in ids), "every lease was extended"
        gate.set()
        await asyncio.wait_for(task, TIMEOUT)
    assert ran == ids
    for job_id in ids:
        job = queue.job(job_id)
        assert (job.status, job.fence, job.attempts) == ("done", 1, 1)
        assert [e.event for e in job.history] == ["enqueued", "claimed", "completed"]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_stop_hands_buffered_jobs_back_at_once_without_their_attempt(
    dsn: str, schema: str, queue: Queue, kind: str
) -> None:
    """A plain function's next job waits on its thread's queue: it is taken back with the
    rest of the buffer, never run."""
    running_id, *buffered = queue.enqueue_many([JobSpec("q", {}) for _ in range(4)])
    gate = threading.Event()
    started: list[int] = []

    async def handler(ctx: JobContext) -> None:
        started.append(ctx.id)
        await asyncio.to_thread(gate.wait)

    def sync_handler(ctx: JobContext) -> None:
        started.append(ctx.id)
        gate.wait()

    worker = make_worker(
        dsn, schema, handler if kind == "async" else sync_handler, concurrency=1, prefetch=3,
        grace=3600.0,
    )
    task = asyncio.create_task(worker.run())
    await until(lambda: len(worker.snapshot().running) == 1, what="one job running")
    worker.stop()
    await until(
        lambda: all(queue.job(i).status == "ready" for i in buffered), what="buffer handed back"
    )
    assert worker.state == "draining" and started == [running_id], "the running job runs on"
    gate.set()
    await asyncio.wait_for(task, TIMEOUT)
    assert started == [running_id], "no buffered job started after the stop"
    assert queue.job(running_id).status == "done"
    for job_id in buffered:
        job = queue.job(job_id)
        assert (job.status, job.attempts, job.lease_until) == ("ready", 0, None)
        assert [e.event for e in job.history] == ["enqueued", "claimed", "released"]
        assert job.history[-1].detail == "worker shutdown: not started"
    assert (worker.snapshot().done, worker.snapshot().buffered) == (1, 0)


async def test_a_buffering_worker_drains_every_job_once(
    dsn: str, schema: str, queue: Queue
) -> None:
    ids = queue.enqueue_many([JobSpec("q", {"i": i}) for i in range(500)])
    seen: list[int] = []

    def handler(ctx: JobContext) -> None:
        seen.append(ctx.id)

    worker = make_worker(dsn, schema, handler, concurrency=2, prefetch=40, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert sorted(seen) == sorted(ids)
    assert status_counts(queue) == {"done": 500}
    snap = worker.snapshot()
    assert (snap.done, snap.failed, snap.lost, snap.buffered) == (500, 0, 0, 0)


async def test_a_plain_handlers_own_timeout_runs_from_its_start_not_its_claim(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A job's timeout (the handler's `timeout_for`) counts from when its handler starts: a
    buffered job waiting behind a running one is not timed out for its wait."""
    ids = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])

    class Handler:
        def __call__(self, ctx: JobContext) -> None:
            time.sleep(0.4)

        def timeout_for(self, ctx: JobContext) -> float:
            return 0.6

    worker = make_worker(dsn, schema, Handler(), concurrency=1, prefetch=2, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert [queue.job(i).status for i in ids] == ["done"] * 3
    assert (worker.snapshot().done, worker.snapshot().failed) == (3, 0)
