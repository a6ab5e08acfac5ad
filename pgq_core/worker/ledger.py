"""The ledger: which jobs the worker holds and where each stands until it is settled.

No I/O: no statement, no thread, no event loop. The time comes from `clock` (a test passes its
own); the worker tells it what happened (claimed, started, ended, settled, lost, handed back)
and reads from it what to settle, what to start, what it may claim and what is still its own.

Invariants:
- A job is *held* from its claim (`hold`) until its settlement committed (`record`), a write
  of it matched no row (`lose`), or it was handed back (`returned`, `handed_back`); it leaves
  once, and `on_release` is called once for it then (`on_hold` once when it came). A job is
  counted `done`, `failed` or `lost` at most once, and only while held: a job lost first and
  reported done afterwards is not counted done.
- Every held job is in exactly one place: the buffer (claimed, no handler started), running
  (started, no outcome) or pending (an outcome waiting for its settlement). The buffer and
  pending hold only held jobs, each once. Buffered jobs are held like running ones: their
  leases kept (`on_hold`), counted as the worker's own by the orphan check; on stop they are
  handed back at once (`returned`), their attempt not counted.
- Held jobs never exceed the worker's limit (`concurrency` plus the buffer's size when they
  were claimed, less the slots of handlers given up): `room` is what a step may claim, less
  what the steps in flight may still claim (`claiming`).
- A busy settlement (its row locked by another session) is not due again before `busy_wait`
  of the times in a row it was busy; a settlement whose statement failed goes back to the
  front of pending (marked uncertain when it may have committed unseen), never twice.
- Only unfinished jobs (no outcome) are handed back; finished ones wait for their settlement.
- A job that ran and could not be settled is left to its lease: it stays the worker's own
  (`ours`, so the orphan check after a reconnect does not hand it back with its attempt
  refunded) until well after its lease ran out, when the reaper has taken it.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..models import Job
from .context import JobContext
from .runner import Outcome

#: Seconds before a failed hand-back of the buffer is tried again.
BUFFER_RETRY = 0.1
#: How long past twice its lease a job left to its lease still counts as the worker's own.
LEFT_TO_LEASE_MARGIN = 60.0


@dataclass(eq=False)
class Held:
    """A job this worker holds, with what is known of its handler and its settlement."""

    job: Job
    ctx: JobContext
    outcome: Outcome | None = None
    #: its settlement was in flight when the connection broke: it may have committed unseen
    uncertain: bool = False
    #: a busy row (locked by another session) is not tried again before this time
    not_before: float = 0.0
    #: how many settlements in a row found its row locked by another session
    busy: int = 0
    #: its settlement was counted after a newer claim of its job took its place (`record`)
    counted: bool = False


@dataclass
class StepResult:
    """What one step did, job by job; each held job of the step is in exactly one list."""

    claimed: list[Job] = field(default_factory=list)
    done: list[Held] = field(default_factory=list)
    failed: list[Held] = field(default_factory=list)
    #: back to ready later, the attempt not counted (the handler raised Snooze)
    snoozed: list[Held] = field(default_factory=list)
    busy: list[Held] = field(default_factory=list)
    lost: list[tuple[Held, str]] = field(default_factory=list)
    retry: list[Held] = field(default_factory=list)
    refused: list[Held] = field(default_factory=list)
    #: handed back, the attempt not counted: the database failed the handler's transaction
    released: list[Held] = field(default_factory=list)
    #: why the claim itself failed for its data (the queue's rows, a rule of the database's)
    claim_refused: str | None = None

    @property
    def settled(self) -> int:
        """Jobs this step settled: done or failed."""
        return len(self.done) + len(self.failed)

    @property
    def dead(self) -> int:
        """Failed jobs of this step that went dead: their last attempt, or told not to retry."""
        return sum(
            h.job.attempts >= h.job.max_attempts or bool(h.outcome and h.outcome.final)
            for h in self.failed
        )


@dataclass
class Recorded:
    """What `record` changed, for the worker to say: the jobs counted failed, found busy, and
    left to their lease (the database refused every settlement), each released now."""

    failed: list[Held] = field(default_factory=list)
    snoozed: list[Held] = field(default_factory=list)
    busy: list[Held] = field(default_factory=list)
    refused: list[Held] = field(default_factory=list)


def _ignore(*args: int) -> None:
    return None


class Ledger:
    """The held jobs of one worker, its buffer, its pending settlements and its counts."""

    def __init__(
        self,
        lease: float,
        busy_wait: Callable[[int], float],
        clock: Callable[[], float] = time.monotonic,
        on_hold: Callable[[int, int], None] = _ignore,
        on_release: Callable[[int], None] = _ignore,
    ) -> None:
        """`lease`: seconds; `busy_wait(n)`: how long a job busy `n` times in a row waits;
        `on_hold(id, fence)` / `on_release(id)`: a job came / left (its lease kept, or not)."""
        self.lease = lease
        self.busy_wait = busy_wait
        self.clock = clock
        self.on_hold = on_hold
        self.on_release = on_release
        self.held: dict[int, Held] = {}
        self.pending: list[Held] = []
        self.buffer: collections.deque[Held] = collections.deque()
        #: when the oldest pending settlement began to wait
        self.first_pending_at = 0.0
        #: a failed hand-back of the buffer is not tried again before this time
        self.buffer_retry_at = 0.0
        self.left_to_lease: dict[int, float] = {}
        #: jobs the claims in flight may bring (lanes.py: two steps may be in flight)
        self.claiming = 0
        self.done = 0
        self.failed = 0
        self.lost = 0
        #: jobs handed back because the database failed their handler's transaction
        self.faulted = 0

    # -- what is held ---------------------------------------------------------------------

    @property
    def counts(self) -> tuple[int, int, int]:
        """Jobs done, failed and lost so far."""
        return self.done, self.failed, self.lost

    def holds(self, h: Held) -> bool:
        return self.held.get(h.job.id) is h

    def running(self) -> list[Held]:
        """Jobs whose handler started and has no outcome yet (safe from any thread)."""
        return [h for h in list(self.held.values()) if h.ctx._began and h.outcome is None]

    def unfinished(self) -> list[Held]:
        """Held jobs without an outcome: buffered or running."""
        return [h for h in self.held.values() if h.outcome is None]

    def room(self, limit: int, settling: int) -> int:
        """Jobs a step that settles `settling` of the held ones may claim, `limit` held."""
        return limit - len(self.held) - self.claiming + settling

    def ours(self) -> list[int]:
        """The ids running under this worker's id by its own doing: held or left to lease."""
        now = self.clock()
        return [*self.held, *(i for i, t in self.left_to_lease.items() if t > now)]

    # -- claimed, started, ended ------------------------------------------------------------

    def hold(self, held: Held) -> None:
        """A claimed job joins the buffer."""
        self.held[held.job.id] = held
        self.on_hold(held.job.id, held.job.fence)
        self.buffer.append(held)

    def put_back(self, ids: Iterable[int]) -> None:
        """Jobs handed to a slot but not started go back to the front of the buffer."""
        taken = set(ids)
        if taken:
            waiting = [h for h in self.held.values() if h.job.id in taken]
            self.buffer.extendleft(reversed(waiting))

    def finished(self, h: Held, outcome: Outcome) -> None:
        """Its handler ended with `outcome`: its settlement is pending."""
        h.outcome = outcome
        if not self.pending:
            self.first_pending_at = self.clock()
        self.pending.append(h)

    def lost_by_heartbeat(self, pairs: Iterable[tuple[int, int]]) -> list[Held]:
        """The held jobs of `pairs` (id, fence) whose handler has not finished: a finished
        one is left to its settlement, which tells the same (or that it committed first)."""
        found = []
        for job_id, fence in pairs:
            h = self.held.get(job_id)
            if h is not None and h.job.fence == fence and h.outcome is None:
                found.append(h)
        return found

    def lose(self, h: Held) -> bool:
        """The job is no longer ours (a write of it matched no row); False if it was already
        given up."""
        if not self.holds(h):
            return False
        self.release(h)
        if h in self.pending:
            self.pending.remove(h)
        if not h.ctx._began and h in self.buffer:
            self.buffer.remove(h)
        self.lost += 1
        return True

    def _superseded(self, h: Held) -> bool:
        """The step that settled `h` also claimed its job again (a retry due at once): the
        newer claim is held, and `h`'s settlement still counts once."""
        newer = self.held.get(h.job.id)
        if h.counted or newer is None or newer is h or newer.job.fence <= h.job.fence:
            return False
        h.counted = True
        return True

    def release(self, h: Held) -> bool:
        """Forget a job; False if it was no longer held."""
        if not self.holds(h):
            return False
        del self.held[h.job.id]
        self.on_release(h.job.id)
        return True

    # -- settling -----------------------------------------------------------------------------

    def due(self, now: float) -> list[Held]:
        """Pending settlements not held off by a busy row."""
        return [h for h in self.pending if h.not_before <= now]

    def settle_deadlines(self, now: float, delay: float) -> list[float]:
        """When pending settlements come due: `delay` after the oldest began to wait (unless all
        are held off by a busy row), and the earliest end of a busy hold-off."""
        busy_until = [h.not_before for h in self.pending if h.not_before > now]
        deadlines = []
        if len(busy_until) < len(self.pending):
            deadlines.append(self.first_pending_at + delay)
        if busy_until:
            deadlines.append(min(busy_until))
        return deadlines

    def take(self, batch: list[Held]) -> None:
        """`batch` (pending settlements) goes into a step."""
        if len(batch) == len(self.pending):
            self.pending.clear()
        else:
            settling = set(batch)
            self.pending = [h for h in self.pending if h not in settling]

    def requeue(self, held: list[Held], *, uncertain: bool) -> None:
        """Settlements a step did not make go back to the front of pending (once each, only
        while held); `uncertain`: their statement may have committed unseen."""
        live = [h for h in held if self.holds(h) and h not in self.pending]
        for h in live:
            h.uncertain = h.uncertain or uncertain
        if live:
            if not self.pending:
                self.first_pending_at = self.clock()
            self.pending[:0] = live

    def record(self, result: StepResult) -> Recorded:
        """Count a step's settlements, hold busy jobs off and requeue them with the ones to
        retry, leave refused ones to their lease. The lost ones are the caller's (`lose`)."""
        now = self.clock()
        recorded = Recorded()
        for h in result.done:
            if self.release(h) or self._superseded(h):
                self.done += 1
        for h in result.failed:
            if self.release(h) or self._superseded(h):
                self.failed += 1
                recorded.failed.append(h)
        for h in result.released:
            if self.release(h):
                self.faulted += 1
        for h in result.snoozed:
            if self.release(h):
                recorded.snoozed.append(h)
        for h in result.busy:
            h.busy += 1
            h.not_before = now + self.busy_wait(h.busy)
            recorded.busy.append(h)
        self.requeue(result.busy + result.retry, uncertain=False)
        for h in result.refused:
            if self.release(h):
                self.leave_to_lease(h, now)
                recorded.refused.append(h)
        return recorded

    def leave_to_lease(self, h: Held, now: float) -> None:
        """A job that ran and could not be settled stays `running` under our id until its
        lease runs out: the orphan check must not take it for an unstarted claim and hand it
        back with its attempt refunded (it would run again, its attempts never used up). It is
        remembered until well after its lease, when the reaper has taken it."""
        self.left_to_lease = {i: t for i, t in self.left_to_lease.items() if t > now}
        self.left_to_lease[h.job.id] = now + 2 * self.lease + LEFT_TO_LEASE_MARGIN

    # -- handing back ---------------------------------------------------------------------------

    def retry_buffer_later(self) -> None:
        self.buffer_retry_at = self.clock() + BUFFER_RETRY

    def returned(self, waiting: list[Held], busy: Iterable[int]) -> None:
        """Buffered jobs `waiting` were handed back on stop, but for the `busy` ones (tried
        again after `BUFFER_RETRY`); a job lost meanwhile is not released twice."""
        kept = set(busy)
        for h in waiting:
            if h.job.id not in kept and h in self.buffer:
                self.buffer.remove(h)
                self.release(h)
        if kept:
            self.retry_buffer_later()

    def handed_back(self, remaining: list[Held], busy: Iterable[int]) -> list[Held]:
        """Unfinished jobs `remaining` were handed back but for the `busy` ones, returned."""
        kept = set(busy)
        for h in remaining:
            if h.job.id not in kept:
                self.release(h)
        return [h for h in remaining if h.job.id in kept]

    def prune_buffer(self) -> None:
        """The buffer keeps only jobs still held."""
        self.buffer = collections.deque(h for h in self.buffer if self.holds(h))
