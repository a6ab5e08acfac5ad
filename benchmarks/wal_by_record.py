"""Where a drain's WAL goes: per relation and record type, per job (PostgreSQL 16+).

python benchmarks/wal_by_record.py [--jobs N] [--side pgq|baseline|both] C [C ...]

On a fresh embedded server (the bench's), for each C: the baseline's drain (C threads, LIMIT 10)
and one `pgq worker --concurrency C --burst` process with the sync no-op handler, as
`pgq bench --same-resources` runs them; the WAL between the LSNs before and after each drain
is read back with pg_walinspect's pg_get_wal_block_info. A record is counted once, under the
relation of its first block; full-page images under every block that carries one. Run from
the repository root with PYTHONPATH=. (the worker imports pgq_bench.handlers).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
from typing import Any

import psycopg

from pgq_bench import (
    SameResourcesOptions,
    drain_baseline,
    fill_baseline,
    fill_pgq,
    server,
    throwaway_schema,
    worker_command,
)

BY_BLOCK = """
SELECT coalesce(c.relname, 'filenode ' || b.relfilenode) AS rel, b.resource_manager AS rm,
       replace(b.record_type, '+INIT', '') AS rt,
       count(*) FILTER (WHERE b.block_id = 0) AS records,
       coalesce(sum(b.record_length) FILTER (WHERE b.block_id = 0), 0) AS bytes,
       coalesce(sum(b.block_fpi_length), 0) AS fpi_bytes
  FROM pg_get_wal_block_info(%(start)s::pg_lsn, %(end)s::pg_lsn, false) b
  LEFT JOIN pg_class c ON c.oid = pg_filenode_relation(
       CASE WHEN b.reltablespace = 1663 THEN 0 ELSE b.reltablespace END, b.relfilenode)
 GROUP BY 1, 2, 3"""
WITHOUT_BLOCK = """
SELECT '-' AS rel, resource_manager AS rm, record_type AS rt, count(*) AS records,
       sum(record_length) AS bytes, 0 AS fpi_bytes
  FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
 WHERE block_ref IS NULL
 GROUP BY 1, 2, 3"""
LSN = "SELECT pg_current_wal_lsn()::text"
SPAN = "SELECT %(end)s::pg_lsn - %(start)s::pg_lsn"


def lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(LSN).fetchone()
    assert row is not None
    return str(row[0])


def breakdown(conn: psycopg.Connection[Any], start: str, end: str, jobs: int) -> None:
    span = {"start": start, "end": end}
    total = conn.execute(SPAN, span).fetchone()
    assert total is not None
    print(f"  WAL per job: {float(total[0]) / jobs:,.0f} bytes")
    rows: dict[tuple[str, str, str], list[float]] = {}
    for query in (BY_BLOCK, WITHOUT_BLOCK):
        for rel, rm, rt, records, size, fpi in conn.execute(query, span).fetchall():
            key = (re.sub(r"_p\d{8}", "_pDAY", rel), rm, rt)
            acc = rows.setdefault(key, [0.0, 0.0, 0.0])
            acc[0] += records / jobs
            acc[1] += float(size) / jobs
            acc[2] += float(fpi) / jobs
    for (rel, rm, rt), (records, size, fpi) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        if size >= 1.0:
            print(
                f"  {rel:<32} {rm:<8} {rt:<16} {records:5.2f} records {size:7.1f} B"
                f"  (full pages {fpi:.1f} B)"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("levels", nargs="+", type=int)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--side", choices=["pgq", "baseline", "both"], default="both")
    args = parser.parse_args()
    opts = SameResourcesOptions(jobs=args.jobs)
    with server(None) as (dsn, _), psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        for c in args.levels:
            if args.side in ("baseline", "both"):
                with throwaway_schema(dsn, "wal_baseline", pgq=False) as schema:
                    fill_baseline(dsn, schema, opts)
                    start = lsn(conn)
                    drain_baseline(dsn, schema, c, opts)
                    print(f"baseline, C={c}")
                    breakdown(conn, start, lsn(conn), args.jobs)
            if args.side in ("pgq", "both"):
                with throwaway_schema(dsn, "wal_pgq") as schema:
                    fill_pgq(dsn, schema, opts)
                    start = lsn(conn)
                    subprocess.run(
                        worker_command(schema, c, "sync"),
                        env={**os.environ, "PGQ_DSN": dsn},
                        check=True,
                        capture_output=True,
                        timeout=600,
                    )
                    print(f"pgq, C={c}")
                    breakdown(conn, start, lsn(conn), args.jobs)


if __name__ == "__main__":
    main()
