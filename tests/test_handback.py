"""Handing back (worker/handback.py) alone, without a database: a fake `call` records the ops
and answers them with canned rows."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support import FakeCall, fake_job, row

from pgq_core import ops
from pgq_core.worker import JobContext
from pgq_core.worker.dispatch import Dispatcher
from pgq_core.worker.handback import (
    RETURNED_UNFINISHED,
    RETURNED_UNSTARTED,
    Recovery,
    hand_back_orphans,
    record_stale,
    return_buffered,
    wind_down,
)
from pgq_core.worker.ledger import Held, Ledger
from pgq_core.worker.link import DataFault, Disconnected, Transient
from pgq_core.worker.policy import PrefetchPolicy
from pgq_core.worker.runner import Outcome


def failed_over(timeline: int, *released: int) -> list[tuple[Any, ...]]:
    """Rows of `hand_back_failed_over`: the timeline, with each job it handed back."""
    return [(timeline, i) for i in released] or [(timeline, None)]


def raising(exc: Exception) -> Any:
    def answer(op: Any) -> Any:
        raise exc

    return answer


def held(ledger: Ledger, job_id: int, fence: int = 1) -> Held:
    h = Held(fake_job(job_id, fence), JobContext(fake_job(job_id, fence), "w", "pgq"))
    ledger.hold(h)
    return h


def released(*pairs: tuple[int, int], outcome: str = "released") -> list[Any]:
    return [row(outcome=outcome, id=i, fence=f) for i, f in pairs]


# -- the orphan check ---------------------------------------------------------------------------


async def test_the_first_check_looks_for_failed_over_jobs_only() -> None:
    call = FakeCall(hand_back_failed_over=failed_over(1))
    recovery = Recovery()
    assert recovery.due
    await recovery.run(call, Ledger(30.0, lambda n: 0.1), "w")
    assert call.names == [["hand_back_failed_over"]]
    assert not recovery.due and recovery.timeline == 1


async def test_after_a_reconnect_the_orphans_not_held_go_back_in_the_same_step() -> None:
    call = FakeCall(hand_back_failed_over=failed_over(1), hand_back_orphans=[(7,)])
    ledger = Ledger(30.0, lambda n: 0.1)
    held(ledger, 3)
    recovery = Recovery()
    recovery.timeline = 1
    recovery.reconnected()
    await recovery.run(call, ledger, "w")
    ((_, orphans),) = call.steps
    assert (orphans.name, orphans.params) == ("hand_back_orphans", {"held": [3], "worker": "w"})
    assert not recovery.due


async def test_a_lost_lane_asks_for_the_orphans() -> None:
    recovery = Recovery()
    recovery.failover = False
    recovery.lane_lost()
    assert recovery.due and recovery.orphans


@pytest.mark.parametrize("fault", [Disconnected("gone"), Transient("lock timeout")])
async def test_a_check_that_could_not_run_stays_due(fault: Exception) -> None:
    recovery = Recovery()
    recovery.reconnected()
    await recovery.run(FakeCall(hand_back_failed_over=raising(fault)), Ledger(30.0, len), "w")
    assert recovery.due and recovery.orphans and recovery.timeline is None


async def test_a_check_refused_for_its_data_is_said_and_not_repeated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    call = FakeCall(hand_back_failed_over=raising(DataFault("no", "P0001")))
    with caplog.at_level(logging.WARNING, "pgq.worker"):
        assert await hand_back_orphans(call, Ledger(30.0, len), "w", 4, False) == 4
    assert "could not look for orphaned claims: no" in caplog.text


async def test_a_new_timeline_and_the_jobs_it_handed_back_are_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    call = FakeCall(hand_back_failed_over=failed_over(2, 5, 6))
    with caplog.at_level(logging.INFO, "pgq.worker"):
        assert await hand_back_orphans(call, Ledger(30.0, len), "w", 1, False) == 2
    assert "the database failed over (timeline 2, was 1)" in caplog.text
    assert "handed back 2 job(s) claimed before the promotion to timeline 2" in caplog.text


async def test_a_full_batch_of_failed_over_jobs_checks_again() -> None:
    call = FakeCall(hand_back_failed_over=failed_over(2, *range(ops.REAP_BATCH)))
    assert await hand_back_orphans(call, Ledger(30.0, len), "w", 2, False) is None


# -- on stop: the buffer, then the unfinished jobs ---------------------------------------------


async def test_the_buffer_goes_back_but_its_busy_rows_wait() -> None:
    ledger = Ledger(30.0, lambda n: 0.1)
    a, b = held(ledger, 1), held(ledger, 2)
    call = FakeCall(hand_back=released((1, 1)) + released((2, 1), outcome="busy"))
    await return_buffered(call, ledger, "w")
    ((op,),) = call.steps
    assert (op.params["ids"], op.params["reason"]) == ([1, 2], RETURNED_UNSTARTED)
    assert list(ledger.buffer) == [b] and list(ledger.held) == [2] and a not in ledger.buffer
    assert ledger.buffer_retry_at > time.monotonic()


async def test_a_failed_hand_back_of_the_buffer_is_tried_later() -> None:
    ledger = Ledger(30.0, lambda n: 0.1)
    h = held(ledger, 1)
    await return_buffered(FakeCall(hand_back=raising(Transient("busy"))), ledger, "w")
    assert list(ledger.buffer) == [h] and ledger.buffer_retry_at > time.monotonic()


#: ids of the handlers the fixture's dispatcher saw cancelled (told to stop)
CANCELLED: list[int] = []


@pytest.fixture
async def dispatcher() -> AsyncIterator[Dispatcher]:
    gate = asyncio.Event()
    CANCELLED.clear()

    async def handler(ctx: JobContext) -> None:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            CANCELLED.append(ctx.id)
            raise

    ledger = Ledger(30.0, lambda n: 0.01)
    d = Dispatcher(handler, 4, "w", "pgq", None, ledger, PrefetchPolicy(4, 0), lambda: None, print)
    yield d
    gate.set()
    d.runner.shutdown()


async def test_wind_down_settles_the_finished_then_hands_back_the_running(
    dispatcher: Dispatcher,
) -> None:
    ledger = dispatcher.ledger
    for i in (1, 2):
        dispatcher.hold(fake_job(i))
    dispatcher.fill()
    await asyncio.sleep(0)
    done = ledger.held[1]
    ledger.finished(done, Outcome("returned"))
    settled: list[list[int]] = []

    async def settle(batch: list[Held]) -> None:
        settled.append([h.job.id for h in batch])
        ledger.take(batch)
        ledger.release(done)

    call = FakeCall(hand_back=released((2, 1)))
    await wind_down(call, dispatcher, lambda now: True, settle, "w", 5.0)
    assert settled == [[1]], "the finished job is settled first"
    ((op,),) = call.steps
    assert (op.params["ids"], op.params["reason"]) == ([2], RETURNED_UNFINISHED)
    assert not ledger.held and not ledger.pending
    assert CANCELLED == [2], "the running handler is told to stop before its job goes back"


async def test_a_busy_unfinished_job_is_tried_again_until_it_goes_back(
    dispatcher: Dispatcher,
) -> None:
    dispatcher.hold(fake_job(1))
    dispatcher.fill()
    await asyncio.sleep(0)
    answers = iter([released((1, 1), outcome="busy"), released((1, 1))])
    call = FakeCall(hand_back=lambda op: next(answers))
    await wind_down(call, dispatcher, lambda now: True, lambda batch: asyncio.sleep(0), "w", 5.0)
    assert call.names == [["hand_back"], ["hand_back"]] and not dispatcher.ledger.held


async def test_finished_jobs_that_cannot_be_settled_are_said_and_left_to_their_lease(
    dispatcher: Dispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    dispatcher.hold(fake_job(1))
    dispatcher.ledger.buffer.clear()
    dispatcher.ledger.finished(dispatcher.ledger.held[1], Outcome("returned"))
    call = FakeCall()
    with caplog.at_level(logging.WARNING, "pgq.worker"):
        await wind_down(call, dispatcher, lambda now: False, lambda b: asyncio.sleep(0), "w", 0.2)
    assert "could not settle 1 finished job(s)" in caplog.text
    assert call.steps == [], "a finished job is never handed back"


# -- stale writes ---------------------------------------------------------------------------------


async def test_stale_writes_are_recorded_one_statement_per_write() -> None:
    ledger = Ledger(30.0, len)
    a, b, c = held(ledger, 1, 3), held(ledger, 2, 4), held(ledger, 3, 5)
    call = FakeCall()
    await record_stale(call, [(a, "complete"), (b, "heartbeat"), (c, "complete")], "w")
    by_detail = {step[0].params["details"][0]: step[0].params for step in call.steps}
    assert by_detail["complete rejected: stale fence"]["ids"] == [1, 3]
    assert by_detail["complete rejected: stale fence"]["fences"] == [3, 5]
    assert by_detail["heartbeat rejected: stale fence"]["ids"] == [2]


async def test_a_stale_write_that_cannot_be_recorded_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ledger = Ledger(30.0, len)
    call = FakeCall(record_stale=raising(Disconnected("gone")))
    with caplog.at_level(logging.INFO, "pgq.worker"):
        await record_stale(call, [(held(ledger, 1), "complete")], "w")
    assert "could not record 1 stale write(s)" in caplog.text
