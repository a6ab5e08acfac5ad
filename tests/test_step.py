"""The step (worker/step.py) alone, without a database: a fake `call` records the ops each step
sends and answers them with canned rows."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from support import FakeCall, claimed_row, fake_job, row

from pgq_core.worker import JobContext
from pgq_core.worker.dispatch import Dispatcher
from pgq_core.worker.ledger import Held, Ledger
from pgq_core.worker.link import DataFault, Disconnected, Refused
from pgq_core.worker.policy import ClaimRound, PrefetchPolicy
from pgq_core.worker.runner import Outcome
from pgq_core.worker.settler import Settler
from pgq_core.worker.step import PAUSE, Stepper

CONCURRENCY = 4


@dataclass
class Parts:
    stepper: Stepper
    dispatcher: Dispatcher
    ledger: Ledger
    call: FakeCall
    started: list[int]
    refusals: list[str]


@pytest.fixture
async def parts() -> AsyncIterator[Callable[..., Parts]]:
    made: list[Parts] = []

    def make(burst: bool = False, **answers: Any) -> Parts:
        started: list[int] = []
        gate = asyncio.Event()

        async def handler(ctx: JobContext) -> None:
            started.append(ctx.id)
            await gate.wait()

        call = FakeCall(**answers)
        ledger = Ledger(30.0, lambda n: 0.1)
        prefetch = PrefetchPolicy(CONCURRENCY, 0)
        dispatcher = Dispatcher(
            handler, CONCURRENCY, "w", "pgq", None, ledger, prefetch, lambda: None, print
        )
        refusals: list[str] = []
        stepper = Stepper(
            Settler(call, "w", timedelta(seconds=30), 1.0),
            dispatcher,
            ClaimRound(["q"], 1.0, 10.0),
            prefetch,
            None,
            "w",
            refusals.append if burst else None,
        )
        made.append(p := Parts(stepper, dispatcher, ledger, call, started, refusals))
        return p

    yield make
    for p in made:
        for h in p.ledger.running():
            p.dispatcher.runner.abandon(h.ctx)
        p.dispatcher.runner.shutdown()


def finished(p: Parts, job_id: int, outcome: Outcome) -> Held:
    """A held job whose handler ended with `outcome`: its settlement pending."""
    h = Held(fake_job(job_id), JobContext(fake_job(job_id), "w", "pgq"))
    p.ledger.hold(h)
    p.ledger.buffer.remove(h)
    p.ledger.finished(h, outcome)
    return h


async def test_a_claim_takes_the_room_and_its_jobs_start_at_once(
    parts: Callable[..., Parts],
) -> None:
    p = parts(settle_complete_and_claim=[claimed_row(1), claimed_row(2)])
    claimed = await p.stepper.step([], claim=True)
    assert claimed == 2
    ((op,),) = p.call.steps
    assert op.name == "settle_complete_and_claim"
    assert (op.params["queue"], op.params["limit"]) == ("q", CONCURRENCY)
    assert sorted(p.ledger.held) == [1, 2] and p.ledger.claiming == 0
    await asyncio.sleep(0)
    assert sorted(p.started) == [1, 2]


async def test_steps_begun_together_share_the_room(parts: Callable[..., Parts]) -> None:
    """The room is reserved when a step begins, so a step begun beside it claims only what is
    left, and nothing once there is none."""
    p = parts()
    first = p.stepper.begin([], claim=True)
    second = p.stepper.begin([], claim=True)
    assert (first.queue, first.free) == ("q", CONCURRENCY)
    assert (second.queue, second.free) == (None, 0)
    assert p.ledger.claiming == CONCURRENCY
    await p.stepper.run(first, p.call)
    assert p.ledger.claiming == 0


async def test_a_step_settles_and_claims_in_one_round_trip(parts: Callable[..., Parts]) -> None:
    done = row(outcome="completed", id=1, fence=1)
    fail = row(outcome="failed", id=2, fence=1)
    p = parts(settle_complete_and_claim=[done, claimed_row(3)], settle_fail=[fail])
    ok = finished(p, 1, Outcome("returned"))
    bad = finished(p, 2, Outcome("raised", "boom"))
    assert await p.stepper.step(p.ledger.due(time.monotonic()), claim=True) == 1
    assert p.call.names == [["settle_fail", "settle_complete_and_claim"]]
    fail_op, complete_op = p.call.steps[0]
    assert fail_op.params["ids"] == [2] and complete_op.params["ids"] == [1]
    assert complete_op.params["limit"] == CONCURRENCY  # the two it settles free their room
    assert p.ledger.counts == (1, 1, 0) and list(p.ledger.held) == [3]
    assert ok not in p.ledger.pending and bad not in p.ledger.pending


async def test_without_a_claim_nothing_is_claimed(parts: Callable[..., Parts]) -> None:
    p = parts(settle_complete_and_claim=[row(outcome="completed", id=1, fence=1)])
    finished(p, 1, Outcome("returned"))
    assert await p.stepper.step(p.ledger.due(time.monotonic()), claim=False) == 0
    ((op,),) = p.call.steps
    assert (op.params["queue"], op.params["limit"]) == ("", 0)
    assert await p.stepper.step([], claim=False) == 0
    assert len(p.call.steps) == 1, "an empty step sends nothing"


@pytest.mark.parametrize("fault", [Disconnected("gone"), Refused("permission denied")])
async def test_a_step_that_fails_whole_puts_its_settlements_back(
    parts: Callable[..., Parts], fault: Exception
) -> None:
    def fail(op: Any) -> Any:
        raise fault

    p = parts(settle_complete_and_claim=fail)
    h = finished(p, 1, Outcome("returned"))
    assert await p.stepper.step(p.ledger.due(time.monotonic()), claim=True) == 0
    assert p.ledger.pending == [h] and p.ledger.claiming == 0
    assert h.uncertain is isinstance(fault, Disconnected), "it may have committed unseen"
    assert p.ledger.counts == (0, 0, 0)


async def test_a_claim_refused_for_its_data_pauses_claims(
    parts: Callable[..., Parts], caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(op: Any) -> Any:
        raise DataFault("a rule refused it", "P0001")

    p = parts(settle_complete_and_claim=refuse, claim=refuse)
    with caplog.at_level(logging.WARNING, "pgq.worker"):
        before = time.monotonic()
        assert await p.stepper.step([], claim=True) == 0
    assert p.call.names == [["settle_complete_and_claim"], ["claim"]], "then the claim alone"
    assert before + PAUSE <= p.stepper.paused_until <= time.monotonic() + PAUSE
    assert "claiming from q refused (a rule refused it); pausing claims" in caplog.text


async def test_a_burst_workers_refused_claim_stops_it_instead(parts: Callable[..., Parts]) -> None:
    def refuse(op: Any) -> Any:
        raise Refused("permission denied for table jobs")

    p = parts(burst=True, settle_complete_and_claim=refuse)
    assert await p.stepper.step([], claim=True) == 0
    assert p.refusals == ["claiming from q refused (permission denied for table jobs)"]
    assert p.stepper.paused_until == 0.0
