"""Loads the named statements of `queries.sql`, the one home of the queue's SQL."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from psycopg import sql

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def named_statements(text: str) -> dict[str, str]:
    """Each `-- name: X` section of a .sql text by name, without its comment lines and final
    semicolon."""
    parts = _NAME.split(text)
    named: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        named[name] = "\n".join(lines).rstrip().rstrip(";")
    return named


@cache
def _raw() -> dict[str, str]:
    return named_statements(files("pgq_core").joinpath("queries.sql").read_text())


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
