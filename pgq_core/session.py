"""Running an op on a connection, and what a failed statement means: one layer under `Queue`,
`AsyncQueue`, the worker's link and heartbeater, the dashboard's source and the CLI.

Invariants:
- An op runs as its named statement (`sql/*.sql`), its filter bound into `{where}`; several
  ops run in one transaction, pipelined in one round trip. A `named` op reads its rows by
  column name (named tuples), the others as plain tuples. Rows are read whole; a value Python
  cannot load raises `UnreadableValue`, never a bare RecursionError or ValueError.
- Under a pooler in transaction mode (`config.pooled`) a session keeps no settings: `bounded`
  runs the transaction's own timeouts first, in the same round trip.
- A failure is classified once, here (`classify`), into exactly one `Failure`: the schema is
  missing (a table, schema or function of pgq's own; a missing table a user's trigger names
  is the statement's data), the connection is gone, the session cannot write (`READ_ONLY`, a
  standby after a failover), a pooler nobody announced got in the way (the statement did not
  run), the role lacks a privilege (an operator's grant ends it), the failure says nothing of
  the statement (serialization, deadlock, lock or statement timeout, too many connections), or
  the statement fails for its data. None but the last is a job's fault.
- Every connection pgq opens runs with pgq's own session settings whatever the role or
  database sets (`detect_pooler`, which every one of them calls first).
- A pooler nobody announced (PGQ_POOLED unset) is found when a connection opens
  (`detect_pooler`: its server process is not the one it announced) or by its errors
  (`note_pooler_error`): pooled mode from then on, said once, and that connection prepares
  nothing more.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import namedtuple_row, tuple_row

from . import ops
from .config import first_line, note_pooler, pooled, pooler_line, pooling_undeclared
from .errors import SchemaMissing, UnreadableValue, Unstorable
from .ops import Op
from .queries import query_with, statement

T = TypeVar("T")

log = logging.getLogger("pgq")

#: SQLSTATE classes and codes worth retrying unchanged.
TRANSIENT_CLASSES = ("08", "40", "53", "57P")
TRANSIENT_CODES = ("55P03", "57014", "55006")
#: The session cannot write (a standby, or default_transaction_read_only): a new one may.
READ_ONLY = "25006"
#: The role lacks a privilege the statement needs.
PERMISSION_DENIED = "42501"
#: What a pooler in transaction mode answers a client that prepares statements: a statement
#: prepared on one server session and used on another ("does not exist"), or a name another
#: client already prepared there ("already exists"). pgq's own SQL never names one.
POOLER_SQLSTATES = ("26000", "42P05")
#: Failures a handler's own transaction meets that are the database's doing, never the job's:
#: serialization failure and deadlock (pgq's heartbeats, settlements and counts write the
#: rows a transactional completion writes), a session that cannot write (a standby, a
#: read-only flip), the server shutting down or not yet taking connections.
HANDLER_FAULT_SQLSTATES = ("40001", "40P01", "25006", "57P01", "57P02", "57P03")
#: A character the database's encoding cannot hold: untranslatable_character (a UTF-8
#: character with no equivalent, or a JSON \u escape of one), character_not_in_repertoire.
UNSTORABLE_SQLSTATES = ("22P05", "22021")


class Failure(enum.Enum):
    """What a failed statement means (see the module's invariants)."""

    SCHEMA_MISSING = "schema missing"
    DISCONNECTED = "disconnected"
    READ_ONLY = "read-only session"
    POOLER = "pooler"
    REFUSED = "permission denied"
    TRANSIENT = "transient"
    DATA = "data"


def classify(
    exc: psycopg.Error,
    schema: str,
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None,
) -> Failure:
    """The one meaning of `exc`, raised by a statement on `conn` against `schema`. A pooler's
    error puts the process in pooled mode (`note_pooler_error`)."""
    if is_schema_missing(exc, schema):
        return Failure.SCHEMA_MISSING
    if conn is not None and (conn.broken or conn.closed):
        return Failure.DISCONNECTED
    if exc.sqlstate == READ_ONLY:
        return Failure.READ_ONLY
    if conn is not None and note_pooler_error(exc, conn):
        return Failure.POOLER
    if exc.sqlstate == PERMISSION_DENIED:
        return Failure.REFUSED
    if is_transient(exc.sqlstate):
        return Failure.TRANSIENT
    return Failure.DATA


def is_transient(sqlstate: str | None) -> bool:
    """True for failures that say nothing about the statement itself."""
    if not sqlstate:
        return True
    return sqlstate.startswith(TRANSIENT_CLASSES) or sqlstate in TRANSIENT_CODES


def database_fault(exc: BaseException) -> str | None:
    """Why `exc`, raised by a handler, is the database's fault and not its job's, or None.

    The first psycopg error on its chain (`__cause__`, else `__context__`: SQLAlchemy and
    Django wrap them) decides: a SQLSTATE of HANDLER_FAULT_SQLSTATES or class 08, or a
    connection lost with no SQLSTATE at all. Its transaction did not commit, so running the
    handler again repeats no committed work."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, psycopg.Error):
            state = current.sqlstate
            lost = state is None and isinstance(current, psycopg.OperationalError)
            if lost or state in HANDLER_FAULT_SQLSTATES or (state or "").startswith("08"):
                return f"{state or 'connection lost'}: {first_line(str(current))}"
            return None
        current = current.__cause__ or current.__context__
    return None


def is_schema_missing(exc: psycopg.Error, schema: str) -> bool:
    """True when the error is about the queue's own tables, functions or schema (not, say, a
    user's trigger). Told by SQLSTATE and the schema's name in the message, in whatever
    quotes the server's lc_messages uses ("pgq.jobs", »pgq.jobs«)."""
    message = exc.diag.message_primary or str(exc)
    name = re.escape(schema)
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return re.search(rf"(?:^|[^\w$.]){name}\.", message) is not None
    if isinstance(exc, psycopg.errors.InvalidSchemaName):
        return re.search(rf"(?:^|[^\w$.]){name}(?:[^\w$.]|$)", message) is not None
    return isinstance(exc, psycopg.errors.UndefinedFunction) and any(
        f"{schema}.{function}" in message for function in ("job_events_", "fence_floor")
    )


def unstorable(
    exc: psycopg.Error, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
) -> Unstorable | None:
    """The one-line error for text the database's encoding cannot hold (the statement that
    sent it, an enqueue, is refused: nothing was written), or None for any other failure."""
    if exc.sqlstate not in UNSTORABLE_SQLSTATES:
        return None
    encoding = conn.info.parameter_status("server_encoding") or "its"
    said = exc.diag.message_detail or exc.diag.message_primary or str(exc)
    return Unstorable(
        f"the database's encoding ({encoding}) cannot store a character of this text: "
        f"{first_line(said)} (a database created with ENCODING 'UTF8' stores any)"
    )


def schema_missing(exc: psycopg.Error, schema: str) -> SchemaMissing:
    """The one-line error for a failure `is_schema_missing` recognised."""
    if isinstance(exc, psycopg.errors.UndefinedFunction):
        return SchemaMissing(
            f"schema {schema!r} lacks pgq's partitioned history (schema version 9): "
            "run `pgq migrate`"
        )
    return SchemaMissing(f"schema {schema!r} has no pgq tables: run `pgq migrate` first")


# -- running ops --------------------------------------------------------------------------


def _statement(op: Op[Any], schema: str) -> tuple[bytes | sql.Composed, Mapping[str, Any]]:
    """The op's statement and parameters, its filter (if any) bound into `{where}`."""
    if op.where is None:
        return statement(op.name, schema), op.params
    fragment, values = op.where.where(schema)
    return query_with(op.name, schema, where=fragment), {**op.params, **values}


def _rows(cur: psycopg.Cursor[Any]) -> list[Any]:
    try:
        return cur.fetchall() if cur.rownumber is not None else []
    except (RecursionError, ValueError) as exc:
        raise UnreadableValue(exc) from None


async def _arows(cur: psycopg.AsyncCursor[Any]) -> list[Any]:
    try:
        return await cur.fetchall() if cur.rownumber is not None else []
    except (RecursionError, ValueError) as exc:
        raise UnreadableValue(exc) from None


def _factory(op: Op[Any]) -> Any:
    return namedtuple_row if op.named else tuple_row


def run(conn: psycopg.Connection[Any], schema: str, op: Op[T]) -> T:
    """One op, one statement."""
    with conn.cursor(row_factory=_factory(op)) as cur:
        cur.execute(*_statement(op, schema))
        rows = _rows(cur)
    return op.read(rows)


async def arun(conn: psycopg.AsyncConnection[Any], schema: str, op: Op[T]) -> T:
    """`run` on an async connection."""
    async with conn.cursor(row_factory=_factory(op)) as cur:
        await cur.execute(*_statement(op, schema))
        rows = await _arows(cur)
    return op.read(rows)


def run_pipelined(conn: psycopg.Connection[Any], schema: str, step: Sequence[Op[Any]]) -> list[Any]:
    """Several ops in one transaction, pipelined in one round trip."""
    cursors = []
    with conn.pipeline(), conn.transaction():
        for op in step:
            cur = conn.cursor(row_factory=_factory(op))
            cur.execute(*_statement(op, schema))
            cursors.append(cur)
    return [op.read(_rows(cur)) for op, cur in zip(step, cursors, strict=True)]


async def arun_pipelined(
    conn: psycopg.AsyncConnection[Any], schema: str, step: Sequence[Op[Any]]
) -> list[Any]:
    """`run_pipelined` on an async connection."""
    cursors = []
    async with conn.pipeline(), conn.transaction():
        for op in step:
            cur = conn.cursor(row_factory=_factory(op))
            await cur.execute(*_statement(op, schema))
            cursors.append(cur)
    return [op.read(await _arows(cur)) for op, cur in zip(step, cursors, strict=True)]


def bounded(
    conn: psycopg.Connection[Any], schema: str, limits: Op[None], step: Sequence[Op[Any]]
) -> list[Any]:
    """The ops of `step` in order; pooled, in one transaction that first sets its own
    timeouts (`limits`: the session keeps none)."""
    if pooled():
        return run_pipelined(conn, schema, [limits, *step])[1:]
    if len(step) == 1:
        return [run(conn, schema, step[0])]
    return run_pipelined(conn, schema, step)


async def abounded(
    conn: psycopg.AsyncConnection[Any], schema: str, limits: Op[None], step: Sequence[Op[Any]]
) -> list[Any]:
    """`bounded` on an async connection."""
    if pooled():
        return (await arun_pipelined(conn, schema, [limits, *step]))[1:]
    if len(step) == 1:
        return [await arun(conn, schema, step[0])]
    return await arun_pipelined(conn, schema, step)


# -- a pooler nobody announced --------------------------------------------------------------


def is_pooler_error(exc: psycopg.Error) -> bool:
    """True for the errors a pooler in transaction mode causes (see POOLER_SQLSTATES), and its
    "bind message supplies N parameters, but prepared statement ... requires M" (08P01): the
    statement did not run; the connection, not the job or the data, is at fault."""
    if exc.sqlstate in POOLER_SQLSTATES:
        return True
    message = exc.diag.message_primary or str(exc)
    return exc.sqlstate == "08P01" and "prepared statement" in message


def note_pooler_error(
    exc: psycopg.Error, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
) -> bool:
    """After a pooler's error (`is_pooler_error`): pooled mode from now on (said once), and
    `conn` prepares nothing more. True if `exc` was one."""
    if not is_pooler_error(exc):
        return False
    evidence = first_line(str(exc))
    if note_pooler(evidence):
        log.warning("%s", pooler_line(evidence))
    if pooled():
        conn.prepare_threshold = None
    return True


def _pooler_found(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], pid: int
) -> str | None:
    announced = conn.info.backend_pid
    if pid == announced or not note_pooler(f"server process {pid}, announced {announced}"):
        return None
    return pooler_line(f"its server process is {pid}, not the {announced} it announced")


def detect_pooler(conn: psycopg.Connection[Any]) -> str | None:
    """On a connection just opened, when PGQ_POOLED says nothing: does it go through a pooler
    (its server process is not the one it announced; a pooler hands out cancel keys of its
    own)? If so `pooled()` is True from now on and this connection prepares nothing. Then
    pgq's session settings (`session_settings`: read committed, ISO dates, postgres intervals,
    no idle-session timeout; pooled, only each transaction's READ COMMITTED), so no role or
    database setting changes what pgq's statements mean. Returns the line to say, the first
    time only."""
    line = None
    if pooling_undeclared():
        line = _pooler_found(conn, run(conn, "pgq", ops.backend_pid()))
    if pooled():
        conn.prepare_threshold = None
    else:
        run(conn, "pgq", ops.session_settings())
    conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    return line


async def adetect_pooler(conn: psycopg.AsyncConnection[Any]) -> str | None:
    """`detect_pooler` for an async connection."""
    line = None
    if pooling_undeclared():
        line = _pooler_found(conn, await arun(conn, "pgq", ops.backend_pid()))
    if pooled():
        conn.prepare_threshold = None
    else:
        await arun(conn, "pgq", ops.session_settings())
    await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)
    return line
