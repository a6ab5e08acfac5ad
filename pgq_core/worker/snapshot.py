"""What a worker reports of itself (`Worker.snapshot()`): its state, counts and running jobs.

Plain frozen data, importing nothing of the worker: the runtime builds it, the metrics, the
dashboard and the command line read it, and none of them needs the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunningJob:
    id: int
    queue: str
    fence: int
    attempts: int
    started_at: float


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
