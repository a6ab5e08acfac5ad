"""The queue API: `Queue` (sync, for producers, operators and the CLI) and `AsyncQueue` (for the
worker and the dashboard). Both are thin: every operation is an `ops.Op` run in one round trip.

Every call runs on the queue's own autocommit connection, so it commits by itself, unless a
`conn` is passed: then it runs inside that connection's open transaction and commits or rolls
back with the caller's own writes.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from . import ops
from .config import connect_options
from .errors import JobNotFound, LeaseLost, SchemaMissing
from .models import Job, JobDetail, JobEvent, JobRow, Lease, QueueStats, Settled
from .ops import JobSpec, Op
from .queries import statement

T = TypeVar("T")
ENQUEUE_CHUNK = 5000


def channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema: `<schema>_jobs`; the payload is the queue name."""
    return f"{schema}_jobs"


def listen_statement(schema: str) -> sql.Composed:
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel(schema)))


def make_worker_id() -> str:
    """Unique per process: host, pid and a random suffix (pids are reused across restarts)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def operator_id() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is not worth failing an operator action
        user = "unknown"
    return f"operator:{user}@{socket.gethostname()}"


def result_json(result: Any) -> str | None:
    """A handler's result as JSON text (None stays None); ValueError if it is not JSON."""
    if result is None:
        return None
    try:
        return json.dumps(result, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"result is not JSON-serialisable: {type(exc).__name__}: {exc}") from None


def _missing(schema: str) -> SchemaMissing:
    return SchemaMissing(f"schema {schema!r} has no pgq tables: run `pgq migrate` first")


def _is_missing(exc: psycopg.errors.UndefinedTable, schema: str) -> bool:
    """True when the error is about the queue's own tables (not, say, a user's trigger)."""
    return f'"{schema}.' in (exc.diag.message_primary or "")


def _expect_applied(settled: Settled, job_id: int, fence: int, action: str) -> None:
    if settled.lost:
        raise LeaseLost(job_id, fence, action)


def _chunks(specs: Sequence[JobSpec]) -> Iterator[Sequence[JobSpec]]:
    for start in range(0, len(specs), ENQUEUE_CHUNK):
        yield specs[start : start + ENQUEUE_CHUNK]


class Queue:
    """Sync queue API over one autocommit connection."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str = "pgq", *, owns: bool = False):
        self.conn = conn
        self.schema = schema
        self._owns = owns

    @classmethod
    def connect(cls, dsn: str, schema: str = "pgq") -> Queue:
        """Connects with `config.connect_options`: the attempt is bounded, keepalives on."""
        return cls(psycopg.connect(dsn, autocommit=True, **connect_options(dsn)), schema, owns=True)

    def close(self) -> None:
        if self._owns:
            self.conn.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, op: Op[T], conn: psycopg.Connection[Any] | None = None) -> T:
        try:
            with (conn or self.conn).cursor() as cur:
                cur.execute(statement(op.name, self.schema), op.params)
                rows = cur.fetchall() if cur.rownumber is not None else []
        except psycopg.errors.UndefinedTable as exc:
            if not _is_missing(exc, self.schema):
                raise
            raise _missing(self.schema) from exc
        return op.read(rows)

    # producers
    def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int = ops.DEFAULT_MAX_ATTEMPTS,
        priority: int = 0,
        conn: psycopg.Connection[Any] | None = None,
    ) -> int:
        spec = JobSpec(
            queue, payload, run_at=run_at, delay=delay, max_attempts=max_attempts, priority=priority
        )
        return self.run(ops.enqueue([spec]), conn)[0]

    def enqueue_many(
        self, specs: Iterable[JobSpec], conn: psycopg.Connection[Any] | None = None
    ) -> list[int]:
        """All or nothing: up to ENQUEUE_CHUNK jobs go in one statement (one round trip); more
        are written chunk by chunk inside one transaction."""
        specs = list(specs)
        target = conn or self.conn
        if len(specs) <= ENQUEUE_CHUNK:
            return self.run(ops.enqueue(specs), target)
        ids: list[int] = []
        with target.transaction():
            for chunk in _chunks(specs):
                chunk_ids: list[int] = self.run(ops.enqueue(chunk), target)
                ids.extend(chunk_ids)
        return ids

    # lease holders
    def claim(
        self, queue: str, limit: int = 10, lease: timedelta = ops.DEFAULT_LEASE, worker: str = ""
    ) -> list[Job]:
        return self.run(ops.claim(queue, limit, lease, worker or make_worker_id()))

    def heartbeat(self, job_id: int, fence: int) -> None:
        _expect_applied(self.run(ops.heartbeat([(job_id, fence)])), job_id, fence, "heartbeat")

    def complete(
        self,
        job_id: int,
        fence: int,
        *,
        worker: str | None = None,
        conn: psycopg.Connection[Any] | None = None,
        result: Any = None,
    ) -> None:
        """Raises LeaseLost if the fence is stale; inside `conn` that rolls the caller back too.
        `result` (JSON-serialisable) is stored with the completion."""
        settled = self.run(ops.complete([(job_id, fence)], worker, [result_json(result)]), conn)
        _expect_applied(settled, job_id, fence, "complete")

    def fail(self, job_id: int, fence: int, error: str, *, worker: str | None = None) -> None:
        settled = self.run(ops.fail([(job_id, fence, error)], worker))
        _expect_applied(settled, job_id, fence, "fail")

    def complete_many(self, held: Sequence[tuple[int, int]], worker: str | None = None) -> Settled:
        return self.run(ops.complete(held, worker))

    def fail_many(self, held: Sequence[tuple[int, int, str]], worker: str | None = None) -> Settled:
        return self.run(ops.fail(held, worker))

    def heartbeat_many(self, held: Sequence[tuple[int, int]]) -> Settled:
        return self.run(ops.heartbeat(held))

    def release_many(
        self, held: Sequence[tuple[int, int]], worker: str | None = None, reason: str = "shutdown"
    ) -> Settled:
        return self.run(ops.release(held, worker, reason))

    def record_stale(
        self, lost: Sequence[tuple[int, int]], worker: str | None, action: str
    ) -> None:
        if lost:
            self.run(ops.record_stale(lost, worker, action))

    # maintenance and operators
    def reap(self, limit: int = ops.REAP_BATCH) -> list[tuple[int, str]]:
        return self.run(ops.reap(limit))

    def requeue(self, ids: Sequence[int]) -> list[int]:
        return self.run(ops.requeue(ids, operator_id()))

    def requeue_dead(self, queue: str | None) -> list[int]:
        return self.run(ops.requeue_dead(queue, operator_id()))

    def kill(self, ids: Sequence[int], reason: str = "killed by operator") -> list[int]:
        return self.run(ops.kill(ids, operator_id(), reason))

    def prune_batches(self, older_than: timedelta, batch: int = ops.PRUNE_BATCH) -> Iterator[int]:
        """Deletes in bounded batches, yielding each batch's count, until nothing is left."""
        while deleted := self.run(ops.prune(older_than, batch)):
            yield deleted

    def prune(self, older_than: timedelta, batch: int = ops.PRUNE_BATCH) -> int:
        return sum(self.prune_batches(older_than, batch))

    # reading
    def stats(self, soon: timedelta = timedelta(seconds=10)) -> list[QueueStats]:
        return self.run(ops.stats(soon))

    def leases(self, limit: int = 100) -> list[Lease]:
        return self.run(ops.leases(limit))

    def jobs(
        self, queue: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[JobRow]:
        return self.run(ops.jobs(queue, status, limit))

    def history(self, job_id: int) -> list[JobEvent]:
        return self.run(ops.history(job_id))

    def job(self, job_id: int) -> JobDetail:
        detail = self.run(ops.job(job_id))
        if detail is None:
            raise JobNotFound(job_id)
        detail.history.extend(self.history(job_id))
        return detail

    # production: settings, and what the exporter and the soak read
    def settings(self) -> dict[str, str]:
        """The schema's settings by name (migration 5), e.g. {'notify': 'always'}."""
        return self.run(ops.settings())

    def set_notify(self, mode: str) -> str:
        """When the jobs trigger sends NOTIFY: 'always' | 'edge' | 'off' (ValueError else);
        applies to every statement from the next one on."""
        return self.run(ops.set_notify(mode))

    def lease_summary(self) -> list[ops.QueueLeases]:
        """Per queue with running jobs: distinct workers holding them, expired leases."""
        return self.run(ops.metrics_leases())

    def activity(self) -> ops.Activity:
        """Worker processes connected to the database; the xmin horizon others hold back."""
        return self.run(ops.metrics_activity())

    def table_sizes(self) -> list[ops.TableSize]:
        """Bytes, live and dead tuples of `jobs` and `job_events`."""
        return self.run(ops.table_sizes(self.schema))

    def claim_latency(self, since: datetime) -> ops.ClaimLatency:
        """Enqueue-to-claim (and -done) percentiles of jobs claimed since `since`."""
        return self.run(ops.claim_latency(since))


class AsyncQueue:
    """The same API as `Queue`, for asyncio, over one autocommit async connection."""

    def __init__(
        self, conn: psycopg.AsyncConnection[Any], schema: str = "pgq", *, owns: bool = False
    ):
        self.conn = conn
        self.schema = schema
        self._owns = owns

    @classmethod
    async def connect(cls, dsn: str, schema: str = "pgq") -> AsyncQueue:
        """Connects with `config.connect_options`: the attempt is bounded, keepalives on."""
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **connect_options(dsn))
        return cls(conn, schema, owns=True)

    async def close(self) -> None:
        if self._owns:
            await self.conn.close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def run(self, op: Op[T], conn: psycopg.AsyncConnection[Any] | None = None) -> T:
        try:
            async with (conn or self.conn).cursor() as cur:
                await cur.execute(statement(op.name, self.schema), op.params)
                rows = await cur.fetchall() if cur.rownumber is not None else []
        except psycopg.errors.UndefinedTable as exc:
            if not _is_missing(exc, self.schema):
                raise
            raise _missing(self.schema) from exc
        return op.read(rows)

    async def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int = ops.DEFAULT_MAX_ATTEMPTS,
        priority: int = 0,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        spec = JobSpec(
            queue, payload, run_at=run_at, delay=delay, max_attempts=max_attempts, priority=priority
        )
        return (await self.run(ops.enqueue([spec]), conn))[0]

    async def enqueue_many(
        self, specs: Iterable[JobSpec], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[int]:
        specs = list(specs)
        target = conn or self.conn
        if len(specs) <= ENQUEUE_CHUNK:
            return await self.run(ops.enqueue(specs), target)
        ids: list[int] = []
        async with target.transaction():
            for chunk in _chunks(specs):
                chunk_ids: list[int] = await self.run(ops.enqueue(chunk), target)
                ids.extend(chunk_ids)
        return ids

    async def claim(
        self, queue: str, limit: int = 10, lease: timedelta = ops.DEFAULT_LEASE, worker: str = ""
    ) -> list[Job]:
        return await self.run(ops.claim(queue, limit, lease, worker or make_worker_id()))

    async def heartbeat(self, job_id: int, fence: int) -> None:
        settled = await self.run(ops.heartbeat([(job_id, fence)]))
        _expect_applied(settled, job_id, fence, "heartbeat")

    async def complete(
        self,
        job_id: int,
        fence: int,
        *,
        worker: str | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
        result: Any = None,
    ) -> None:
        settled = await self.run(
            ops.complete([(job_id, fence)], worker, [result_json(result)]), conn
        )
        _expect_applied(settled, job_id, fence, "complete")

    async def fail(self, job_id: int, fence: int, error: str, *, worker: str | None = None) -> None:
        settled = await self.run(ops.fail([(job_id, fence, error)], worker))
        _expect_applied(settled, job_id, fence, "fail")

    async def complete_many(
        self, held: Sequence[tuple[int, int]], worker: str | None = None
    ) -> Settled:
        return await self.run(ops.complete(held, worker))

    async def fail_many(
        self, held: Sequence[tuple[int, int, str]], worker: str | None = None
    ) -> Settled:
        return await self.run(ops.fail(held, worker))

    async def heartbeat_many(self, held: Sequence[tuple[int, int]]) -> Settled:
        return await self.run(ops.heartbeat(held))

    async def release_many(
        self, held: Sequence[tuple[int, int]], worker: str | None = None, reason: str = "shutdown"
    ) -> Settled:
        return await self.run(ops.release(held, worker, reason))

    async def record_stale(
        self, lost: Sequence[tuple[int, int]], worker: str | None, action: str
    ) -> None:
        if lost:
            await self.run(ops.record_stale(lost, worker, action))

    async def reap(self, limit: int = ops.REAP_BATCH) -> list[tuple[int, str]]:
        return await self.run(ops.reap(limit))

    async def requeue(self, ids: Sequence[int]) -> list[int]:
        return await self.run(ops.requeue(ids, operator_id()))

    async def requeue_dead(self, queue: str | None) -> list[int]:
        return await self.run(ops.requeue_dead(queue, operator_id()))

    async def kill(self, ids: Sequence[int], reason: str = "killed by operator") -> list[int]:
        return await self.run(ops.kill(ids, operator_id(), reason))

    async def prune(self, older_than: timedelta, batch: int = ops.PRUNE_BATCH) -> int:
        total = 0
        while deleted := await self.run(ops.prune(older_than, batch)):
            total += deleted
        return total

    async def stats(self, soon: timedelta = timedelta(seconds=10)) -> list[QueueStats]:
        return await self.run(ops.stats(soon))

    async def leases(self, limit: int = 100) -> list[Lease]:
        return await self.run(ops.leases(limit))

    async def jobs(
        self, queue: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[JobRow]:
        return await self.run(ops.jobs(queue, status, limit))

    async def history(self, job_id: int) -> list[JobEvent]:
        return await self.run(ops.history(job_id))

    async def job(self, job_id: int) -> JobDetail:
        detail = await self.run(ops.job(job_id))
        if detail is None:
            raise JobNotFound(job_id)
        detail.history.extend(await self.history(job_id))
        return detail
