"""Loads the named statements of `sql/*.sql`, the one home of the queue's SQL: `protocol.sql`
(what every producer and worker runs: docs/guides/protocol.md), `enqueue.sql` (the producer's
other paths: one job, one that notifies after its commit, COPY), `api.sql` (the public batch
API an application holding its own claims runs), `workflows.sql`, `operator.sql`,
`observer.sql`, `session.sql` (a session's bounds, its server process, the schema's version),
`registry.sql` and `roles.sql` (the grants of `pgq roles`).

A `-- name: X` section is a statement; a `-- fragment: X` section is a piece of SQL written
once and spliced, as text, wherever a statement names it as `{X}` (before `{schema}` and any
`{where}` are bound). Names are unique across the files."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from psycopg import sql

FILES = (
    "protocol.sql",
    "enqueue.sql",
    "api.sql",
    "workflows.sql",
    "operator.sql",
    "observer.sql",
    "session.sql",
    "registry.sql",
    "roles.sql",
)

_SECTION = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)


def sections(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(statements, fragments) of a .sql text by name, each without its comment lines and
    final semicolon."""
    parts = _SECTION.split(text)
    found: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        if name in found["name"] or name in found["fragment"]:
            raise ValueError(f"{name!r} is defined twice")
        found[kind][name] = "\n".join(lines).rstrip().rstrip(";")
    return found["name"], found["fragment"]


def named_statements(text: str) -> dict[str, str]:
    """Each `-- name: X` section of a .sql text by name, its `{fragments}` spliced in."""
    statements, fragments = sections(text)
    return {name: splice(body, fragments) for name, body in statements.items()}


def splice(body: str, fragments: dict[str, str]) -> str:
    """`body` with each `{fragment}` it names replaced by the fragment's text, and the
    fragments those name in turn."""
    for _ in range(len(fragments) + 1):
        spliced = body
        for name, fragment in fragments.items():
            spliced = spliced.replace("{" + name + "}", fragment)
        if spliced == body:
            return body
        body = spliced
    raise ValueError("fragments name each other in a cycle")


@cache
def _raw() -> dict[str, str]:
    home = files("pgq_core").joinpath("sql")
    texts = [home.joinpath(name).read_text() for name in FILES]
    return named_statements("\n".join(texts))


def names() -> list[str]:
    return sorted(_raw())


@cache
def query(name: str, schema: str) -> sql.Composed:
    """The statement `name` with `{schema}` bound to the quoted schema identifier."""
    return sql.SQL(_raw()[name]).format(schema=sql.Identifier(schema))


@cache
def statement(name: str, schema: str) -> bytes:
    """`query(name, schema)` rendered once: what the hot paths send (composing a statement on
    every call costs more than some of them take to run)."""
    return query(name, schema).as_bytes(None)


def query_with(name: str, schema: str, **fragments: sql.Composable) -> sql.Composed:
    """The statement `name` with `{schema}` and each `{fragment}` (e.g. a filter's `{where}`,
    built with psycopg.sql, values as placeholders) bound. Not cached: fragments vary."""
    return sql.SQL(_raw()[name]).format(schema=sql.Identifier(schema), **fragments)
