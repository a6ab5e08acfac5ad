"""Schedules at scale: how late each slot is, how many go missing, and what the schedulers cost.

python benchmarks/schedules_at_scale.py DSN [--schedules 2000] [--cron '*/5 * * * * *']
    [--workers 3] [--seconds 60]

Makes a throwaway schema with SCHEDULES schedules of CRON, starts WORKERS real `pgq worker`
processes (no-op handler) for SECONDS, then prints for the slots due in the window: how many
were enqueued of how many expected, the lateness of each at p50, p99 and max (ready: when its
job could first be claimed, the later of its queued_at and run_at, less its slot; a slot
enqueued ahead is ready at its slot; claimed: when a worker took it, less its slot), how far
ahead of its slot each was inserted, the CPU each worker used (user + system, from /proc) per
second of wall time, the lines the workers logged at INFO and WARNING, and the load average
(the machine may be shared: compare figures of one run, or runs at the same load).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from pgq_bench import process_cpu, throwaway_schema
from pgq_core.cron import next_slot


def main(dsn: str, schedules: int, cron: str, workers: int, seconds: float) -> None:
    with throwaway_schema(dsn, "bench_sched") as schema, psycopg.connect(
        dsn, autocommit=True
    ) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.schedules (name, queue, cron, payload, max_attempts)"
                " SELECT 's' || i, 'sched', %s, '{{}}', 1 FROM generate_series(1, %s) i"
            ).format(sql.Identifier(schema)),
            [cron, schedules],
        )
        argv = [
            sys.executable, "-m", "pgq_cli", "--dsn", dsn, "--schema", schema, "worker",
            "sched", "--handler", "pgq_bench.handlers:noop_sync",
        ]
        procs = [
            subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(workers)
        ]
        began = datetime.now(UTC)
        time.sleep(seconds)
        ended = datetime.now(UTC)
        cpu = [process_cpu(p.pid) for p in procs]
        logs = []
        for p in procs:
            p.send_signal(signal.SIGTERM)
            logs.append(p.communicate(timeout=60)[1])
        rows = conn.execute(
            sql.SQL(
                "SELECT unique_key, extract(epoch FROM GREATEST(queued_at, run_at)),"
                " extract(epoch FROM queued_at), extract(epoch FROM claimed_at)"
                " FROM {}.jobs WHERE queue = 'sched'"
            ).format(sql.Identifier(schema))
        ).fetchall()
    late, claimed_late, ahead = [], [], []
    for key, ready, queued, claimed in rows:
        slot = datetime.fromisoformat(str(key).split(":", 2)[2])
        if began + timedelta(seconds=3) <= slot <= ended - timedelta(seconds=3):
            late.append(float(ready) - slot.timestamp())
            ahead.append(slot.timestamp() - float(queued))
            if claimed is not None:
                claimed_late.append(float(claimed) - slot.timestamp())
    expected_slots = 0
    at = next_slot(cron, began + timedelta(seconds=3) - timedelta(microseconds=1))
    while at is not None and at <= ended - timedelta(seconds=3):
        expected_slots += 1
        at = next_slot(cron, at)
    for figures in (late, claimed_late, ahead):
        figures.sort()

    def pct(p: float, figures: list[float] | None = None) -> float:
        figures = late if figures is None else figures
        return figures[min(len(figures) - 1, int(p * len(figures)))] if figures else float("nan")

    text = "".join(logs)
    print(f"schedules {schedules} of {cron!r}, {workers} workers, {seconds:g} s")
    print(f"slots in the window: {len(late)} enqueued of {expected_slots * schedules} expected")
    print(f"lateness s: p50 {pct(0.5):.3f}  p99 {pct(0.99):.3f}  max {late[-1] if late else 0:.3f}")
    print(
        f"claimed after slot s: p50 {pct(0.5, claimed_late):.3f}  "
        f"p99 {pct(0.99, claimed_late):.3f}  ({len(claimed_late)} claimed)"
    )
    print(
        f"inserted ahead of slot s: p50 {pct(0.5, ahead):.3f}  min {pct(0.0, ahead):.3f}  "
        f"max {pct(1.0, ahead):.3f}"
    )
    print("CPU per worker (cores): " + ", ".join(f"{c / seconds:.3f}" for c in cpu))
    print(f"lines: INFO {text.count(' INFO ')}, WARNING {text.count(' WARNING ')}")
    warnings = [line for line in text.splitlines() if " WARNING " in line]
    for line in warnings[:3]:
        print("  " + line[:160])
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("--schedules", type=int, default=2000)
    parser.add_argument("--cron", default="*/5 * * * * *")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    main(args.dsn, args.schedules, args.cron, args.workers, args.seconds)
