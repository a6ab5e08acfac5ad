"""Handing jobs back: what the worker holds and will not run goes back to `ready` at once.

Three cases, each one statement through `call` (the worker's link) and the ledger told what
was released: the buffered jobs on stop, the unfinished jobs at the end of `run()` (their
handlers told to stop first, after the finished ones were settled: `wind_down`), and at the
start and after a reconnect the jobs claimed before a failover (anyone's: a fence from an older
timeline writes nothing) and the orphans (jobs running under this worker's id that it does not
hold: a claim whose reply was lost). Stale writes (a fenced write
that matched no row) are recorded here as well.

Invariants:
- A handed-back job's attempt is not counted, and only unfinished jobs (no outcome) are
  handed back: finished ones are settled first.
- A job whose row another session holds (busy) stays held and is tried again; nothing here
  waits on a row lock, and a failed statement is tried again, never raised into `run()`.
- The orphan check never takes back a job the worker holds or left to its lease
  (`Ledger.ours`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import ops
from ..models import FailedOver
from ..text import printable
from .dispatch import Dispatcher
from .ledger import Held, Ledger
from .link import DataFault, Disconnected, Transient
from .runner import Runner

log = logging.getLogger("pgq.worker")

#: How the hand-back runs a statement: the worker's link (with its transient backoff).
Call = Callable[..., Awaitable[list[Any]]]
#: The history's detail for buffered jobs handed back on stop.
RETURNED_UNSTARTED = "worker shutdown: not started"
#: The history's detail for unfinished jobs handed back at the end of `run()`.
RETURNED_UNFINISHED = "worker shutdown"


class Recovery:
    """What the next orphan check covers: the jobs a failover left (at the start and after
    every reconnect) and, after a reconnect or a lost second lane, the orphans."""

    def __init__(self) -> None:
        self.failover = True
        self.orphans = False
        #: the server's timeline at the last check (None: none yet)
        self.timeline: int | None = None

    @property
    def due(self) -> bool:
        return self.failover or self.orphans

    def reconnected(self) -> None:
        self.failover = self.orphans = True

    def lane_lost(self) -> None:
        """A step on a lane that broke may have claimed unseen."""
        self.orphans = True

    async def run(self, call: Call, ledger: Ledger, worker_id: str) -> None:
        """The check, once no step is in flight; kept due when it could not run."""
        timeline = await hand_back_orphans(call, ledger, worker_id, self.timeline, self.orphans)
        if timeline is not None:
            self.timeline = timeline
            self.failover = self.orphans = False


async def hand_back_orphans(
    call: Call, ledger: Ledger, worker_id: str, timeline: int | None, orphans: bool
) -> int | None:
    """At the start or after a reconnect: the jobs claimed before a promotion go back
    (anyone's: their fences write nothing now), then, with `orphans`, the jobs claimed under
    our id by a statement whose reply never arrived. `timeline`: the server's timeline at the
    last check (None: none yet). Returns the server's timeline once the check is done, None
    when it could not run (try again)."""
    step: list[ops.Op[Any]] = [ops.hand_back_failed_over()]
    if orphans:
        step.append(ops.hand_back_orphans(ledger.ours(), worker_id))
    try:
        results = await call(*step)
    except (Disconnected, Transient):
        return None
    except DataFault as exc:
        log.warning(
            "worker %s: could not look for orphaned claims: %s", worker_id, printable(str(exc))
        )
        return timeline
    failed_over: FailedOver = results[0]
    orphaned: list[int] = results[1] if orphans else []
    if timeline is not None and failed_over.timeline != timeline:
        log.warning(
            "worker %s: the database failed over (timeline %d, was %d): every job claimed "
            "before it is lost to its holder and runs again",
            worker_id,
            failed_over.timeline,
            timeline,
        )
    if failed_over.released:
        log.warning(
            "worker %s: handed back %d job(s) claimed before the promotion to timeline %d "
            "(their fences write nothing now; the attempt does not count)",
            worker_id,
            len(failed_over.released),
            failed_over.timeline,
        )
    if orphaned:
        log.info(
            "worker %s: handed back %d job(s) claimed while the connection broke "
            "(their reply was lost; the attempt does not count)",
            worker_id,
            len(orphaned),
        )
    if len(failed_over.released) >= ops.REAP_BATCH:
        return None  # more to hand back: check again
    return failed_over.timeline


async def return_buffered(call: Call, ledger: Ledger, worker_id: str) -> None:
    """On stop, the buffered jobs go back at once (their attempt not counted)."""
    waiting = list(ledger.buffer)
    pairs = [(h.job.id, h.job.fence) for h in waiting]
    try:
        (settled,) = await call(ops.hand_back(pairs, worker_id, RETURNED_UNSTARTED))
    except (Disconnected, Transient, DataFault):
        ledger.retry_buffer_later()
        return
    ledger.returned(waiting, settled.busy)
    log.info(
        "worker %s: handed back %d buffered job(s) not started", worker_id, len(settled.applied)
    )


async def hand_back_unfinished(
    call: Call, ledger: Ledger, runner: Runner, worker_id: str, deadline: float
) -> None:
    """Tell running handlers to stop and release their jobs (the attempt not counted), trying
    busy ones again until `deadline`."""
    remaining = ledger.unfinished()
    if not remaining:
        return
    for h in remaining:
        runner.abandon(h.ctx)
    await runner.wait_abandoned(timeout=1.0)
    released = 0
    while remaining and time.monotonic() < deadline:
        pairs = [(h.job.id, h.job.fence) for h in remaining]
        try:
            (settled,) = await call(ops.hand_back(pairs, worker_id, RETURNED_UNFINISHED))
        except (Disconnected, Transient, DataFault):
            await asyncio.sleep(0.1)
            continue
        released += len(settled.applied)
        remaining = ledger.handed_back(remaining, settled.busy)
        if remaining:
            await asyncio.sleep(0.1)
    ledger.prune_buffer()
    if remaining:
        log.warning(
            "worker %s: could not hand back %d job(s); they return when their leases expire",
            worker_id,
            len(remaining),
        )
    log.info("worker %s: handed back %d job(s)", worker_id, released)


async def wind_down(
    call: Call,
    jobs: Dispatcher,
    ready: Callable[[float], bool],
    settle: Callable[[list[Held]], Awaitable[object]],
    worker_id: str,
    timeout: float,
) -> None:
    """Settle every finished job (`settle`, while `ready`), then hand back the jobs still
    running; all within `timeout` seconds."""
    ledger = jobs.ledger
    deadline = time.monotonic() + timeout
    while ledger.pending and time.monotonic() < deadline:
        if not ready(time.monotonic()):
            await asyncio.sleep(0.05)
            continue
        due = ledger.due(time.monotonic())
        if due:
            await settle(due)
        else:
            await asyncio.sleep(0.05)
    if ledger.pending:
        log.warning(
            "worker %s: could not settle %d finished job(s); they return when their leases expire",
            worker_id,
            len(ledger.pending),
        )
    jobs.take_back()
    await hand_back_unfinished(call, ledger, jobs.runner, worker_id, deadline)


async def record_stale(call: Call, lost: list[tuple[Held, str]], worker_id: str) -> None:
    """Record the fenced writes of `lost` (job, the write) that matched no row."""
    by_action: dict[str, list[tuple[int, int]]] = {}
    for h, action in lost:
        by_action.setdefault(action, []).append((h.job.id, h.job.fence))
    for action, pairs in by_action.items():
        try:
            await call(ops.record_stale(pairs, worker_id, action))
        except (Disconnected, Transient, DataFault):
            log.info("worker %s: could not record %d stale write(s)", worker_id, len(pairs))
