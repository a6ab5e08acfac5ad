"""What a worker reports of itself (`Worker.snapshot()`): its state, counts and running jobs.

Plain frozen data, importing nothing of the worker's runtime: the runtime builds it from its
ledger (`take_snapshot`), the metrics, the dashboard and the command line read it, and none
of them needs the other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..models import JobProgress

if TYPE_CHECKING:
    from .ledger import Ledger
    from .scheduler import SlotCounts


@dataclass(frozen=True)
class RunningJob:
    id: int
    queue: str
    fence: int
    attempts: int
    started_at: float
    #: what its handler last reported (`JobContext.progress`), written or not; None: nothing
    progress: JobProgress | None = None


@dataclass(frozen=True)
class WorkerSnapshot:
    id: str
    queues: tuple[str, ...]
    state: str
    concurrency: int
    done: int
    failed: int
    lost: int
    running: tuple[RunningJob, ...]
    #: claimed jobs waiting in the worker's buffer for a free slot
    buffered: int = 0
    #: schedule slots this worker's scheduler enqueued, and missed ones it skipped (each
    #: skip also said in a warning line)
    slots_enqueued: int = 0
    slots_skipped: int = 0


def take_snapshot(
    worker_id: str,
    queues: tuple[str, ...],
    state: str,
    concurrency: int,
    ledger: Ledger,
    slots: SlotCounts | None = None,
) -> WorkerSnapshot:
    """The snapshot of a worker whose held jobs `ledger` keeps (safe from any thread)."""
    now = time.monotonic()
    wall = time.time() - now
    running = tuple(
        RunningJob(
            h.job.id,
            h.job.queue,
            h.job.fence,
            h.job.attempts,
            wall + h.ctx._began,
            h.ctx._progress.latest(now),
        )
        for h in ledger.running()
    )
    return WorkerSnapshot(
        id=worker_id,
        queues=queues,
        state=state,
        concurrency=concurrency,
        done=ledger.done,
        failed=ledger.failed,
        lost=ledger.lost,
        running=running,
        buffered=len(ledger.buffer),
        slots_enqueued=slots.enqueued if slots is not None else 0,
        slots_skipped=slots.skipped if slots is not None else 0,
    )
