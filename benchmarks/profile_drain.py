"""Where a drain's server time goes: one drain per side with pg_stat_statements and pg_stat_wal.

python benchmarks/profile_drain.py DSN [JOBS]

DSN must reach a superuser on a throwaway server started with
`-c shared_preload_libraries=pg_stat_statements` (PostgreSQL 15+). The script turns on
`track_wal_io_timing` (ALTER SYSTEM, reload) and leaves it on: use a throwaway cluster.
Per side it prints the drain rate, each statement's execution time per job, and WAL records,
writes, fsyncs and fsync time per job. The statistics are server-wide; run on a quiet server.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import sys

import psycopg

import pgq_bench as bench
from pgq_bench import Meter, throwaway_schema

TOP_STATEMENTS = """
SELECT calls, total_exec_time, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 80)
  FROM pg_stat_statements WHERE calls > 10 ORDER BY total_exec_time DESC LIMIT 4
"""
WAL = "SELECT wal_records, wal_bytes, wal_write, wal_sync, wal_sync_time FROM pg_stat_wal"
#: (label, bench side kind, claim size)
SIDES = (("baseline", "baseline", 10), ("pgq claim 10", "pgq", 10), ("pgq claim 50", "pgq", 50))
WORKERS = 4


def main(dsn: str, jobs: int) -> None:
    ctx = mp.get_context("spawn")
    opts = bench.Options(jobs, WORKERS, 10, 50, 100, 1, 1)
    with psycopg.connect(dsn, autocommit=True) as conn, contextlib.ExitStack() as stack:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("ALTER SYSTEM SET track_wal_io_timing = on")
        conn.execute("SELECT pg_reload_conf()")
        meter = Meter(conn)
        for label, kind, claim in SIDES:
            schema = stack.enter_context(throwaway_schema(dsn, "bench_prof", pgq=kind == "pgq"))
            if kind == "baseline":
                bench.setup_baseline(dsn, schema)
            bench.refill(conn, dsn, kind, schema, opts)
            conn.execute("SELECT pg_stat_statements_reset()")
            conn.execute("SELECT pg_stat_reset_shared('wal')")
            phase, lost = bench.drain(
                meter, ctx, schema, jobs, WORKERS, *bench.drain_args(kind, dsn, schema, claim)
            )
            wal = conn.execute(WAL).fetchone()
            top = conn.execute(TOP_STATEMENTS).fetchall()
            assert wal is not None
            total_ms = sum(float(r[1]) for r in top)
            print(
                f"== {label}: {phase.rate:,.0f} jobs/s ({phase.seconds:.2f} s, lost {lost}); "
                f"statement execution {total_ms * 1000 / jobs:.0f} µs/job"
            )
            for calls, ms, _rows, text in top:
                print(
                    f"   {calls:>6} calls  {float(ms) / calls:7.3f} ms/call  "
                    f"{float(ms) * 1000 / jobs:5.0f} µs/job  {text}"
                )
            records, wal_bytes, writes, syncs, sync_ms = wal
            print(
                f"   WAL: {records / jobs:.1f} records/job, {float(wal_bytes) / jobs:.0f} B/job, "
                f"{writes / jobs:.3f} writes/job, {syncs / jobs:.3f} fsyncs/job, "
                f"fsync time {float(sync_ms) * 1000 / jobs:.0f} µs/job"
            )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
