"""A session's settings and identity (sql/session.sql): timeouts, read-only, its backend pid,
the schema's version, the server's role, the database's clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..errors import PgqError, SchemaMissing
from ..models import ServerRole
from .op import Op, Rows, read_nothing


def drop_schema() -> Op[None]:
    """The schema and everything in it (a private test schema, `testing.private_schema`)."""
    return Op("drop_schema", {}, lambda rows: None)


def milliseconds(timeout: timedelta) -> int:
    """`timeout` in whole milliseconds, rounded up: a positive timeout is at least 1 ms, never
    0 (which PostgreSQL reads as no timeout at all)."""
    return -(-timeout // timedelta(milliseconds=1))


def session_limits(
    statement_timeout: timedelta, lock_timeout: timedelta, *, force: bool
) -> Op[None]:
    """Timeouts in whole milliseconds (`milliseconds`; only 0 disables); see `session_limits`
    in sql/*.sql."""
    return Op(
        "session_limits",
        {
            "statement_timeout": str(milliseconds(statement_timeout)),
            "lock_timeout": str(milliseconds(lock_timeout)),
            "force": force,
        },
        lambda rows: None,
    )


def server_role() -> Op[ServerRole]:
    """The server the session reached: address, standby or primary, lag, timeline."""

    def read(rows: Rows) -> ServerRole:
        host, port, standby, lag, timeline = rows[0]
        return ServerRole(
            None if host is None else str(host),
            None if port is None else int(port),
            bool(standby),
            None if lag is None else float(lag),
            None if timeline is None else int(timeline),
        )

    return Op("server_role", {}, read)


def read_only_session() -> Op[None]:
    """Every transaction of the session starts read-only (a reader's, `--read-dsn`)."""
    return Op("read_only_session", {}, lambda rows: None)


def local_limits(statement_timeout: timedelta, lock_timeout: timedelta) -> Op[None]:
    """Timeouts of the current transaction alone (see `local_limits` in sql/*.sql)."""
    return Op(
        "local_limits",
        {
            "statement_timeout": str(milliseconds(statement_timeout)),
            "lock_timeout": str(milliseconds(lock_timeout)),
        },
        lambda rows: None,
    )


def session_settings() -> Op[None]:
    """The settings pgq's own sessions run with (see `session_settings` in sql/*.sql)."""
    return Op("session_settings", {}, lambda rows: None)


def open_transaction() -> Op[None]:
    """A statement reading nothing, that begins a caller's transaction (`open_transaction`)."""
    return Op("open_transaction", {}, read_nothing)


def backend_pid() -> Op[int]:
    """The server process id the statement ran in (see `backend_pid` in sql/*.sql)."""
    return Op("backend_pid", {}, lambda rows: int(rows[0][0]))


#: Database encodings pgq refuses: SQL_ASCII stores whatever bytes a client sends, unchecked
#: and unconverted, so a payload written by one client may not be readable by another.
REFUSED_ENCODINGS = ("SQL_ASCII",)


def encoding_refusal(encoding: str) -> str | None:
    """Why pgq cannot run on a database of `encoding` (its `server_encoding`), or None. Every
    other encoding works: pgq's connections speak UTF-8 and the server converts."""
    if encoding.upper() not in REFUSED_ENCODINGS:
        return None
    return (
        f"the database's encoding is {encoding}, which stores text as unchecked bytes: pgq "
        "needs an encoding PostgreSQL converts (create the database with ENCODING 'UTF8')"
    )


def require_schema(needed: int, schema: str) -> Op[int]:
    """The schema's version; `SchemaMissing` when it is older than `needed` (the statements of
    this pgq would fail on it: a worker must not start there), PgqError when the database's
    encoding is one pgq refuses (`encoding_refusal`)."""

    def read(rows: list[tuple[Any, ...]]) -> int:
        version = int(rows[0][0])
        refusal = encoding_refusal(str(rows[0][1]))
        if refusal is not None:
            raise PgqError(refusal)
        if version < needed:
            raise SchemaMissing(
                f"schema {schema!r} is at version {version}, this pgq needs {needed}:"
                " run `pgq migrate` first"
            )
        return version

    return Op("schema_version", {}, read)


def database_clock() -> Op[datetime]:
    """The database's time at the moment the statement runs."""
    return Op("database_clock", {}, lambda rows: rows[0][0])
