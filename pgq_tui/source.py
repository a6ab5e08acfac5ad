"""Where the dashboard's data comes from.

`PgSource` is the real one: pgq_core's `AsyncQueue` over one connection, plus a second
connection that LISTENs. It never shows a password: every error text is scrubbed of it.
Any connection failure surfaces as `Disconnected`; the next call connects again; while no
host of the DSN takes writes, it says so in plain words (`cluster.no_primary`).

With a `read_dsn` (a standby, `--read-dsn`) the reads go there on a read-only session of
their own that never asks for the writable host; the actions, the exact counts they confirm
and LISTEN stay on `dsn`, the primary (a standby has no NOTIFY).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any, Protocol

import psycopg

from pgq_core import (
    AsyncQueue,
    JobDetail,
    JobRow,
    LatencyReport,
    Lease,
    PgqError,
    QueueStats,
    QueueWindow,
    WorkerInfo,
    listen_statement,
    ops,
)
from pgq_core.cluster import no_primary
from pgq_core.config import connect_options, listen_dsn, pooled, scrub
from pgq_core.defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT
from pgq_core.filters import JobFilter
from pgq_core.models import ErrorGroup, Health, ServerRole
from pgq_core.session import adetect_pooler, is_pooler_error
from pgq_core.text import first_line, libpq_reason

APPLICATION_NAME = "pgq-dashboard"
#: how often a LISTEN waiting for notifications checks that the source is still open (s)
LISTEN_RECHECK = 1.0


class Disconnected(Exception):
    """The server is unreachable (or went away); the message is fit for the header."""


class ListenRefused(Exception):
    """The server LISTEN reached is a standby ("cannot execute LISTEN during recovery"): no
    notification comes from it; the dashboard polls."""


class Source(Protocol):
    """What the dashboard reads and does. Every method may raise `Disconnected`."""

    async def stats(self) -> list[QueueStats]: ...
    async def latency(self, queues: Sequence[str]) -> LatencyReport:
        """Wait and run percentiles of these queues' done jobs, 5m and 1h (bounded per queue)."""
        ...

    async def stats_window(self, offset: int, limit: int) -> QueueWindow:
        """At most `limit` queues by name from the `offset`th, and how many in all."""
        ...

    async def queue_stats(self, queues: Sequence[str]) -> list[QueueStats]:
        """The `stats` rows of these queues only (what an action just changed)."""
        ...

    async def leases(self, limit: int) -> list[Lease]: ...
    async def workers(self) -> list[WorkerInfo]:
        """The live workers, from their rows in `workers` (any process's)."""
        ...

    async def jobs(self, queue: str | None, status: str | None, limit: int) -> list[JobRow]: ...
    async def job(self, job_id: int) -> JobDetail: ...
    async def requeue(self, ids: Sequence[int]) -> list[int]: ...
    async def requeue_dead(self, queue: str) -> list[int]: ...
    async def kill(self, ids: Sequence[int]) -> list[int]: ...
    async def pause_queue(self, queue: str, reason: str | None) -> None: ...
    async def resume_queue(self, queue: str) -> None: ...
    async def jobs_matching(self, where: JobFilter, limit: int) -> list[JobRow]: ...
    async def count_matching(self, where: JobFilter, action: str) -> int:
        """How many jobs `where` matches that `action` (requeue, kill) may change."""
        ...

    async def bulk(self, action: str, where: JobFilter) -> list[int]:
        """`action` over every job `where` matches, in bounded batches, fence-checked; the
        history rows name the operator and the filter."""
        ...

    async def errors(self, limit: int) -> list[ErrorGroup]: ...
    async def health(self) -> Health: ...
    async def server(self) -> ServerRole | None:
        """The server the reads reach (address, standby, lag, timeline); None: not known."""
        ...

    async def primary(self) -> ServerRole | None:
        """With reads on a standby, the server the writes reach; None when the reads reach the
        primary themselves (`server` says it) or it is not known."""
        ...

    def notifications(self) -> AsyncIterator[str]:
        """Queue names as jobs become ready; ends (or raises Disconnected) when the link drops."""
        ...

    async def reset(self) -> None: ...
    async def close(self) -> None: ...


class PgSource:
    """pgq_core's AsyncQueue on a dedicated autocommit connection, reconnected on demand.

    A connection is never closed under a call running on it (libpq's connection would be freed
    under psycopg's statement, which can crash the process): a connection given up while busy
    is closed by the last call that leaves it."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        connect_timeout: float | None = 3,
        statement_timeout: timedelta = DEFAULT_STATEMENT_TIMEOUT,
        lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT,
        read_dsn: str | None = None,
    ) -> None:
        self.dsn = dsn
        #: where the reads go (a standby); None: `dsn`, as the writes
        self.read_dsn = read_dsn
        self.schema = schema
        #: None: the DSN's or PGCONNECT_TIMEOUT or pgq's default (`config.connect_options`)
        self.connect_timeout = connect_timeout
        #: bound every statement and lock wait of the session (a limit the role or server
        #: sets is kept), so a locked table never hangs a poll or an action
        self.statement_timeout = statement_timeout
        self.lock_timeout = lock_timeout
        #: names this dashboard's connections in pg_stat_activity
        self.application_name = f"{APPLICATION_NAME} {secrets.token_hex(3)}"
        #: the reads' connection, and (with a `read_dsn`) the writes' own
        self._queue: AsyncQueue | None = None
        self._writer: AsyncQueue | None = None
        self._lock = asyncio.Lock()
        #: calls running per connection, and the given-up connections they keep open
        self._busy: dict[AsyncQueue, int] = {}
        self._retired: set[AsyncQueue] = set()
        #: closed: no call opens a connection any more
        self._closed = False

    async def _connect(
        self, dsn: str | None = None, reader: bool = False
    ) -> psycopg.AsyncConnection[Any]:
        dsn = dsn or self.dsn
        options = connect_options(dsn, reader=reader)
        if self.connect_timeout is not None:
            options["connect_timeout"] = self.connect_timeout
        return await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, application_name=self.application_name, **options
        )

    async def _get(self, write: bool = False) -> AsyncQueue:
        """The reads' queue, or with `write` (and a `read_dsn`) the writes' own."""
        write = write and self.read_dsn is not None
        reader = self.read_dsn is not None and not write
        async with self._lock:
            current = self._writer if write else self._queue
            if current is None or current.conn.closed:
                if self._closed:
                    raise Disconnected("the dashboard's connections are closed")
                try:
                    conn = await self._connect(self.read_dsn if reader else self.dsn, reader)
                except psycopg.Error as exc:
                    raise self._disconnected(exc) from None
                queue = AsyncQueue(conn, self.schema, owns=True)
                try:
                    await adetect_pooler(conn)  # said once by pgq_core's logger
                except psycopg.Error as exc:
                    await queue.close()
                    raise self._disconnected(exc) from None
                if not pooled():  # a session setting would stay on a server session others get
                    limits = ops.session_limits(
                        self.statement_timeout, self.lock_timeout, force=False
                    )
                    try:
                        await queue.run(limits)
                        if reader:  # a reader writes nothing, whatever it is asked
                            await queue.run(ops.read_only_session())
                    except psycopg.Error as exc:
                        await queue.close()
                        raise self._disconnected(exc) from None
                if self._closed:  # closed while this one opened
                    await queue.close()
                    raise Disconnected("the dashboard's connections are closed")
                if write:
                    self._writer = queue
                else:
                    self._queue = queue
                current = queue
            return current

    def _disconnected(self, exc: BaseException) -> Disconnected:
        """The reason in one line: while no host takes writes, that in plain words."""
        text = no_primary(exc, self.dsn) or libpq_reason(exc)
        for dsn in (self.dsn, self.read_dsn, os.environ.get("PGQ_LISTEN_DSN")):
            text = scrub(text, dsn)
        return Disconnected(text)

    async def _forget(self, queue: AsyncQueue) -> None:
        """Give `queue`'s connection up: the next call reconnects. It is closed now if no call
        runs on it, else by the last one to leave (`_call`)."""
        if self._queue is queue:
            self._queue = None
        if self._writer is queue:
            self._writer = None
        if self._busy.get(queue):
            self._retired.add(queue)
        else:
            await self._close(queue)

    @staticmethod
    async def _close(queue: AsyncQueue) -> None:
        with contextlib.suppress(Exception):  # the connection is already broken
            await queue.close()

    async def _write(self, name: str, *args: Any) -> Any:
        """`name` on the primary (the writes' connection): an action, or a count it confirms."""
        return await self._call(name, *args, write=True)

    async def _call(self, name: str, *args: Any, write: bool = False) -> Any:
        queue = await self._get(write)
        self._busy[queue] = self._busy.get(queue, 0) + 1
        try:
            return await self._run(queue, name, *args)
        finally:
            self._busy[queue] -= 1
            if not self._busy[queue]:
                del self._busy[queue]
                if queue in self._retired:
                    self._retired.discard(queue)
                    await self._close(queue)

    async def _run(self, queue: AsyncQueue, name: str, *args: Any) -> Any:
        try:
            return await getattr(queue, name)(*args)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            await self._forget(queue)
            raise self._disconnected(exc) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            # a login whose pgq role may not read or do this (an observer and a payload)
            raise PgqError(f"permission denied: {first_line(str(exc))}") from None
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            # a standby (or a primary since demoted): the next call looks for the writable host
            await self._forget(queue)
            raise PgqError(str(self._disconnected(exc))) from None
        except psycopg.Error as exc:
            if not is_pooler_error(exc):
                raise
            await self._forget(queue)  # pooled mode began: the next connection prepares nothing
            raise self._disconnected(exc) from None

    async def stats(self) -> list[QueueStats]:
        result: list[QueueStats] = await self._call("stats")
        return result

    async def stats_window(self, offset: int, limit: int) -> QueueWindow:
        result: QueueWindow = await self._call("stats_window", offset, limit)
        return result

    async def latency(self, queues: Sequence[str]) -> LatencyReport:
        result: LatencyReport = await self._call("latency", ops.LATENCY_WINDOW, list(queues))
        return result

    async def workers(self) -> list[WorkerInfo]:
        result: list[WorkerInfo] = await self._call("workers")
        return result

    async def queue_stats(self, queues: Sequence[str]) -> list[QueueStats]:
        result: list[QueueStats] = await self._call("queue_stats", queues)
        return result

    async def leases(self, limit: int) -> list[Lease]:
        result: list[Lease] = await self._call("leases", limit)
        return result

    async def jobs(self, queue: str | None, status: str | None, limit: int) -> list[JobRow]:
        result: list[JobRow] = await self._call("jobs", queue, status, limit)
        return result

    async def job(self, job_id: int) -> JobDetail:
        result: JobDetail = await self._call("job", job_id)
        return result

    async def requeue(self, ids: Sequence[int]) -> list[int]:
        result: list[int] = await self._write("requeue", ids)
        return result

    async def requeue_dead(self, queue: str) -> list[int]:
        result: list[int] = await self._write("requeue_dead", queue)
        return result

    async def kill(self, ids: Sequence[int]) -> list[int]:
        result: list[int] = await self._write("kill", ids)
        return result

    async def pause_queue(self, queue: str, reason: str | None) -> None:
        await self._write("pause", queue, reason)

    async def resume_queue(self, queue: str) -> None:
        """Resuming also wakes the queue's workers (its notification)."""
        await self._write("resume", queue)

    async def jobs_matching(self, where: JobFilter, limit: int) -> list[JobRow]:
        result: list[JobRow] = await self._call("jobs_matching", where, limit)
        return result

    async def count_matching(self, where: JobFilter, action: str) -> int:
        result: int = await self._write("count_matching", where, action)
        return result

    async def bulk(self, action: str, where: JobFilter) -> list[int]:
        result: list[int] = await self._write("bulk", action, where)
        return result

    async def errors(self, limit: int) -> list[ErrorGroup]:
        result: list[ErrorGroup] = await self._call("errors", None, None, limit)
        return result

    async def health(self) -> Health:
        result: Health = await self._call("health")
        return result

    async def server(self) -> ServerRole | None:
        result: ServerRole = await self._call("server_role")
        return result

    async def primary(self) -> ServerRole | None:
        if self.read_dsn is None:
            return None
        result: ServerRole = await self._write("server_role")
        return result

    async def notifications(self) -> AsyncIterator[str]:
        """Queue names as notifications arrive. Through a pooler in transaction mode LISTEN
        runs on PGQ_LISTEN_DSN; without one this never yields (the poll timer refreshes).

        Ends once the source is closed: after `close` it opens nothing, a connection opening
        as it closes is closed once open, and one listening within LISTEN_RECHECK."""
        target = listen_dsn(self.dsn)
        if target is None:
            while not self._closed:
                await asyncio.sleep(LISTEN_RECHECK)
            return
        if self._closed:
            return
        try:
            conn = await self._connect(target)
        except psycopg.Error as exc:
            raise self._disconnected(exc) from None
        try:
            if self._closed:  # closed while this one opened
                return
            try:
                await conn.execute(listen_statement(self.schema))
            except psycopg.errors.ReadOnlySqlTransaction:
                raise ListenRefused("the server is a standby") from None
            while not self._closed:
                async for notify in conn.notifies(timeout=LISTEN_RECHECK):
                    yield notify.payload
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise self._disconnected(exc) from None
        finally:
            with contextlib.suppress(Exception):  # closing a dead connection
                await conn.close()

    async def reset(self) -> None:
        """Give the connections up: the next call reconnects. One a call hangs on is closed
        when that call ends (cancelled by its caller: psycopg then cancels the statement on the
        server, or closes the connection itself after a few seconds)."""
        for queue in (self._queue, self._writer):
            if queue is not None:
                await self._forget(queue)

    async def close(self) -> None:
        """Give the connections up (`reset`) for good: a connection opening now is closed
        once open, and no later call opens one."""
        self._closed = True
        await self.reset()
