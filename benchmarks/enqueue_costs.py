"""What one enqueue costs, on one connection: µs of Python (this thread's CPU), µs of the
server (the backend's CPU, from /proc), µs of wall time and WAL bytes, per job, for the baseline's
plain INSERT and pgq's `Queue.enqueue` under each `notify` mode, alternated round by round.

PYTHONPATH=. python benchmarks/enqueue_costs.py [--dsn DSN] [--jobs N] [--rounds R]
    [--batch B]

With --batch B each side enqueues B jobs per call instead (the baseline's batch INSERT, pgq's
`Queue.enqueue_many`, and its COPY path `Queue.enqueue_copy`). Without --dsn on a fresh
embedded server (the backend's CPU is read from /proc only when the server runs on this
machine). Each figure is the median over the rounds; the machine's CPU steal over the whole
run is printed with them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgq_bench import (
    BASELINE_ENQUEUE,
    BASELINE_ENQUEUE_BATCH,
    QUEUE_NAME,
    baseline_connection,
    cpu_ticks,
    load_average,
    payload,
    process_cpu,
    server,
    setup_baseline,
    steal_percent,
    throwaway_schema,
)
from pgq_core import JobSpec, Queue

WAL = "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"
PID = "SELECT pg_backend_pid()"


def measure(
    admin: psycopg.Connection[Any],
    conn: psycopg.Connection[Any],
    call: Callable[[int], None],
    calls: int,
    jobs_per_call: int,
) -> dict[str, float]:
    pid = int(conn.execute(PID).fetchone()[0])  # type: ignore[index]
    for n in range(20):  # warm: prepared statements, caches
        call(n)
    wal0 = int(admin.execute(WAL).fetchone()[0])  # type: ignore[index]
    srv0, py0, t0 = process_cpu(pid), time.thread_time(), time.perf_counter()
    for n in range(calls):
        call(n)
    wall, py, srv = time.perf_counter() - t0, time.thread_time() - py0, process_cpu(pid) - srv0
    wal = int(admin.execute(WAL).fetchone()[0]) - wal0  # type: ignore[index]
    jobs = calls * jobs_per_call
    return {
        "wall_us": wall * 1e6 / jobs,
        "python_us": py * 1e6 / jobs,
        "server_us": srv * 1e6 / jobs,
        "wal_bytes": wal / jobs,
        "jobs_per_s": jobs / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--payload-bytes", type=int, default=0)
    parser.add_argument("--sides", default="")
    args = parser.parse_args()
    with server(args.dsn) as (dsn, _):
        run(dsn, args)


def run(dsn: str, args: argparse.Namespace) -> None:
    batch = args.batch
    per_call = batch or 1
    calls = max(1, args.jobs // per_call)
    results: dict[str, list[dict[str, float]]] = {}
    with (
        psycopg.connect(dsn, autocommit=True) as admin,
        throwaway_schema(dsn, "cost_baseline", pgq=False) as baseline_schema,
        throwaway_schema(dsn, "cost_pgq") as pgq_schema,
    ):
        setup_baseline(dsn, baseline_schema)
        baseline = baseline_connection(dsn, baseline_schema)
        q = Queue(psycopg.connect(dsn, autocommit=True), pgq_schema, owns=True)
        body = [payload(args.payload_bytes, n) for n in range(per_call)]

        def baseline_one(n: int) -> None:
            baseline.execute(BASELINE_ENQUEUE, {"queue": QUEUE_NAME, "payload": Jsonb(body[0])})

        def baseline_many(n: int) -> None:
            baseline.execute(
                BASELINE_ENQUEUE_BATCH, {"queue": QUEUE_NAME, "payloads": [Jsonb(p) for p in body]}
            )

        def pgq_one(n: int) -> None:
            q.enqueue(QUEUE_NAME, body[0])

        def pgq_many(n: int) -> None:
            q.enqueue_many([JobSpec(QUEUE_NAME, p) for p in body])

        def pgq_copy(n: int) -> None:
            q.enqueue_copy([JobSpec(QUEUE_NAME, p) for p in body])

        if batch:
            sides: dict[str, tuple[str | None, Callable[[int], None], psycopg.Connection[Any]]] = {
                "baseline_batch": (None, baseline_many, baseline),
                "pgq_many_edge": ("edge", pgq_many, q.conn),
                "pgq_copy_edge": ("edge", pgq_copy, q.conn),
            }
        else:
            sides = {
                "baseline": (None, baseline_one, baseline),
                "pgq_edge": ("edge", pgq_one, q.conn),
                "pgq_always": ("always", pgq_one, q.conn),
                "pgq_off": ("off", pgq_one, q.conn),
            }
        if args.sides:
            sides = {k: v for k, v in sides.items() if k in args.sides.split(",")}
        ticks = cpu_ticks()
        load = load_average()
        for _ in range(args.rounds):
            for name, (mode, call, conn) in sides.items():
                for schema in (baseline_schema, pgq_schema):
                    tables = "jobs" if schema == baseline_schema else "jobs, {s}.job_events"
                    admin.execute(
                        sql.SQL("TRUNCATE {s}." + tables).format(s=sql.Identifier(schema))
                    )
                if mode is not None:
                    q.set_notify(mode)
                results.setdefault(name, []).append(measure(admin, conn, call, calls, per_call))
        baseline.close()
        q.close()
    print(
        f"{args.jobs} jobs per side per round, {per_call} per call, {args.rounds} rounds "
        f"(medians); load {load} -> {load_average()}, steal {steal_percent(ticks, cpu_ticks())}%"
    )
    print(
        f"{'side':16} {'jobs/s':>9} {'wall us':>8} {'python us':>10} {'server us':>10} {'WAL B':>7}"
    )
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(
            f"{name:16} {med['jobs_per_s']:9,.0f} {med['wall_us']:8.1f} {med['python_us']:10.1f} "
            f"{med['server_us']:10.1f} {med['wal_bytes']:7.0f}"
        )


if __name__ == "__main__":
    main()
