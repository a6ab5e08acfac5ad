"""`pgq bench --producers N`: many producers, each committing one job per transaction (the
web-request pattern), pgq's `Queue.enqueue` under each `notify` mode against the baseline's plain
INSERT, same threads, same run, same server; then the same from N asyncio tasks sharing a pool
of N connections (`AsyncQueue.enqueue` against the baseline's INSERT), and batches: BATCH_JOBS jobs
in batches of BATCH_SIZE on one connection (the baseline's batch INSERT, `Queue.enqueue_many`,
`Queue.enqueue_copy`, PgQueuer's batch enqueue on asyncpg), `pgq enqueue --file` of them (a
process, its start counted), and 5x as many in one `enqueue_payloads` (the bulk path: COPY,
one job per payload, no JobSpec each).

Each producer is a thread with its own connection, connected before the clock starts; all start
together and each enqueues its share one job per transaction. A LISTENing connection consumes
notifications meanwhile (as a worker's would), counting them, and another samples
`pg_notification_queue_usage()` (the share of the server's notification queue in use). Sides
run in rounds, interleaved, so a noisy neighbour hits every side alike; each reports its median.

The shared sides (`pgq_shared_*`, `pgq_async_shared_*`) are the same producers, threads or
tasks, sharing one queue and its one connection, as an application keeps one per process: their
concurrent enqueues share rounds (pgq_core/rounds.py), one transaction each. The baseline keeps
its N connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.table import Table

from pgq_core import AsyncQueue, JobSpec, Queue, listen_statement
from pgq_core.ops import NOTIFY_MODES

from .baseline import BASELINE_ENQUEUE, BASELINE_ENQUEUE_BATCH, baseline_connection, setup_baseline
from .common import (
    CONNECT_TIMEOUT,
    QUEUE_NAME,
    cpu_ticks,
    load_average,
    machine,
    payload,
    percentile,
    server_version,
    steal_percent,
    throwaway_schema,
)

# The bench's own bookkeeping.
QUEUE_USAGE = "SELECT pg_notification_queue_usage()"
TRUNCATE_BASELINE = "TRUNCATE {s}.jobs"
TRUNCATE_PGQ = "TRUNCATE {s}.jobs, {s}.job_events, {s}.queue_counts"
SAMPLE_EVERY = 0.05
TRUNCATE_PEER = "TRUNCATE {s}.pgqueuer"
#: Before each batch side: dirty pages flushed, and no autovacuum worker at work (the side
#: after a 20,000-job side of another ran 5-8% slower without).
CHECKPOINT = "CHECKPOINT"
VACUUMING = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
QUIET_SECONDS = 5.0
#: The batch sides: at most BATCH_JOBS jobs per round (5x --jobs), BATCH_SIZE per call; the
#: bulk side 5x as many, in one call.
BATCH_JOBS = 20_000
BATCH_SIZE = 1_000
BULK_FACTOR = 5
#: The async sides: pgq's, under these notify modes.
ASYNC_MODES = ("edge", "always")
#: The sides where the producers share one queue (one connection), under these notify modes:
#: its concurrent enqueues share rounds (pgq_core/rounds.py).
SHARED_MODES = ("edge", "always")


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
    steal_percent: float | None = None

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate}


def produce(
    connections: list[Any], enqueue_one: Callable[[Any, int], None], jobs: int
) -> tuple[float, list[float]]:
    """Every connection's thread enqueues its share, one job per transaction, started
    together: (seconds from the start to the last commit, each enqueue's seconds)."""
    n = len(connections)
    share = [jobs // n + (i < jobs % n) for i in range(n)]
    barrier = threading.Barrier(len(connections) + 1)
    latencies: list[list[float]] = [[] for _ in connections]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        own = latencies[i]
        try:
            barrier.wait()
            for n in range(share[i]):
                t0 = time.perf_counter()
                enqueue_one(connections[i], n)
                own.append(time.perf_counter() - t0)
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(connections))]
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


def _produce_async(
    dsn: str,
    tasks: int,
    enqueue_one: Callable[[Any, int], Any],
    jobs: int,
    shared_schema: str | None = None,
) -> tuple[float, list[float]]:
    """`tasks` asyncio tasks in this thread's new event loop, sharing a pool of `tasks`
    autocommit connections (opened before the clock starts), each enqueueing its share one
    job per transaction: (seconds from the start to the last commit, each enqueue's seconds).
    With `shared_schema`, the pool is one `AsyncQueue` on that schema, its one connection
    taken by every task at once (its concurrent enqueues share rounds)."""

    async def main() -> tuple[float, list[float]]:
        conns: list[Any]
        if shared_schema is None:
            conns = [
                await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(tasks)
            ]
        else:
            conns = [await AsyncQueue.connect(dsn, shared_schema)]
        pool: asyncio.Queue[Any] = asyncio.Queue()
        for i in range(tasks):
            pool.put_nowait(conns[i % len(conns)])
        share = [jobs // tasks + (i < jobs % tasks) for i in range(tasks)]
        latencies: list[float] = []

        async def produce(count: int) -> None:
            for n in range(count):
                t0 = time.perf_counter()
                conn = await pool.get()
                try:
                    await enqueue_one(conn, n)
                finally:
                    pool.put_nowait(conn)
                latencies.append(time.perf_counter() - t0)

        try:
            t0 = time.perf_counter()
            await asyncio.gather(*(produce(n) for n in share))
            return time.perf_counter() - t0, latencies
        finally:
            for c in conns:
                await c.close()

    return asyncio.run(main())


class _Ears:
    """A LISTENing connection consuming notifications (counted) and a queue-usage sampler."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.count = 0
        self.max_usage = 0.0
        self._stop = threading.Event()
        self._listen = psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        self._listen.execute(listen_statement(schema))
        self._sample = psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
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


def _summary(runs: dict[str, list[Run]], baseline: str) -> dict[str, Any]:
    """Each side's medians over its rounds, and its rate's ratio to `baseline`'s."""
    medians = {s: statistics.median(run.rate for run in rs) for s, rs in runs.items()}
    return {
        s: {
            "rate": medians[s],
            "ratio_to_baseline": medians[s] / medians[baseline] if medians[baseline] else None,
            "p50_ms": statistics.median(run.p50_ms for run in rs),
            "p99_ms": statistics.median(run.p99_ms for run in rs),
            "notifications": statistics.median(run.notifications for run in rs),
            "max_queue_usage": max(run.max_queue_usage for run in rs),
            "steal_percent": [run.steal_percent for run in rs],
        }
        for s, rs in runs.items()
    }


def run_producers(
    dsn: str, embedded: bool, opts: ProducersOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """Every figure of one producers run, as plain data (see the module's docstring)."""
    sync_sides = [
        "baseline",
        *(f"pgq_{mode}" for mode in NOTIFY_MODES),
        *(f"pgq_shared_{mode}" for mode in SHARED_MODES),
    ]
    async_sides = [
        "baseline_async",
        *(f"pgq_async_{mode}" for mode in ASYNC_MODES),
        *(f"pgq_async_shared_{mode}" for mode in SHARED_MODES),
    ]
    sides = [*sync_sides, *async_sides]
    runs: dict[str, list[Run]] = {s: [] for s in sides}
    result: dict[str, Any] = {"params": asdict(opts), "machine": machine()}
    with (
        psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as admin,
        throwaway_schema(dsn, "bench_baseline", pgq=False) as baseline_schema,
        throwaway_schema(dsn, "bench_pgq") as pgq_schema,
    ):
        result["server"] = {"version": server_version(admin), "embedded": embedded}
        setup_baseline(dsn, baseline_schema)
        baseline_conns = [baseline_connection(dsn, baseline_schema) for _ in range(opts.producers)]
        queues = [Queue.connect(dsn, pgq_schema) for _ in range(opts.producers)]
        shared = Queue.connect(dsn, pgq_schema)  # one queue, its one connection, for every thread
        ears = _Ears(dsn, pgq_schema)

        def baseline_one(conn: psycopg.Connection[Any], n: int) -> None:
            params = {"queue": QUEUE_NAME, "payload": Jsonb(payload(opts.payload_bytes, n))}
            conn.execute(BASELINE_ENQUEUE, params)

        def pgq_one(q: Queue, n: int) -> None:
            q.enqueue(QUEUE_NAME, payload(opts.payload_bytes, n))

        async def baseline_one_async(conn: psycopg.AsyncConnection[Any], n: int) -> None:
            params = {"queue": QUEUE_NAME, "payload": Jsonb(payload(opts.payload_bytes, n))}
            await conn.execute(BASELINE_ENQUEUE, params)

        aqueues: dict[int, AsyncQueue] = {}  # one per pooled connection, as an application keeps

        async def shared_one_async(queue: AsyncQueue, n: int) -> None:
            await queue.enqueue(QUEUE_NAME, payload(opts.payload_bytes, n))

        async def pgq_one_async(conn: psycopg.AsyncConnection[Any], n: int) -> None:
            aq = aqueues.get(id(conn)) or aqueues.setdefault(id(conn), AsyncQueue(conn, pgq_schema))
            await aq.enqueue(QUEUE_NAME, payload(opts.payload_bytes, n))

        try:
            for r in range(opts.rounds):
                for side in sides:
                    on_baseline = side.startswith("baseline")
                    schema = baseline_schema if on_baseline else pgq_schema
                    truncate = TRUNCATE_BASELINE if on_baseline else TRUNCATE_PGQ
                    admin.execute(sql.SQL(truncate).format(s=sql.Identifier(schema)))
                    admin.execute(sql.SQL("VACUUM {}.jobs").format(sql.Identifier(schema)))
                    if not on_baseline:
                        queues[0].set_notify(side.rsplit("_", 1)[1])
                    ears.reset()
                    say(
                        f"round {r + 1}/{opts.rounds}: {side}, {opts.producers} producers, "
                        f"{opts.jobs} jobs one per transaction"
                    )
                    ticks = cpu_ticks()
                    if side == "baseline":
                        seconds, lat = produce(baseline_conns, baseline_one, opts.jobs)
                    elif side.startswith("pgq_shared_"):
                        seconds, lat = produce([shared] * opts.producers, pgq_one, opts.jobs)
                    elif side.startswith("pgq_async_shared_"):
                        seconds, lat = _produce_async(
                            dsn, opts.producers, shared_one_async, opts.jobs, pgq_schema
                        )
                    elif side in sync_sides:
                        seconds, lat = produce(queues, pgq_one, opts.jobs)
                    elif side == "baseline_async":
                        seconds, lat = _produce_async(
                            _path_dsn(dsn, baseline_schema),
                            opts.producers,
                            baseline_one_async,
                            opts.jobs,
                        )
                    else:
                        aqueues.clear()
                        seconds, lat = _produce_async(dsn, opts.producers, pgq_one_async, opts.jobs)
                    steal = steal_percent(ticks, cpu_ticks())
                    heard, usage = ears.settle()
                    runs[side].append(
                        Run(
                            opts.jobs,
                            seconds,
                            percentile(lat, 50) * 1000,
                            percentile(lat, 99) * 1000,
                            heard,
                            usage,
                            steal,
                        )
                    )
            queues[0].set_notify("edge")
            result["batches"] = _batches(dsn, admin, baseline_schema, queues[0], opts, say)
        finally:
            ears.close()
            for c in baseline_conns:
                c.close()
            for q in queues:
                q.close()
            shared.close()
    result["load_at_end"] = load_average()
    result["rounds"] = {s: [run.to_dict() for run in rs] for s, rs in runs.items()}
    result["sides"] = _summary({s: runs[s] for s in sync_sides}, "baseline")
    result["async_sides"] = _summary({s: runs[s] for s in async_sides}, "baseline_async")
    return result


def _path_dsn(dsn: str, schema: str) -> str:
    """`dsn` whose sessions start with `schema` on their search_path (the baseline's statements
    are unqualified)."""
    return make_conninfo(dsn, options=f"-c search_path={schema}")


def _batches(
    dsn: str,
    admin: psycopg.Connection[Any],
    baseline_schema: str,
    q: Queue,
    opts: ProducersOptions,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Up to BATCH_JOBS jobs in batches of BATCH_SIZE per side (edge notify), rounds
    alternated; `pgq enqueue --file` of them all, and the baseline's batch INSERT and
    PgQueuer's batch enqueue of the same file, each from a process of its own (`baseline_file`,
    `pgqueuer_file`); 5x as many in one `enqueue_payloads`. Jobs/s per side (median) and its
    ratio to the baseline's batch INSERT and to PgQueuer's batch enqueue (in this process, on
    an open connection), and to `baseline_file` and `pgqueuer_file` (a process each: equal
    resources for `pgq enqueue --file`)."""
    from . import pgqueuer_side

    pgq_ident = sql.Identifier(q.schema)
    batch_jobs = max(BATCH_SIZE, min(BATCH_JOBS, opts.jobs * 5))
    bodies = [payload(opts.payload_bytes, n) for n in range(batch_jobs)]
    chunks = [bodies[i : i + BATCH_SIZE] for i in range(0, batch_jobs, BATCH_SIZE)]
    baseline = baseline_connection(dsn, baseline_schema)
    rates: dict[str, list[float]] = {}
    steal: dict[str, list[float | None]] = {}
    with (
        throwaway_schema(dsn, "bench_peer", pgq=False) as peer_schema,
        tempfile.TemporaryDirectory(prefix="pgq-bench-file-") as home,
    ):
        lines = Path(home) / "jobs.jsonl"
        lines.write_text("".join(json.dumps(b) + "\n" for b in bodies))
        peer_payloads = [json.dumps(b).encode() for b in bodies]
        asyncio.run(pgqueuer_side.install_and_fill(dsn, peer_schema, []))
        env = {**os.environ, "PGQ_DSN": dsn, "PGQ_SCHEMA": q.schema}

        def baseline_batch() -> None:
            for chunk in chunks:
                baseline.execute(
                    BASELINE_ENQUEUE_BATCH,
                    {"queue": QUEUE_NAME, "payloads": [Jsonb(b) for b in chunk]},
                )

        def pgq_many() -> None:
            for chunk in chunks:
                q.enqueue_many([JobSpec(QUEUE_NAME, b) for b in chunk])

        def pgq_copy() -> None:
            for chunk in chunks:
                q.enqueue_copy([JobSpec(QUEUE_NAME, b) for b in chunk])

        def pgq_file() -> None:
            command = [sys.executable, "-m", "pgq_cli", "enqueue", QUEUE_NAME, "--file", str(lines)]
            subprocess.run(command, env=env, check=True, capture_output=True)

        def baseline_file() -> None:
            command = [sys.executable, "-m", "pgq_bench.baseline_file", str(lines), QUEUE_NAME]
            baseline_env = {
                **os.environ, "BASELINE_DSN": dsn, "BASELINE_SCHEMA": baseline_schema,
                "BASELINE_STATEMENT": BASELINE_ENQUEUE_BATCH,
            }  # fmt: skip
            subprocess.run(command, env=baseline_env, check=True, capture_output=True)

        def peer_file() -> None:
            command = [sys.executable, "-m", "pgq_bench.pgqueuer_file", str(lines), peer_schema]
            peer_env = {**os.environ, "PEER_CONNECT": json.dumps(pgqueuer_side.connect_params(dsn))}
            subprocess.run(command, env=peer_env, check=True, capture_output=True)

        def peer_batch() -> float:
            return asyncio.run(
                pgqueuer_side.enqueue_batches(dsn, peer_schema, peer_payloads, BATCH_SIZE)
            )

        def pgq_bulk() -> None:
            q.enqueue_payloads(QUEUE_NAME, bulk)

        bulk = [payload(opts.payload_bytes, n) for n in range(batch_jobs * BULK_FACTOR)]
        # a side returns its seconds when only part of the call is its enqueue
        batch_sides: dict[str, tuple[Callable[[], float | None], int]] = {
            "baseline_batch": (baseline_batch, batch_jobs),
            "pgqueuer_batch": (peer_batch, batch_jobs),
            "pgq_enqueue_many": (pgq_many, batch_jobs),
            "pgq_enqueue_copy": (pgq_copy, batch_jobs),
            "baseline_file": (baseline_file, batch_jobs),
            "pgqueuer_file": (peer_file, batch_jobs),
            "pgq_enqueue_file": (pgq_file, batch_jobs),
            "pgq_copy_bulk": (pgq_bulk, len(bulk)),
        }
        try:
            for r in range(opts.rounds):
                for side, (call, jobs) in batch_sides.items():
                    admin.execute(
                        sql.SQL(TRUNCATE_BASELINE).format(s=sql.Identifier(baseline_schema))
                    )
                    admin.execute(sql.SQL(TRUNCATE_PGQ).format(s=pgq_ident))
                    admin.execute(sql.SQL(TRUNCATE_PEER).format(s=sql.Identifier(peer_schema)))
                    _quiet(admin)
                    say(f"round {r + 1}/{opts.rounds}: {side}, {jobs} jobs")
                    ticks = cpu_ticks()
                    t0 = time.perf_counter()
                    seconds = call()
                    seconds = time.perf_counter() - t0 if seconds is None else seconds
                    rates.setdefault(side, []).append(jobs / seconds)
                    steal.setdefault(side, []).append(steal_percent(ticks, cpu_ticks()))
        finally:
            baseline.close()
    medians = {side: statistics.median(rs) for side, rs in rates.items()}
    return {
        "batch_size": BATCH_SIZE,
        "jobs": batch_jobs,
        "sides": {
            side: {
                "rate": rate,
                "rounds": rates[side],
                "ratio_to_baseline_batch": rate / medians["baseline_batch"],
                "ratio_to_pgqueuer": rate / medians["pgqueuer_batch"],
                # a process on each side: start, imports, connection and the file's reading
                "ratio_to_baseline_file": rate / medians["baseline_file"],
                "ratio_to_pgqueuer_file": rate / medians["pgqueuer_file"],
                "steal_percent": steal[side],
            }
            for side, rate in medians.items()
        },
    }


def _quiet(admin: psycopg.Connection[Any]) -> None:
    """The server as each batch side finds it: a CHECKPOINT (where the role may), then no
    autovacuum worker running, waited for up to QUIET_SECONDS."""
    # a --dsn role without pg_checkpoint: the sides find what the run left
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
        admin.execute(CHECKPOINT)
    deadline = time.monotonic() + QUIET_SECONDS
    while time.monotonic() < deadline:
        row = admin.execute(VACUUMING).fetchone()
        if not row or not row[0]:
            return
        time.sleep(0.05)


def print_producers(result: dict[str, Any], console: Console) -> None:
    params = result["params"]
    for key, how in (("sides", "threads"), ("async_sides", "asyncio tasks on one pool")):
        table = Table(
            title=f"{params['producers']} {how}, {params['jobs']:,} jobs one per transaction, "
            f"median of {params['rounds']} round(s)"
        )
        columns = ("side", "jobs/s", "x baseline", "p50 ms", "x baseline p50", "p99 ms",
                   "notifications", "steal %")  # fmt: skip
        for column in columns:
            table.add_column(column, justify="left" if column == "side" else "right")
        sides = result[key]
        baseline_p50 = next(iter(sides.values()))["p50_ms"]
        for side, s in sides.items():
            ratio = s["ratio_to_baseline"]
            table.add_row(
                side,
                f"{s['rate']:,.0f}",
                f"{ratio:.2f}x" if ratio is not None else "-",
                f"{s['p50_ms']:.2f}",
                f"{s['p50_ms'] / baseline_p50:.2f}x" if baseline_p50 else "-",
                f"{s['p99_ms']:.2f}",
                "-" if side.startswith("baseline") else f"{s['notifications']:,.0f}",
                " / ".join("-" if x is None else f"{x:.0f}" for x in s["steal_percent"]),
            )
        console.print(table)
    batches = result["batches"]
    table = Table(
        title=f"batches of {batches['batch_size']:,} on one connection (the bulk side: one "
        f"enqueue_payloads), median of {params['rounds']} round(s)"
    )
    for column in ("side", "jobs/s", "x baseline batch", "x PgQueuer", "x baseline file",
                   "x PgQueuer file", "steal %"):  # fmt: skip
        table.add_column(column, justify="left" if column == "side" else "right")
    for side, s in batches["sides"].items():
        table.add_row(
            side,
            f"{s['rate']:,.0f}",
            f"{s['ratio_to_baseline_batch']:.2f}x",
            f"{s['ratio_to_pgqueuer']:.2f}x",
            f"{s['ratio_to_baseline_file']:.2f}x" if side.endswith("_file") else "-",
            f"{s['ratio_to_pgqueuer_file']:.2f}x" if side.endswith("_file") else "-",
            " / ".join("-" if x is None else f"{x:.0f}" for x in s["steal_percent"]),
        )
    console.print(table)
