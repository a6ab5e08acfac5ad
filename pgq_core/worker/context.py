"""What a handler gets: the claimed job, and whether its lease is still held."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import psycopg

from ..models import Job
from ..queue import AsyncQueue, Queue


class JobContext:
    """What a handler gets: the claimed job, and whether its lease is still held."""

    __slots__ = (
        "_began",
        "_completed",
        "_lost",
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

    @property
    def lost(self) -> bool:
        """True once the lease is lost or handed back: stop, the result will be thrown away."""
        return self._lost

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
