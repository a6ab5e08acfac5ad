"""The worker's statement connection, and what a failed statement means.

Invariants:
- One statement (or one pipelined transaction of several) at a time; nothing waits forever:
  every session gets `statement_timeout` and `lock_timeout`, and connecting has a timeout.
- A failure, classified once by `session.classify`, is exactly one of: `Disconnected` (the
  connection is gone; the link reconnects by itself with bounded backoff), `Transient` (retry
  the same statement later: serialization failure, deadlock, lock or statement timeout, too
  many connections; `Refused`: permission denied, which an operator's grant ends; none of them
  is a job's fault), `DataFault` (this statement fails for its data: retrying it as-is cannot
  help), or `SchemaMissing` (a table of pgq's own is missing; a missing table a user's trigger
  names is the statement's data).
- A session that cannot write (`READ_ONLY`, as after a failover) is dropped: the statement is
  `Transient` and the link reconnects until a session takes writes (a DSN naming several hosts
  asks libpq for the writable one: `cluster.writer_options`; a server that reports itself a
  hot standby, as one host named alone does, is not taken back); while none does, that is
  said once per outage, in plain words (`cluster.no_primary`).
- A pooler in transaction mode nobody announced (PGQ_POOLED unset) is found when a connection
  opens (`detect_pooler`) or by its errors (`is_pooler_error`: prepared statements that do not
  exist or already exist): pooled mode from then on, said once; the statement is `Transient`
  (it did not run) and the session is replaced by one that prepares nothing.
- Error texts never carry the DSN's password.
- Reading a reply never raises for one job's payload: JSON that Python cannot load arrives as
  `UnreadablePayload` (the statement, a claim, has committed by then).
- The worker's main loop runs its statements on a `Lane`: after a `Transient` failure none
  is sent before a backoff (0.1 s doubling to 5 s, reset by a success).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import set_json_loads

from .. import ops, session
from ..cluster import no_primary, standby_worker
from ..config import connect_options, first_line, pooled, scrub
from ..errors import PgqError, why_unreadable
from ..migrate import latest_version
from ..ops import Op
from ..session import Failure, adetect_pooler, detect_pooler
from ..text import printable
from .policy import Backoff
from .stdio import restore_standard_fds

log = logging.getLogger("pgq.worker")


class Disconnected(Exception):
    """The connection is down; the link is reconnecting."""


class Transient(Exception):
    """The statement failed but may succeed unchanged later."""


class Refused(Transient):
    """The session may not run the statement (permission denied): a grant's fault, never a
    job's. Retried unchanged, as it succeeds once an operator grants it; a worker that must
    end (`--burst`) stops on it instead."""


class DataFault(Exception):
    """The statement failed for its data (or a rule of the database): never retry it as-is."""

    def __init__(self, message: str, sqlstate: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


@dataclass(frozen=True)
class UnreadablePayload:
    """A payload PostgreSQL stores but Python's json cannot load (nested past the recursion
    limit, an integer past the digit limit): its job fails without reaching the handler."""

    reason: str


def load_payload(data: str | bytes) -> Any:
    """`json.loads` that never raises for JSON PostgreSQL produced: what it cannot load comes
    back as `UnreadablePayload`, so one job's payload never breaks the reply it arrives in."""
    try:
        return json.loads(data)
    except (RecursionError, ValueError) as exc:
        return UnreadablePayload(why_unreadable(exc))


@dataclass(frozen=True)
class Timeouts:
    """Session bounds of every worker connection (seconds)."""

    statement: float = 30.0
    lock: float = 5.0
    connect: float | None = None

    def session_statement(self) -> sql.Composed:
        """Bounds every statement of the session; plans are generic, since the worker runs the
        same few statements thousands of times and planning each afresh costs more than running
        it (0.25 ms of planning against 0.2 ms of execution for a settle-and-claim)."""
        return sql.SQL(
            "SET statement_timeout = {}; SET lock_timeout = {};"
            " SET plan_cache_mode = force_generic_plan"
        ).format(
            sql.Literal(f"{ops.milliseconds(timedelta(seconds=self.statement))}ms"),
            sql.Literal(f"{ops.milliseconds(timedelta(seconds=self.lock))}ms"),
        )

    def local_limits(self) -> Op[None]:
        """The same bounds for one transaction alone: what a pooled connection runs first in
        each transaction instead of the session settings (`config.pooled`)."""
        return ops.local_limits(timedelta(seconds=self.statement), timedelta(seconds=self.lock))

    def connect_kwargs(self, dsn: str) -> dict[str, Any]:
        options = connect_options(dsn)
        if self.connect is not None:
            options["connect_timeout"] = max(1, round(self.connect))
        return options


def application_name(role: str, worker_id: str) -> str:
    """What `pg_stat_activity` shows for a worker connection: `pgq <role> <worker id>`."""
    return f"pgq {role} {worker_id}"[:63]


async def open_connection(
    dsn: str, timeouts: Timeouts, app: str = "pgq"
) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection with the worker's session bounds (pooled: none; each
    transaction sets its own, see `Link` and `run_sync`). Cancelled while it opens (the
    worker stopping), the connection is closed once open (`_close_once_open`), never left
    half-way through authentication on the server."""
    restore_standard_fds()  # a socket must never take fd 0-2, where log lines go
    opening = asyncio.ensure_future(
        psycopg.AsyncConnection.connect(
            dsn, autocommit=True, application_name=app, **timeouts.connect_kwargs(dsn)
        )
    )
    try:
        conn = await asyncio.shield(opening)
    except asyncio.CancelledError:
        await _close_once_open(opening)
        raise
    try:
        if (line := await adetect_pooler(conn)) is not None:
            log.warning("%s", line)
        if not pooled():
            await conn.execute(timeouts.session_statement())
    except BaseException:
        await conn.close()
        raise
    return conn


async def _close_once_open(opening: asyncio.Future[psycopg.AsyncConnection[Any]]) -> None:
    """Close the connection `opening` opens, once open (bounded by the connect timeout). A
    connect cut off half-way keeps a server session waiting in authentication until the
    client's socket is freed or `authentication_timeout` (60 s) passes, and while it waits
    every DROP DATABASE on that server waits too. Cancelled again: closed when it opens."""
    try:
        conn = await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_finish_opened)
        return
    except Exception:  # noqa: BLE001 - it did not open: nothing to close
        return
    with contextlib.suppress(psycopg.Error):
        await conn.close()


def _finish_opened(opening: asyncio.Future[psycopg.AsyncConnection[Any]]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().pgconn.finish()


def open_sync_connection(dsn: str, timeouts: Timeouts, app: str = "pgq") -> psycopg.Connection[Any]:
    """`open_connection` for threads."""
    restore_standard_fds()
    conn = psycopg.connect(
        dsn, autocommit=True, application_name=app, **timeouts.connect_kwargs(dsn)
    )
    try:
        if (line := detect_pooler(conn)) is not None:
            log.warning("%s", line)
        if not pooled():
            conn.execute(timeouts.session_statement())
    except BaseException:
        conn.close()
        raise
    return conn


T = TypeVar("T")


def run_sync(conn: psycopg.Connection[Any], schema: str, timeouts: Timeouts, op: Op[T]) -> T:
    """Run `op` on a connection of `open_sync_connection`; pooled, inside a transaction that
    first sets its own timeouts (in one round trip, pipelined)."""
    result: T = session.bounded(conn, schema, timeouts.local_limits(), [op])[0]
    return result


def _unwritable(conn: psycopg.AsyncConnection[Any]) -> str | None:
    """Why a fresh session would refuse every write, from what the server reports at connect
    (PostgreSQL 14+): a hot standby, or sessions read-only by the database's or role's default
    (a read-only flip); None when it takes writes, or does not say."""
    if conn.info.parameter_status("in_hot_standby") == "on":
        return "server is in hot standby mode"
    if conn.info.parameter_status("default_transaction_read_only") == "on":
        return "cannot execute statements in a read-only transaction"
    return None


class Link:
    """The worker's statement connection: one statement at a time, reconnecting on loss."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        timeouts: Timeouts,
        on_down: Callable[[str], None],
        on_up: Callable[[], None],
        app: str = "pgq",
        *,
        says_outages: bool = True,
    ) -> None:
        self._app = app
        #: whether this link logs that it waits for a writable server (the main link does; a
        #: second link of the same worker would say it again)
        self._says_outages = says_outages
        self._dsn = dsn
        self._schema = schema
        self._timeouts = timeouts
        self._on_down = on_down
        self._on_up = on_up
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._reconnecting: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def up(self) -> bool:
        return self._conn is not None

    async def open(self) -> None:
        self._conn = await self._connect()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await open_connection(self._dsn, self._timeouts, self._app)
        set_json_loads(load_payload, conn)
        return conn

    async def call(self, *step: Op[Any]) -> list[Any]:
        """Run the ops in order; several run in one transaction, pipelined in one round trip."""
        async with self._lock:
            conn = self._conn
            if conn is not None and pooled() and conn.prepare_threshold is not None:
                conn = await self._fresh_session(conn, "pooled mode")
            if conn is None:
                raise Disconnected
            try:
                return await session.abounded(
                    conn, self._schema, self._timeouts.local_limits(), step
                )
            except psycopg.Error as exc:
                failure = session.classify(exc, self._schema, conn)
                if failure is Failure.SCHEMA_MISSING:
                    raise session.schema_missing(exc, self._schema) from None
                text = no_primary(exc, self._dsn) or first_line(str(exc))
                reason = scrub(text or type(exc).__name__, self._dsn)
                if failure is Failure.DISCONNECTED:
                    self._down(conn, reason)
                    raise Disconnected(reason) from None
                if failure is Failure.READ_ONLY:
                    self._down(conn, reason)
                    raise Transient(reason) from None
                if failure is Failure.POOLER:
                    await self._fresh_session(conn, reason)
                    raise Transient(reason) from None
                if failure is Failure.REFUSED:
                    raise Refused(reason) from None
                if failure is Failure.TRANSIENT:
                    raise Transient(reason) from None
                raise DataFault(reason, exc.sqlstate) from None
            finally:
                if self._closed:  # close() left the connection to the call running on it
                    await self._release(conn)

    async def _fresh_session(
        self, conn: psycopg.AsyncConnection[Any], reason: str
    ) -> psycopg.AsyncConnection[Any] | None:
        """Replace `conn` (pooled mode began: the new one prepares nothing and sets nothing on
        the session); if no new one opens, the link is down and reconnects."""
        try:
            fresh = await self._connect()
        except psycopg.Error:
            self._down(conn, reason)
            if self._closed:  # close() left `conn` to this call, which ends here
                await self._release(conn)
            return None
        self._conn = fresh
        with contextlib.suppress(psycopg.Error):
            await conn.close()
        return fresh

    def _down(self, conn: psycopg.AsyncConnection[Any], reason: str) -> None:
        if self._conn is not conn:
            return
        self._conn = None
        self._on_down(reason)
        self._reconnecting = asyncio.create_task(self._reconnect(conn))

    async def _reconnect(self, old: psycopg.AsyncConnection[Any]) -> None:
        with contextlib.suppress(psycopg.Error):
            await old.close()
        backoff = Backoff(first=0.25, cap=5.0)
        said = False
        while not self._closed:
            await asyncio.sleep(backoff.next())
            try:
                fresh = await self._connect()
            except psycopg.Error as exc:
                waiting = no_primary(exc, self._dsn)
                if waiting is not None and not said and self._says_outages:  # once per outage
                    said = True
                    log.warning("%s: %s", self._app, scrub(waiting, self._dsn))
                continue
            unwritable = _unwritable(fresh)
            if unwritable is not None:
                # up, but no statement of a worker's runs there: still waiting for writes
                with contextlib.suppress(psycopg.Error):
                    await fresh.close()
                if not said and self._says_outages:
                    said = True
                    waiting = no_primary(unwritable, self._dsn) or ""
                    log.warning("%s: %s", self._app, scrub(waiting, self._dsn))
                continue
            if self._closed:
                await fresh.close()
                return
            self._conn = fresh
            self._on_up()
            return

    async def _release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Close `conn`, given up by `close` while a call ran on it, and any connection the
        link took since (the link is closed)."""
        left, self._conn = self._conn, None
        for each in (conn, left):
            if each is not None and not each.closed:
                with contextlib.suppress(psycopg.Error):
                    await each.close()

    async def close(self) -> None:
        """Close the link. A connection a call is running on is closed by that call when its
        statement ends, never under it (libpq's connection freed under psycopg's statement can
        crash the process, and a statement that committed would be reported as failed)."""
        self._closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        conn, self._conn = self._conn, None
        if conn is not None and not self._lock.locked():  # else the call running closes it
            with contextlib.suppress(psycopg.Error):
                await conn.close()


class Lane:
    """The worker's statements on `link`: a transient failure holds off the next ones with
    backoff (`ready` is False until then), and `statements` counts the ones run."""

    def __init__(self, link: Link, worker_id: str) -> None:
        self.link = link
        self._worker_id = worker_id
        self._backoff = Backoff(first=0.1, cap=5.0)
        #: no statement before this time (time.monotonic()) after a transient failure
        self.ready_at = 0.0
        self.statements = 0

    def ready(self, now: float) -> bool:
        """The link is up and not held off."""
        return self.link.up and now >= self.ready_at

    async def call(self, *step: Op[Any]) -> list[Any]:
        """Run `step` on the link; a transient failure holds off statements with backoff."""
        try:
            results = await self.link.call(*step)
        except Transient as exc:
            delay = self._backoff.next()
            self.ready_at = time.monotonic() + delay
            log.warning(
                "worker %s: %s failed, retrying in %.1fs: %s",
                self._worker_id,
                "+".join(op.name for op in step),
                delay,
                printable(str(exc)),
            )
            raise
        self._backoff.reset()
        self.statements += len(step)
        return results


async def open_checked(
    link: Link, dsn: str, schema: str, burst: bool, stopping: Callable[[], bool] = bool
) -> bool:
    """Open `link` and check the schema's version; a burst worker's server must not be a
    standby (nothing there can be claimed). Raises PgqError in the operator's words.

    While the servers answer but none takes writes (a failover under way), a long-running
    worker waits for the new primary, saying so once, as it does after a reconnect; False
    when a stop came first. Nothing answering at all still fails at once."""
    backoff = Backoff(first=0.25, cap=5.0)
    said = False
    while True:
        try:
            await link.open()
            break
        except psycopg.OperationalError as exc:
            waiting = None if burst else no_primary(exc, dsn)
            if waiting is None:
                text = scrub(first_line(str(exc)), dsn)
                raise PgqError(f"database unavailable: {text}") from None
            if not said:
                said = True
                log.warning("worker starting: %s", scrub(waiting, dsn))
            pause_until = time.monotonic() + backoff.next()
            while time.monotonic() < pause_until:
                if stopping():
                    return False
                await asyncio.sleep(0.05)
    if said:
        log.info("worker starting: a writable primary answers")
    try:
        await link.call(ops.require_schema(latest_version(), schema))
    except Refused as exc:  # in the operator's words, never the class's name
        raise PgqError(f"permission denied: {exc}") from None
    except DataFault as exc:
        raise PgqError(f"database error: {exc}") from None
    except (Disconnected, Transient) as exc:
        raise PgqError(f"database unavailable: {exc}") from None
    if burst:
        (role,) = await link.call(ops.server_role())
        if role.standby:
            raise PgqError(standby_worker(role))
    return True
