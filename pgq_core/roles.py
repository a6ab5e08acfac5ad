"""pgq's roles: NOLOGIN group roles per schema (producer, worker, operator, observer), each
granted exactly its sections of `sql/roles.sql`, column by column.

A role's grants are revoked whole and applied again each time (`apply`), so what it holds is
always exactly what roles.sql says for the schema's current version; `pgq migrate` does so for
every role `pgq roles` made for the schema (told by the comment it leaves on each role).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from .config import check_schema
from .errors import PgqError
from .queries import query_with, statement

KINDS = ("producer", "worker", "operator", "observer")
#: roles.sql's sections each kind holds, in order (after `roles_revoke`)
SECTIONS: dict[str, tuple[str, ...]] = {
    "producer": ("roles_base", "roles_producer"),
    "worker": ("roles_base", "roles_producer", "roles_worker"),
    "observer": ("roles_base", "roles_observer"),
    "operator": ("roles_base", "roles_producer", "roles_observer", "roles_operator"),
}
#: PostgreSQL's longest identifier, in bytes
NAME_BYTES = 63


def role_name(schema: str, kind: str, prefix: str | None = None) -> str:
    """`<prefix>_<kind>`, the prefix the schema's name unless given: one set per schema, so
    several pgq schemas share a cluster. PgqError when too long for PostgreSQL."""
    if kind not in KINDS:
        raise PgqError(f"no pgq role {kind!r}: one of {', '.join(KINDS)}")
    if prefix is not None and not prefix:
        raise PgqError("the role prefix is empty")
    name = f"{prefix if prefix is not None else schema}_{kind}"
    if len(name.encode()) > NAME_BYTES:
        raise PgqError(f"role name {name!r} is longer than {NAME_BYTES} bytes: give --prefix")
    return name


def comment(schema: str, kind: str) -> str:
    """What `create` leaves on a role: how `migrate` finds the schema's roles."""
    return f"pgq {kind} role of schema {schema}"


def grant_statements(schema: str, kind: str, role: str) -> list[sql.Composed]:
    """Everything `kind`'s role holds on the schema, as statements: revoke all, grant again."""
    check_schema(schema)
    names = ("roles_revoke", *SECTIONS[kind])
    return [query_with(name, schema, role=sql.Identifier(role)) for name in names]


def create_statements(schema: str, kind: str, role: str) -> list[sql.Composed]:
    """Making `role` (NOLOGIN) with its comment, then `grant_statements`."""
    ident = sql.Identifier(role)
    return [
        query_with("role_create", schema, role=ident),
        query_with("role_comment", schema, role=ident, comment=sql.Literal(comment(schema, kind))),
        *grant_statements(schema, kind, role),
    ]


def exists(conn: psycopg.Connection[Any], role: str) -> bool:
    found = conn.execute(statement("role_exists", "pgq"), {"role": role}).fetchone()
    return bool(found and found[0])


def create(
    conn: psycopg.Connection[Any],
    schema: str,
    kinds: tuple[str, ...] = KINDS,
    prefix: str | None = None,
) -> list[tuple[str, str, bool]]:
    """Create (if missing) and grant each of `kinds`' roles, in one transaction: (kind, role,
    created). A role that exists gets its comment and its grants anew."""
    done = []
    role = ""
    try:
        with conn.transaction():
            for kind in kinds:
                role = role_name(schema, kind, prefix)
                created = not exists(conn, role)
                steps = create_statements(schema, kind, role)
                for step in steps if created else steps[1:]:
                    conn.execute(step)
                done.append((kind, role, created))
    except psycopg.errors.InsufficientPrivilege as exc:
        said = " ".join(filter(None, [exc.diag.message_primary, exc.diag.message_detail]))
        raise PgqError(
            f"may not create or grant role {role!r}: {said} (run it as the schema's owner, "
            "with CREATEROLE)"
        ) from None
    return done


def grant(
    conn: psycopg.Connection[Any],
    schema: str,
    kind: str,
    login: str,
    prefix: str | None = None,
) -> str:
    """Grant `kind`'s role (which must exist) to `login`; the role's name."""
    role = role_name(schema, kind, prefix)
    if not exists(conn, role):
        raise PgqError(f"role {role!r} does not exist: run `pgq roles create` first")
    if not exists(conn, login):
        raise PgqError(f"role {login!r} does not exist")
    conn.execute(grant_statement(schema, role, login))
    return role


def grant_statement(schema: str, role: str, login: str) -> sql.Composed:
    return query_with("role_grant", schema, role=sql.Identifier(role), member=sql.Identifier(login))


def of_schema(conn: psycopg.Connection[Any], schema: str) -> list[tuple[str, str]]:
    """(role, kind) of every role `create` made for `schema`."""
    rows = conn.execute(statement("roles_of_schema", "pgq"), {"schema": schema}).fetchall()
    return [(str(role), str(kind)) for role, kind in rows]


def regrant(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Apply the grants of every role `create` made for `schema` again (after a migration: a
    new column gets what roles.sql gives it); the roles' names."""
    found = of_schema(conn, schema)
    for role, kind in found:
        for step in grant_statements(schema, kind, role):
            conn.execute(step)
    return [role for role, _ in found]
