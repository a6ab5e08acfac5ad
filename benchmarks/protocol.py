"""The protocol's ceiling, without the worker runtime: N processes loop over the raw statements.

`baseline`: the baseline's claim (LIMIT 10) and one fenced complete UPDATE per job, as written
(`pgq_bench/baseline.sql`), on pgq's table.
`pgq:B`: pgq's `claim`, then `complete_and_claim` (settle the batch, claim B more) per round
trip, with fences checked and history rows written, exactly as the worker does.

    .venv/bin/python benchmarks/protocol.py baseline pgq:10 pgq:50 [--jobs 20000] [--procs 4]

Runs on the embedded server under PGQ_HOME (or PGQ_DSN), in a throwaway schema it drops.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from pgq_bench import BASELINE_CLAIM, BASELINE_COMPLETE, BASELINE_LIMIT, QUEUE_NAME
from pgq_core import JobSpec, Queue, embedded, migrate, ops

SCHEMA = "pgq_protocol_bench"
LEASE = timedelta(seconds=30)
def loop(dsn: str, side: str, batch: int, out: Any) -> None:
    done = 0
    with Queue.connect(dsn, SCHEMA) as q:
        if side == "baseline":
            # The baseline's statements are unqualified: reach pgq's table through search_path.
            q.conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(SCHEMA)))
            claim = {"queue": QUEUE_NAME, "limit": BASELINE_LIMIT}
            while rows := q.conn.execute(BASELINE_CLAIM, claim).fetchall():
                for job_id, _payload, fence in rows:
                    complete = {"id": job_id, "fence": fence}
                    done += q.conn.execute(BASELINE_COMPLETE, complete).rowcount
        else:
            jobs = q.claim("bench", batch, LEASE, f"bench-{os.getpid()}")
            while jobs:
                held = [(j.id, j.fence) for j in jobs]
                settled, jobs = q.run(
                    ops.complete_and_claim(held, "bench", batch, LEASE, f"bench-{os.getpid()}")
                )
                done += len(settled.applied)
    out.put(done)


def run(dsn: str, side: str, jobs: int, procs: int) -> float:
    name, _, size = side.partition(":")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        migrate(conn, SCHEMA)
        with Queue(conn, SCHEMA) as q:
            q.enqueue_many(JobSpec("bench", {"n": i}) for i in range(jobs))
        conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(SCHEMA)))
    out: Any = mp.Queue()
    workers = [
        mp.Process(target=loop, args=(dsn, name, int(size or 10), out)) for _ in range(procs)
    ]
    began = time.perf_counter()
    for w in workers:
        w.start()
    done = sum(out.get() for _ in workers)
    seconds = time.perf_counter() - began
    for w in workers:
        w.join()
    assert done == jobs, f"{side}: {done} of {jobs} settled"
    return jobs / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sides", nargs="+", help="baseline, pgq:10, pgq:50, ...")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--procs", type=int, default=4)
    args = parser.parse_args()
    dsn = os.environ.get("PGQ_DSN") or embedded.start()
    try:
        for side in args.sides:
            rate = run(dsn, side, args.jobs, args.procs)
            print(f"{side:>8} x{args.procs}: {rate:>8,.0f} jobs/s")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))


if __name__ == "__main__":
    main()
