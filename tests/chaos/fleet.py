"""The fleet, a chaos run: many worker processes through PgBouncer, SIGKILLed and SIGSTOPped,
while a producer enqueues at a steady rate; then every job is accounted for from SQL.

tests/test_fleet.py runs a short one and the checks on tampered tables; the five-minute run
whose figures docs/performance.md reports is, from the repository root,
`PYTHONPATH=tests python -m chaos.fleet 5m --json` (`--help` for its options; exit 1 when a
check fails).

The run:
- PgBouncer in transaction mode in front of the server (`bouncer.POOL_SETTINGS`, the pool a
  deployment would run: 8 server connections + 2 in reserve), on a private Unix socket;
- W `pgq worker` processes (`--pooled`, LISTEN on a direct connection), each with its own
  `--worker-id` (`fleet-w1`...), concurrency C, running `pgq_bench.handlers:fenced_effect`: the
  job's effect (a row of `effects` listing the fence of every application that committed) and
  its completion in one transaction through the pool;
- a producer enqueueing `rate` jobs/s, one per transaction, through the pool;
- every `kill_every` seconds (0.5x to 1.5x, at random) a worker is SIGKILLed, preferably one
  holding jobs, and started again with the same id: a deployment restarts a crashed process
  in place (a container restarting in its pod, a systemd instance), under the same name. The
  killed process's jobs come back when their leases expire (the reaper; the attempt counts):
  a worker hands back jobs running under its id only after a reconnect, never at start;
- one worker at a time is SIGSTOPped (one holding jobs) for longer than its lease plus two reap
  intervals, then SIGCONTed: by then its jobs were reaped and taken by others, and every write
  it makes for them must be rejected (a 'stale' event);
- at the end: no more jobs, every stopped worker resumed, the workers drain (bounded), SIGTERM.

The checks, all from SQL (`check`):
- no job lost: every id the producer was given back exists, and every job is done: none
  ready or running after the drain, none dead (a dead job is listed with its last error);
- no effect applied twice: no job's `effects.fences` holds more than one fence, i.e. no two
  transactions that applied its effect (each of which completed it) both committed; and no job
  has two 'completed' events;
- no stale completion landed: every 'completed' event and every effect carries the job's
  final fence (a completion by an older claim would carry an older one);
- every done job has its effect and every effect belongs to a done job;
- no worker exited unless killed or stopped at the end by the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgq_bench.common import (
    QUEUE_NAME,
    load_average,
    log_tail,
    machine,
    scan_logs,
    server,
    server_version,
    throwaway_schema,
)
from pgq_bench.handlers import EFFECTS_TABLE, FENCED_EFFECT_SPEC
from pgq_core import PgqError, Queue
from pgq_core.config import scrub
from pgq_core.durations import parse_duration
from pgq_core.text import printable

from .bouncer import POOL_SETTINGS, Bouncer, executable, pgbouncer

#: Each job's work: the handler sleeps a random time up to this long before its transaction.
WORK_MAX_S = 0.02
TICK = 0.1
POOL_SAMPLE_EVERY = 2.0

# The run's own bookkeeping and checks (not queue SQL).
SERVER_NOW = "SELECT clock_timestamp()"
#: What a worker logs once it runs, its SIGTERM handled (runtime.Worker.run).
STARTED_MARK = b" started: queues "
#: Running jobs by worker id, with how long ago each was claimed: a restarted worker keeps its
#: id, so the jobs its killed predecessor held (until their leases expire) are told apart by age.
HELD = """
SELECT worker, extract(epoch FROM clock_timestamp() - claimed_at)::float8 FROM {s}.jobs
 WHERE status = 'running'
"""
HELD_BY = """
SELECT id, fence FROM {s}.jobs
 WHERE status = 'running' AND worker = %s AND claimed_at >= clock_timestamp() - %s::interval
"""
UNFINISHED = "SELECT count(*) FROM {s}.jobs WHERE status IN ('ready', 'running')"
STATUS_COUNTS = "SELECT status, count(*) FROM {s}.jobs GROUP BY status"
MISSING = """
SELECT count(*) FROM unnest(%(ids)s::bigint[]) AS a(id)
 WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.id = a.id)
"""
DEAD = "SELECT id, attempts, last_error FROM {s}.jobs WHERE status = 'dead' ORDER BY id LIMIT 20"
UNFINISHED_SAMPLE = """
SELECT id, status, fence, worker, lease_until FROM {s}.jobs
 WHERE status IN ('ready', 'running') ORDER BY id LIMIT 20
"""
APPLIED_TWICE = """
SELECT job_id, fences FROM {s}.effects WHERE cardinality(fences) > 1 ORDER BY job_id
"""
COMPLETED_TWICE = """
SELECT job_id, array_agg(fence ORDER BY id) FROM {s}.job_events WHERE event = 'completed'
 GROUP BY job_id HAVING count(*) > 1 ORDER BY job_id
"""
STALE_COMPLETIONS = """
SELECT ev.job_id, ev.fence, j.fence FROM {s}.job_events ev JOIN {s}.jobs j ON j.id = ev.job_id
 WHERE ev.event = 'completed' AND ev.fence <> j.fence ORDER BY ev.job_id
"""
STALE_EFFECTS = """
SELECT e.job_id, e.fence, j.fence FROM {s}.effects e JOIN {s}.jobs j ON j.id = e.job_id
 WHERE e.fence <> j.fence ORDER BY e.job_id
"""
DONE_WITHOUT_EFFECT = """
SELECT j.id FROM {s}.jobs j
 WHERE j.status = 'done' AND NOT EXISTS (SELECT 1 FROM {s}.effects e WHERE e.job_id = j.id)
 ORDER BY j.id
"""
EFFECT_WITHOUT_DONE = """
SELECT e.job_id, j.status FROM {s}.effects e LEFT JOIN {s}.jobs j ON j.id = e.job_id
 WHERE j.status IS DISTINCT FROM 'done' ORDER BY e.job_id
"""
EVENTS = "SELECT event, count(*) FROM {s}.job_history GROUP BY event ORDER BY event"
CLAIMS_PER_JOB = "SELECT fence, count(*) FROM {s}.jobs GROUP BY fence ORDER BY fence"
#: Pickup: enqueue to the job's first claim (its first 'claimed' event); done: enqueue to done.
LATENCY = """
WITH first AS (
  SELECT job_id, min(at) AS at FROM {s}.job_history WHERE event = 'claimed' GROUP BY job_id
), lat AS (
  SELECT extract(epoch FROM f.at - j.queued_at) AS pickup,
         CASE WHEN j.status = 'done' THEN extract(epoch FROM j.finished_at - j.queued_at) END
           AS done
    FROM {s}.jobs j JOIN first f ON f.job_id = j.id
)
SELECT count(*),
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY pickup), max(pickup),
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY done), max(done)
  FROM lat
"""
DONE_BETWEEN = """
SELECT count(*) FROM {s}.jobs
 WHERE status = 'done' AND finished_at >= %(start)s AND finished_at < %(end)s
"""
SPAN = """
SELECT min(queued_at), max(finished_at), count(*) FILTER (WHERE status = 'done') FROM {s}.jobs
"""
STOP_OUTCOME = """
SELECT count(*),
       count(*) FILTER (WHERE j.status = 'done' AND j.fence > h.fence),
       (SELECT count(*) FROM {s}.job_events
         WHERE event = 'stale' AND worker = %(worker)s AND at >= %(since)s)
  FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS h(id, fence)
  JOIN {s}.jobs j ON j.id = h.id
"""
#: The jobs slowest from enqueue to done, with their history (seconds after the enqueue).
SLOWEST = """
WITH slow AS (
  SELECT id, queued_at, finished_at - queued_at AS took FROM {s}.jobs
   WHERE status = 'done' ORDER BY finished_at - queued_at DESC LIMIT %(n)s
)
SELECT s.id, round(extract(epoch FROM s.took)::numeric, 1),
       array_agg(ev.event || ' ' || ev.fence || ' ' || coalesce(ev.worker, '-') || ' +'
                 || round(extract(epoch FROM ev.at - s.queued_at)::numeric, 1) || 's'
                 ORDER BY ev.phase, ev.at, ev.seq)
  FROM slow s JOIN {s}.job_history ev ON ev.job_id = s.id
 GROUP BY s.id, s.took ORDER BY s.took DESC
"""
LOG_MARKS = ("Traceback", " ERROR ", " WARNING ", "prepared statement")


@dataclass(frozen=True)
class FleetOptions:
    duration: float
    workers: int = 8
    concurrency: int = 25
    rate: float = 100.0
    kill_every: float = 5.0
    lease: float = 30.0
    pool_size: int = 8
    seed: int | None = None
    drain_timeout: float | None = None

    @property
    def reap_interval(self) -> float:
        """The worker's reaper period for this lease (as `Worker` computes it)."""
        return min(5.0, max(0.5, self.lease / 2))

    @property
    def stop_for(self) -> float:
        """A SIGSTOP long enough for any lease the stopped worker held to expire and be reaped."""
        return self.lease + 2 * self.reap_interval + 1.0

    @property
    def drain_limit(self) -> float:
        return self.drain_timeout or max(60.0, 2 * self.lease + 30.0)

    def pool_settings(self) -> dict[str, Any]:
        settings = dict(POOL_SETTINGS)
        settings["default_pool_size"] = self.pool_size
        settings["max_db_connections"] = self.pool_size + settings["reserve_pool_size"]
        return settings


def _q(text: str, schema: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(float(seconds) * 1000, 1)


class Producer(threading.Thread):
    """Enqueues `rate` jobs/s, one per transaction, through the pool; keeps every id it was
    given back (each one a job the queue now owes)."""

    def __init__(self, dsn: str, schema: str, rate: float, rng: random.Random) -> None:
        super().__init__(daemon=True, name="fleet-producer")
        self.dsn, self.schema, self.rate = dsn, schema, rate
        self.rng = rng
        self.ids: list[int] = []
        self.errors = 0
        self.max_lag = 0.0
        self.last_error = ""
        self.stopping = threading.Event()
        self.started_at = 0.0
        self.ended_at = 0.0

    def _queue(self) -> Queue:
        conn = psycopg.connect(self.dsn, autocommit=True, prepare_threshold=None)
        return Queue(conn, self.schema)

    def run(self) -> None:
        queue: Queue | None = None
        self.started_at = time.monotonic()
        sent = 0
        try:
            while not self.stopping.is_set():
                due = self.started_at + sent / self.rate
                now = time.monotonic()
                if due > now:
                    self.stopping.wait(due - now)
                    continue
                self.max_lag = max(self.max_lag, now - due)
                try:
                    if queue is None:
                        queue = self._queue()
                    work = round(self.rng.uniform(0, WORK_MAX_S), 4)
                    job_id = queue.enqueue(QUEUE_NAME, {"n": sent, "sleep": work})
                except psycopg.Error as exc:
                    self.errors += 1
                    self.last_error = str(exc).strip().splitlines()[0] if str(exc) else repr(exc)
                    if queue is not None:
                        queue.conn.close()
                        queue = None
                    self.stopping.wait(0.1)
                    continue
                self.ids.append(job_id)
                sent += 1
        finally:
            self.ended_at = time.monotonic()
            if queue is not None:
                queue.conn.close()


@dataclass
class Slot:
    """One worker of the fleet: its id, kept across restarts, and its current process."""

    worker_id: str
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    stopped_since: float | None = None
    started_at: float = 0.0
    logs: list[Path] = field(default_factory=list)

    def age(self) -> float:
        """Seconds since its current process started."""
        return time.monotonic() - self.started_at


class Fleet:
    """The worker processes: started, killed and restarted, stopped and continued."""

    def __init__(self, env: dict[str, str], args: Sequence[str], logs: Path, n: int) -> None:
        self.env, self.args, self.logs = env, list(args), logs
        self.slots = [Slot(f"fleet-w{i + 1}") for i in range(n)]
        self.unexpected: list[dict[str, Any]] = []

    def start(self, slot: Slot) -> None:
        slot.starts += 1
        slot.started_at = time.monotonic()
        log_path = self.logs / f"{slot.worker_id}.{slot.starts}.log"
        slot.logs.append(log_path)
        argv = [sys.executable, "-m", "pgq_cli", "worker", QUEUE_NAME, *self.args,
                "--worker-id", slot.worker_id]  # fmt: skip
        with log_path.open("wb") as log:
            slot.proc = subprocess.Popen(
                argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.logs
            )

    def kill(self, slot: Slot) -> None:
        assert slot.proc is not None
        slot.proc.send_signal(signal.SIGKILL)
        slot.proc.wait(30)
        self.start(slot)

    def stop(self, slot: Slot) -> None:
        assert slot.proc is not None
        slot.proc.send_signal(signal.SIGSTOP)
        slot.stopped_since = time.monotonic()

    def cont(self, slot: Slot) -> float:
        """SIGCONT a stopped worker; returns how long it was stopped."""
        if slot.proc is not None and slot.proc.poll() is None:
            slot.proc.send_signal(signal.SIGCONT)
        stopped = time.monotonic() - (slot.stopped_since or time.monotonic())
        slot.stopped_since = None
        return stopped

    def running(self) -> list[Slot]:
        return [s for s in self.slots if s.stopped_since is None]

    def restart_exited(self, elapsed: float) -> None:
        """A worker that exited by itself is a finding: note it, and start it again as a
        deployment's supervisor would."""
        for slot in self.running():
            if slot.proc is not None and slot.proc.poll() is not None:
                self.unexpected.append(
                    {"at_s": round(elapsed, 1), "worker": slot.worker_id,
                     "exit_code": slot.proc.returncode, "log": slot.logs[-1].name,
                     "log_tail": log_tail(slot.logs[-1])}
                )  # fmt: skip
                self.start(slot)

    def started(self, slot: Slot) -> bool:
        """Its current process has logged its start (so it handles SIGTERM), or has exited."""
        if slot.proc is None or slot.proc.poll() is not None:
            return True
        try:
            return STARTED_MARK in slot.logs[-1].read_bytes()
        except OSError:
            return False

    def terminate_all(self, timeout: float = 60.0) -> list[int | None]:
        """SIGTERM every worker once it has started (one just restarted may still be importing,
        when SIGTERM would kill it outright), then wait for their exit codes."""
        deadline = time.monotonic() + timeout
        for slot in self.slots:
            if slot.stopped_since is not None:
                self.cont(slot)
        while not all(self.started(s) for s in self.slots) and time.monotonic() < deadline:
            time.sleep(0.05)
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for slot in self.slots:
            if slot.proc is None:
                codes.append(None)
                continue
            try:
                codes.append(slot.proc.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                slot.proc.kill()
                slot.proc.wait(10)
                codes.append(None)
        return codes


def check(conn: psycopg.Connection[Any], schema: str, acked: Sequence[int]) -> dict[str, Any]:
    """The run's verdict from SQL: `acked` are the ids the producer was given back. Returns
    {"passed": bool, "checks": {name: {"passed": bool, ...evidence}}}."""

    def rows(text: str, params: Any = None) -> list[tuple[Any, ...]]:
        return conn.execute(_q(text, schema), params).fetchall()

    statuses = dict(rows(STATUS_COUNTS))
    missing = rows(MISSING, {"ids": list(acked)})[0][0]
    unfinished = statuses.get("ready", 0) + statuses.get("running", 0)
    dead = rows(DEAD)
    twice = rows(APPLIED_TWICE)
    completed_twice = rows(COMPLETED_TWICE)
    stale_completions = rows(STALE_COMPLETIONS)
    stale_effects = rows(STALE_EFFECTS)
    no_effect = rows(DONE_WITHOUT_EFFECT)
    orphan_effects = rows(EFFECT_WITHOUT_DONE)
    checks: dict[str, dict[str, Any]] = {
        "no_job_lost": {
            "passed": missing == 0 and unfinished == 0 and statuses.get("dead", 0) == 0,
            "acknowledged": len(acked),
            "in_table": sum(statuses.values()),
            "missing": missing,
            "unfinished": unfinished,
            "unfinished_sample": [list(map(str, r)) for r in rows(UNFINISHED_SAMPLE)][:10],
            "done": statuses.get("done", 0),
            "dead": statuses.get("dead", 0),
            "dead_sample": [{"id": r[0], "attempts": r[1], "last_error": r[2]} for r in dead],
        },
        "no_effect_applied_twice": {
            "passed": not twice and not completed_twice,
            "effects_with_several_fences": len(twice),
            "jobs_completed_twice": len(completed_twice),
            "sample": [{"job_id": r[0], "fences": list(r[1])} for r in (twice or completed_twice)][
                :10
            ],
        },
        "no_stale_completion": {
            "passed": not stale_completions and not stale_effects,
            "completions_not_at_final_fence": len(stale_completions),
            "effects_not_at_final_fence": len(stale_effects),
            "sample": [list(r) for r in (stale_completions or stale_effects)][:10],
        },
        "effects_match_done_jobs": {
            "passed": not no_effect and not orphan_effects,
            "done_without_effect": len(no_effect),
            "effect_without_done_job": len(orphan_effects),
            "sample": [list(map(str, r)) for r in (no_effect or orphan_effects)][:10],
        },
    }
    return {"passed": all(c["passed"] for c in checks.values()), "checks": checks}


def figures(
    conn: psycopg.Connection[Any], schema: str, window: tuple[datetime, datetime]
) -> dict[str, Any]:
    """Throughput, pickup and done latency, claims per job and the history's events."""

    def rows(text: str, params: Any = None) -> list[tuple[Any, ...]]:
        return conn.execute(_q(text, schema), params).fetchall()

    n, pickup, pickup_max, done, done_max = rows(LATENCY)[0]
    start, end = window
    in_window = rows(DONE_BETWEEN, {"start": start, "end": end})[0][0]
    first, last, total_done = rows(SPAN)[0]
    span = (last - first).total_seconds() if first and last else 0.0
    window_s = (end - start).total_seconds()
    return {
        "throughput_jobs_s": round(in_window / window_s, 1) if window_s > 0 else None,
        "throughput_note": "jobs done while the producer ran, per second of that window",
        "overall_jobs_s": round(total_done / span, 1) if span > 0 else None,
        "jobs_claimed": n,
        "pickup_p50_ms": _ms(pickup[0]) if pickup else None,
        "pickup_p99_ms": _ms(pickup[1]) if pickup else None,
        "pickup_max_ms": _ms(pickup_max),
        "done_p50_ms": _ms(done[0]) if done else None,
        "done_p99_ms": _ms(done[1]) if done else None,
        "done_max_ms": _ms(done_max),
        "latency_note": "pickup: enqueue to first claim; done: enqueue to done (server clock)",
        "claims_per_job": {str(fence): count for fence, count in rows(CLAIMS_PER_JOB)},
        "slowest": [
            {"id": i, "seconds": float(took), "history": list(history)}
            for i, took, history in rows(SLOWEST, {"n": 5})
        ],
        "events": dict(rows(EVENTS)),
    }


class PoolWatch:
    """Samples PgBouncer's SHOW POOLS: most clients waiting, longest wait, most servers busy."""

    def __init__(self, bouncer: Bouncer) -> None:
        self.bouncer = bouncer
        self.max_waiting = 0
        self.max_wait_ms = 0.0
        self.max_active = 0
        self.samples = 0
        self.errors = 0

    def sample(self) -> None:
        try:
            pools = [p for p in self.bouncer.show("SHOW POOLS") if p["database"] != "pgbouncer"]
        except psycopg.Error:
            self.errors += 1
            return
        self.samples += 1
        for p in pools:
            self.max_waiting = max(self.max_waiting, int(p["cl_waiting"]))
            wait = float(p["maxwait"]) * 1000 + float(p.get("maxwait_us", 0)) / 1000
            self.max_wait_ms = max(self.max_wait_ms, wait)
            self.max_active = max(self.max_active, int(p["sv_active"]))

    def report(self) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        with contextlib.suppress(psycopg.Error):
            for row in self.bouncer.show("SHOW STATS"):
                if row["database"] != "pgbouncer":
                    stats = {k: int(v) for k, v in row.items() if k != "database"}
        return {
            "max_clients_waiting": self.max_waiting,
            "max_wait_ms": round(self.max_wait_ms, 1),
            "max_server_connections_active": self.max_active,
            "samples": self.samples,
            "sample_errors": self.errors,
            "transactions": stats.get("total_xact_count"),
            "avg_wait_us": stats.get("avg_wait_time"),
            "total_wait_s": round(stats["total_wait_time"] / 1e6, 1) if stats else None,
        }


@contextlib.contextmanager
def _logs_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pgq-fleet-") as logs:
        yield Path(logs)


def run_fleet(
    dsn: str, embedded: bool, opts: FleetOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """Run the fleet for `opts.duration` seconds through a PgBouncer of its own; the result
    holds the checks (`passed`) and the figures."""
    rng = random.Random(opts.seed)
    with (
        pgbouncer(dsn, opts.pool_settings()) as bouncer,
        throwaway_schema(dsn, "fleet") as schema,
        _logs_dir() as logs,
        psycopg.connect(dsn, autocommit=True) as mon,
    ):
        mon.execute(_q(EFFECTS_TABLE, schema))
        header = {
            "duration_s": opts.duration,
            "workers": opts.workers,
            "concurrency": opts.concurrency,
            "rate": opts.rate,
            "kill_every_s": opts.kill_every,
            "lease_s": opts.lease,
            "stop_for_s": opts.stop_for,
            "handler": FENCED_EFFECT_SPEC,
            "work_per_job_ms": f"uniform 0-{WORK_MAX_S * 1000:g}",
            "restart": "same --worker-id (restarted in place)",
            "pgbouncer": {
                "version": bouncer.version,
                "listen": "Unix socket in a private directory",
                **bouncer.settings,
            },
            "server": server_version(mon),
            "embedded": embedded,
            "machine": machine(),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "seed": opts.seed,
        }
        env = dict(
            os.environ,
            PGQ_DSN=bouncer.dsn,
            PGQ_SCHEMA=schema,
            PGQ_POOLED="1",
            PGQ_LISTEN_DSN=dsn,
        )
        env.pop("PGQ_WORKER_ID", None)
        args = ["--handler", FENCED_EFFECT_SPEC, "--concurrency", str(opts.concurrency),
                "--lease", f"{opts.lease:g}s", "--log-level", "info"]  # fmt: skip
        fleet = Fleet(env, args, logs, opts.workers)
        pool = PoolWatch(bouncer)
        producer = Producer(bouncer.dsn, schema, opts.rate, random.Random(rng.random()))
        kills: list[dict[str, Any]] = []
        stops: list[dict[str, Any]] = []
        say(
            f"fleet: {opts.duration:g}s, {opts.workers} workers x {opts.concurrency} through "
            f"PgBouncer {bouncer.version.split()[-1]} (pool {opts.pool_size} + "
            f"{bouncer.settings['reserve_pool_size']}), {opts.rate:g} jobs/s, a SIGKILL every "
            f"~{opts.kill_every:g}s, SIGSTOP for {opts.stop_for:g}s (lease {opts.lease:g}s)"
        )
        codes: list[int | None] = []
        drained_in: float | None = None
        try:
            for slot in fleet.slots:
                fleet.start(slot)
            time.sleep(1.0)  # let them connect before the clock starts
            window_start = mon.execute(SERVER_NOW).fetchone()[0]  # type: ignore[index]
            started = time.monotonic()
            producer.start()
            end = started + opts.duration
            next_kill = started + opts.kill_every * rng.uniform(0.5, 1.5)
            next_stop = started + max(2.0, 0.15 * opts.duration)
            next_sample = started
            next_say = started + max(5.0, opts.duration / 10)
            while time.monotonic() < end:
                now = time.monotonic()
                elapsed = now - started
                fleet.restart_exited(elapsed)
                for slot in fleet.slots:
                    since = slot.stopped_since
                    if since is not None and now - since >= opts.stop_for:
                        stops[-1]["stopped_s"] = round(fleet.cont(slot), 1)
                        next_stop = now + opts.stop_for
                if now >= next_kill:
                    kills.append(_kill_one(fleet, mon, schema, rng, elapsed))
                    next_kill = now + opts.kill_every * rng.uniform(0.5, 1.5)
                if (
                    now >= next_stop
                    and all(s.stopped_since is None for s in fleet.slots)
                    and end - now > opts.stop_for + 1.0
                ):
                    stops.append(_stop_one(fleet, mon, schema, rng, elapsed))
                    next_stop = float("inf")
                if now >= next_sample:
                    pool.sample()
                    next_sample = now + POOL_SAMPLE_EVERY
                if now >= next_say:
                    say(_progress(mon, schema, producer, elapsed, len(kills), len(stops), pool))
                    next_say = now + max(5.0, opts.duration / 10)
                time.sleep(TICK)
            producer.stopping.set()
            producer.join(30)
            window_end = mon.execute(SERVER_NOW).fetchone()[0]  # type: ignore[index]
            for slot in fleet.slots:
                if slot.stopped_since is not None:
                    stops[-1]["stopped_s"] = round(fleet.cont(slot), 1)
            say(f"producing stopped after {time.monotonic() - started:.0f}s; draining")
            drain_started = time.monotonic()
            while time.monotonic() - drain_started < opts.drain_limit:
                fleet.restart_exited(time.monotonic() - started)
                pool.sample()
                left = mon.execute(_q(UNFINISHED, schema)).fetchone()[0]  # type: ignore[index]
                if left == 0:
                    drained_in = time.monotonic() - drain_started
                    break
                time.sleep(0.5)
        finally:
            producer.stopping.set()
            codes = fleet.terminate_all()
        verdict = check(mon, schema, producer.ids)
        pool_report = pool.report()
        pool_report["closes"] = bouncer_closes(bouncer.log)
        if pool_report["transactions"] and producer.ids:
            pool_report["transactions_per_job"] = round(
                pool_report["transactions"] / len(producer.ids), 1
            )
        unexpected = {
            "passed": not fleet.unexpected,
            "exits": fleet.unexpected[:10],
            "exit_codes_at_sigterm": codes,
        }
        verdict["checks"]["no_worker_exited_by_itself"] = unexpected
        verdict["passed"] = verdict["passed"] and unexpected["passed"]
        for stop in stops:
            stop.update(_stop_outcome(mon, schema, stop))
        result = {
            "fleet": header,
            "producer": {
                "enqueued": len(producer.ids),
                "errors": producer.errors,
                "last_error": scrub(producer.last_error, dsn) if producer.last_error else None,
                "achieved_rate": round(
                    len(producer.ids) / max(1e-9, producer.ended_at - producer.started_at), 1
                ),
                "max_lag_s": round(producer.max_lag, 3),
            },
            "kills": {
                "count": len(kills),
                "jobs_held_by_victims": sum(k["held"] for k in kills),
                "by_worker": _count_by(kills, "worker"),
                "events": kills,
            },
            "stops": stops,
            "drain": {
                "drained": drained_in is not None,
                "seconds": None if drained_in is None else round(drained_in, 1),
                "limit_s": opts.drain_limit,
            },
            "pool": {
                **pool_report,
                "note": "transactions: every transaction the pool ran (producer, handlers, "
                "claims, heartbeats, reaps); per job: that over the jobs enqueued",
            },
            "workers": {
                "ids": [s.worker_id for s in fleet.slots],
                "starts": {s.worker_id: s.starts for s in fleet.slots},
                "logs": scan_logs([p for s in fleet.slots for p in s.logs], LOG_MARKS),
            },
            "figures": figures(mon, schema, (window_start, window_end)),
            "load_at_end": load_average(),
            "ended": datetime.now(UTC).isoformat(timespec="seconds"),
            **verdict,
        }
    return result


def _held(mon: psycopg.Connection[Any], schema: str, slots: Sequence[Slot]) -> dict[str, int]:
    """Running jobs claimed by each slot's current process (not by a killed predecessor)."""
    ages = {s.worker_id: s.age() for s in slots}
    held: dict[str, int] = {}
    for worker, claimed_ago in mon.execute(_q(HELD, schema)).fetchall():
        if worker in ages and claimed_ago <= ages[worker]:
            held[worker] = held.get(worker, 0) + 1
    return held


def _pick(
    fleet: Fleet, mon: psycopg.Connection[Any], schema: str, rng: random.Random
) -> tuple[Slot, dict[str, int]]:
    """A running worker, one holding jobs if any does; and what each running worker holds."""
    candidates = fleet.running()
    held = _held(mon, schema, candidates)
    holders = [s for s in candidates if held.get(s.worker_id, 0) > 0]
    return rng.choice(holders or candidates), held


def _kill_one(
    fleet: Fleet, mon: psycopg.Connection[Any], schema: str, rng: random.Random, elapsed: float
) -> dict[str, Any]:
    """SIGKILL a running worker, preferably one holding jobs, and start it again (same id)."""
    victim, held = _pick(fleet, mon, schema, rng)
    fleet.kill(victim)
    return {"at_s": round(elapsed, 1), "worker": victim.worker_id,
            "held": held.get(victim.worker_id, 0)}  # fmt: skip


def _stop_one(
    fleet: Fleet, mon: psycopg.Connection[Any], schema: str, rng: random.Random, elapsed: float
) -> dict[str, Any]:
    """SIGSTOP a worker holding jobs (any, if none does); note what it held, and when."""
    victim, _ = _pick(fleet, mon, schema, rng)
    fleet.stop(victim)
    log = victim.logs[-1]
    at = mon.execute(SERVER_NOW).fetchone()[0]  # type: ignore[index]
    jobs = mon.execute(
        _q(HELD_BY, schema), [victim.worker_id, timedelta(seconds=victim.age())]
    ).fetchall()
    return {
        "at_s": round(elapsed, 1),
        "worker": victim.worker_id,
        "since": at,
        "held": [(int(i), int(f)) for i, f in jobs],
        "log": (log, log.stat().st_size if log.exists() else 0),
    }


def _stop_outcome(
    mon: psycopg.Connection[Any], schema: str, stop: dict[str, Any]
) -> dict[str, Any]:
    """What became of a stopped worker's jobs: how many were done by a later claim, and how
    many of its writes were rejected as stale after it was stopped."""
    held = stop.pop("held")
    since = stop.pop("since")
    log, offset = stop.pop("log")
    n, redone, stale = mon.execute(
        _q(STOP_OUTCOME, schema),
        {"ids": [i for i, _ in held], "fences": [f for _, f in held],
         "worker": stop["worker"], "since": since},
    ).fetchone() or (0, 0, 0)  # fmt: skip
    return {
        "jobs_held": n,
        "done_by_a_later_claim": redone,
        "stale_events_recorded": stale,
        "log_after_stop": _log_from(log, offset),
    }


def _log_from(path: Path, offset: int, most: int = 15) -> list[str]:
    """What a worker logged from `offset` on (its lines after a SIGSTOP), time and text."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [printable(line)[:240] for line in text.strip().splitlines()[:most]]


def bouncer_closes(log: Path) -> dict[str, int]:
    """PgBouncer's reasons for closing connections, counted from its log ("closing because:
    <reason> (age ...)")."""
    counts: dict[str, int] = {}
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return counts
    for line in text.splitlines():
        _, sep, rest = line.partition("closing because: ")
        if sep:
            reason = rest.split(" (age")[0].strip()
            counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _count_by(items: list[dict[str, Any]], key: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item[key]] = counts.get(item[key], 0) + 1
    return dict(sorted(counts.items()))


def _progress(
    mon: psycopg.Connection[Any],
    schema: str,
    producer: Producer,
    elapsed: float,
    kills: int,
    stops: int,
    pool: PoolWatch,
) -> str:
    counts = dict(mon.execute(_q(STATUS_COUNTS, schema)).fetchall())
    return (
        f"{elapsed:>6.0f}s  enqueued {len(producer.ids):,}  done {counts.get('done', 0):,}  "
        f"ready {counts.get('ready', 0):,}  running {counts.get('running', 0):,}  "
        f"dead {counts.get('dead', 0):,}  kills {kills}  stops {stops}  "
        f"pool waiting max {pool.max_waiting}"
    )


def print_fleet(result: dict[str, Any], say: Callable[[str], None]) -> None:
    f = result["figures"]
    verdict = "PASSED" if result["passed"] else "FAILED"
    say(
        f"fleet {verdict}: {result['producer']['enqueued']:,} jobs, {result['kills']['count']} "
        f"kills, {len(result['stops'])} stops; {f['throughput_jobs_s']} jobs/s done; pickup "
        f"p50/p99 {f['pickup_p50_ms']}/{f['pickup_p99_ms']} ms; done p50/p99 "
        f"{f['done_p50_ms']}/{f['done_p99_ms']} ms"
    )
    for name, c in result["checks"].items():
        detail = {k: v for k, v in c.items() if k != "passed" and v not in ([], {}, None)}
        say(f"  {name}: {'ok' if c['passed'] else 'FAILED'} {json.dumps(detail, default=str)}")


def _seconds(text: str) -> float:
    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m chaos.fleet DURATION`: the fleet on a throwaway server (or --dsn with a
    throwaway schema); prints the figures and checks (or --json); 1 when a check failed."""
    parser = argparse.ArgumentParser(
        prog="python -m chaos.fleet",
        description="Workers through PgBouncer under SIGKILL and SIGSTOP, then every job "
        "accounted for from SQL.",
    )
    parser.add_argument("duration", type=_seconds, help="how long the producer runs, e.g. 5m")
    parser.add_argument("--dsn", default=os.environ.get("PGQ_DSN"),
                        help="a server to use (default: a throwaway embedded one)")
    parser.add_argument("--workers", type=int, default=8, help="worker processes (8)")
    parser.add_argument("--concurrency", type=int, default=25, help="each worker's (25)")
    parser.add_argument("--rate", type=float, default=100.0, help="jobs/s enqueued (100)")
    parser.add_argument("--kill-every", type=_seconds, default=5.0,
                        help="a SIGKILL about this often, 0.5x to 1.5x (5s)")
    parser.add_argument("--lease", type=_seconds, default=30.0, help="the workers' lease (30s)")
    parser.add_argument("--pool-size", type=int, default=8, help="PgBouncer's pool (8)")
    parser.add_argument("--random-state", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.duration <= 0:
        parser.error("the duration must be longer than 0s")
    try:
        executable()  # before any server starts: one line
    except PgqError as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        return 1
    opts = FleetOptions(
        args.duration,
        workers=args.workers,
        concurrency=args.concurrency,
        rate=args.rate,
        kill_every=args.kill_every,
        lease=args.lease,
        pool_size=args.pool_size,
        seed=args.random_state,
    )

    def say(message: str) -> None:
        print(f"· {message}", file=sys.stderr if args.json else sys.stdout, flush=True)

    with server(args.dsn, statement_stats=False) as (target, embedded):
        result = run_fleet(target, embedded, opts, say)
    if args.json:
        print(json.dumps(result, default=str, indent=2))
    else:
        print_fleet(result, say)
    if not result["passed"]:
        say('fleet FAILED: see "checks"')
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
