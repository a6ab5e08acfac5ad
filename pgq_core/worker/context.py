"""What a handler gets: the claimed job, whether its lease is still held, and where to report
its progress.

Invariants (progress):
- `JobContext.progress` only validates and records the latest value in memory, under a lock
  of its own: cheap and non-blocking from a sync handler's thread or an async handler's loop.
- The heartbeater writes it with the lease (`extend_leases`), fenced like the lease, at most
  once per `PROGRESS_EVERY` seconds per job: the latest value at each beat, values reported in
  between are coalesced. A beat that did not write it (busy row, failed statement) leaves it
  due for the next.
"""

from __future__ import annotations

import math
import operator
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import psycopg

from ..models import Job, JobProgress
from ..queue import AsyncQueue, Queue
from ..text import one_line

#: The most characters of a progress note stored (control characters made spaces, then cut).
PROGRESS_NOTE_CHARS = 200
#: At most one progress write per job per this many seconds.
PROGRESS_EVERY = 1.0
#: The largest `done` or `total` (the columns are bigint).
PROGRESS_MAX = 2**63 - 1


def _count(name: str, value: object) -> int:
    kind = type(value).__name__
    if isinstance(value, bool):
        raise ValueError(f"progress {name} must be an integer, not {kind}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"progress {name} must be an integer, not {kind}") from None
    if number > PROGRESS_MAX:
        raise ValueError(f"progress {name} must be at most {PROGRESS_MAX}, not {number}")
    return number


def check_progress(done: object, total: object = None, note: object = None) -> JobProgress:
    """The progress `done` of `total` (None: unknown) with `note`, checked (ValueError: done
    >= 0, total > 0, done <= total) and the note made one line of at most PROGRESS_NOTE_CHARS."""
    d = _count("done", done)
    if d < 0:
        raise ValueError(f"progress done must be >= 0, not {d}")
    t = None if total is None else _count("total", total)
    if t is not None and t <= 0:
        raise ValueError(f"progress total must be > 0 (or None: unknown), not {t}")
    if t is not None and d > t:
        raise ValueError(f"progress done must be <= total, not {d} of {t}")
    if note is not None and not isinstance(note, str):
        raise ValueError(f"progress note must be a string or None, not {type(note).__name__}")
    text = one_line(note, PROGRESS_NOTE_CHARS) if note is not None else None
    return JobProgress(d, t, text or None)


class ProgressCell:
    """A job's latest progress: set from the handler's thread or loop, read by the heartbeater
    (`due`, `written`) and the worker's snapshot (`latest`) from theirs."""

    __slots__ = ("_at", "_latest", "_lock", "_sent", "_version", "_written_at")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: JobProgress | None = None
        #: when `_latest` was reported (time.monotonic())
        self._at = 0.0
        #: bumped by each report; `_sent` is the version last written
        self._version = 0
        self._sent = 0
        #: when the last write was sent (time.monotonic())
        self._written_at = -math.inf

    def set(self, progress: JobProgress, now: float | None = None) -> None:
        with self._lock:
            self._latest = progress
            self._at = time.monotonic() if now is None else now
            self._version += 1

    def latest(self, now: float | None = None) -> JobProgress | None:
        """The latest progress reported, its `age` as of `now`; None if none was."""
        with self._lock:
            latest, at = self._latest, self._at
        if latest is None:
            return None
        age = max(0.0, (time.monotonic() if now is None else now) - at)
        return JobProgress(latest.done, latest.total, latest.note, age)

    def due(self, now: float, every: float = PROGRESS_EVERY) -> tuple[int, JobProgress] | None:
        """(version, progress) to write now: reported since the last write, and that write at
        least `every` seconds ago; else None."""
        with self._lock:
            if self._latest is None or self._version == self._sent:
                return None
            if now - self._written_at < every:
                return None
            latest, version, age = self._latest, self._version, max(0.0, now - self._at)
        return version, JobProgress(latest.done, latest.total, latest.note, age)

    def written(self, version: int, sent_at: float) -> None:
        """The write of `version`, sent at `sent_at`, landed."""
        with self._lock:
            self._sent = max(self._sent, version)
            self._written_at = sent_at


class JobContext:
    """What a handler gets: the claimed job, and whether its lease is still held."""

    __slots__ = (
        "_began",
        "_completed",
        "_lost",
        "_progress",
        "attempts",
        "fence",
        "id",
        "lease_until",
        "max_attempts",
        "payload",
        "queue",
        "schema",
        "timeout",
        "trace",
        "worker_id",
    )

    def __init__(self, job: Job, worker_id: str, schema: str) -> None:
        self.id: int = job.id
        self.queue: str = job.queue
        self.payload: Any = job.payload
        self.fence: int = job.fence
        self.attempts: int = job.attempts
        self.max_attempts: int = job.max_attempts
        self.lease_until: datetime = job.lease_until
        self.trace: Mapping[str, Any] | None = job.trace
        self.worker_id = worker_id
        self.schema = schema
        self._lost = False
        self._completed = False
        #: when its handler began (time.monotonic()); 0.0 until then
        self._began = 0.0
        self.timeout: float | None = None
        self._progress = ProgressCell()

    @property
    def lost(self) -> bool:
        """True once the lease is lost or handed back: stop, the result will be thrown away."""
        return self._lost

    def progress(self, done: int, total: int | None = None, note: str | None = None) -> None:
        """Report how far the handler got: `done` of `total` (None: unknown), with a short
        `note` (one line, cut to 200 characters). From a sync or an async handler alike: it only
        records the latest value in memory (cheap, never waits on the database).

        The heartbeat writes it to the job's row with the lease, fenced (a lost lease's
        progress lands nowhere), at most once a second: values reported in between are
        coalesced, and with a heartbeat interval over a second it waits for the next beat.
        Raises ValueError unless done >= 0, total > 0 (or None) and done <= total."""
        self._progress.set(check_progress(done, total, note))

    def complete(self, conn: psycopg.Connection[Any], result: Any = None) -> None:
        """Complete this job inside `conn`'s open transaction, together with the handler's writes
        (and `result`, JSON-serialisable, stored with it).

        Raises LeaseLost if the fence is stale (the caller's transaction must then roll back).
        The worker does not complete the job again once this returned and the handler returns.
        """
        Queue(conn, self.schema).complete(
            self.id, self.fence, worker=self.worker_id, conn=conn, result=result
        )
        self._completed = True

    async def complete_async(self, conn: psycopg.AsyncConnection[Any], result: Any = None) -> None:
        """`complete` for async handlers."""
        await AsyncQueue(conn, self.schema).complete(
            self.id, self.fence, worker=self.worker_id, conn=conn, result=result
        )
        self._completed = True

    def completed_in_transaction(self) -> None:
        """Mark the job as completed by the handler itself (it ran `Queue.complete(conn=...)`)."""
        self._completed = True

    def __repr__(self) -> str:
        return f"JobContext(id={self.id}, queue={self.queue!r}, fence={self.fence})"
