"""How heartbeats change the jobs table: the share of HOT updates, and table and index growth.

python benchmarks/hot_heartbeats.py DSN [--before-version-6]

Fills a throwaway schema with 2,000 jobs (200-byte payloads), claims 200 and extends their
leases 100 times (20,000 heartbeat updates), then prints how many were HOT and how the table
and its indexes grew. `--before-version-6` puts back what version 6 changed (the baseline's
jobs_lease_idx on lease_until, fillfactor 100): the figures before the change.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from pgq_bench import throwaway_schema
from pgq_core import JobSpec, Queue, ops

ROUNDS = 100
RUNNING = 200


def stats(conn: psycopg.Connection[Any], schema: str) -> tuple[int, int, int, int]:
    """(updates, HOT updates, table bytes, index bytes) of `schema.jobs`."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(0.6)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT n_tup_upd, n_tup_hot_upd, pg_relation_size(relid), pg_indexes_size(relid)"
        " FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'jobs'",
        [schema],
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def main(dsn: str, before: bool) -> None:
    with throwaway_schema(dsn, "bench_hot") as schema, Queue.connect(dsn, schema) as q:
        if before:
            q.conn.execute(sql.SQL("DROP INDEX {}.jobs_running_idx").format(sql.Identifier(schema)))
            q.conn.execute(
                sql.SQL(
                    "CREATE INDEX jobs_lease_idx ON {}.jobs (lease_until) WHERE status = 'running'"
                ).format(sql.Identifier(schema))
            )
            q.conn.execute(
                sql.SQL("ALTER TABLE {}.jobs RESET (fillfactor)").format(sql.Identifier(schema))
            )
        q.enqueue_many([JobSpec("q", {"pad": "x" * 200}) for _ in range(2000)])
        held = [(j.id, j.fence) for j in q.claim("q", RUNNING, timedelta(seconds=60), "w")]
        u0, h0, t0, i0 = stats(q.conn, schema)
        for _ in range(ROUNDS):
            q.run(ops.extend_leases(held))
        u1, h1, t1, i1 = stats(q.conn, schema)
        print(
            f"{'before' if before else 'after'} version 6: {u1 - u0} heartbeat updates, "
            f"{h1 - h0} HOT ({(h1 - h0) / (u1 - u0):.0%}); table {t0 // 1024} -> {t1 // 1024} kB, "
            f"indexes {i0 // 1024} -> {i1 // 1024} kB"
        )


if __name__ == "__main__":
    main(sys.argv[1], "--before-version-6" in sys.argv[2:])
