"""P worker processes at concurrency C drain N no-op jobs from one queue: jobs/s, worker CPU.

python benchmarks/process_drain.py DSN P C N

Each process runs `pgq_core.worker.Worker` in burst mode with an async no-op handler; the
figures are wall-clock jobs/s from start to the last exit (process start included) and the
workers' own CPU (`time.process_time`) per job. This is how the busy loop that competing
claims caused was found (4 x 10: 4,060 -> 15,671 jobs/s, 393 -> 45 µs CPU per job).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import secrets
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

from pgq_core import JobSpec, Queue, migrate
from pgq_core.worker import Worker


async def noop(job: Any) -> None:
    return None


def work(dsn: str, schema: str, concurrency: int, out: Any) -> None:
    worker = Worker(dsn, ["q"], noop, schema=schema, concurrency=concurrency, burst=True)
    cpu = time.process_time()
    asyncio.run(worker.run())
    out.put((worker.snapshot().done, time.process_time() - cpu, worker.statements))


def main(dsn: str, processes: int, concurrency: int, jobs: int) -> None:
    schema = f"bench_procs_{secrets.token_hex(3)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn, schema)
    try:
        with Queue.connect(dsn, schema) as q:
            q.enqueue_many([JobSpec("q", {}) for _ in range(jobs)])
        out: Any = mp.Queue()
        started = time.perf_counter()
        procs = [
            mp.Process(target=work, args=(dsn, schema, concurrency, out))
            for _ in range(processes)
        ]
        for p in procs:
            p.start()
        results = [out.get() for _ in procs]
        for p in procs:
            p.join()
        elapsed = time.perf_counter() - started
        done = sum(r[0] for r in results)
        cpu = sum(r[1] for r in results)
        statements = sum(r[2] for r in results)
        print(
            f"{processes} x concurrency {concurrency}: {done / elapsed:,.0f} jobs/s, "
            f"{cpu / done * 1e6:.0f} µs worker CPU per job, {done / statements:.1f} jobs per "
            f"statement, per process {[r[0] for r in results]}"
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
