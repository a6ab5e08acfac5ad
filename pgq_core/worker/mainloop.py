"""The worker's main loop: what to run next (an orphan check, the buffer handed back, a step)
and how long to wait when nothing is due.

Invariants:
- One step per round trip and lane: what finished is settled together with the claim for the
  slots it frees; claims are made only while not stopping, the heartbeater renews leases
  (renewal.py) and there is room. Up to two steps are in flight, one per lane (lanes.py); the
  orphan check and the hand-back of the buffer wait until none is.
- It returns once a burst worker is drained, or once stopping with no step in flight and
  nothing held (or the grace deadline passed); `wind_down` then settles what finished and
  hands back what did not.
- A burst worker is drained only by a claim that found nothing, settled nothing itself and
  was the only step from its beginning to its end, holding nothing: settling a job may make
  others ready (a workflow's dependents) that a claim in the same statement cannot see, and
  so may a step settling beside it; one begun beside it may still claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable

from .dispatch import Dispatcher
from .handback import Recovery, return_buffered, wind_down
from .heartbeater import Heartbeater
from .lanes import Lanes
from .link import Lane
from .policy import ClaimRound, FlushPolicy
from .state import Lifecycle, State
from .step import Step, Stepper

log = logging.getLogger("pgq.worker")

#: Seconds the hand-backs at the end of `run()` may take.
HAND_BACK_TIMEOUT = 5.0


class MainLoop:
    """The main loop of worker `worker_id`, over the parts the worker made for its run."""

    def __init__(
        self,
        worker_id: str,
        burst: bool,
        life: Lifecycle,
        dispatcher: Dispatcher,
        stepper: Stepper,
        lanes: Lanes,
        claims: ClaimRound,
        flush: FlushPolicy,
        heart: Heartbeater,
        recovery: Recovery,
        wake: asyncio.Event,
        refuse: Callable[[str], None],
    ) -> None:
        """`refuse`: a burst worker's stop when renewing its leases is refused."""
        self._id = worker_id
        self._burst = burst
        self._life = life
        self._dispatcher = dispatcher
        self._ledger = dispatcher.ledger
        self._stepper = stepper
        self._lanes = lanes
        self._main = lanes.main
        self._claims = claims
        self._flush = flush
        self._heart = heart
        self._recovery = recovery
        self._wake = wake
        self._refuse = refuse

    async def run(self) -> None:
        """Until drained (burst) or stopped; what a step raised that is not the database's
        doing is raised here."""
        lanes, ledger, dispatcher, life = self._lanes, self._ledger, self._dispatcher, self._life
        call = self._main.call
        while True:
            lanes.check()
            if life.state is State.DRAINED:
                log.info("worker %s: queues drained (burst)", self._id)
                return
            dispatcher.fill()
            now = time.monotonic()
            stopping = life.state.stopping
            recover = self._recovery.due
            if recover or (stopping and ledger.buffer):
                if not lanes.quiet:  # a claim in flight is not held yet
                    await self._sleep(self._next_timeout(now))
                    continue
                can_talk = self._main.ready(now)
                if can_talk and recover:
                    await self._recovery.run(call, ledger, self._id)
                    continue
                if can_talk and stopping and now >= ledger.buffer_retry_at:
                    await return_buffered(call, ledger, self._id)
                    continue
            due = ledger.due(now)
            flush = self._flush.due(
                pending=len(due),
                held=len(ledger.held),
                oldest=ledger.first_pending_at,
                now=now,
                stopping=stopping,
            )
            claim = (
                not stopping
                and now >= self._stepper.paused_until
                and (self._claims.due(now) or (self._burst and not ledger.held and lanes.quiet))
                and self._can_renew(now)
            )
            wanted = False
            if claim:
                dispatcher.size_buffer()
                wanted = dispatcher.wanted(len(due) if dispatcher.target else 0)
            dispatcher.starved()
            if flush or wanted:
                lane = lanes.free(now, self._wake.set)
                if lane is not None:
                    step = self._stepper.begin(due, claim)
                    alone = lanes.started + 1 if lanes.quiet else None
                    lanes.start(lane, self._step(step, lane, claim, alone))
                    continue
            if life.state.stopping and lanes.quiet and (
                not ledger.held or now >= life.grace_deadline
            ):
                return
            await self._sleep(self._next_timeout(now))

    async def wind_down(self) -> None:
        """Settle every finished job, then hand back the jobs still running."""
        settle = functools.partial(self._stepper.step, claim=False)
        call, ready = self._main.call, self._main.ready
        await wind_down(call, self._dispatcher, ready, settle, self._id, HAND_BACK_TIMEOUT)

    async def _step(self, step: Step, lane: Lane, claim: bool, alone: int | None) -> None:
        """Run `step` on `lane`; `alone`: its number among the steps started if no other step
        was in flight when it began (else None)."""
        claimed = await self._stepper.run(step, lane.call)
        drained = (
            claimed == 0
            and not step.batch
            and not self._claims.mid_round
            and self._dispatcher.idle
        )
        only = alone is not None and self._lanes.started == alone
        if self._burst and claim and not self._life.state.refused and drained and only:
            self._life.drained()

    def _can_renew(self, now: float) -> bool:
        """Claim only while the heartbeater renews leases (renewal.py)."""
        if self._heart.may_claim(now):
            return True
        if self._burst and (refusal := self._heart.refusal(now)) is not None:
            self._refuse(f"renewing leases refused ({refusal})")
        return False

    def _next_timeout(self, now: float) -> float:
        ledger, stopping = self._ledger, self._life.state.stopping
        deadlines = [now + 1.0]
        if stopping:
            deadlines.append(self._life.grace_deadline)
            if ledger.buffer:
                deadlines.append(ledger.buffer_retry_at)
        ready_at = self._main.ready_at
        if not self._main.link.up:
            pass  # woken when the link is back
        elif ready_at > now:
            deadlines.append(ready_at)
        else:
            deadlines += ledger.settle_deadlines(now, self._flush.delay)
            if not stopping and self._dispatcher.wanted(0) and self._can_renew(now):
                deadlines.append(max(self._claims.next_poll, self._stepper.paused_until))
        return max(0.0, min(deadlines) - now)

    async def _sleep(self, timeout: float) -> None:
        wake = self._wake
        if timeout <= 0 or wake.is_set():
            await asyncio.sleep(0)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await wake.wait()
        wake.clear()
