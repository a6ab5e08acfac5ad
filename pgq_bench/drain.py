"""`pgq bench` (the default run): the baseline's plain SQL against pgq's worker, side by side on one
throwaway server.

Three sides drain the same jobs with the same number of worker processes on the same server,
in the same run: `baseline` (the baseline's SQL, claim `--batch`), `pgq_same_batch` (pgq's worker
claiming `--batch` too: what batched settlement alone buys) and `pgq` (claiming
`--concurrency`: what the larger claim buys on top).
Each worker process connects first, reports ready and waits for `go`, so process start-up is
never timed. A drain ends when the last process finds the queue empty; nothing polls the
database meanwhile, and the meter subtracts its own transactions from the cost figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import queue as stdqueue
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import timedelta
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.synchronize import Event
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.table import Table

from pgq_core import JobSpec, PgqError, Queue, listen_statement

from .baseline import (
    BASELINE_CLAIM,
    BASELINE_COMPLETE,
    BASELINE_ENQUEUE,
    BASELINE_POLL_INTERVAL,
    baseline_connection,
    setup_baseline,
)
from .common import (
    CHILD_APP,
    CONNECT_TIMEOUT,
    QUEUE_NAME,
    Cost,
    Meter,
    load_average,
    machine,
    machine_busy_seconds,
    payload,
    percentile,
    server_version,
    throwaway_schema,
)
from .handlers import noop_async

# The bench's own bookkeeping.
TALLY = "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FROM {s}.jobs"
JOB_STATUS = "SELECT status FROM {s}.jobs WHERE id = %s"
#: Diagnostic runs of pgq with part of its per-job work switched off in a throwaway schema, to
#: show what that part costs: the jobs trigger (done counts, NOTIFY), the fence history rows.
VARIANTS: dict[str, tuple[str, ...]] = {
    "no_trigger": ("ALTER TABLE {s}.jobs DISABLE TRIGGER USER",),
    "no_history": (
        "CREATE FUNCTION {s}.bench_skip_row() RETURNS trigger LANGUAGE plpgsql"
        " AS 'BEGIN RETURN NULL; END'",
        "CREATE TRIGGER bench_skip_row BEFORE INSERT ON {s}.job_events"
        " FOR EACH ROW EXECUTE FUNCTION {s}.bench_skip_row()",
    ),
}

TRUNCATE_BASELINE = "TRUNCATE {s}.jobs"
TRUNCATE_PGQ = "TRUNCATE {s}.jobs, {s}.job_events, {s}.queue_counts"
#: Refill of the baseline's table for later rounds: the same rows its INSERT writes, in one go.
BASELINE_FILL = """
INSERT INTO {s}.jobs (queue, payload)
SELECT %(queue)s, jsonb_build_object('n', g, 'pad', repeat('x', %(pad)s))
  FROM generate_series(0, %(n)s - 1) g"""

READY_TIMEOUT = 120.0
DRAIN_TIMEOUT = 1800.0
LATENCY_WARMUP = 3
SINGLE_ENQUEUE_CAP = 5000


# ---------------------------------------------------------------- child processes


def _child_env() -> None:
    os.environ["PGAPPNAME"] = CHILD_APP


def baseline_worker(
    dsn: str,
    schema: str,
    batch: int,
    drain: bool,
    starts: MPQueue[Any] | None,
    ready: MPQueue[Any],
    go: Event,
    stop: Event,
) -> None:
    """The baseline's loop: claim `batch`, complete each job with its own UPDATE. With `drain` it
    exits at the first empty claim; otherwise it polls every BASELINE_POLL_INTERVAL until `stop`."""
    _child_env()
    with baseline_connection(dsn, schema) as conn:
        ready.put(os.getpid())
        go.wait()
        cpu = time.process_time()
        lost = 0
        while True:
            rows = conn.execute(BASELINE_CLAIM, {"queue": QUEUE_NAME, "limit": batch}).fetchall()
            if not rows:
                if drain or stop.is_set():
                    break
                stop.wait(BASELINE_POLL_INTERVAL)
                continue
            for job_id, _payload, fence in rows:
                if starts is not None:
                    starts.put((job_id, time.time()))
                cur = conn.execute(BASELINE_COMPLETE, {"id": job_id, "fence": fence})
                lost += cur.rowcount == 0
        ready.put(("finished", time.time()))
    ready.put(("lost", lost))
    ready.put(("cpu", time.process_time() - cpu))


def pgq_worker(
    dsn: str,
    schema: str,
    concurrency: int,
    burst: bool,
    starts: MPQueue[Any] | None,
    ready: MPQueue[Any],
    go: Event,
    stop: Event,
) -> None:
    """pgq's Worker with a no-op async handler (or one that reports its start time)."""
    _child_env()
    from pgq_core.worker import Worker

    async def record(ctx: Any) -> None:
        assert starts is not None
        starts.put((ctx.id, time.time()))

    handler = noop_async if starts is None else record
    worker = Worker(
        dsn,
        [QUEUE_NAME],
        handler,
        schema=schema,
        concurrency=concurrency,
        lease=timedelta(seconds=30),
        burst=burst,
        grace=10.0,
    )
    ready.put(os.getpid())
    go.wait()
    cpu = time.process_time()
    asyncio.run(_run_worker(worker, stop, ready))
    ready.put(("finished", time.time()))
    ready.put(("lost", worker.snapshot().lost))
    ready.put(("cpu", time.process_time() - cpu))


async def _run_worker(worker: Any, stop: Event, ready: MPQueue[Any]) -> None:
    def stop_when_told() -> None:
        # Polls: a process that exits while blocked in Event.wait() deadlocks the next set().
        while not stop.is_set():
            time.sleep(0.05)
        worker.stop()

    threading.Thread(target=stop_when_told, daemon=True).start()
    task = asyncio.create_task(worker.run())
    while not task.done() and worker.snapshot().state != "running":
        await asyncio.sleep(0.01)
    ready.put(("running", os.getpid()))
    await task


def listener(dsn: str, schema: str, ready: MPQueue[Any], go: Event, stop: Event) -> None:
    """An idle connection LISTENing on the queue's channel, consuming every notification."""
    _child_env()
    received = 0
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        conn.execute(listen_statement(schema))
        ready.put(os.getpid())
        go.wait()
        while not stop.is_set():
            for _ in conn.notifies(timeout=0.2):
                received += 1
    ready.put(("notified", received))


# ---------------------------------------------------------------- process groups


@dataclass
class Group:
    """Child processes started together: each reports ready, all start on `go`."""

    procs: list[SpawnProcess]
    ready: MPQueue[Any]
    go: Event
    stop: Event
    reports: list[tuple[str, float]]

    def wait(self, kind: str | None = None, timeout: float = READY_TIMEOUT) -> list[Any]:
        """Wait for one message of `kind` (None: a plain pid) from every process; their values."""
        seen = 0
        values: list[Any] = []
        deadline = time.monotonic() + timeout
        while seen < len(self.procs):
            try:
                msg = self.ready.get(timeout=0.2)
            except stdqueue.Empty:
                if any(not p.is_alive() and p.exitcode for p in self.procs):
                    raise PgqError(
                        "a bench worker process died (see its traceback above)"
                    ) from None
                if time.monotonic() > deadline:
                    raise PgqError(
                        f"bench worker processes: no {kind or 'ready'} in time"
                    ) from None
                continue
            if (kind is None and isinstance(msg, int)) or (
                isinstance(msg, tuple) and msg[0] == kind
            ):
                seen += 1
                values.append(msg[1] if isinstance(msg, tuple) else msg)
            elif isinstance(msg, tuple):
                self.reports.append(msg)
        return values

    def finish(self, timeout: float = 60.0) -> list[tuple[str, float]]:
        """Stop, join and return the processes' final reports."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            p.join(max(0.1, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
        while True:
            try:
                msg = self.ready.get(timeout=0.05)
            except stdqueue.Empty:
                break
            if isinstance(msg, tuple):
                self.reports.append(msg)
        return self.reports


@contextmanager
def group(ctx: SpawnContext, n: int, target: Callable[..., None], *args: Any) -> Iterator[Group]:
    ready: MPQueue[Any] = ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(target=target, args=(*args, ready, go, stop), daemon=True) for _ in range(n)
    ]
    g = Group(procs, ready, go, stop, [])
    for p in procs:
        p.start()
    try:
        g.wait()
        yield g
    finally:
        g.finish()


# ---------------------------------------------------------------- measurements


@dataclass
class Phase:
    """One measured run: how many jobs, how long, and what it cost the server."""

    jobs: int
    seconds: float
    xacts_per_job: float
    wal_bytes_per_job: float
    #: CPU of the worker processes (all threads) while they worked, per job.
    worker_cpu_us_per_job: float | None = None
    #: CPU of the whole machine (every process, PostgreSQL included) over the run, per job.
    machine_cpu_us_per_job: float | None = None
    #: Jobs per claim (the baseline's LIMIT, pgq's worker concurrency); None for enqueues.
    claim: int | None = None

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate}


def _phase(jobs: int, seconds: float, cost: Cost) -> Phase:
    return Phase(jobs, seconds, cost.xacts_per_job, cost.wal_bytes_per_job)


def enqueue_baseline(meter: Meter, dsn: str, schema: str, jobs: int, payload_bytes: int) -> Phase:
    with baseline_connection(dsn, schema) as conn:
        start = meter.start()
        t0 = time.perf_counter()
        for n in range(jobs):
            conn.execute(
                BASELINE_ENQUEUE, {"queue": QUEUE_NAME, "payload": Jsonb(payload(payload_bytes, n))}
            )
        seconds = time.perf_counter() - t0
        conn.execute(sql.SQL("SELECT pg_stat_force_next_flush()"))
        return _phase(jobs, seconds, meter.cost(start, jobs, others=1))


def enqueue_pgq(
    meter: Meter, dsn: str, schema: str, jobs: int, payload_bytes: int, *, many: bool
) -> Phase:
    """`many`: one enqueue_many call (arrays, one transaction); else one enqueue per job."""
    with Queue.connect(dsn, schema) as q:
        start = meter.start()
        t0 = time.perf_counter()
        if many:
            q.enqueue_many(JobSpec(QUEUE_NAME, payload(payload_bytes, n)) for n in range(jobs))
        else:
            for n in range(jobs):
                q.enqueue(QUEUE_NAME, payload(payload_bytes, n))
        seconds = time.perf_counter() - t0
        q.conn.execute("SELECT pg_stat_force_next_flush()")
        return _phase(jobs, seconds, meter.cost(start, jobs, others=1))


def drain(
    meter: Meter,
    ctx: SpawnContext,
    schema: str,
    jobs: int,
    workers: int,
    target: Callable[..., None],
    *args: Any,
) -> tuple[Phase, int]:
    """Time from `go` until the last worker process finds the queue empty (its first empty
    claim, all its jobs settled); (phase, jobs reported lost). Nothing polls meanwhile."""
    with group(ctx, workers, target, *args) as g:
        start = meter.start()
        busy0 = machine_busy_seconds()
        t0 = time.time()
        g.go.set()
        finished = g.wait("finished", timeout=DRAIN_TIMEOUT)
        seconds = max(finished) - t0
        busy = machine_busy_seconds() - busy0
        reports = g.finish()
    meter.wait_children_gone()
    lost = sum(int(v) for k, v in reports if k == "lost")
    cpu = sum(float(v) for k, v in reports if k == "cpu")
    phase = _phase(jobs, seconds, meter.cost(start, jobs))
    phase.worker_cpu_us_per_job = cpu / jobs * 1e6
    phase.machine_cpu_us_per_job = busy / jobs * 1e6 if busy >= 0 else None
    return phase, lost


def pickup_latency(
    meter: Meter,
    ctx: SpawnContext,
    schema: str,
    samples: int,
    workers: int,
    target: Callable[..., None],
    *args: Any,
    enqueue: Callable[[int], int],
    wait_running: bool,
) -> list[float]:
    """Seconds from enqueue commit to handler start, one job at a time on an idle queue.

    Between samples the queue stays idle for a random time (longer than the baseline's poll
    interval), so polling workers are caught at a random point of their cycle."""
    starts: MPQueue[Any] = ctx.Queue()
    status = sql.SQL(JOB_STATUS).format(s=sql.Identifier(schema))
    latencies: list[float] = []
    with group(ctx, workers, target, *args, starts) as g:
        g.go.set()
        if wait_running:
            g.wait("running")
        for n in range(samples + LATENCY_WARMUP):
            job_id = enqueue(n)
            committed = time.time()
            while True:
                try:
                    started_id, started = starts.get(timeout=30)
                except stdqueue.Empty:
                    raise PgqError(f"job {job_id} was not picked up within 30s") from None
                if started_id == job_id:
                    break
            if n >= LATENCY_WARMUP:
                latencies.append(max(0.0, started - committed))
            deadline = time.monotonic() + 30
            while meter.execute(status, [job_id])[0][0] != "done":
                if time.monotonic() > deadline:
                    raise PgqError(f"job {job_id} did not complete within 30s")
                time.sleep(0.001)
            time.sleep(random.uniform(0.01, 0.01 + BASELINE_POLL_INTERVAL))
    return latencies


def notify_cost(
    meter: Meter,
    ctx: SpawnContext,
    dsn: str,
    schema: str,
    jobs: int,
    payload_bytes: int,
    listeners: int,
) -> tuple[Phase, int]:
    """Single-job enqueues (one NOTIFY each) while `listeners` idle connections LISTEN."""
    with group(ctx, listeners, listener, dsn, schema) as g:
        g.go.set()
        phase = enqueue_pgq(meter, dsn, schema, jobs, payload_bytes, many=False)
        time.sleep(0.5)
        reports = g.finish()
    return phase, sum(int(v) for k, v in reports if k == "notified")


def _tally(conn: psycopg.Connection[Any], schema: str) -> tuple[int, int]:
    row = conn.execute(sql.SQL(TALLY).format(s=sql.Identifier(schema))).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _vacuum(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(schema)))


@dataclass(frozen=True)
class Options:
    jobs: int
    workers: int
    batch: int
    concurrency: int
    payload_bytes: int
    latency_samples: int
    rounds: int = 1


def drain_args(kind: str, dsn: str, schema: str, batch: int) -> tuple[Any, ...]:
    worker = baseline_worker if kind == "baseline" else pgq_worker
    return (worker, dsn, schema, batch, True, None)


def refill(conn: psycopg.Connection[Any], dsn: str, kind: str, schema: str, opts: Options) -> None:
    """Empty a side's tables and enqueue the round's jobs again (unmeasured)."""
    ident = sql.Identifier(schema)
    if kind == "baseline":
        conn.execute(sql.SQL(TRUNCATE_BASELINE).format(s=ident))
        conn.execute(
            sql.SQL(BASELINE_FILL).format(s=ident),
            {"queue": QUEUE_NAME, "n": opts.jobs, "pad": opts.payload_bytes},
        )
    else:
        conn.execute(sql.SQL(TRUNCATE_PGQ).format(s=ident))
        with Queue.connect(dsn, schema) as q:
            q.enqueue_many(
                JobSpec(QUEUE_NAME, payload(opts.payload_bytes, n)) for n in range(opts.jobs)
            )
    _vacuum(conn, schema)


def _median_phase(phases: list[Phase]) -> Phase:
    return sorted(phases, key=lambda ph: ph.rate)[len(phases) // 2]


#: The sides compared (one JSON object and one table column each), in column order.
SIDES = ("baseline", "pgq_same_batch", "pgq")
#: pgq's sides: the claim size each drains with ("batch": the baseline's, "concurrency": pgq's).
PGQ_SIDES: dict[str, str] = {
    "pgq_same_batch": "batch",
    "pgq": "concurrency",
    **dict.fromkeys(VARIANTS, "concurrency"),
}


def run_bench(
    dsn: str, embedded: bool, opts: Options, say: Callable[[str], None]
) -> dict[str, Any]:
    """Every figure of one bench run, as plain data.

    Drains run in rounds, the sides interleaved (baseline, pgq at the baseline's claim size, pgq
    at its own, pgq variants, then again), so a noisy neighbour hits every side alike; each side
    reports its median round. Pickup latency is measured for the baseline and for `pgq` only."""
    ctx = mp.get_context("spawn")
    single_jobs = min(opts.jobs, SINGLE_ENQUEUE_CAP)
    result: dict[str, Any] = {
        "params": {**asdict(opts), "single_enqueue_jobs": single_jobs},
        "machine": machine(),
    }
    claims = {"baseline": opts.batch, **{k: getattr(opts, v) for k, v in PGQ_SIDES.items()}}
    sides = list(claims)
    with (
        contextlib.ExitStack() as stack,
        psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn,
    ):
        meter = Meter(conn)
        result["server"] = {"version": server_version(conn), "embedded": embedded}
        schemas = {
            "baseline": stack.enter_context(throwaway_schema(dsn, "bench_baseline", pgq=False)),
            **{k: stack.enter_context(throwaway_schema(dsn, "bench_pgq")) for k in PGQ_SIDES},
        }
        setup_baseline(dsn, schemas["baseline"])
        for name, statements in VARIANTS.items():
            for statement in statements:
                conn.execute(sql.SQL(statement).format(s=sql.Identifier(schemas[name])))

        say(f"baseline: enqueue {opts.jobs} jobs, one INSERT each")
        enqueued = {
            "baseline": enqueue_baseline(
                meter, dsn, schemas["baseline"], opts.jobs, opts.payload_bytes
            )
        }
        for name in PGQ_SIDES:
            say(f"{name}: enqueue_many {opts.jobs} jobs")
            enqueued[name] = enqueue_pgq(
                meter, dsn, schemas[name], opts.jobs, opts.payload_bytes, many=True
            )
            _vacuum(conn, schemas[name])
        _vacuum(conn, schemas["baseline"])

        drains: dict[str, list[Phase]] = {k: [] for k in sides}
        lost = dict.fromkeys(sides, 0)
        tallies: dict[str, tuple[int, int]] = {}
        for r in range(opts.rounds):
            for name in sides:
                kind = "baseline" if name == "baseline" else "pgq"
                if r:
                    refill(conn, dsn, kind, schemas[name], opts)
                say(
                    f"round {r + 1}/{opts.rounds}: {name} drain, {opts.workers} processes, "
                    f"claim {claims[name]}"
                )
                phase, lost_now = drain(
                    meter,
                    ctx,
                    schemas[name],
                    opts.jobs,
                    opts.workers,
                    *drain_args(kind, dsn, schemas[name], claims[name]),
                )
                phase.claim = claims[name]
                drains[name].append(phase)
                lost[name] += lost_now
                done, total = _tally(conn, schemas[name])
                tallies[name] = (min(done, tallies.get(name, (done, 0))[0]), total)

        baseline_schema, pgq_schema = schemas["baseline"], schemas["pgq"]
        say(f"baseline: pickup latency, {opts.latency_samples} jobs one at a time")
        with baseline_connection(dsn, baseline_schema) as producer:

            def baseline_enqueue_one(n: int) -> int:
                params = {"queue": QUEUE_NAME, "payload": Jsonb(payload(opts.payload_bytes, n))}
                row = producer.execute(BASELINE_ENQUEUE + " RETURNING id", params).fetchone()
                assert row is not None
                return int(row[0])

            baseline_latency = pickup_latency(
                meter,
                ctx,
                baseline_schema,
                opts.latency_samples,
                opts.workers,
                baseline_worker,
                dsn,
                baseline_schema,
                opts.batch,
                False,
                enqueue=baseline_enqueue_one,
                wait_running=False,
            )
        say(f"pgq: pickup latency, {opts.latency_samples} jobs one at a time")
        with Queue.connect(dsn, pgq_schema) as q:
            pgq_latency = pickup_latency(
                meter,
                ctx,
                pgq_schema,
                opts.latency_samples,
                opts.workers,
                pgq_worker,
                dsn,
                pgq_schema,
                opts.concurrency,
                False,
                enqueue=lambda n: q.enqueue(QUEUE_NAME, payload(opts.payload_bytes, n)),
                wait_running=True,
            )
        say(f"pgq: enqueue {single_jobs} jobs one at a time, without and with listeners")
        pgq_single = enqueue_pgq(
            meter, dsn, pgq_schema, single_jobs, opts.payload_bytes, many=False
        )
        pgq_single_listened, notified = notify_cost(
            meter, ctx, dsn, pgq_schema, single_jobs, opts.payload_bytes, opts.workers
        )

    median = {k: _median_phase(v) for k, v in drains.items()}
    latencies: dict[str, list[float] | None] = {
        "baseline": baseline_latency,
        "pgq_same_batch": None,
        "pgq": pgq_latency,
    }
    result["drain_rounds"] = {k: [ph.rate for ph in v] for k, v in drains.items()}

    def side(name: str) -> dict[str, Any]:
        enq, dr, lat = enqueued[name], median[name], latencies[name]
        done, total = tallies[name]
        pickup: dict[str, float | None] = {
            "pickup_p50_ms": percentile(lat, 50) * 1000 if lat else None,
            "pickup_p99_ms": percentile(lat, 99) * 1000 if lat else None,
            "pickup_max_ms": max(lat) * 1000 if lat else None,
        }
        return {
            "claim_size": claims[name],
            "enqueue_rate": enq.rate,
            "drain_rate": dr.rate,
            "drain_seconds": dr.seconds,
            **pickup,
            "drain_xacts_per_job": dr.xacts_per_job,
            "drain_wal_bytes_per_job": dr.wal_bytes_per_job,
            "drain_worker_cpu_us_per_job": dr.worker_cpu_us_per_job,
            "drain_machine_cpu_us_per_job": dr.machine_cpu_us_per_job,
            "enqueue_xacts_per_job": enq.xacts_per_job,
            "enqueue_wal_bytes_per_job": enq.wal_bytes_per_job,
            "jobs": total,
            "done": done,
            "lost": lost[name],
        }

    for name in SIDES:
        result[name] = side(name)
    result["enqueue"] = {
        "baseline_insert_per_job": enqueued["baseline"].to_dict(),
        "pgq_enqueue_per_job": pgq_single.to_dict(),
        "pgq_enqueue_per_job_listened": {
            **pgq_single_listened.to_dict(),
            "listeners": opts.workers,
            "notifications_received": notified,
        },
        "pgq_enqueue_many": enqueued["pgq"].to_dict(),
        **{f"pgq_enqueue_many_{k}": enqueued[k].to_dict() for k in VARIANTS},
    }
    result["drain"] = {
        "baseline": median["baseline"].to_dict(),
        "pgq_same_batch": median["pgq_same_batch"].to_dict(),
        "pgq": median["pgq"].to_dict(),
        **{f"pgq_{k}": median[k].to_dict() for k in VARIANTS},
    }
    baseline_rate = median["baseline"].rate
    result["ratio"] = median["pgq"].rate / baseline_rate if baseline_rate else None
    result["ratio_same_batch"] = (
        median["pgq_same_batch"].rate / baseline_rate if baseline_rate else None
    )
    result["machine"]["load_at_end"] = load_average()
    return result


# ---------------------------------------------------------------- output

RUN_COLUMNS = (
    "run",
    "claim",
    "jobs",
    "jobs/s",
    "xacts / job",
    "WAL B / job",
    "worker CPU µs / job",
)


def _f(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def side_label(name: str, claim: int) -> str:
    return f"baseline (LIMIT {claim})" if name == "baseline" else f"pgq (claim {claim})"


def print_tables(result: dict[str, Any], console: Console) -> None:
    sides = {name: result[name] for name in SIDES}
    baseline = sides["baseline"]
    server_info, params = result["server"], result["params"]
    title = (
        f"pgq bench · PostgreSQL {server_info['version']}"
        f"{' (embedded)' if server_info['embedded'] else ''} · {params['jobs']} jobs, "
        f"{params['workers']} worker processes per side, payload {params['payload_bytes']} B"
    )
    table = Table(title=title)
    table.add_column("")
    for name, fig in sides.items():
        table.add_column(side_label(name, fig["claim_size"]), justify="right")
    for name, fig in sides.items():
        if name != "baseline":
            table.add_column(f"{side_label(name, fig['claim_size'])} / baseline", justify="right")

    def row(label: str, key: str, digits: int = 0) -> None:
        values = [fig[key] for fig in sides.values()]
        if all(v is None for v in values):
            return
        cells = ["-" if v is None else _f(float(v), digits) for v in values]
        a = baseline[key]
        ratios = [f"{float(v) / float(a):.2f}x" if a and v is not None else "-" for v in values[1:]]
        table.add_row(label, *cells, *ratios)

    row("enqueue (jobs/s; baseline INSERT, pgq enqueue_many)", "enqueue_rate")
    row("drain (jobs/s)", "drain_rate")
    row("pickup p50 (ms)", "pickup_p50_ms", 1)
    row("pickup p99 (ms)", "pickup_p99_ms", 1)
    row("drain transactions / job", "drain_xacts_per_job", 2)
    row("drain WAL bytes / job", "drain_wal_bytes_per_job")
    row("drain worker CPU µs / job", "drain_worker_cpu_us_per_job")
    row("drain machine CPU µs / job", "drain_machine_cpu_us_per_job")
    row("enqueue transactions / job", "enqueue_xacts_per_job", 2)
    row("enqueue WAL bytes / job", "enqueue_wal_bytes_per_job")
    table.add_row("jobs done", *(f"{fig['done']}/{fig['jobs']}" for fig in sides.values()), "", "")
    console.print(table)

    methods = Table(title="enqueue and drain runs")
    for col in RUN_COLUMNS:
        methods.add_column(col, justify="left" if col == "run" else "right")
    labels = {
        "baseline_insert_per_job": "enqueue: baseline INSERT, one per job",
        "pgq_enqueue_per_job": "enqueue: pgq enqueue, one per job",
        "pgq_enqueue_per_job_listened": "enqueue: pgq enqueue, one per job, listeners on",
        "pgq_enqueue_many": "enqueue: pgq enqueue_many (arrays)",
        "pgq_enqueue_many_no_trigger": "enqueue: pgq enqueue_many, jobs trigger off",
        "pgq_enqueue_many_no_history": "enqueue: pgq enqueue_many, no history rows",
    }
    runs = [(labels.get(k, k), v) for k, v in result["enqueue"].items()]
    runs += [(f"drain: {k.replace('_', ' ')}", v) for k, v in result["drain"].items()]
    for label, ph in runs:
        methods.add_row(
            label,
            "" if ph["claim"] is None else str(ph["claim"]),
            str(ph["jobs"]),
            _f(ph["rate"]),
            _f(ph["xacts_per_job"], 2),
            _f(ph["wal_bytes_per_job"]),
            "" if ph["worker_cpu_us_per_job"] is None else _f(ph["worker_cpu_us_per_job"]),
        )
    console.print(methods)
    console.print(
        f"ratio (pgq drain / baseline drain): [bold]{_x(result['ratio'])}[/bold] at claim "
        f"{result['pgq']['claim_size']}; ratio_same_batch: {_x(result['ratio_same_batch'])} "
        f"at the baseline's claim size {baseline['claim_size']}"
    )
