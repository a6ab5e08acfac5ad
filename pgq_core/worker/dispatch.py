"""The dispatcher: claimed jobs onto free handler slots, each handler's end and each step's
settlements into the ledger, and how many jobs the next claim may take.

It sits between the ledger (ledger.py) and the runner (runner.py), on the event loop, and runs
no statement: a stale write it finds is passed to `on_stale` for the worker to record.

Invariants:
- A freed slot takes the next buffered job at once, without waiting for a statement; no
  buffered job starts once `stopped`. Plain functions without a timeout get one more job per
  thread, waiting on the threads' queue (`take_back` returns those to the buffer).
- A handler whose transaction the database failed (`Outcome.faulted`: serialization
  failure, deadlock, read-only, shutdown, connection lost) has its job handed back, the
  attempt not counted, with a line and a history row saying why; at most
  MAX_FAULTS_IN_A_ROW times in a row per job, then the next counts as a failed attempt.
- Every way a handler ends is one entry: returned or raised -> its settlement pending;
  timed out -> pending as a failure; a fenced write of its own that matched no row -> lost;
  cancelled (handed back) -> nothing. An ending of a job no longer held, or already ended,
  is dropped.
- A lost job's handler is told to stop and its result discarded; a job whose payload cannot
  be read fails without running.
- Held jobs never exceed `concurrency` plus the buffer's size (`target`, the prefetch
  policy's) when they were claimed, the slots of handlers given up left out (`room`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from ..models import Job
from ..text import printable, storable
from .context import JobContext
from .ledger import Held, Ledger, StepResult
from .link import UnreadablePayload
from .policy import PrefetchPolicy
from .runner import Handler, Outcome, Runner

log = logging.getLogger("pgq.worker")

#: Database faults in a row (`Outcome.faulted`) after which one counts as a failed attempt.
MAX_FAULTS_IN_A_ROW = 5
#: Jobs whose faults in a row this worker remembers (the oldest forgotten first).
FAULTS_REMEMBERED = 10_000


def failure_line(held: Held) -> str:
    """The log line of a failed attempt: dead when out of attempts or final (DontRetry), its
    error, then its traceback (control characters escaped, newlines kept)."""
    job, outcome = held.job, held.outcome
    dead = job.attempts >= job.max_attempts or (outcome is not None and outcome.final)
    error = outcome.error if outcome is not None and outcome.error else "?"
    line = (
        f"job {job.id} failed (attempt {job.attempts} of {job.max_attempts}), "
        f"{'dead' if dead else 'will retry'}: {printable(error)}"
    )
    if outcome is not None and outcome.traceback:
        line += "\n" + printable(outcome.traceback, multiline=True)
    return line


class Dispatcher:
    """Runs the held jobs of `ledger` with `handler` on `concurrency` slots."""

    def __init__(
        self,
        handler: Handler,
        concurrency: int,
        worker_id: str,
        schema: str,
        timeout: float | None,
        ledger: Ledger,
        prefetch: PrefetchPolicy,
        wakeup: Callable[[], None],
        on_stale: Callable[[list[tuple[Held, str]]], None],
    ) -> None:
        self.runner = Runner(handler, concurrency, f"pgq-job-{worker_id}", self._slot_freed)
        self._concurrency = concurrency
        self._worker_id = worker_id
        self._schema = schema
        self._timeout = timeout
        self.ledger = self._ledger = ledger
        self._prefetch = prefetch
        self._wakeup = wakeup
        #: database faults in a row per job id, while this worker keeps meeting them
        self._faults: dict[int, int] = {}
        self._on_stale = on_stale
        timed = timeout is not None or hasattr(handler, "timeout_for")
        queued_ahead = 0
        if not self.runner.is_async and not timed:  # a timeout runs from the submit
            queued_ahead = concurrency
        self._slots = concurrency + queued_ahead
        #: no buffered job starts any more (the worker is stopping)
        self.stopped = False
        #: the buffer's size for the next claim
        self.target = 0
        self._starved_logged = False

    @property
    def idle(self) -> bool:
        """No job held, no handler given up still running."""
        return not self._ledger.held and not self.runner.abandoned

    def room(self, settling: int) -> int:
        """Jobs a step that settles `settling` of the held ones may claim: up to `concurrency`
        plus the buffer's size held, the slots of handlers given up left out."""
        limit = self._concurrency + self.target - self.runner.abandoned
        return self._ledger.room(limit, settling)

    def wanted(self, settling: int) -> bool:
        """A claim is worth making: the buffer is down to half its size and there is room."""
        return len(self._ledger.buffer) <= self.target // 2 and self.room(settling) > 0

    def size_buffer(self) -> None:
        """The buffer's size for the next claim (the prefetch policy's, from what it saw)."""
        youngest = None
        if self.runner.occupied >= self._concurrency:
            youngest = self.runner.last_began
        self.target = self._prefetch.size(youngest)

    def starved(self) -> bool:
        """Handlers given up occupy every slot, so claiming has stopped; said once."""
        starved = not self._ledger.held and self.runner.abandoned >= self._concurrency
        if starved and not self._starved_logged:
            log.warning(
                "worker %s: all %d slot(s) are held by handlers that were given up (timed out "
                "or lease lost) and have not returned; no new claims until one does",
                self._worker_id,
                self._concurrency,
            )
        self._starved_logged = starved
        return starved

    def hold(self, job: Job) -> None:
        """A claimed job joins the buffer (its lease kept by the heartbeater from now on)."""
        ctx = JobContext(job, self._worker_id, self._schema)
        ctx.timeout = self._timeout
        self._ledger.hold(Held(job, ctx))

    def fill(self) -> None:
        """Start buffered jobs on the free slots; none once stopped."""
        buffer = self._ledger.buffer
        while buffer and not self.stopped and self.runner.occupied < self._slots:
            held = buffer.popleft()
            job = held.job
            if isinstance(job.payload, UnreadablePayload):
                error = f"the payload cannot be read: {job.payload.reason}"
                self._finished(held, Outcome("raised", storable(error)))
                continue
            self.runner.start(held.ctx, self._timeout, functools.partial(self._ended, held))

    def settled(self, result: StepResult) -> None:
        """A step's settlements: counted, said, busy ones back in line, lost ones given up."""
        recorded = self._ledger.record(result)
        for h in recorded.failed:
            log.warning("%s", failure_line(h))
        for h in recorded.snoozed:
            delay = h.outcome.delay if h.outcome else 0.0
            log.info("job %d snoozed for %gs (the attempt does not count)", h.job.id, delay)
        for h in recorded.busy:
            log.debug("job %d: row locked by another session; settling later", h.job.id)
        for h in recorded.refused:
            log.error(
                "job %d: the database refused every settlement; left to its lease (the "
                "reaper will retry it)",
                h.job.id,
            )
        self.lose(result.lost)

    def stop(self, keep: int) -> None:
        """Start no more buffered jobs; those waiting on the threads' queue beyond the next
        `keep` go back to the buffer."""
        self.stopped = True
        self.take_back(keep)

    def take_back(self, slots: int = 0) -> None:
        """Jobs waiting on the threads' queue beyond the next `slots` go back to the buffer."""
        self._ledger.put_back(ctx.id for ctx in self.runner.take_back(slots))

    def heartbeat_lost(self, pairs: list[tuple[int, int]]) -> None:
        """From the heartbeater: these leases are gone. Jobs whose handler already finished are
        left to their settlement, which tells the same (or that it committed first)."""
        self.lose([(h, "heartbeat") for h in self._ledger.lost_by_heartbeat(pairs)])

    def lose(self, lost: list[tuple[Held, str]]) -> None:
        """These jobs are no longer ours (`action` matched no row): stop their handlers, drop
        their results, free their slots; the ones not already given up go to `on_stale`."""
        stale = [(h, action) for h, action in lost if self._lose(h, action)]
        if stale:
            self._on_stale(stale)

    def _lose(self, held: Held, action: str) -> bool:
        if not self._ledger.lose(held):
            return False
        self.runner.abandon(held.ctx)
        log.warning(
            "job %d: lease lost (fence %d, %s matched no row); handler stopped, result discarded",
            held.job.id,
            held.job.fence,
            action,
        )
        return True

    def _slot_freed(self) -> None:
        """A handler given up has really ended: its slot takes the next buffered job."""
        self.fill()
        self._wakeup()

    def _ended(self, held: Held, outcome: Outcome) -> None:
        """A handler ended: queue its job's settlement (unless the job was given up) and start
        the next buffered job on the slot it freed."""
        if outcome.kind in ("returned", "raised", "snoozed"):
            self._prefetch.handler_ended(held.ctx._began)
        self._settle_later(held, outcome)
        self.fill()

    def _settle_later(self, held: Held, outcome: Outcome) -> None:
        if not self._ledger.holds(held) or held.outcome is not None:
            return
        if outcome.kind == "cancelled":
            return
        if outcome.kind == "lost":
            self.lose([(held, outcome.action)])
            return
        outcome = self._bounded_fault(held, outcome)
        if outcome.kind == "timed_out":
            log.warning(
                "job %d: %s; failing it (its handler was %s)",
                held.job.id,
                outcome.error,
                "cancelled" if self.runner.is_async else "abandoned in its thread",
            )
        self._finished(held, outcome)

    def _bounded_fault(self, held: Held, outcome: Outcome) -> Outcome:
        """A database fault hands the job back, the attempt not counted, at most
        MAX_FAULTS_IN_A_ROW times in a row for one job in this worker; the next counts as a
        failed attempt (a handler whose own transactions always conflict must still end)."""
        job_id = held.job.id
        if not outcome.faulted:
            self._faults.pop(job_id, None)
            return outcome
        n = self._faults[job_id] = self._faults.get(job_id, 0) + 1
        if n > MAX_FAULTS_IN_A_ROW:
            del self._faults[job_id]
            return Outcome(
                "raised",
                storable(f"{outcome.error} ({n} database faults in a row: this one counts)"),
                traceback=outcome.traceback,
            )
        if len(self._faults) > FAULTS_REMEMBERED:
            self._faults.pop(next(iter(self._faults)))
        log.warning(
            "job %d: the database failed its handler's transaction (%s); handing it back, "
            "the attempt not counted (%d of %d in a row)",
            job_id,
            printable(outcome.error or "?"),
            n,
            MAX_FAULTS_IN_A_ROW,
        )
        return outcome

    def _finished(self, held: Held, outcome: Outcome) -> None:
        self._ledger.finished(held, outcome)
        self._wakeup()
