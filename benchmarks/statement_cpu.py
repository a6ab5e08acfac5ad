"""The server's CPU per one-job enqueue statement, sides interleaved in short blocks so a
crowded machine hits each alike: the baseline's plain INSERT, and pgq's `Queue.enqueue` under
`notify off` (its one statement, no trigger), each on a connection of its own with
`synchronous_commit` off (no WAL flush: the statement's own work). Per side, the median and
the least µs of the backend's CPU per statement over the blocks (read from /proc in clock
ticks: make blocks long enough that a tick is small beside them).

PYTHONPATH=. python benchmarks/statement_cpu.py [--dsn DSN] [--calls 3000] [--blocks 9]

Without --dsn on a fresh embedded server; the backend's CPU is read only when the server runs
on this machine.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgq_bench import (
    BASELINE_ENQUEUE,
    QUEUE_NAME,
    baseline_connection,
    load_average,
    payload,
    process_cpu,
    server,
    setup_baseline,
    throwaway_schema,
)
from pgq_core import Queue

PID = "SELECT pg_backend_pid()"
NO_FLUSH = "SET synchronous_commit = off"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--calls", type=int, default=3000, help="statements per block")
    parser.add_argument("--blocks", type=int, default=9)
    args = parser.parse_args()
    with server(args.dsn) as (dsn, _):
        run(dsn, args.calls, args.blocks)


def run(dsn: str, calls: int, blocks: int) -> None:
    with (
        throwaway_schema(dsn, "cpu_baseline", pgq=False) as baseline_schema,
        throwaway_schema(dsn, "cpu_pgq") as pgq_schema,
    ):
        setup_baseline(dsn, baseline_schema)
        baseline = baseline_connection(dsn, baseline_schema)
        q = Queue(psycopg.connect(dsn, autocommit=True), pgq_schema, owns=True)
        q.set_notify("off")
        body = payload(0, 1)

        def baseline_one() -> None:
            baseline.execute(BASELINE_ENQUEUE, {"queue": QUEUE_NAME, "payload": Jsonb(body)})

        def pgq_one() -> None:
            q.enqueue(QUEUE_NAME, body)

        sides: dict[str, tuple[Callable[[], None], psycopg.Connection[Any]]] = {
            "baseline INSERT": (baseline_one, baseline),
            "pgq enqueue (off)": (pgq_one, q.conn),
        }
        pids = {}
        for name, (call, conn) in sides.items():
            conn.execute(NO_FLUSH)
            row = conn.execute(PID).fetchone()
            assert row is not None
            pids[name] = int(row[0])
            for _ in range(50):  # prepared statements, caches
                call()
        load = load_average()
        per: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(blocks):
            for name, (call, _conn) in sides.items():
                start = process_cpu(pids[name])
                for _ in range(calls):
                    call()
                per[name].append((process_cpu(pids[name]) - start) * 1e6 / calls)
        baseline.close()
        q.close()
    print(f"{blocks} blocks of {calls} per side, interleaved; load {load} -> {load_average()}")
    print(f"{'side':20} {'median us':>10} {'least us':>9}")
    for name, values in per.items():
        print(f"{name:20} {statistics.median(values):10.1f} {min(values):9.1f}")


if __name__ == "__main__":
    main()
