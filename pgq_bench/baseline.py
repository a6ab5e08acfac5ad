"""The baseline pgq is measured against (a plain-SQL SKIP LOCKED queue): its SQL, loaded by name
from `baseline.sql` (its one home), and the connection its unqualified statements run on."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgq_core.queries import named_statements

SET_PATH = "SET search_path TO {}"


@cache
def statements() -> dict[str, str]:
    """Every statement of baseline.sql by name, without its comment lines and final semicolon."""
    return named_statements(files("pgq_bench").joinpath("baseline.sql").read_text())


#: The baseline's table, verbatim.
BASELINE_TABLE = statements()["table"]
#: The baseline's two partial indexes, verbatim.
BASELINE_INDEXES = (statements()["ready_index"], statements()["lease_index"])
#: The plain INSERT, one job per statement.
BASELINE_ENQUEUE = statements()["enqueue"]
#: The plain batch INSERT, many jobs of one queue per statement (`payloads`: a jsonb array).
BASELINE_ENQUEUE_BATCH = statements()["enqueue_batch"]
#: The baseline's claim (`LIMIT %(limit)s`, 10 as the baseline is written).
BASELINE_CLAIM = statements()["claim"]
#: The baseline's completion, one UPDATE per job.
BASELINE_COMPLETE = statements()["complete"]
#: The baseline's LIMIT.
BASELINE_LIMIT = 10
#: The baseline's example poll interval ("ten workers polling every 100 ms"); it has no NOTIFY.
BASELINE_POLL_INTERVAL = 0.1


def baseline_connection(dsn: str, schema: str) -> psycopg.Connection[Any]:
    """An autocommit connection on which the baseline's unqualified statements reach `schema`."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(sql.SQL(SET_PATH).format(sql.Identifier(schema)))
    return conn


def setup_baseline(dsn: str, schema: str) -> None:
    """The baseline's table and indexes in `schema` (which must exist)."""
    with baseline_connection(dsn, schema) as conn:
        conn.execute(BASELINE_TABLE)
        for statement in BASELINE_INDEXES:
            conn.execute(statement)


#: What result files written before the baseline had its name called it (as a key at any depth,
#: or as a side's `"side"`), and its name now. The one place old results are read through.
LEGACY_NAMES = {
    "seed": "baseline",
    "seed_async": "baseline_async",
    "seed_batch": "baseline_batch",
    "seed_limit": "baseline_limit",
    "seed_insert_per_job": "baseline_insert_per_job",
    "ratio_to_seed": "ratio_to_baseline",
    "ratio_to_seed_batch": "ratio_to_baseline_batch",
}
#: Runs whose results have a `seed` of their own, a random state, never the baseline.
RANDOM_STATE_RUNS = ("failover", "fleet")


def with_baseline_names(result: dict[str, Any]) -> dict[str, Any]:
    """A parsed `pgq bench --json` result with the baseline under today's names, whether it was
    written before the rename (`seed`, `ratio_to_seed`, ...) or after; other keys unchanged.
    A failover or fleet result is returned as it is: its `seed` is the run's random state."""
    if any(run in result for run in RANDOM_STATE_RUNS):
        return result
    renamed: dict[str, Any] = _renamed(result)
    return renamed


def _renamed(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            LEGACY_NAMES.get(k, k): LEGACY_NAMES.get(v, v)
            if k == "side" and isinstance(v, str)
            else _renamed(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    return value


def read_result(path: str | Path) -> dict[str, Any]:
    """The `pgq bench --json` result in `path`, old or new, under today's names."""
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return with_baseline_names(data)
