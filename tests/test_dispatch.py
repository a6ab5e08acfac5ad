"""The dispatcher (worker/dispatch.py) alone, without a database: it runs no statement, so
its handlers are scripted and what it would have the worker record is collected."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg.errors
import pytest
from support import fake_job, until

from pgq_core.errors import LeaseLost
from pgq_core.worker import JobContext
from pgq_core.worker.dispatch import MAX_FAULTS_IN_A_ROW, Dispatcher
from pgq_core.worker.ledger import Held, Ledger, StepResult
from pgq_core.worker.link import UnreadablePayload
from pgq_core.worker.policy import PrefetchPolicy

CONCURRENCY = 2


class Script:
    """Handlers that do what their job's payload says once `release(id)` lets them end:
    {"raise": "serialization"} raises a serialization failure, {"lose": True} a lost lease,
    else they return."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.cancelled: list[int] = []
        self._gates: dict[int, asyncio.Event] = {}

    def release(self, job_id: int) -> None:
        self._gates.setdefault(job_id, asyncio.Event()).set()

    async def __call__(self, ctx: JobContext) -> None:
        self.started.append(ctx.id)
        try:
            await self._gates.setdefault(ctx.id, asyncio.Event()).wait()
        except asyncio.CancelledError:
            self.cancelled.append(ctx.id)
            raise
        if ctx.payload.get("raise") == "serialization":
            raise psycopg.errors.SerializationFailure("could not serialize access")
        if ctx.payload.get("lose"):
            raise LeaseLost(ctx.id, ctx.fence, "fenced write")


Made = tuple[Dispatcher, Script, list[list[tuple[Held, str]]]]


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., Made]]:
    made: list[Dispatcher] = []

    def build(target: int = 0) -> Made:
        script = Script()
        stale: list[list[tuple[Held, str]]] = []
        ledger = Ledger(30.0, lambda n: 0.1)
        d = Dispatcher(
            script, CONCURRENCY, "w", "pgq", None, ledger, PrefetchPolicy(CONCURRENCY, target),
            lambda: None, stale.append,
        )
        made.append(d)
        return d, script, stale

    yield build
    for d in made:
        for h in d.ledger.running():
            d.runner.abandon(h.ctx)
        d.runner.shutdown()


def job(job_id: int, **payload: Any) -> Any:
    return fake_job(job_id, payload=payload or {"n": job_id})


async def test_a_freed_slot_takes_the_next_buffered_job_at_once(make: Callable[..., Made]) -> None:
    d, script, _ = make()
    for i in (1, 2, 3):
        d.hold(job(i))
    d.fill()
    await until(lambda: len(script.started) == 2, what="two slots busy")
    assert [h.job.id for h in d.ledger.buffer] == [3]
    script.release(1)
    await until(lambda: script.started == [1, 2, 3], what="the third job on the freed slot")
    assert [(h.job.id, h.outcome and h.outcome.kind) for h in d.ledger.pending] == [
        (1, "returned")
    ]


async def test_once_stopped_no_buffered_job_starts(make: Callable[..., Made]) -> None:
    d, script, _ = make()
    for i in (1, 2, 3):
        d.hold(job(i))
    d.fill()
    await until(lambda: len(script.started) == 2, what="two slots busy")
    d.stop(keep=CONCURRENCY)
    script.release(1)
    await until(lambda: len(d.ledger.pending) == 1, what="the first settlement pending")
    await asyncio.sleep(0.01)
    assert script.started == [1, 2] and [h.job.id for h in d.ledger.buffer] == [3]


async def test_a_payload_that_cannot_be_read_fails_without_running(
    make: Callable[..., Made],
) -> None:
    d, script, _ = make()
    d.hold(fake_job(1, payload=UnreadablePayload("nested too deep")))
    d.fill()
    ((h,),) = [d.ledger.pending]
    assert h.outcome is not None and h.outcome.kind == "raised"
    assert h.outcome.error == "the payload cannot be read: nested too deep"
    assert script.started == []


async def test_a_database_fault_goes_back_uncounted_a_bounded_number_of_times(
    make: Callable[..., Made],
) -> None:
    d, script, _ = make()
    kinds = []
    for fence in range(1, MAX_FAULTS_IN_A_ROW + 2):
        d.hold(fake_job(1, fence, payload={"raise": "serialization"}))
        d.fill()
        script.release(1)
        await until(lambda: bool(d.ledger.pending), what="the ending")
        (h,) = d.ledger.pending
        assert h.outcome is not None
        kinds.append(h.outcome.kind)
        d.ledger.take([h])
        d.ledger.release(h)
        script._gates.clear()
    assert kinds == ["faulted"] * MAX_FAULTS_IN_A_ROW + ["raised"]


async def test_a_lost_lease_stops_the_job_and_its_stale_write_is_passed_on(
    make: Callable[..., Made],
) -> None:
    d, script, stale = make()
    d.hold(job(1, lose=True))
    d.fill()
    script.release(1)
    await until(lambda: bool(stale), what="the stale write")
    ((h, action),) = stale[0]
    assert (h.job.id, action) == (1, "fenced write")
    assert not d.ledger.held and not d.ledger.pending and d.ledger.lost == 1


async def test_a_heartbeat_that_lost_a_lease_stops_only_the_running_handler(
    make: Callable[..., Made],
) -> None:
    d, script, stale = make()
    d.hold(job(1))
    d.hold(job(2))
    d.fill()
    script.release(2)
    await until(lambda: len(d.ledger.pending) == 1, what="job 2 finished")
    d.heartbeat_lost([(1, 1), (2, 1)])
    await until(lambda: script.cancelled == [1], what="job 1's handler told to stop")
    assert [[(h.job.id, a) for h, a in s] for s in stale] == [[(1, "heartbeat")]]
    assert list(d.ledger.held) == [2], "a finished job is left to its settlement"


async def test_a_steps_settlements_are_counted_and_its_lost_jobs_given_up(
    make: Callable[..., Made],
) -> None:
    d, script, stale = make()
    d.hold(job(1))
    d.hold(job(2))
    d.fill()
    script.release(1)
    await until(lambda: len(d.ledger.pending) == 1, what="job 1 finished")
    done = d.ledger.pending[0]
    d.ledger.take([done])
    running = d.ledger.held[2]
    d.settled(StepResult(done=[done], lost=[(running, "complete")]))
    assert d.ledger.counts == (1, 0, 1) and not d.ledger.held
    assert [[h.job.id for h, _ in s] for s in stale] == [[2]]
    await until(lambda: script.cancelled == [2], what="job 2's handler told to stop")


async def test_the_room_for_a_claim_counts_held_claiming_and_settling_jobs(
    make: Callable[..., Made],
) -> None:
    d, _, _ = make()
    d.target = 2  # the buffer's size
    assert d.room(0) == CONCURRENCY + 2 and d.wanted(0)
    d.hold(job(1))
    d.ledger.claiming = 2
    assert d.room(0) == 1 and d.room(1) == 2
    d.hold(job(2))
    assert d.room(0) == 0 and not d.wanted(0)
    d.ledger.claiming = 0
    assert d.room(0) == 2 and not d.wanted(0), "the buffer holds more than half its size"
