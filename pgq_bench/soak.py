"""`pgq bench --soak 60m --rate R`: a bounded soak. A producer enqueues R jobs/s (one per
transaction), 4 `pgq worker` processes run a no-op handler, and every sample interval (a
minute) the soak records sizes, dead tuples and claim latency as one JSON line, then prunes
done jobs older than a minute (`Queue.prune`, what `pgq prune --older-than 1m` runs).

Pass criteria, computed at the end over the samples after warm-up (the first third): every
size flat (the last third's mean within 20% of the middle third's) and claim latency flat (the
last third's median p50 and p99 at most 1.5x the middle third's, plus 5 ms of noise). The last
line of the results file is the summary. Sampling every `sample` seconds; with a sample under a
minute, prune keeps `sample` seconds of done jobs instead of a minute (short test runs).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import IO, Any

import psycopg
from psycopg import sql

from pgq_core import Queue
from pgq_core.queries import named_statements

from .common import QUEUE_NAME, load_average, machine, payload, server_version, throwaway_schema
from .handlers import HANDLER_SPECS

WORKERS = 4
WORKER_CONCURRENCY = 10
PRUNE_AGE = timedelta(minutes=1)
#: Size flatness: the last third's mean within this share of the middle third's.
SIZE_TOLERANCE = 0.20
#: Latency flatness: the last third's median at most this factor of the middle third's, + slack.
LATENCY_FACTOR = 1.5
LATENCY_SLACK_MS = 5.0


@dataclass(frozen=True)
class SoakOptions:
    duration: float
    rate: float
    sample: float
    results: Path
    payload_bytes: int = 100
    workers: int = WORKERS


class Producer(threading.Thread):
    """Enqueues `rate` jobs/s, one per transaction, on a schedule (it catches up when late)."""

    def __init__(self, dsn: str, schema: str, rate: float, payload_bytes: int) -> None:
        super().__init__(daemon=True)
        self.queue = Queue.connect(dsn, schema)
        self.rate = rate
        self.payload_bytes = payload_bytes
        self.sent = 0
        self.errors = 0
        self.lag = 0.0
        self.stopping = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        try:
            while not self.stopping.is_set():
                due = start + self.sent / self.rate
                now = time.monotonic()
                if due > now:
                    self.stopping.wait(due - now)
                    continue
                self.lag = now - due
                try:
                    self.queue.enqueue(QUEUE_NAME, payload(self.payload_bytes, self.sent))
                except psycopg.Error:
                    self.errors += 1
                    self.stopping.wait(0.1)
                    continue
                self.sent += 1
        finally:
            self.queue.close()


def _start_workers(dsn: str, schema: str, n: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, PGQ_DSN=dsn, PGQ_SCHEMA=schema)
    procs = []
    for i in range(n):
        with (logs / f"worker-{i}.log").open("wb") as log:
            argv = [
                sys.executable, "-m", "pgq_cli", "worker", QUEUE_NAME,
                "--handler", HANDLER_SPECS["sync"],
                "--concurrency", str(WORKER_CONCURRENCY), "--log-level", "warning",
            ]  # fmt: skip
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT))
    return procs


def _stop_workers(procs: list[subprocess.Popen[bytes]]) -> list[int | None]:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for p in procs:
        try:
            codes.append(p.wait(60))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait(10))
    return codes


@dataclass(frozen=True)
class ClaimLatency:
    """Jobs claimed since a time: count, enqueue->claim and enqueue->done seconds (p50, p99;
    None without jobs), and the server time to pass as the next `since`."""

    claimed: int
    claim_p50: float | None
    claim_p99: float | None
    done_p50: float | None
    done_p99: float | None
    until: datetime


def claim_latency(q: Queue, since: datetime) -> ClaimLatency:
    """`claim_latency` of the bench's queries.sql (pgq_core runs no statement only a benchmark
    needs)."""
    text = named_statements(files("pgq_bench").joinpath("queries.sql").read_text())
    statement = sql.SQL(text["claim_latency"]).format(schema=sql.Identifier(q.schema))
    row = q.conn.execute(statement, {"since": since}).fetchone()
    assert row is not None
    count, c50, c99, d50, d99, until = row

    def f(value: Any) -> float | None:
        return None if value is None else float(value)

    return ClaimLatency(int(count), f(c50), f(c99), f(d50), f(d99), until)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


def sample(
    q: Queue, producer: Producer, started: float, since: datetime, prune_age: timedelta
) -> tuple[dict[str, Any], datetime]:
    """One sample (a JSON-able dict) and the `since` of the next one."""
    latency = claim_latency(q, since)
    stats = {s.queue: s for s in q.stats()}.get(QUEUE_NAME)
    sizes = {t.table: asdict(t) for t in q.table_sizes()}
    t0 = time.monotonic()
    pruned = q.prune(prune_age)
    line = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - started, 1),
        "enqueued": producer.sent,
        "producer_lag_s": round(producer.lag, 3),
        "producer_errors": producer.errors,
        "ready": stats.ready if stats else 0,
        "running": stats.running if stats else 0,
        "dead": stats.dead if stats else 0,
        "done_kept": stats.done if stats else 0,
        "completed": stats.completed if stats else 0,
        "claimed": latency.claimed,
        "claim_p50_ms": _ms(latency.claim_p50),
        "claim_p99_ms": _ms(latency.claim_p99),
        "done_p50_ms": _ms(latency.done_p50),
        "done_p99_ms": _ms(latency.done_p99),
        "tables": {
            name: {k: v for k, v in size.items() if k != "table"} for name, size in sizes.items()
        },
        "pruned": pruned,
        "prune_s": round(time.monotonic() - t0, 3),
        "load": load_average(),
    }
    return line, latency.until


def _thirds(values: list[float]) -> tuple[list[float], list[float]]:
    third = len(values) // 3
    return values[third : 2 * third], values[2 * third :]


def verdict(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Pass criteria over the samples: sizes and latencies flat after warm-up (see module)."""
    checks: dict[str, Any] = {}
    if len(samples) < 3:
        return {"passed": None, "reason": "fewer than 3 samples", "checks": checks}
    for table in ("jobs", "job_events"):
        for part in ("table_bytes", "index_bytes"):
            series = [float(s["tables"].get(table, {}).get(part, 0)) for s in samples]
            middle, last = _thirds(series)
            m, lst = statistics.mean(middle), statistics.mean(last)
            checks[f"{table}.{part}"] = {
                "middle_mean": round(m),
                "last_mean": round(lst),
                "passed": (m == 0 and lst == 0) or abs(lst - m) <= SIZE_TOLERANCE * max(m, 1),
            }
    for key in ("claim_p50_ms", "claim_p99_ms"):
        series = [float(s[key]) for s in samples if s[key] is not None]
        if len(series) < 3:
            checks[key] = {"passed": False, "reason": "no claims sampled"}
            continue
        middle, last = _thirds(series)
        m, lst = statistics.median(middle), statistics.median(last)
        checks[key] = {
            "middle_median": m,
            "last_median": lst,
            "passed": lst <= LATENCY_FACTOR * m + LATENCY_SLACK_MS,
        }
    return {"passed": all(c["passed"] for c in checks.values()), "checks": checks}


def run_soak(
    dsn: str, embedded: bool, opts: SoakOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """Run the soak for `opts.duration` seconds; every sample is a line of `opts.results`, and
    so is the summary (returned too)."""
    prune_age = PRUNE_AGE if opts.sample >= 60 else timedelta(seconds=opts.sample)
    opts.results.parent.mkdir(parents=True, exist_ok=True)
    samples: list[dict[str, Any]] = []
    with (
        throwaway_schema(dsn, "soak") as schema,
        tempfile.TemporaryDirectory(prefix="pgq-soak-") as logs,
        opts.results.open("w") as out,
        Queue.connect(dsn, schema) as q,
    ):
        header = {
            "soak": {
                "duration_s": opts.duration,
                "rate": opts.rate,
                "sample_s": opts.sample,
                "prune_age_s": prune_age.total_seconds(),
                "workers": opts.workers,
                "worker_concurrency": WORKER_CONCURRENCY,
                "server": server_version(q.conn),
                "embedded": embedded,
                "machine": machine(),
                "started": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        }
        _write(out, header)
        procs = _start_workers(dsn, schema, opts.workers, Path(logs))
        producer = Producer(dsn, schema, opts.rate, opts.payload_bytes)
        started = time.monotonic()
        since = datetime.now(UTC)
        producer.start()
        say(
            f"soak: {opts.duration:g}s at {opts.rate:g} jobs/s, {opts.workers} workers, "
            f"a sample every {opts.sample:g}s into {opts.results}"
        )
        try:
            n = 0
            while True:
                n += 1
                next_at = started + n * opts.sample
                if next_at > started + opts.duration + 0.5:
                    break
                time.sleep(max(0.0, next_at - time.monotonic()))
                line, since = sample(q, producer, started, since, prune_age)
                samples.append(line)
                _write(out, line)
                say(
                    f"{line['elapsed_s']:>7.0f}s  enqueued {line['enqueued']:,}  ready "
                    f"{line['ready']:,}  claim p50/p99 {line['claim_p50_ms']}/"
                    f"{line['claim_p99_ms']} ms  jobs {_mb(line, 'jobs')}  events "
                    f"{_mb(line, 'job_events')}  pruned {line['pruned']:,}"
                )
                dead_workers = [p.pid for p in procs if p.poll() is not None]
                if dead_workers:
                    say(f"workers exited early: {dead_workers}")
                    break
        finally:
            producer.stopping.set()
            producer.join(10)
            codes = _stop_workers(procs)
        summary = {
            "summary": {
                **verdict(samples),
                "samples": len(samples),
                "enqueued": producer.sent,
                "worker_exit_codes": codes,
                "ended": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        }
        _write(out, summary)
    return {"header": header["soak"], "samples": samples, **summary}


def _mb(line: dict[str, Any], table: str) -> str:
    t = line["tables"].get(table, {})
    return f"{(t.get('table_bytes', 0) + t.get('index_bytes', 0)) / 2**20:.1f} MB"


def _write(out: IO[str], data: dict[str, Any]) -> None:
    out.write(json.dumps(data, default=str) + "\n")
    out.flush()


def print_soak(result: dict[str, Any], say: Callable[[str], None]) -> None:
    s = result["summary"]
    verdict_text = {True: "PASSED", False: "FAILED", None: "NOT JUDGED"}[s["passed"]]
    say(f"soak {verdict_text}: {s['samples']} samples, {s['enqueued']:,} jobs enqueued")
    for name, check in s.get("checks", {}).items():
        say(f"  {name}: {'ok' if check['passed'] else 'NOT FLAT'} {check}")
