"""Enqueue inside your framework's transaction: a SQLAlchemy 2 session or connection on the
psycopg 3 driver (`postgresql+psycopg://`), or a plain psycopg connection.

The job is written on the very connection, inside the very transaction, of the application's
own writes: it exists only if they commit. SQLAlchemy is never imported here; its objects are
recognised by what they offer; `sqlalchemy_engine` alone imports it, when called.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg

from .config import connect_options, schema_name
from .defaults import DEFAULT_MAX_ATTEMPTS
from .errors import PgqError
from .extras import require
from .queue import Queue
from .target import find_target

if TYPE_CHECKING:
    from sqlalchemy import Engine


def driver_connection(obj: Any) -> psycopg.Connection[Any]:
    """The psycopg connection under `obj`: a psycopg connection itself, a SQLAlchemy
    `Connection` (`.connection.driver_connection`) or `Session` (`.connection()` first, which
    begins the session's transaction if none is open), or a Django database connection
    (`django.db.connection`, connected first: inside `transaction.atomic()` the job joins its
    transaction, outside it commits at once as Django's own writes do). PgqError for anything
    else, e.g. a SQLAlchemy engine on another driver, or Django on psycopg2."""
    if isinstance(obj, psycopg.Connection):
        return obj
    if isinstance(obj, psycopg.AsyncConnection):
        raise PgqError("an async psycopg connection: use AsyncQueue.enqueue(conn=...)")
    if callable(getattr(obj, "ensure_connection", None)) and hasattr(obj, "vendor"):
        return _django_connection(obj)
    sa_connection = obj
    if not hasattr(obj, "exec_driver_sql") and callable(getattr(obj, "connection", None)):
        sa_connection = obj.connection()  # a Session: its connection, in its transaction
    raw = getattr(getattr(sa_connection, "connection", None), "driver_connection", None)
    if isinstance(raw, psycopg.Connection):
        return raw
    raise PgqError(
        f"cannot enqueue through a {type(obj).__name__}: give a psycopg 3 connection, or a "
        "SQLAlchemy session or connection whose URL is postgresql+psycopg://"
    )


def _django_connection(wrapper: Any) -> psycopg.Connection[Any]:
    """The psycopg connection of a Django database connection (`django.db.connection`)."""
    if wrapper.vendor != "postgresql":
        raise PgqError(f"cannot enqueue through Django's {wrapper.vendor} database: pgq needs "
                       "PostgreSQL")
    wrapper.ensure_connection()
    raw = wrapper.connection
    if isinstance(raw, psycopg.Connection):
        return raw
    raise PgqError(
        "Django's connection is psycopg2: pgq needs psycopg 3 (Django 4.2 and later use it "
        "when it is installed)"
    )


def enqueue_in(
    conn: Any,
    queue: str,
    payload: Any,
    *,
    schema: str | None = None,
    delay: timedelta | None = None,
    run_at: datetime | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    unique_key: str | None = None,
) -> int:
    """Enqueue one job inside `conn`'s transaction (see `driver_connection` for what `conn`
    may be): the job's id. It commits or rolls back with the caller's own writes. `schema`:
    else PGQ_SCHEMA, else pgq."""
    raw = driver_connection(conn)
    return Queue(raw, schema_name(schema)).enqueue(
        queue,
        payload,
        delay=delay,
        run_at=run_at,
        max_attempts=max_attempts,
        unique_key=unique_key,
        conn=raw,
    )


def sqlalchemy_engine(dsn: str | None = None, **options: Any) -> Engine:
    """A SQLAlchemy engine (psycopg 3 driver) on the queue's database, found as the CLI finds
    it: `dsn`, else PGQ_DSN, else the embedded server (started if needed, the PGQ_SCHEMA or
    pgq schema migrated). Its connections time out as pgq's own do, and printing the engine
    shows no password. `options` go to `sqlalchemy.create_engine`."""
    require("sqlalchemy", "sqlalchemy_engine()")
    from sqlalchemy import create_engine

    dsn = find_target(dsn).dsn

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, **connect_options(dsn))

    return create_engine("postgresql+psycopg://", creator=connect, **options)
