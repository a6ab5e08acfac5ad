"""The step: one turn of the worker's main loop, settle and claim in one round trip.

A step takes the due settlements out of the ledger's pending list, settles them (settler.py)
together with a claim for the slots they free, from the queue the claim round picks, and then
records what it did: claimed jobs held, settlements into the ledger (dispatch.py), the claim
round and the prefetch policy told, the metrics observed.

Invariants:
- A step claims no more than the room the dispatcher gives (held jobs never exceed
  `concurrency` plus the buffer's size), and nothing when `claim` is False.
- A step that fails whole (connection lost, transient failure) puts its settlements back at
  the front of pending, uncertain when the connection broke; nothing is counted.
- A claim the database refuses for its data pauses claims for `PAUSE` seconds (`paused_until`)
  and is said once per step; a refusal in burst mode goes to `on_refused` instead (the worker
  stops: its queues cannot be drained).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..text import printable
from .dispatch import Dispatcher
from .ledger import Held
from .link import Disconnected, Refused, Transient
from .policy import ClaimRound, PrefetchPolicy
from .settler import Call, Settler

if TYPE_CHECKING:
    from .metrics import WorkerMetrics

log = logging.getLogger("pgq.worker")

#: Seconds claims pause after the database refused one for its data.
PAUSE = 5.0


@dataclass(frozen=True)
class Step:
    """A step begun: the settlements it makes, and the queue and room of its claim (None, 0:
    no claim)."""

    batch: list[Held]
    queue: str | None
    free: int


class Stepper:
    """Runs the steps of one worker (`worker_id`)."""

    def __init__(
        self,
        settler: Settler,
        dispatcher: Dispatcher,
        claims: ClaimRound,
        prefetch: PrefetchPolicy,
        metrics: WorkerMetrics | None,
        worker_id: str,
        on_refused: Callable[[str], None] | None,
    ) -> None:
        """`on_refused`: the burst worker's stop (None: not in burst mode)."""
        self._settler = settler
        self._ledger = dispatcher.ledger
        self._dispatcher = dispatcher
        self._claims = claims
        self._prefetch = prefetch
        self._metrics = metrics
        self._worker_id = worker_id
        self._on_refused = on_refused
        #: no claim before this time (time.monotonic()) after one was refused
        self.paused_until = 0.0

    def begin(self, batch: list[Held], claim: bool) -> Step:
        """Take `batch` out of pending and reserve the room its claim may fill (made before
        the step's statement runs, so a step begun beside it claims only what is left)."""
        self._ledger.take(batch)
        free = self._dispatcher.room(len(batch))
        queue = self._claims.next_queue() if claim and free > 0 else None
        step = Step(batch, queue, free if queue is not None else 0)
        self._ledger.claiming += step.free
        return step

    async def run(self, step: Step, call: Call) -> int:
        """Settle the step's batch and make its claim, in one transaction on `call`'s
        connection (split apart only when a statement fails for its data). Returns how many
        were claimed."""
        try:
            return await self._run(step, call)
        finally:
            self._ledger.claiming -= step.free

    async def step(self, batch: list[Held], claim: bool, call: Call | None = None) -> int:
        """`begin` and `run` at once (on the settler's own connection unless `call`)."""
        return await self.run(self.begin(batch, claim), call or self._settler.call)

    async def _run(self, step: Step, call: Call) -> int:
        batch, queue, free = step.batch, step.queue, step.free
        dispatcher = self._dispatcher
        started = time.monotonic()
        try:
            result = await self._settler.step(batch, queue, free, call)
        except (Disconnected, Transient) as exc:
            self._ledger.requeue(batch, uncertain=isinstance(exc, Disconnected))
            if self._on_refused is not None and isinstance(exc, Refused):
                doing = f"claiming from {queue}" if queue is not None else "settling"
                self._on_refused(f"{doing} refused ({exc})")
            return 0
        self._prefetch.step_ended(started)
        if queue is not None and result.claim_refused is not None:
            refused = f"claiming from {queue} refused ({result.claim_refused})"
            if self._on_refused is not None:
                self._on_refused(refused)
            else:
                self.paused_until = time.monotonic() + PAUSE
                log.warning(
                    "worker %s: %s; pausing claims for 5s", self._worker_id, printable(refused)
                )
        claimed = len(result.claimed)
        if queue is not None:
            for job in result.claimed:
                dispatcher.hold(job)
            self._claims.claimed(queue, claimed, time.monotonic())
        dispatcher.settled(result)
        dispatcher.fill()
        if self._metrics is not None:
            took, claiming = time.monotonic() - started, queue is not None
            self._metrics.observe_step(
                took, claimed, result.settled, result.dead, claiming=claiming
            )
        return claimed
