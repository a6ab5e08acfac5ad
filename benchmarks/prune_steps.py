"""Where `pgq prune` spends its time, and what a writer of the history feels meanwhile.

python benchmarks/prune_steps.py DSN [--done N] [--ready N] [--dead N] [--before-version-9]

Fills a throwaway schema with `pgq bench --stats-scale`'s fixture (N done jobs over 30 days, 3
history rows each; ready, 1,000 running and dead jobs over the same days, their history in
those days too), then prunes done jobs older than 7 days step by step: the batches of jobs
(5,000 each), then each day of history dropped (the rows of jobs still present kept), then the
default partition's rows of jobs gone. Meanwhile one connection inserts history rows in a loop,
as workers do, and the longest of those inserts is reported. Also: WAL written, job_events's
size before, after, and after VACUUM. `--before-version-9` runs the same on a version-8 schema
(one unpartitioned job_events) with the unpartitioned prune: the figures before the change.
"""

from __future__ import annotations

import argparse
import importlib
import json
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from pgq_bench import (
    FIXTURE_EVENTS,
    FIXTURE_JOBS,
    HISTORY_DAYS,
    QUEUES,
    ScaleOptions,
    fill_fixture,
    throwaway_schema,
)
from pgq_core import Queue, migrate, ops
from pgq_core.migrate import migrations

CUTOFF = timedelta(days=7)
#: Version 6's prune statement, as it shipped.
PRUNE_V6 = """
WITH victims AS (
  SELECT id FROM {s}.jobs
   WHERE status = 'done' AND finished_at < now() - %(older_than)s::interval
   ORDER BY finished_at
   LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM {s}.jobs WHERE id IN (SELECT id FROM victims) RETURNING id
), history AS (
  DELETE FROM {s}.job_events WHERE job_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
"""
SIZE = """
SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
  FROM (SELECT %(t)s::regclass AS relid WHERE (SELECT relkind FROM pg_class
                                                WHERE oid = %(t)s::regclass) = 'r'
        UNION ALL SELECT relid FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf) r
"""


def scalar(
    conn: psycopg.Connection[Any], query: sql.Composed | sql.SQL | str, params: Any = None
) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


class Writer:
    """Inserts one history row at a time on its own connection; the longest insert, in ms."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        insert = sql.SQL(
            "INSERT INTO {}.job_events (job_id, event, fence) VALUES (0, 'probe', 0)"
        ).format(sql.Identifier(self.schema))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                conn.execute(insert)
                self.samples.append((time.perf_counter() - t0) * 1000)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> dict[str, float]:
        ordered = sorted(self.samples)
        return {
            "inserts": len(ordered),
            "p50_ms": round(ordered[len(ordered) // 2], 2),
            "max_ms": round(ordered[-1], 1),
        }


def fill_v6(conn: psycopg.Connection[Any], schema: str, opts: ScaleOptions) -> None:
    module = importlib.import_module("pgq_core.migrate")
    shipped = migrations()
    module.migrations = lambda: [m for m in shipped if m[0] < 9]  # type: ignore[attr-defined]
    try:
        migrate(conn, schema)
    finally:
        module.migrations = lambda: shipped  # type: ignore[attr-defined]
    ident = sql.Identifier(schema)
    fill = sql.SQL(FIXTURE_JOBS).format(
        s=ident, queues=sql.Literal(QUEUES), days=sql.Literal(HISTORY_DAYS)
    )
    for status, n in (
        ("done", opts.done),
        ("ready", opts.ready),
        ("running", opts.running),
        ("dead", opts.dead),
    ):
        conn.execute(fill, {"status": status, "n": n})
    conn.execute(sql.SQL(FIXTURE_EVENTS).format(s=ident))


def prune_v7(q: Queue, out: dict[str, Any]) -> None:
    droppable = q.run(ops.event_partitions_before(CUTOFF))
    before = droppable[-1].to_at if droppable else None
    t0 = time.perf_counter()
    deleted = 0
    while n := q.run(ops.prune(CUTOFF, ops.PRUNE_BATCH, before)):
        deleted += n
    out["batches_seconds"] = round(time.perf_counter() - t0, 2)
    out["deleted"] = deleted
    t0 = time.perf_counter()
    kept, longest = 0, 0.0
    for part in droppable:
        t1 = time.perf_counter()
        outcome, rows = q.run(ops.drop_event_partition(part.name, CUTOFF))
        assert outcome == "dropped", outcome
        kept += rows
        longest = max(longest, time.perf_counter() - t1)
    out["drops_seconds"] = round(time.perf_counter() - t0, 2)
    out["partitions_dropped"] = len(droppable)
    out["rows_kept"] = kept
    out["longest_drop_ms"] = round(longest * 1000)
    if before is not None:
        t0 = time.perf_counter()
        out["default_rows_deleted"] = q.run(ops.prune_default_orphans(before))
        out["default_sweep_seconds"] = round(time.perf_counter() - t0, 2)


def prune_v6(conn: psycopg.Connection[Any], schema: str, out: dict[str, Any]) -> None:
    statement = sql.SQL(PRUNE_V6).format(s=sql.Identifier(schema))
    t0 = time.perf_counter()
    deleted = 0
    params = {"older_than": CUTOFF, "limit": ops.PRUNE_BATCH}
    while n := scalar(conn, statement, params):
        deleted += n
    out["batches_seconds"] = round(time.perf_counter() - t0, 2)
    out["deleted"] = deleted


def main(dsn: str, opts: ScaleOptions, before_version_9: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"layout": "version 8" if before_version_9 else "version 9"}
    with (
        throwaway_schema(dsn, "bench_prune", pgq=not before_version_9) as schema,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        t0 = time.perf_counter()
        if before_version_9:
            fill_v6(conn, schema, opts)
        else:
            fill_fixture(conn, schema, opts)
        for table in ("jobs", "job_events", "queue_counts"):
            conn.execute(
                sql.SQL("VACUUM ANALYZE {}.{}").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
            )
        out["fill_seconds"] = round(time.perf_counter() - t0, 1)
        events = {"t": f"{schema}.job_events"}
        out["job_events_bytes"] = scalar(conn, SIZE, events)
        wal = scalar(conn, "SELECT pg_current_wal_lsn()")
        q = Queue(conn, schema)
        t0 = time.perf_counter()
        with Writer(dsn, schema) as writer:
            if before_version_9:
                prune_v6(conn, schema, out)
            else:
                prune_v7(q, out)
        out["prune_seconds"] = round(time.perf_counter() - t0, 2)
        out["writer_during_prune"] = writer.report()
        written = scalar(
            conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint", [str(wal)]
        )
        out["wal_mb"] = round(written / 2**20, 1)
        out["job_events_bytes_after"] = scalar(conn, SIZE, events)
        t0 = time.perf_counter()
        conn.execute(sql.SQL("VACUUM {}.job_events").format(sql.Identifier(schema)))
        out["vacuum_job_events_seconds"] = round(time.perf_counter() - t0, 2)
        out["job_events_bytes_after_vacuum"] = scalar(conn, SIZE, events)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("--done", type=int, default=1_000_000)
    parser.add_argument("--ready", type=int, default=100_000)
    parser.add_argument("--dead", type=int, default=10_000)
    parser.add_argument("--before-version-9", action="store_true")
    args = parser.parse_args()
    options = ScaleOptions(args.done, args.ready, 1_000, args.dead, repeat=1)
    print(json.dumps(main(args.dsn, options, args.before_version_9), indent=2))
