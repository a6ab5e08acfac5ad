"""Versioned, idempotent schema migrations, safe to run from many processes at once."""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any

import psycopg
from psycopg import sql

from .config import check_schema
from .defaults import ENSURE_LOCK_TIMEOUT, PARTITIONS_AHEAD
from .errors import PgqError
from .ops import encoding_refusal
from .queries import statement
from .roles import regrant

_FILE = re.compile(r"^(\d{4})_\w+\.sql$")


def migrations() -> list[tuple[int, str, str]]:
    """(version, file name, SQL text) of every migration shipped, in order."""
    found = []
    for entry in files("pgq_core").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text()))
    return sorted(found)


def latest_version() -> int:
    return migrations()[-1][0]


def migrate(conn: psycopg.Connection[Any], schema: str = "pgq") -> list[int]:
    """Bring `schema` to the latest version; returns the versions applied (empty: up to date).

    One transaction under an advisory lock keyed on the schema name: a second process waits,
    then finds nothing left to do. Every shipped version not yet recorded is applied, in
    version order: numbers need not be contiguous, and a version merged later with a lower
    number than one already applied (branches developed in parallel) is still applied. Then,
    from version 9 on, the history's daily partitions ahead are made sure of (a day whose lock
    is busy is left to the workers' reapers).
    `schema` must pass `config.check_schema` (PgqError otherwise, before anything is created):
    the migrations put it inside string literals as well as identifiers.
    The migrations run with search_path `pg_catalog, <schema>, pg_temp` (the caller's is put
    back at the end): an old migration's unqualified call never resolves to a look-alike a
    user created in a schema on the caller's path.
    Last, every role `pgq roles` made for the schema gets its grants again (`roles.regrant`):
    a column a migration added is granted to the roles roles.sql names it for.
    A database whose encoding pgq refuses (`ops.encoding_refusal`: SQL_ASCII) raises PgqError
    before anything is created.
    """
    ident = sql.Identifier(check_schema(schema))
    refusal = encoding_refusal(conn.info.parameter_status("server_encoding") or "")
    if refusal is not None:
        raise PgqError(refusal)
    applied: list[int] = []
    with conn.transaction():
        caller_path = conn.execute(
            "SELECT pg_catalog.current_setting('search_path'),"
            " pg_catalog.set_config('search_path', 'pg_catalog, ' ||"
            " pg_catalog.quote_ident(%s::text) || ', pg_temp', true)",
            [schema],
        ).fetchone()
        conn.execute(
            "SELECT pg_catalog.pg_advisory_xact_lock("
            "pg_catalog.hashtext('pgq migrate ' || %s::text)::bigint)",
            [schema],
        )
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.schema_version ("
                " version int PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        done = {
            int(row[0])
            for row in conn.execute(
                sql.SQL("SELECT version FROM {}.schema_version").format(ident)
            ).fetchall()
        }
        for version, name, text in migrations():
            if version in done:
                continue
            conn.execute(sql.SQL(text).format(schema=ident))
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_version (version, name) VALUES (%s, %s)").format(
                    ident
                ),
                [version, name],
            )
            applied.append(version)
        has_partitions = conn.execute(
            "SELECT pg_catalog.to_regprocedure(pg_catalog.format("
            "'%%I.job_events_add_partitions(date, date, interval)', %s::text)) IS NOT NULL",
            [schema],
        ).fetchone()
        if has_partitions and has_partitions[0]:
            conn.execute(
                statement("ensure_partitions", schema),
                {"ahead": PARTITIONS_AHEAD, "lock_timeout": ENSURE_LOCK_TIMEOUT},
            )
        regrant(conn, schema)
        if caller_path:
            conn.execute(
                "SELECT pg_catalog.set_config('search_path', %s::text, true)", [caller_path[0]]
            )
    return applied


def schema_version(conn: psycopg.Connection[Any], schema: str = "pgq") -> int:
    """0 when the schema has never been migrated."""
    row = conn.execute(
        "SELECT pg_catalog.to_regclass(pg_catalog.format('%%I.schema_version', %s::text))"
        " IS NOT NULL",
        [schema],
    ).fetchone()
    if not row or not row[0]:
        return 0
    found = conn.execute(
        sql.SQL("SELECT coalesce(pg_catalog.max(version), 0) FROM {}.schema_version").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    return int(found[0]) if found else 0
