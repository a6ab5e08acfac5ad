"""The server's side of one COPY of many jobs into pgq's jobs table, as migrated (no BEFORE
ROW INSERT trigger since schema 38), against the same table with two BEFORE ROW INSERT
triggers as jobs had before 38 (same WHEN clauses, never firing here: their presence alone
makes COPY insert row by row). Sides alternated, each COPY in a transaction of its own on one
connection: wall seconds (the commit's WAL flush included), the backend's CPU seconds, WAL
bytes; medians over the rounds.

PYTHONPATH=. python benchmarks/copy_triggers.py [--dsn DSN] [--jobs 100000] [--rounds 7]

Without --dsn on a fresh embedded server; the backend's CPU is read only when the server runs
on this machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import psycopg
from psycopg import sql

from pgq_bench import QUEUE_NAME, load_average, payload, process_cpu, server, throwaway_schema

COLUMNS = "queue, payload, run_at, max_attempts, priority, backoff_base, backoff_cap, trace"
BEFORE_TRIGGERS = """
CREATE FUNCTION {s}.bench_row_unchanged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN NEW; END $$;
CREATE TRIGGER bench_error_group_before BEFORE INSERT ON {s}.jobs
  FOR EACH ROW WHEN (NEW.last_error IS NOT NULL) EXECUTE FUNCTION {s}.bench_row_unchanged();
CREATE TRIGGER bench_check_before BEFORE INSERT ON {s}.jobs
  FOR EACH ROW WHEN (NEW.status NOT IN ('ready', 'waiting'))
  EXECUTE FUNCTION {s}.bench_row_unchanged();
"""
TRUNCATE = "TRUNCATE {s}.jobs, {s}.job_events, {s}.queue_counts"
WAL = "SELECT pg_catalog.pg_current_wal_lsn()"
WAL_SINCE = "SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), %s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with server(args.dsn) as (dsn, _):
        print(json.dumps(run(dsn, args.jobs, args.rounds), indent=2))


def run(dsn: str, jobs: int, rounds: int) -> dict[str, object]:
    due = "2026-01-01 00:00:00+00\t5\t0\t\\N\t\\N\t\\N\n"
    text = "".join(f"{QUEUE_NAME}\t{json.dumps(payload(100, n))}\t{due}" for n in range(jobs))
    data = text.encode()
    load = load_average()
    with (
        throwaway_schema(dsn, "copy_now") as now,
        throwaway_schema(dsn, "copy_before") as before,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        conn.execute(sql.SQL(BEFORE_TRIGGERS).format(s=sql.Identifier(before)))
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pid = int(row[0])
        sides = {"schema 38 (no BEFORE ROW trigger)": now, "two BEFORE ROW triggers": before}
        per: dict[str, list[tuple[float, float, int]]] = {name: [] for name in sides}
        for _ in range(rounds):
            for name, schema in sides.items():
                ident = sql.Identifier(schema)
                conn.execute(sql.SQL(TRUNCATE).format(s=ident))
                conn.execute("CHECKPOINT")
                start = conn.execute(WAL).fetchone()
                cpu, t0 = process_cpu(pid), time.perf_counter()
                copy_in = sql.SQL("COPY {}.jobs ({}) FROM STDIN").format(ident, sql.SQL(COLUMNS))
                with conn.transaction(), conn.cursor() as cur, cur.copy(copy_in) as copy:
                    copy.write(data)
                seconds, cpu = time.perf_counter() - t0, process_cpu(pid) - cpu
                wal = conn.execute(WAL_SINCE, [start[0] if start else None]).fetchone()
                per[name].append((seconds, cpu, int(wal[0]) if wal else 0))
    return {
        "jobs": jobs,
        "rounds": rounds,
        "load": [load, load_average()],
        "sides": {
            name: {
                "seconds": statistics.median(r[0] for r in runs),
                "backend_cpu_seconds": statistics.median(r[1] for r in runs),
                "wal_bytes": statistics.median(r[2] for r in runs),
                "jobs_per_second": jobs / statistics.median(r[0] for r in runs),
            }
            for name, runs in per.items()
        },
    }


if __name__ == "__main__":
    main()
