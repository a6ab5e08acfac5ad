"""Snooze: a handler raises (or returns) `Snooze(seconds)`; its job goes back to ready at the
database's now() + seconds, the attempt not counted, fenced like every write, with a
`snoozed` row in its history."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from psycopg import sql
from support import TIMEOUT, make_worker

from pgq_core import Queue, Snooze, Tasks, ops
from pgq_core.worker import JobContext


def _wait_seconds(queue: Queue, job_id: int) -> float:
    """Seconds from the job's snoozed row to the run_at it was given."""
    row = queue.conn.execute(
        sql.SQL(
            "SELECT extract(epoch FROM j.run_at - e.at)::float8 FROM {s}.jobs j"
            " JOIN {s}.job_events e ON e.job_id = j.id AND e.event = 'snoozed'"
            " WHERE j.id = %s ORDER BY e.id DESC LIMIT 1"
        ).format(s=sql.Identifier(queue.schema)),
        [job_id],
    ).fetchone()
    assert row is not None
    return float(row[0])


@pytest.mark.parametrize("how", ["raised", "returned", "async"])
async def test_a_snoozed_job_is_ready_later_and_spends_no_attempt(
    dsn: str, schema: str, queue: Queue, how: str
) -> None:
    job_id = queue.enqueue("q", {}, max_attempts=1)

    def plain(ctx: JobContext) -> Snooze:
        if how == "raised":
            raise Snooze(120)
        return Snooze(120)

    async def coroutine(ctx: JobContext) -> None:
        raise Snooze(120)

    handler = coroutine if how == "async" else plain
    worker = make_worker(dsn, schema, handler, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)

    job = queue.job(job_id)
    # max_attempts=1: a failure would have made it dead; a snooze spends nothing
    assert (job.status, job.attempts, job.last_error) == ("ready", 0, None)
    assert job.run_at.timestamp() > time.time() + 100
    assert abs(_wait_seconds(queue, job_id) - 120) < 1
    events = [(e.event, e.fence, e.worker) for e in queue.history(job_id)]
    assert events == [("enqueued", 0, None), ("claimed", 1, worker.id), ("snoozed", 1, worker.id)]
    snoozed = queue.history(job_id)[-1]
    assert snoozed.detail is not None and snoozed.detail.startswith("for 120s (runs at ")
    snap = worker.snapshot()
    assert (snap.done, snap.failed, snap.lost) == (0, 0, 0)


async def test_a_snoozed_job_runs_again_when_due(dsn: str, schema: str, queue: Queue) -> None:
    job_id = queue.enqueue("q", {}, max_attempts=1)
    runs: list[int] = []

    def handler(ctx: JobContext) -> None:
        runs.append(ctx.attempts)
        if len(runs) < 3:
            raise Snooze(0)

    worker = make_worker(dsn, schema, handler, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    job = queue.job(job_id)
    assert (job.status, job.attempts, job.fence) == ("done", 1, 3)
    assert runs == [1, 1, 1]
    assert [e.event for e in queue.history(job_id)].count("snoozed") == 2


def test_a_stale_fence_snoozes_nothing(queue: Queue) -> None:
    job_id = queue.enqueue("q", {})
    [job] = queue.claim("q", 1, worker="w1")
    queue.kill([job_id])  # an operator took it back: the fence moved on
    queue.requeue([job_id])
    [again] = queue.claim("q", 1, worker="w2")
    assert again.fence > job.fence
    settled = queue.run(ops.settle_snooze([(job.id, job.fence)], [60.0], "w1"))
    assert (settled.applied, settled.lost) == ([], [job_id])
    now = queue.job(job_id)
    assert (now.status, now.fence, now.worker) == ("running", again.fence, "w2")
    assert "snoozed" not in [e.event for e in queue.history(job_id)]
    settled = queue.run(ops.settle_snooze([(again.id, again.fence)], [60.0], "w2"))
    assert settled.applied == [job_id]
    assert queue.job(job_id).status == "ready"


def test_a_task_snoozes_whatever_its_retry_on(dsn: str, schema: str, queue: Queue) -> None:
    tasks = Tasks("q", client=queue)

    @tasks.task(queue="q", retry_on=(ConnectionError,), max_attempts=1)
    def later() -> None:
        raise Snooze(60)

    job_id = later.enqueue(conn=queue)
    worker = make_worker(dsn, schema, tasks, burst=True)
    asyncio.run(asyncio.wait_for(worker.run(), TIMEOUT))
    job = queue.job(job_id)
    assert (job.status, job.attempts) == ("ready", 0)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), 366 * 86400])
def test_a_snooze_out_of_bounds_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="Snooze must be from 0 to"):
        Snooze(bad)
    with pytest.raises(TypeError):
        Snooze("10")  # type: ignore[arg-type]
    assert Snooze(timedelta(minutes=1).total_seconds()).seconds == 60.0
