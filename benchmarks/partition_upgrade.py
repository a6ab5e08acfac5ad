"""What migration 9 (the history partitioned by day) costs on a big version-6 database.

python benchmarks/partition_upgrade.py DSN [--done N] [--repeat R]

Migrates a throwaway schema to version 6, fills it with `pgq bench --stats-scale`'s fixture
(N done jobs over 30 days with 3 history rows each, N/10 ready, N/1000 running, N/100 dead),
times a job's history read (the `history` statement, R random jobs), then times the upgrade to
version 9 (one transaction: job_events is locked for all of it), reads the history again,
and prunes done jobs older than 7 days. The old table becomes the legacy partition as it is: no
row is rewritten; the upgrade builds its (id, at) primary key and scans it once to check its
rows are older than the bound. Until the legacy partition lies wholly before the cutoff (7 days
after the upgrade, for `--older-than 7d`), prune deletes its rows one by one, as before.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
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
    percentile,
    throwaway_schema,
)
from pgq_core import Queue, migrate
from pgq_core.migrate import migrations

SIZE = """
SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
  FROM (SELECT %(t)s::regclass AS relid
        UNION ALL SELECT relid FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf) r
"""


def scalar(
    conn: psycopg.Connection[Any], query: sql.Composed | sql.SQL | str, params: Any = None
) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def history_ms(q: Queue, ids: list[int], repeat: int) -> dict[str, float]:
    samples = []
    for job_id in random.sample(ids, min(repeat, len(ids))):
        t0 = time.perf_counter()
        q.history(job_id)
        samples.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": percentile(samples, 50), "p95_ms": percentile(samples, 95)}


def main(dsn: str, done: int, repeat: int) -> dict[str, Any]:
    module = importlib.import_module("pgq_core.migrate")
    shipped = migrations()
    with throwaway_schema(dsn, "bench_upgrade", pgq=False) as schema, psycopg.connect(
        dsn, autocommit=True
    ) as conn:
        module.migrations = lambda: [m for m in shipped if m[0] <= 6]  # type: ignore[attr-defined]
        try:
            migrate(conn, schema)
        finally:
            module.migrations = lambda: shipped  # type: ignore[attr-defined]
        ident = sql.Identifier(schema)
        fill = sql.SQL(FIXTURE_JOBS).format(
            s=ident, queues=sql.Literal(QUEUES), days=sql.Literal(HISTORY_DAYS)
        )
        t0 = time.perf_counter()
        for status, n in (
            ("done", done),
            ("ready", done // 10),
            ("running", done // 1000),
            ("dead", done // 100),
        ):
            conn.execute(fill, {"status": status, "n": n})
        conn.execute(sql.SQL(FIXTURE_EVENTS).format(s=ident))
        conn.execute(sql.SQL("VACUUM ANALYZE {}.job_events").format(ident))
        filled = time.perf_counter() - t0
        table = f"{schema}.job_events"
        count = sql.SQL("SELECT count(*) FROM {}.job_events").format(ident)
        rows = scalar(conn, count)
        ids = [r[0] for r in conn.execute(sql.SQL("SELECT id FROM {}.jobs").format(ident))]
        q = Queue(conn, schema)
        before = {
            "bytes": scalar(conn, SIZE, {"t": table}),
            "history": history_ms(q, ids, repeat),
        }
        t0 = time.perf_counter()
        applied = migrate(conn, schema)
        upgrade = time.perf_counter() - t0
        assert scalar(conn, count) == rows
        conn.execute(sql.SQL("ANALYZE {}.job_events").format(ident))
        after = {
            "bytes": scalar(conn, SIZE, {"t": table}),
            "history": history_ms(q, ids, repeat),
            "partitions": len(
                conn.execute(
                    sql.SQL("SELECT * FROM {}.job_events_partitions()").format(ident)
                ).fetchall()
            ),
        }
        t0 = time.perf_counter()
        report = q.prune_report(timedelta(days=7))
        prune = {
            "seconds": round(time.perf_counter() - t0, 2),
            "deleted": report.deleted,
            "partitions_dropped": report.partitions_dropped,
            "bytes_after": scalar(conn, SIZE, {"t": table}),
        }
        return {
            "server": conn.info.server_version,
            "done": done,
            "history_rows": rows,
            "fill_seconds": round(filled, 1),
            "applied": applied,
            "upgrade_seconds": round(upgrade, 2),
            "before": before,
            "after": after,
            "prune_7d_after_upgrade": prune,
        }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("--done", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(main(args.dsn, args.done, args.repeat), indent=2))
