"""The seed's baseline SQL, loaded by name from `seed.sql` (its one home), and the connection
its unqualified statements run on."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import psycopg
from psycopg import sql

from pgq_core.queries import named_statements

SET_PATH = "SET search_path TO {}"


@cache
def statements() -> dict[str, str]:
    """Every statement of seed.sql by name, without its comment lines and final semicolon."""
    return named_statements(files("pgq_bench").joinpath("seed.sql").read_text())


#: The seed's table, verbatim.
SEED_TABLE = statements()["table"]
#: The seed's two partial indexes, verbatim.
SEED_INDEXES = (statements()["ready_index"], statements()["lease_index"])
#: The plain INSERT, one job per statement.
SEED_ENQUEUE = statements()["enqueue"]
#: The plain batch INSERT, many jobs of one queue per statement (`payloads`: a jsonb array).
SEED_ENQUEUE_BATCH = statements()["enqueue_batch"]
#: The seed's claim (`LIMIT %(limit)s`, 10 as the seed writes it).
SEED_CLAIM = statements()["claim"]
#: The seed's completion, one UPDATE per job.
SEED_COMPLETE = statements()["complete"]
#: The seed's LIMIT.
SEED_LIMIT = 10
#: The seed's example poll interval ("ten workers polling every 100 ms"); it has no NOTIFY.
SEED_POLL_INTERVAL = 0.1


def seed_connection(dsn: str, schema: str) -> psycopg.Connection[Any]:
    """An autocommit connection on which the seed's unqualified statements reach `schema`."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(sql.SQL(SET_PATH).format(sql.Identifier(schema)))
    return conn


def setup_seed(dsn: str, schema: str) -> None:
    """The seed's table and indexes in `schema` (which must exist)."""
    with seed_connection(dsn, schema) as conn:
        conn.execute(SEED_TABLE)
        for statement in SEED_INDEXES:
            conn.execute(statement)
