"""`pgq bench --producers N`: many producers, each committing one job per transaction (the
web-request pattern), pgq's `Queue.enqueue` under each `notify` mode against the seed's plain
INSERT, same threads, same run, same server.

Each producer is a thread with its own connection, connected before the clock starts; all start
together and each enqueues its share one job per transaction. A LISTENing connection consumes
notifications meanwhile (as a worker's would), counting them, and another samples
`pg_notification_queue_usage()` (the share of the server's notification queue in use). Sides
run in rounds, interleaved, so a noisy neighbour hits every side alike; each reports its median.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.table import Table

from pgq_core import Queue, listen_statement
from pgq_core.ops import NOTIFY_MODES

from .common import (
    QUEUE_NAME,
    load_average,
    machine,
    payload,
    percentile,
    server_version,
    throwaway_schema,
)
from .seed import SEED_ENQUEUE, seed_connection, setup_seed

# The bench's own bookkeeping.
QUEUE_USAGE = "SELECT pg_notification_queue_usage()"
TRUNCATE_SEED = "TRUNCATE {s}.jobs"
TRUNCATE_PGQ = "TRUNCATE {s}.jobs, {s}.job_events, {s}.queue_counts"
SAMPLE_EVERY = 0.05


@dataclass(frozen=True)
class ProducersOptions:
    producers: int
    jobs: int
    payload_bytes: int
    rounds: int


@dataclass
class Run:
    """One side's round: jobs/s, per-enqueue latency, notifications, queue usage."""

    jobs: int
    seconds: float
    p50_ms: float
    p99_ms: float
    notifications: int = 0
    max_queue_usage: float = 0.0

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate}


def _produce(
    connections: list[Any], enqueue_one: Callable[[Any, int], None], jobs: int
) -> tuple[float, list[float]]:
    """Every connection's thread enqueues its share, one job per transaction, started
    together: (seconds from the start to the last commit, each enqueue's seconds)."""
    n = len(connections)
    share = [jobs // n + (i < jobs % n) for i in range(n)]
    barrier = threading.Barrier(len(connections) + 1)
    latencies: list[list[float]] = [[] for _ in connections]
    errors: list[BaseException] = []

    def produce(i: int) -> None:
        own = latencies[i]
        try:
            barrier.wait()
            for n in range(share[i]):
                t0 = time.perf_counter()
                enqueue_one(connections[i], n)
                own.append(time.perf_counter() - t0)
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(len(connections))]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return seconds, [x for own in latencies for x in own]


class _Ears:
    """A LISTENing connection consuming notifications (counted) and a queue-usage sampler."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.count = 0
        self.max_usage = 0.0
        self._stop = threading.Event()
        self._listen = psycopg.connect(dsn, autocommit=True)
        self._listen.execute(listen_statement(schema))
        self._sample = psycopg.connect(dsn, autocommit=True)
        self._threads = [
            threading.Thread(target=self._consume, daemon=True),
            threading.Thread(target=self._usage, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _consume(self) -> None:
        while not self._stop.is_set():
            for _ in self._listen.notifies(timeout=0.1):
                self.count += 1

    def _usage(self) -> None:
        while not self._stop.is_set():
            row = self._sample.execute(QUEUE_USAGE).fetchone()
            self.max_usage = max(self.max_usage, float(row[0]) if row else 0.0)
            self._stop.wait(SAMPLE_EVERY)

    def reset(self) -> None:
        """Start counting afresh (after the consumer has read what a previous side left)."""
        time.sleep(0.3)
        self.count, self.max_usage = 0, 0.0

    def settle(self) -> tuple[int, float]:
        """Notifications received and the largest usage seen since `reset` (late ones too)."""
        time.sleep(0.5)
        return self.count, self.max_usage

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self._listen.close()
        self._sample.close()


def run_producers(
    dsn: str, embedded: bool, opts: ProducersOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """Every figure of one producers run, as plain data (see the module's docstring)."""
    sides = ["seed", *(f"pgq_{mode}" for mode in NOTIFY_MODES)]
    runs: dict[str, list[Run]] = {s: [] for s in sides}
    result: dict[str, Any] = {"params": asdict(opts), "machine": machine()}
    with (
        psycopg.connect(dsn, autocommit=True) as admin,
        throwaway_schema(dsn, "bench_seed", pgq=False) as seed_schema,
        throwaway_schema(dsn, "bench_pgq") as pgq_schema,
    ):
        result["server"] = {"version": server_version(admin), "embedded": embedded}
        setup_seed(dsn, seed_schema)
        seed_conns = [seed_connection(dsn, seed_schema) for _ in range(opts.producers)]
        queues = [Queue.connect(dsn, pgq_schema) for _ in range(opts.producers)]
        ears = _Ears(dsn, pgq_schema)

        def seed_one(conn: psycopg.Connection[Any], n: int) -> None:
            params = {"queue": QUEUE_NAME, "payload": Jsonb(payload(opts.payload_bytes, n))}
            conn.execute(SEED_ENQUEUE, params)

        def pgq_one(q: Queue, n: int) -> None:
            q.enqueue(QUEUE_NAME, payload(opts.payload_bytes, n))

        try:
            for r in range(opts.rounds):
                for side in sides:
                    schema = seed_schema if side == "seed" else pgq_schema
                    truncate = TRUNCATE_SEED if side == "seed" else TRUNCATE_PGQ
                    admin.execute(sql.SQL(truncate).format(s=sql.Identifier(schema)))
                    admin.execute(sql.SQL("VACUUM {}.jobs").format(sql.Identifier(schema)))
                    if side != "seed":
                        queues[0].set_notify(side.removeprefix("pgq_"))
                    ears.reset()
                    say(
                        f"round {r + 1}/{opts.rounds}: {side}, {opts.producers} producers, "
                        f"{opts.jobs} jobs one per transaction"
                    )
                    if side == "seed":
                        seconds, lat = _produce(seed_conns, seed_one, opts.jobs)
                    else:
                        seconds, lat = _produce(queues, pgq_one, opts.jobs)
                    heard, usage = ears.settle()
                    runs[side].append(
                        Run(
                            opts.jobs,
                            seconds,
                            percentile(lat, 50) * 1000,
                            percentile(lat, 99) * 1000,
                            heard,
                            usage,
                        )
                    )
        finally:
            ears.close()
            for c in seed_conns:
                c.close()
            for q in queues:
                q.close()
    result["load_at_end"] = load_average()
    result["rounds"] = {s: [run.to_dict() for run in rs] for s, rs in runs.items()}
    medians = {s: statistics.median(run.rate for run in rs) for s, rs in runs.items()}
    result["sides"] = {
        s: {
            "rate": medians[s],
            "ratio_to_seed": medians[s] / medians["seed"] if medians["seed"] else None,
            "p50_ms": statistics.median(run.p50_ms for run in rs),
            "p99_ms": statistics.median(run.p99_ms for run in rs),
            "notifications": statistics.median(run.notifications for run in rs),
            "max_queue_usage": max(run.max_queue_usage for run in rs),
        }
        for s, rs in runs.items()
    }
    return result


def print_producers(result: dict[str, Any], console: Console) -> None:
    params = result["params"]
    table = Table(
        title=f"{params['producers']} producers, {params['jobs']:,} jobs one per transaction, "
        f"median of {params['rounds']} round(s)"
    )
    for column in ("side", "jobs/s", "x seed", "p50 ms", "p99 ms", "notifications", "max usage"):
        table.add_column(column, justify="left" if column == "side" else "right")
    for side, s in result["sides"].items():
        ratio = s["ratio_to_seed"]
        table.add_row(
            side,
            f"{s['rate']:,.0f}",
            f"{ratio:.2f}x" if ratio is not None else "-",
            f"{s['p50_ms']:.2f}",
            f"{s['p99_ms']:.2f}",
            "-" if side == "seed" else f"{s['notifications']:,.0f}",
            "-" if side == "seed" else f"{s['max_queue_usage']:.6f}",
        )
    console.print(table)
