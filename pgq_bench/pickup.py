"""`pgq bench --pickup`: how soon one idle worker starts a job, and how long claimed jobs wait
in a worker before their handler starts.

For each handler kind, one `pgq worker bench --concurrency C --handler
pgq_bench.handlers:record_start_<kind>` process (the worker users run, not `--burst`) on a
throwaway schema; its handler appends `job_id unix_time` to a file as it starts, and does
nothing else. Then:

- **idle**: after a few warm-up jobs, `--latency-samples` jobs enqueued one at a time with
  `Queue.enqueue` (one transaction: its NOTIFY reaches the LISTENing worker), each only once
  the previous one is done and the queue has stayed idle for 10 to 110 ms (random). *pickup* =
  handler start - the moment `enqueue` was called, both on this machine's clock: the commit
  falls somewhere in the call, and a handler can start before the call returns (a crowded
  machine runs the worker first), so the call's start is the one moment before it.
- **busy**: `--jobs` jobs in one `enqueue_many`, drained by the same worker.

In both, *claimed to start* = handler start - the job's `claimed_at` (the claim transaction's
`now()`, the server's clock): the claim's own round trip and the time the job waited in the
worker before a slot ran it (a worker that claims ahead holds it in its buffer meanwhile). On
the embedded server or a server on this machine both clocks are one; over a network their
offset adds in. The worker is stopped with SIGTERM afterwards and must exit 0.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql

from pgq_core import JobSpec, PgqError, Queue

from .common import (
    BOOKKEEPING_TIMEOUT,
    CONNECT_TIMEOUT,
    QUEUE_NAME,
    load_average,
    machine,
    payload,
    percentile,
    server_version,
    throwaway_schema,
)
from .handlers import RECORD_START_SPECS, STARTS_FILE_ENV
from .same_resources import worker_command

#: Warm-up jobs (the worker connects, LISTENs, settles into idle), not counted.
WARMUP = 3
#: The queue stays idle this long between two samples (seconds, uniform).
IDLE_GAP = (0.01, 0.11)
#: Longest wait for one job's start, for one job to be done, for the busy drain.
START_TIMEOUT = 60.0
DONE_TIMEOUT = 30.0
BUSY_TIMEOUT = 1800.0
STOP_TIMEOUT = 60.0
OUTPUT_TAIL = 5
PERCENTILES = (50, 95, 99)
JOB_STATUS = "SELECT status FROM {s}.jobs WHERE id = %s"
CLAIMED_AT = "SELECT id, extract(epoch FROM claimed_at)::float8 FROM {s}.jobs WHERE id = ANY(%s)"


@dataclass(frozen=True)
class PickupOptions:
    samples: int = 200
    busy_jobs: int = 2000
    concurrency: int = 10
    handlers: tuple[str, ...] = ("sync", "async")
    payload_bytes: int = 100


def summary(seconds: list[float]) -> dict[str, float | int]:
    """p50/p95/p99/max in milliseconds, and the sample's size."""
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        **{f"p{p}_ms": percentile(ms, p) for p in PERCENTILES},
        "max_ms": max(ms),
    }


class Starts:
    """The handler's starts file, read as it grows: job id -> handler start (unix time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: dict[int, float] = {}
        self._offset = 0
        self._partial = b""

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        for line in lines:
            job_id, at = line.split()
            self.seen.setdefault(int(job_id), float(at))

    def wait(self, ids: list[int], timeout: float, alive: Callable[[], None]) -> None:
        """Until every job of `ids` has started; `alive` raises if the worker died."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if all(i in self.seen for i in ids):
                return
            alive()
            if time.monotonic() > deadline:
                left = sum(i not in self.seen for i in ids)
                raise PgqError(f"{left} job(s) not started by the worker within {timeout:.0f}s")
            time.sleep(0.0005)


def _tail(output: IO[bytes]) -> str:
    output.seek(0)
    lines = output.read().decode(errors="replace").strip().splitlines()[-OUTPUT_TAIL:]
    return " | ".join(lines) or "no output"


@contextmanager
def worker_process(
    dsn: str, command: list[str], starts: Path
) -> Iterator[Callable[[], None]]:
    """The worker running; yields a check that raises if it has exited. SIGTERM on exit, and
    it must exit 0."""
    env = {**os.environ, "PGQ_DSN": dsn, STARTS_FILE_ENV: str(starts)}
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)

        def alive() -> None:
            if proc.poll() is not None:
                raise PgqError(f"pgq worker exited with {proc.returncode}: {_tail(output)}")

        try:
            yield alive
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    raise PgqError(
                        f"pgq worker still running {STOP_TIMEOUT:.0f}s after SIGTERM; killed"
                    ) from None
        if proc.returncode != 0:
            raise PgqError(f"pgq worker exited with {proc.returncode}: {_tail(output)}")


def _wait_done(conn: psycopg.Connection[Any], schema: str, job_id: int) -> None:
    status = sql.SQL(JOB_STATUS).format(s=sql.Identifier(schema))
    deadline = time.monotonic() + DONE_TIMEOUT
    while True:
        row = conn.execute(status, [job_id]).fetchone()
        if row is not None and row[0] == "done":
            return
        if time.monotonic() > deadline:
            raise PgqError(f"job {job_id} not done within {DONE_TIMEOUT:.0f}s")
        time.sleep(0.002)


def _claimed_at(conn: psycopg.Connection[Any], schema: str, ids: list[int]) -> dict[int, float]:
    query = sql.SQL(CLAIMED_AT).format(s=sql.Identifier(schema))
    return {int(i): float(at) for i, at in conn.execute(query, [ids]).fetchall()}


def measure(
    dsn: str, kind: str, opts: PickupOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """The idle and busy figures of one handler kind."""
    with (
        throwaway_schema(dsn, "bench_pickup") as schema,
        tempfile.TemporaryDirectory(prefix="pgq-bench-pickup-") as tmp,
        Queue.connect(dsn, schema) as q,
        psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn,
    ):
        conn.execute(BOOKKEEPING_TIMEOUT)
        command = worker_command(
            schema, opts.concurrency, kind, handler=RECORD_START_SPECS[kind], burst=False
        )
        starts = Starts(Path(tmp) / "starts")
        committed: dict[int, float] = {}
        with worker_process(dsn, command, starts.path) as alive:
            say(f"{kind}: {WARMUP} warm-up jobs, then {opts.samples} jobs one at a time")
            for n in range(WARMUP + opts.samples):
                at = time.time()
                job_id = q.enqueue(QUEUE_NAME, payload(opts.payload_bytes, n))
                if n >= WARMUP:
                    committed[job_id] = at
                starts.wait([job_id], START_TIMEOUT, alive)
                _wait_done(conn, schema, job_id)
                time.sleep(random.uniform(*IDLE_GAP))
            say(f"{kind}: {opts.busy_jobs} jobs in one enqueue_many, drained by the same worker")
            busy = q.enqueue_many(
                JobSpec(QUEUE_NAME, payload(opts.payload_bytes, n))
                for n in range(opts.busy_jobs)
            )
            t0 = time.time()
            starts.wait(busy, BUSY_TIMEOUT, alive)
            started_all = time.time() - t0
        idle_ids = list(committed)
        claimed = _claimed_at(conn, schema, idle_ids + busy)
    seen = starts.seen
    return {
        "handler": kind,
        "schema": schema,
        "concurrency": opts.concurrency,
        "command": " ".join(["pgq", *command[3:]]),
        "idle": {
            "pickup": summary([seen[i] - committed[i] for i in idle_ids]),
            "claimed_to_start": summary([seen[i] - claimed[i] for i in idle_ids]),
        },
        "busy": {
            "jobs": len(busy),
            "started_rate": len(busy) / started_all if started_all > 0 else None,
            "claimed_to_start": summary([seen[i] - claimed[i] for i in busy]),
        },
    }


def run_pickup(
    dsn: str, embedded: bool, opts: PickupOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "mode": "pickup",
        "params": {
            "samples": opts.samples,
            "warmup": WARMUP,
            "idle_gap_seconds": list(IDLE_GAP),
            "busy_jobs": opts.busy_jobs,
            "concurrency": opts.concurrency,
            "handlers": list(opts.handlers),
            "payload_bytes": opts.payload_bytes,
        },
        "machine": machine(),
    }
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        result["server"] = {"version": server_version(conn), "embedded": embedded}
    result["runs"] = {kind: measure(dsn, kind, opts, say) for kind in opts.handlers}
    result["machine"]["load_at_end"] = load_average()
    return result


def print_pickup(result: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    server_info, params = result["server"], result["params"]
    table = Table(
        title=(
            f"pgq bench --pickup · PostgreSQL {server_info['version']}"
            f"{' (embedded)' if server_info['embedded'] else ''} · one idle `pgq worker "
            f"--concurrency {params['concurrency']}` process"
        ),
        caption=(
            f"idle: {params['samples']} jobs enqueued one at a time, each once the previous "
            f"is done and {params['idle_gap_seconds'][0] * 1000:.0f}-"
            f"{params['idle_gap_seconds'][1] * 1000:.0f} ms of idle passed; pickup = handler "
            "start - enqueue called (this machine's clock).\n"
            f"busy: {params['busy_jobs']} jobs in one enqueue_many. claimed to start = handler "
            "start - the job's claimed_at (the claim's now(), the server's clock): the claim's "
            "round trip and the wait in the worker before a slot ran it."
        ),
        caption_justify="left",
    )
    for col in ("handler", "figure", "n", "p50 ms", "p95 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="left" if col in ("handler", "figure") else "right")
    for kind, run in result["runs"].items():
        rows = [
            ("idle: pickup", run["idle"]["pickup"]),
            ("idle: claimed to start", run["idle"]["claimed_to_start"]),
            ("busy: claimed to start", run["busy"]["claimed_to_start"]),
        ]
        for n, (label, fig) in enumerate(rows):
            table.add_row(
                kind if n == 0 else "",
                label,
                str(fig["n"]),
                *(f"{fig[k]:,.2f}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")),
                end_section=n == len(rows) - 1,
            )
    console.print(table)
