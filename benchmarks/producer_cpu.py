"""Where N producers' time goes, one job per transaction each (the `pgq bench --producers N`
pattern): per side, µs of wall time per job, the producer process's CPU per job (all its
threads: they share one GIL), the N backends' CPU per job (read from /proc, so the server must
run on this machine) and the p50 latency of one enqueue. Sides: the baseline's plain INSERT and
`Queue.enqueue` under each `notify` mode, alternated round by round on one server.

PYTHONPATH=. python benchmarks/producer_cpu.py [--dsn DSN] [--producers 16] [--jobs 4000]
    [--rounds 3] [--sides baseline,edge,always,off]
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
    QUEUE_NAME,
    baseline_connection,
    load_average,
    payload,
    process_cpu,
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
    parser.add_argument("--sides", default="baseline,edge,always,off")
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

        def baseline_one(conn: psycopg.Connection[Any], n: int) -> None:
            conn.execute(BASELINE_ENQUEUE, {"queue": QUEUE_NAME, "payload": Jsonb(payload(0, n))})

        def pgq_one(q: Queue, n: int) -> None:
            q.enqueue(QUEUE_NAME, payload(0, n))

        per: dict[str, list[tuple[float, float, float, float]]] = {s: [] for s in sides}
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
                    queues[0].set_notify(side)
                conns: list[Any] = baselines if on_baseline else queues
                one: Callable[[Any, int], None] = baseline_one if on_baseline else pgq_one
                pids = (
                    [c.info.backend_pid for c in baselines]
                    if on_baseline
                    else [q.conn.info.backend_pid for q in queues]
                )
                backends, python = sum(map(process_cpu, pids)), time.process_time()
                seconds, latencies = produce(conns, one, jobs)
                python = time.process_time() - python
                backends = sum(map(process_cpu, pids)) - backends
                per[side].append((seconds, python, backends, statistics.median(latencies) * 1000))
        for c in baselines:
            c.close()
        for q in queues:
            q.close()
    print(
        f"{producers} producers, {jobs} jobs per side per round, {rounds} rounds (medians);"
        f" load {load} -> {load_average()}"
    )
    print(
        f"{'side':8} {'wall us/job':>11} {'python us/job':>13} {'backends us/job':>15}"
        f" {'p50 ms':>7}"
    )
    for side, runs in per.items():
        wall, python, backends, p50 = (statistics.median(r[i] for r in runs) for i in range(4))
        us = 1e6 / jobs
        print(f"{side:8} {wall * us:11.0f} {python * us:13.0f} {backends * us:15.0f} {p50:7.2f}")


if __name__ == "__main__":
    main()
