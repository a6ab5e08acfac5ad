"""The heartbeater alone (pgq_core/worker/heartbeater.py), on a real PostgreSQL: it extends the
leases it tracks from its own thread, reports a job whose fence went stale, never waits on a
row another session holds, and opens the claim gate only once a round trip succeeded."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from support import until

from pgq_core import JobSpec, Queue, ops
from pgq_core.models import Job
from pgq_core.worker.heartbeater import Heartbeater
from pgq_core.worker.link import Link, Timeouts

LEASE = timedelta(seconds=3)
INTERVAL = 0.2


@pytest.fixture
async def link(dsn: str, schema: str) -> AsyncIterator[Link]:
    link = Link(dsn, schema, Timeouts(), lambda reason: None, lambda: None, "pgq heartbeat test")
    await link.open()
    try:
        yield link
    finally:
        await link.close()


class Beats:
    """A running heartbeater and the losses it reported, on this test's event loop."""

    def __init__(self, dsn: str, schema: str, worker_id: str) -> None:
        self.worker_id = worker_id
        self.lost: list[tuple[int, int]] = []
        self.renewing = 0
        self.heart = Heartbeater(
            dsn,
            schema,
            Timeouts(),
            INTERVAL,
            worker_id,
            asyncio.get_running_loop(),
            self.lost.extend,
            on_renewing=self._renewing,
        )

    def _renewing(self) -> None:
        self.renewing += 1


@pytest.fixture
async def beats(dsn: str, schema: str) -> AsyncIterator[Beats]:
    beats = Beats(dsn, schema, f"hb-{secrets.token_hex(3)}")
    beats.heart.start()
    try:
        yield beats
    finally:
        await asyncio.to_thread(beats.heart.stop)


async def claim_one(link: Link, queue: Queue, worker_id: str) -> Job:
    queue.enqueue_many([JobSpec("q", {})])
    (jobs,) = await link.call(ops.claim("q", 1, LEASE, worker_id))
    (job,) = jobs
    return job


def lease_until(queue: Queue, job: Job) -> datetime:
    until = queue.job(job.id).lease_until
    assert until is not None
    return until


async def test_the_claim_gate_opens_on_the_first_round_trip(beats: Beats) -> None:
    heart = beats.heart
    await until(lambda: heart.claim_blocked(time.monotonic()) is None)
    await until(lambda: beats.renewing == 1, what="on_renewing called once")
    assert heart.refusal(0.0) is None


async def test_a_tracked_lease_is_extended_and_an_untracked_one_is_not(
    beats: Beats, link: Link, queue: Queue
) -> None:
    worker_id = beats.worker_id
    kept = await claim_one(link, queue, worker_id)
    left = await claim_one(link, queue, worker_id)
    first_kept, first_left = lease_until(queue, kept), lease_until(queue, left)
    beats.heart.track(kept.id, kept.fence)
    await until(lambda: lease_until(queue, kept) > first_kept, timeout=5, what="extended")
    assert lease_until(queue, left) == first_left
    detail = queue.job(kept.id)
    assert (detail.status, detail.fence, detail.worker) == ("running", kept.fence, worker_id)
    beats.heart.untrack(kept.id)
    await asyncio.sleep(3 * INTERVAL)
    after_untrack = lease_until(queue, kept)
    await asyncio.sleep(3 * INTERVAL)
    assert lease_until(queue, kept) == after_untrack
    assert beats.lost == []


async def test_a_job_whose_fence_went_stale_is_reported_lost_once(
    beats: Beats, link: Link, queue: Queue
) -> None:
    worker_id = beats.worker_id
    job = await claim_one(link, queue, worker_id)
    (settled,) = await link.call(ops.hand_back([(job.id, job.fence)], worker_id, "test"))
    assert settled.applied == [job.id]
    (reclaimed,) = await link.call(ops.claim("q", 1, LEASE, "someone-else"))
    assert reclaimed[0].id == job.id and reclaimed[0].fence != job.fence
    beats.heart.track(job.id, job.fence)  # our fence is stale now
    await until(lambda: beats.lost, timeout=5, what="the loss reported")
    assert beats.lost[0] == (job.id, job.fence)
    detail = queue.job(job.id)
    assert (detail.worker, detail.fence) == ("someone-else", reclaimed[0].fence)


async def test_a_row_another_session_holds_is_skipped_not_waited_on_nor_lost(
    dsn: str, schema: str, beats: Beats, link: Link, queue: Queue
) -> None:
    worker_id = beats.worker_id
    job = await claim_one(link, queue, worker_id)
    before = lease_until(queue, job)
    with psycopg.connect(dsn) as locker:
        locker.execute(
            sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE").format(
                sql.Identifier(schema)
            ),
            [job.id],
        )
        beats.heart.track(job.id, job.fence)
        locked_at = time.monotonic()
        # a beat sent after the lock was taken succeeds while it is held: not stuck behind it
        # (one that waited would fail at the session's lock_timeout, 5 s, not succeed)
        await until(
            lambda: (beats.heart.renewed_at() or 0.0) > locked_at + INTERVAL,
            timeout=15,
            what="a round trip sent under the lock succeeded",
        )
        locker.rollback()
    assert beats.lost == []
    await until(lambda: lease_until(queue, job) > before, timeout=5, what="extended after")
