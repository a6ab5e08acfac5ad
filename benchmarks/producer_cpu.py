"""Where N producers' time goes, one job per transaction each (the `pgq bench --producers N`
pattern): per side, µs of wall time per job, the producer process's CPU per job (all its
threads: they share one GIL), the server's CPU per job (every process of it: backends, WAL
writer, the notifier's backend; read from /proc, so the server must run on this machine), WAL
bytes per job and the p50 latency of one enqueue. Sides: the baseline's plain INSERT and
`Queue.enqueue` under each `notify` mode, a queue per thread, and `shared-<mode>`: the threads
sharing one queue (its enqueues share rounds), alternated round by round on one server.

PYTHONPATH=. python benchmarks/producer_cpu.py [--dsn DSN] [--producers 16] [--jobs 4000]
    [--rounds 3] [--sides baseline,edge,always,off,shared-edge,shared-always]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgq_bench import (
    BASELINE_ENQUEUE,
    QUEUE_NAME,
    baseline_connection,
    load_average,
    payload,
    produce,
    server,
    setup_baseline,
    throwaway_schema,
)
from pgq_core import Queue

TRUNCATE_BASELINE = "TRUNCATE {s}.jobs"
TRUNCATE_PGQ = "TRUNCATE {s}.jobs, {s}.job_events, {s}.queue_counts"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", default="baseline,edge,always,off,shared-edge,shared-always")
    args = parser.parse_args()
    with server(args.dsn) as (dsn, _):
        run(dsn, args.producers, args.jobs, args.rounds, args.sides.split(","))


def run(dsn: str, producers: int, jobs: int, rounds: int, sides: list[str]) -> None:
    with (
        psycopg.connect(dsn, autocommit=True) as admin,
        throwaway_schema(dsn, "cpu_baseline", pgq=False) as baseline_schema,
        throwaway_schema(dsn, "cpu_pgq") as pgq_schema,
    ):
        setup_baseline(dsn, baseline_schema)
        baselines = [baseline_connection(dsn, baseline_schema) for _ in range(producers)]
        queues = [Queue.connect(dsn, pgq_schema) for _ in range(producers)]
        shared = Queue.connect(dsn, pgq_schema)
        postmaster = _parent(admin.info.backend_pid)

        def baseline_one(conn: psycopg.Connection[Any], n: int) -> None:
            conn.execute(BASELINE_ENQUEUE, {"queue": QUEUE_NAME, "payload": Jsonb(payload(0, n))})

        def pgq_one(q: Queue, n: int) -> None:
            q.enqueue(QUEUE_NAME, payload(0, n))

        per: dict[str, list[tuple[float, ...]]] = {s: [] for s in sides}
        load = load_average()
        for _ in range(rounds):
            for side in sides:
                on_baseline = side == "baseline"
                schema = sql.Identifier(baseline_schema if on_baseline else pgq_schema)
                admin.execute(
                    sql.SQL(TRUNCATE_BASELINE if on_baseline else TRUNCATE_PGQ).format(s=schema)
                )
                admin.execute(sql.SQL("VACUUM {}.jobs").format(schema))
                if not on_baseline:
                    queues[0].set_notify(side.removeprefix("shared-"))
                conns: list[Any] = (
                    baselines
                    if on_baseline
                    else [shared] * producers
                    if side.startswith("shared-")
                    else queues
                )
                one: Callable[[Any, int], None] = baseline_one if on_baseline else pgq_one
                wal = _lsn(admin)
                cpu, python = _server_cpu(postmaster), time.process_time()
                seconds, latencies = produce(conns, one, jobs)
                python = time.process_time() - python
                cpu = _server_cpu(postmaster) - cpu
                wal = _lsn(admin) - wal
                p50 = statistics.median(latencies) * 1000
                per[side].append((seconds, python, cpu, wal, p50))
        for c in baselines:
            c.close()
        for q in queues:
            q.close()
        shared.close()
    print(
        f"{producers} producers, {jobs} jobs per side per round, {rounds} rounds (medians);"
        f" load {load} -> {load_average()}"
    )
    print(
        f"{'side':14} {'wall us/job':>11} {'python us/job':>13} {'server us/job':>13}"
        f" {'WAL B/job':>9} {'p50 ms':>7}"
    )
    for side, runs in per.items():
        wall, python, cpu, wal_bytes, p50 = (
            statistics.median(r[i] for r in runs) for i in range(5)
        )
        us = 1e6 / jobs
        print(
            f"{side:14} {wall * us:11.0f} {python * us:13.0f} {cpu * us:13.0f}"
            f" {wal_bytes / jobs:9.0f} {p50:7.2f}"
        )


def _parent(pid: int) -> int:
    """The parent of process `pid` (a backend's: the postmaster)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _server_cpu(postmaster: int) -> float:
    """CPU seconds so far of the server: the postmaster and every process it started (from
    /proc/PID/schedstat, in ns: /proc/PID/stat's clock ticks would lose up to 10 ms a
    process)."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                pid = int(entry)
                if pid == postmaster or _parent(pid) == postmaster:
                    with open(f"/proc/{pid}/schedstat") as f:
                        total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
    return total / 1e9


def _lsn(conn: psycopg.Connection[Any]) -> int:
    """The server's WAL position, in bytes."""
    row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


if __name__ == "__main__":
    main()
