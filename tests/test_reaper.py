"""The reaper alone (pgq_core/worker/reaper.py), on a real PostgreSQL: an expired lease goes
back to `ready` (or `dead` at its last attempt), a live one is left alone, several reapers at
once reap each lease once, and the history's partitions ahead are made sure of."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql
from support import until

from pgq_core import JobSpec, Queue, ops
from pgq_core.worker.link import Link, Timeouts
from pgq_core.worker.reaper import PARTITIONS_EVERY, ensure_partitions, reap_forever

WORKER = "reaper-test"
SHORT = timedelta(milliseconds=300)
LONG = timedelta(seconds=60)


@pytest.fixture
async def link(dsn: str, schema: str) -> AsyncIterator[Link]:
    link = Link(dsn, schema, Timeouts(), lambda reason: None, lambda: None, "pgq reaper test")
    await link.open()
    try:
        yield link
    finally:
        await link.close()


@contextlib.asynccontextmanager
async def reaping(link: Link, interval: float = 0.1) -> AsyncIterator[None]:
    task = asyncio.create_task(reap_forever(link.call, interval, WORKER))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def status(queue: Queue, job_id: int) -> str:
    return queue.job(job_id).status


async def test_an_expired_lease_goes_back_to_ready_and_a_live_one_stays(
    link: Link, queue: Queue
) -> None:
    queue.enqueue_many([JobSpec("q", {"n": 1}), JobSpec("live", {"n": 2})])
    ((expiring,),) = await link.call(ops.claim("q", 1, SHORT, WORKER))
    ((live,),) = await link.call(ops.claim("live", 1, LONG, WORKER))
    async with reaping(link):
        await until(lambda: status(queue, expiring.id) == "ready", timeout=10, what="reaped")
        await asyncio.sleep(0.5)  # a few more passes
    assert queue.job(expiring.id).attempts == 1
    detail = queue.job(live.id)
    assert (detail.status, detail.worker, detail.fence) == ("running", WORKER, live.fence)
    (again,) = await link.call(ops.claim("q", 1, LONG, "next-worker"))
    assert [j.id for j in again] == [expiring.id] and again[0].fence != expiring.fence


async def test_an_expired_lease_at_its_last_attempt_goes_dead(link: Link, queue: Queue) -> None:
    queue.enqueue_many([JobSpec("q", {}, max_attempts=1)])
    ((job,),) = await link.call(ops.claim("q", 1, SHORT, WORKER))
    async with reaping(link):
        await until(lambda: status(queue, job.id) == "dead", timeout=10, what="dead")
    assert queue.job(job.id).attempts == 1


async def test_reapers_at_once_reap_each_lease_once(
    dsn: str, schema: str, link: Link, queue: Queue
) -> None:
    queue.enqueue_many([JobSpec("q", {"n": n}) for n in range(20)])
    (jobs,) = await link.call(ops.claim("q", 20, SHORT, WORKER))
    await asyncio.sleep(SHORT.total_seconds() + 0.1)
    links = [Link(dsn, schema, Timeouts(), lambda r: None, lambda: None, "r") for _ in range(3)]
    for other in links:
        await other.open()
    try:
        results = await asyncio.gather(*(other.call(ops.reap()) for other in links))
    finally:
        for other in links:
            await other.close()
    reaped = [job_id for (rows,) in results for job_id, _ in rows]
    assert sorted(reaped) == sorted(j.id for j in jobs)  # every one, none twice
    assert {status(queue, j.id) for j in jobs} == {"ready"}


def partitions(queue: Queue) -> set[str]:
    rows = queue.conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_inherits i"
        " JOIN pg_catalog.pg_class p ON p.oid = i.inhparent"
        " JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = p.relnamespace"
        " WHERE n.nspname = %s AND p.relname = 'job_events'",
        [queue.schema],
    ).fetchall()
    return {str(r[0]) for r in rows}


async def test_the_first_pass_creates_a_missing_partition_ahead(link: Link, queue: Queue) -> None:
    last = (datetime.now(UTC) + timedelta(days=ops.PARTITIONS_AHEAD)).strftime("job_events_p%Y%m%d")
    assert last in partitions(queue)
    queue.conn.execute(
        sql.SQL("DROP TABLE {}.{}").format(sql.Identifier(queue.schema), sql.Identifier(last))
    )
    assert last not in partitions(queue)
    async with reaping(link):
        await until(lambda: last in partitions(queue), timeout=10, what="the day recreated")
    warned: set[object] = set()
    assert await ensure_partitions(link.call, WORKER, warned) == PARTITIONS_EVERY
    assert warned == set()
