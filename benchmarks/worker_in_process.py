"""One worker in this process drains N no-op jobs: jobs/s, the worker's CPU per job, the
machine's busy share and its CPU steal, and the steps it took.

PYTHONPATH=. python benchmarks/worker_in_process.py [--dsn DSN] [--runs R] C sync|async N

Without --dsn on a fresh embedded server (stopped and deleted after). Each run fills a
throwaway schema with N jobs (as `pgq bench --same-resources` does), then times `Worker.run()`
in burst mode from start to exit in this process: no process start, so a change to the
worker's Python shows in its CPU per job. On a VM, read the steal column: a run that lost much
of the CPU to other guests says little.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import psycopg
from psycopg import sql

from pgq_bench import (
    SameResourcesOptions,
    busy_percent,
    cpu_ticks,
    fill_pgq,
    noop_async,
    noop_sync,
    server,
    steal_percent,
    throwaway_schema,
)
from pgq_core.worker import Worker


def run_once(dsn: str, concurrency: int, kind: str, jobs: int) -> None:
    with throwaway_schema(dsn, "bench_inproc") as schema:
        fill_pgq(dsn, schema, SameResourcesOptions(jobs=jobs))
        handler = noop_async if kind == "async" else noop_sync
        worker = Worker(dsn, ["bench"], handler, schema=schema, concurrency=concurrency, burst=True)
        ticks = cpu_ticks()
        started, cpu = time.perf_counter(), time.process_time()
        asyncio.run(worker.run())
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        after = cpu_ticks()
        with psycopg.connect(dsn, autocommit=True) as conn:
            query = sql.SQL("SELECT count(*) FROM {}.jobs WHERE status = 'done'")
            row = conn.execute(query.format(sql.Identifier(schema))).fetchone()
        done = int(row[0]) if row else 0
    print(
        f"C={concurrency} {kind}: {done / wall:,.0f} jobs/s, {done}/{jobs} done, worker CPU "
        f"{cpu * 1e6 / max(done, 1):.0f} us/job, machine busy {busy_percent(ticks, after)}%, "
        f"steal {steal_percent(ticks, after)}%, {worker.statements} statements"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("concurrency", type=int)
    parser.add_argument("handler", choices=["sync", "async"])
    parser.add_argument("jobs", type=int)
    parser.add_argument("--dsn", help="a server to use (default: a fresh embedded one)")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with server(args.dsn) as (dsn, _):
        for _ in range(args.runs):
            run_once(dsn, args.concurrency, args.handler, args.jobs)


if __name__ == "__main__":
    main()
