"""Fenced writes to the user's own tables: only a newer fence may overwrite a row.

The plain-SQL baseline's `reports` example, generalised: a row keyed by `key` carries the fence
of the claim that wrote it, and a write with an older or equal fence changes nothing. Call it
inside the same transaction as `Queue.complete(..., conn=...)` so the effect and the completion
commit together, and both are rejected if the fence is stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql


def fenced_write(
    conn: psycopg.Connection[Any],
    table: str,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    fence: int,
    *,
    schema: str | None = None,
    fence_column: str = "fence",
) -> bool:
    """Insert, or update where the stored fence is older; True if the row was written.

    `table` needs a unique constraint on the `key` columns and a bigint `fence_column`.
    """
    if not key:
        raise ValueError("fenced_write needs at least one key column")
    target = sql.Identifier(schema, table) if schema else sql.Identifier(table)
    columns = [*key, *values, fence_column]
    params = [*key.values(), *values.values(), fence]
    updates = [*values, fence_column]
    statement = sql.SQL(
        "INSERT INTO {target} AS t ({cols}) VALUES ({vals}) "
        "ON CONFLICT ({keys}) DO UPDATE SET {sets} WHERE t.{fence} < excluded.{fence}"
    ).format(
        target=target,
        cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
        vals=sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        keys=sql.SQL(", ").join(map(sql.Identifier, key)),
        sets=sql.SQL(", ").join(
            sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c)) for c in updates
        ),
        fence=sql.Identifier(fence_column),
    )
    cur = conn.execute(statement, params)
    return cur.rowcount == 1
