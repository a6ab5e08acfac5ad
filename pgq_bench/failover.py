"""`pgq bench --failover`: real `pgq worker` processes on a Patroni cluster whose leader is
SIGKILLed under load, again and again; then every job and every handler run is accounted for.

The run (`run_failover`):
- a cluster of two PostgreSQL 15 nodes (`cluster.Cluster`, asynchronous or synchronous
  replication), pgq migrated on it, the handler's side tables (`handlers.FAILOVER_TABLES`);
- W `pgq worker` processes at concurrency C on the cluster's multi-host DSN, each running
  `handlers.failover_effect`: a fenced write, a row in `applied` and the completion in one
  transaction, and a line per start and per acknowledged commit in a file outside the database
  (which can lose commits);
- the jobs are enqueued in F + 1 batches, each waited on until the standby has it (so no
  enqueue is lost to the failover); a failover happens inside each of the first F batches, once
  a share of it (`kill_at`) is acknowledged: the leader is SIGKILLed, the promotion awaited, the
  first claim on the new primary timed, and the old node rejoins as a replica (pg_rewind);
- then the last batch is drained and the workers stopped with SIGTERM.

The checks (`analyse`), from the final primary and the runs file:
- no job lost: every job enqueued ends `done`;
- no stale write accepted: each done job's one `effects` row and one `applied` row carry the
  fence and the worker of its final claim (two `applied` rows: an effect applied twice);
- never two holders of one fence: no (job, fence) started by two runs;
- re-runs for lost completions: jobs with more than one acknowledged commit (the database lost
  one in a failover); allowed under asynchronous replication, none under synchronous;
- claims back: each promotion is followed by a claim on the new primary within 10 s;
- attempts spent: jobs whose attempts exceed their runs (reported, not a check).
"""

from __future__ import annotations

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
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pgq_core import JobSpec, Queue, migrate
from pgq_core.text import printable

from .cluster import Cluster
from .common import load_average, log_tail, machine, scan_logs, server_version
from .handlers import FAILOVER_EFFECT_SPEC, FAILOVER_RUNS_ENV, FAILOVER_TABLES

QUEUE = "failover"
SCHEMA = "pgq"
#: What a worker logs once it runs (runtime.Worker.run).
STARTED_MARK = b" started: queues "
#: The most seconds from a promotion to the first claim on the new primary that passes.
CLAIM_BACK_LIMIT_S = 10.0
LOG_MARKS = ("Traceback", " ERROR ", " WARNING ", "lease lost", "database unavailable")

# The bench's own bookkeeping and checks (not queue SQL).
REPLICATED = """
SELECT count(*) > 0 AND bool_and(flush_lsn >= %(lsn)s::pg_lsn) FROM pg_stat_replication
 WHERE state = 'streaming'
"""
FIRST_CLAIM_SINCE = """
SELECT extract(epoch FROM least(
  (SELECT min(claimed_at) FROM {s}.jobs WHERE claimed_at >= to_timestamp(%(t)s)),
  (SELECT min(claimed_at) FROM {s}.job_events WHERE claimed_at >= to_timestamp(%(t)s))))
"""
UNFINISHED = "SELECT count(*) FROM {s}.jobs WHERE status IN ('ready', 'running')"
STATUS_COUNTS = "SELECT status, count(*) FROM {s}.jobs GROUP BY status"
JOBS = "SELECT id, status, fence, attempts, worker FROM {s}.jobs"
EFFECTS = "SELECT job_id, fence, worker, run FROM {s}.effects"
APPLIED = "SELECT job_id, fence, worker, run FROM {s}.applied"


@dataclass(frozen=True)
class FailoverOptions:
    failovers: int = 10
    jobs: int = 5_000
    workers: int = 3
    concurrency: int = 10
    synchronous: bool = False
    #: each job's work: a sleep drawn uniformly from this range (seconds)
    sleep: tuple[float, float] = (0.05, 0.3)
    #: the share of a batch acknowledged when its failover happens
    kill_at: float = 0.4
    #: how far behind the standby is when the leader dies (its WAL senders stop this long
    #: before the crash): a link's replication lag, which a loopback link lacks
    lag: float = 0.2
    lease: float = 30.0
    seed: int | None = None
    drain_timeout: float = 180.0
    promotion_timeout: float = 60.0


def _q(text: str, schema: str = SCHEMA) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def batches(jobs: int, parts: int) -> list[int]:
    """`jobs` split into `parts` sizes differing by at most one."""
    return [jobs // parts + (1 if i < jobs % parts else 0) for i in range(parts)]


class Runs:
    """The runs file, read as it grows: the jobs whose commits were acknowledged."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._rest = b""
        self.acked: set[int] = set()
        self.lines = 0

    def poll(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        *complete, self._rest = (self._rest + data).split(b"\n")
        for raw in complete:
            self.lines += 1
            line = json.loads(raw)
            if line["event"] == "acked":
                self.acked.add(int(line["job"]))


def read_runs(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the runs file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


class Workers:
    """The `pgq worker` processes, with a log each."""

    def __init__(self, env: dict[str, str], args: Sequence[str], logs: Path, n: int) -> None:
        self.logs = [logs / f"failover-w{i + 1}.log" for i in range(n)]
        self.procs: list[subprocess.Popen[bytes]] = []
        for i, log_path in enumerate(self.logs):
            argv = [sys.executable, "-m", "pgq_cli", "worker", QUEUE, *args,
                    "--worker-id", f"failover-w{i + 1}"]  # fmt: skip
            with log_path.open("wb") as log:
                self.procs.append(
                    subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=logs)
                )

    def wait_started(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for proc, log in zip(self.procs, self.logs, strict=True):
            while STARTED_MARK not in log.read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{log.name}: the worker did not start: {log_tail(log)}")
                time.sleep(0.05)

    def exited(self) -> list[dict[str, Any]]:
        return [{"worker": log.stem, "exit_code": p.returncode, "log_tail": log_tail(log)}
                for p, log in zip(self.procs, self.logs, strict=True)
                if p.poll() is not None]  # fmt: skip

    def terminate(self, timeout: float = 60.0) -> list[int | None]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes: list[int | None] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                codes.append(None)
        return codes


@contextlib.contextmanager
def _connection(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        yield conn


def _retrying(dsn: str, what: Callable[[psycopg.Connection[Any]], Any], timeout: float) -> Any:
    """`what` on a fresh connection to `dsn`, retried on connection errors until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with _connection(dsn) as conn:
                return what(conn)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _unfinished(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(_q(UNFINISHED)).fetchone()
    return int(row[0]) if row else 0


def enqueue_batch(cluster: Cluster, specs: list[JobSpec], timeout: float = 60.0) -> list[int]:
    """Enqueue in one transaction on the primary, then wait until the standby has flushed it:
    a job the harness counts on is never one an asynchronous failover could lose."""
    with _connection(cluster.dsn) as conn:
        ids = Queue(conn, SCHEMA).enqueue_many(specs)
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        deadline = time.monotonic() + timeout
        while not (conn.execute(REPLICATED, {"lsn": row[0]}).fetchone() or [False])[0]:
            if time.monotonic() > deadline:
                raise RuntimeError("the standby did not receive the enqueued batch")
            time.sleep(0.05)
    return ids


class ClaimWatch(threading.Thread):
    """Polls the new primary for the first claim made at or after the promotion."""

    def __init__(self, dsn: str, since: float, timeout: float = 30.0) -> None:
        super().__init__(daemon=True, name="claim-watch")
        self.dsn, self.since, self.timeout = dsn, since, timeout
        self.first: float | None = None

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error), _connection(self.dsn) as conn:
                while time.monotonic() < deadline:
                    row = conn.execute(_q(FIRST_CLAIM_SINCE), {"t": self.since}).fetchone()
                    if row is not None and row[0] is not None:
                        self.first = float(row[0])
                        return
                    time.sleep(0.05)
            time.sleep(0.1)


def run_failover(opts: FailoverOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """The whole scenario on a cluster of its own; the result holds the checks (`passed`)."""
    rng = random.Random(opts.seed)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with (
        Cluster(synchronous=opts.synchronous, say=say) as cluster,
        tempfile.TemporaryDirectory(prefix="pgq-failover-") as tmp,
    ):
        logs = Path(tmp)
        runs_path = logs / "runs.jsonl"
        with _connection(cluster.dsn) as conn:
            migrate(conn, SCHEMA)
            conn.execute(_q(FAILOVER_TABLES))
            version = server_version(conn)
        env = dict(os.environ, PGQ_DSN=cluster.dsn, PGQ_SCHEMA=SCHEMA)
        env[FAILOVER_RUNS_ENV] = str(runs_path)
        for name in ("PGQ_WORKER_ID", "PGQ_POOLED", "PGQ_LISTEN_DSN", "PGQ_READ_DSN"):
            env.pop(name, None)
        args = ["--handler", FAILOVER_EFFECT_SPEC, "--concurrency", str(opts.concurrency),
                "--lease", f"{opts.lease:g}s", "--log-level", "info"]  # fmt: skip
        sizes = batches(opts.jobs, opts.failovers + 1)
        low, high = opts.sleep
        specs = [JobSpec(QUEUE, {"n": n, "sleep": round(rng.uniform(low, high), 3)})
                 for n in range(opts.jobs)]  # fmt: skip
        say(
            f"failover: {opts.failovers} failovers, {opts.jobs:,} jobs in {len(sizes)} batches, "
            f"{opts.workers} workers x {opts.concurrency}, "
            f"{'synchronous' if opts.synchronous else 'asynchronous'} replication"
        )
        runs = Runs(runs_path)
        ids: list[int] = []
        failovers: list[dict[str, Any]] = []
        workers = Workers(env, args, logs, opts.workers)
        codes: list[int | None] = []
        drained_in: float | None = None
        began = time.monotonic()
        try:
            workers.wait_started()
            offset = 0
            for i, size in enumerate(sizes):
                batch = enqueue_batch(cluster, specs[offset : offset + size])
                offset += size
                ids.extend(batch)
                if i == len(sizes) - 1:
                    break
                want = max(1, int(size * opts.kill_at))
                deadline = time.monotonic() + 120
                while len(runs.acked.intersection(batch)) < want:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"batch {i + 1}: {want} acknowledgements never came")
                    time.sleep(0.02)
                    runs.poll()
                failovers.append(_failover(cluster, runs, batch, opts, say, i + 1))
            say(f"last batch enqueued after {time.monotonic() - began:.0f}s; draining")
            drain_started = time.monotonic()
            while time.monotonic() - drain_started < opts.drain_timeout:
                left = _retrying(cluster.dsn, _unfinished, 30)
                if left == 0:
                    drained_in = time.monotonic() - drain_started
                    break
                time.sleep(0.25)
        finally:
            exited = workers.exited()
            codes = workers.terminate()
        with _connection(cluster.dsn) as conn:
            verdict = analyse(conn, ids, read_runs(runs_path), failovers, opts)
        verdict["checks"]["no_worker_exited_by_itself"] = {
            "passed": not exited, "exits": exited, "exit_codes_at_sigterm": codes,
        }  # fmt: skip
        verdict["passed"] = all(c["passed"] for c in verdict["checks"].values())
        return {
            "failover": {
                **{k: v for k, v in asdict(opts).items() if k != "seed"},
                "replication": "synchronous" if opts.synchronous else "asynchronous",
                "handler": FAILOVER_EFFECT_SPEC,
                "batches": sizes,
                "server": version,
                "patroni": {
                    "ttl": cluster.ttl,
                    "loop_wait": cluster.loop_wait,
                    "retry_timeout": cluster.retry_timeout,
                },
                "cluster_started_s": round(cluster.started_in, 1),
                "machine": machine(),
                "started": started,
                "ended": datetime.now(UTC).isoformat(timespec="seconds"),
                "seed": opts.seed,
            },
            "failovers": failovers,
            "timings": _timings(failovers),
            "drain": {
                "drained": drained_in is not None,
                "seconds": None if drained_in is None else round(drained_in, 1),
                "total_s": round(time.monotonic() - began, 1),
            },
            "workers": {"logs": scan_logs(workers.logs, LOG_MARKS)},
            "load_at_end": load_average(),
            **verdict,
        }


def _failover(
    cluster: Cluster,
    runs: Runs,
    batch: list[int],
    opts: FailoverOptions,
    say: Callable[[str], None],
    number: int,
) -> dict[str, Any]:
    """Kill the leader, wait for the promotion, time the first claim on the new primary, bring
    the old node back as a replica."""
    runs.poll()
    acked = len(runs.acked.intersection(batch))
    old = cluster.kill_leader(opts.lag)
    promotion = cluster.wait_for_promotion(opts.promotion_timeout)
    watch = ClaimWatch(cluster.node_dsn(promotion.node), promotion.at)
    watch.start()
    rejoined = cluster.restart_node(old)
    watch.join(max(0.0, watch.timeout))
    claim_back = None if watch.first is None else watch.first - promotion.at
    event = {
        "number": number,
        "killed": f"node{old}",
        "promoted": f"node{promotion.node}",
        "timeline": promotion.timeline,
        "batch_acked_at_kill": acked,
        "batch_size": len(batch),
        "promotion_s": round(promotion.seconds, 2),
        "first_claim_after_promotion_s": None if claim_back is None else round(claim_back, 2),
        "rejoined_s": round(rejoined, 1),
        "rejoined_by": cluster.last_rejoin,
    }
    say(
        f"failover {number}: node{old} killed with {len(batch) - acked} of its batch unacked; "
        f"node{promotion.node} took writes after {promotion.seconds:.1f}s (timeline "
        f"{promotion.timeline}), first claim {event['first_claim_after_promotion_s']}s after; "
        f"node{old} back as a replica in {rejoined:.1f}s ({cluster.last_rejoin})"
    )
    return event


def _timings(failovers: list[dict[str, Any]]) -> dict[str, Any]:
    def spread(key: str) -> dict[str, float | None]:
        values = [f[key] for f in failovers if f[key] is not None]
        if not values:
            return {"min": None, "median": None, "max": None}
        values.sort()
        return {"min": values[0], "median": values[len(values) // 2], "max": values[-1]}

    return {
        "promotion_s": spread("promotion_s"),
        "first_claim_after_promotion_s": spread("first_claim_after_promotion_s"),
        "rejoined_s": spread("rejoined_s"),
    }


def analyse(
    conn: psycopg.Connection[Any],
    ids: Sequence[int],
    lines: list[dict[str, Any]],
    failovers: list[dict[str, Any]],
    opts: FailoverOptions,
    schema: str = SCHEMA,
) -> dict[str, Any]:
    """The verdict: {"passed", "checks": {name: {"passed", ...evidence}}, "figures"}, from the
    jobs `ids`, the side tables in `schema` and the runs file's `lines`."""
    jobs = {r[0]: r for r in conn.execute(_q(JOBS, schema)).fetchall()}
    effects = {r[0]: r for r in conn.execute(_q(EFFECTS, schema)).fetchall()}
    applied: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for r in conn.execute(_q(APPLIED, schema)).fetchall():
        applied[r[0]].append(r)
    starts: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    runs_per_job: Counter[int] = Counter()
    acks: dict[int, list[dict[str, Any]]] = defaultdict(list)
    events: Counter[str] = Counter()
    for line in lines:
        events[line["event"]] += 1
        if line["event"] == "start":
            starts[(line["job"], line["fence"])].append(line)
            runs_per_job[line["job"]] += 1
        elif line["event"] == "acked":
            acks[line["job"]].append(line)

    lost = [i for i in ids if i not in jobs or jobs[i][1] != "done"]
    stale: list[dict[str, Any]] = []
    twice: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    for i in ids:
        job = jobs.get(i)
        if job is None or job[1] != "done":
            continue
        _, _, fence, _, worker = job
        effect = effects.get(i)
        rows = applied.get(i, [])
        final = {"job": i, "final_fence": fence, "final_claim_by": worker}
        if effect is None and not rows:
            missing.append(final)
            continue
        if effect is None or effect[1] != fence or effect[2] != worker:
            stale.append({**final, "effect": None if effect is None else list(effect[1:])})
        if len(rows) != 1 or rows[0][1] != fence or rows[0][2] != worker:
            twice.append({**final, "applied": [list(r[1:]) for r in rows]})
    holders: list[dict[str, Any]] = [
        {"job": job, "fence": fence,
         "runs": [{"run": s["run"], "wall": round(s["wall"], 3)} for s in started]}
        for (job, fence), started in sorted(starts.items())
        if len({s["run"] for s in started}) > 1
    ]  # fmt: skip
    reruns = sorted(j for j, a in acks.items() if len(a) > 1)
    applied_runs = {r[3] for rows in applied.values() for r in rows}
    acks_lost = [a for al in acks.values() for a in al if a["run"] not in applied_runs]
    attempts_spent = sorted(i for i in ids if i in jobs and jobs[i][3] > runs_per_job.get(i, 0))
    claim_backs = [f["first_claim_after_promotion_s"] for f in failovers]
    slow_claims = [f["number"] for f in failovers
                   if f["first_claim_after_promotion_s"] is None
                   or f["first_claim_after_promotion_s"] >= CLAIM_BACK_LIMIT_S]  # fmt: skip
    statuses = dict(conn.execute(_q(STATUS_COUNTS, schema)).fetchall())

    def history(job_ids: Sequence[int]) -> dict[str, Any]:
        queue = Queue(conn, schema)
        out: dict[str, Any] = {}
        for i in list(job_ids)[:5]:
            out[str(i)] = {
                "history": [f"{e.at.isoformat(timespec='milliseconds')} {e.event} fence "
                            f"{e.fence} {e.worker or '-'} {printable(e.detail or '')}"
                            for e in queue.history(i)],
                "runs": [{k: v for k, v in line.items() if k not in ("job", "mono")}
                         for line in lines if line["job"] == i],
            }  # fmt: skip
        return out

    checks: dict[str, dict[str, Any]] = {
        "no_job_lost": {
            "passed": not lost,
            "enqueued": len(ids),
            "done": statuses.get("done", 0),
            "statuses": statuses,
            "lost": len(lost),
            "sample": history(lost),
        },
        "no_stale_write_accepted": {
            "passed": not stale and not twice,
            "effects_not_from_final_claim": len(stale),
            "jobs_without_exactly_one_applied_row_from_final_claim": len(twice),
            "sample": (stale + twice)[:10],
            "histories": history([s["job"] for s in (stale + twice)]),
        },
        "every_done_job_has_its_effect": {
            "passed": not missing,
            "done_without_effect": len(missing),
            "rule": "a job done without its handler's transaction: a completion landed "
            "without the effect it commits with",
            "sample": missing[:10],
            "histories": history([m["job"] for m in missing]),
        },
        "never_two_holders_of_one_fence": {
            "passed": not holders,
            "fences_held_twice": len(holders),
            "sample": holders[:10],
            "histories": history([h["job"] for h in holders]),
        },
        "re_runs_for_lost_completions": {
            "passed": not (opts.synchronous and reruns),
            "jobs": len(reruns),
            "acknowledged_commits_lost": len(acks_lost),
            "acknowledged_commits_lost_sample": [
                f"job {a['job']} fence {a['fence']} run {a['run']}" for a in acks_lost[:10]
            ],
            "rule": "allowed under asynchronous replication, none under synchronous",
            "sample": reruns[:10],
        },
        "claims_back_within_10s": {
            "passed": not slow_claims and len(failovers) == opts.failovers,
            "seconds": claim_backs,
            "failovers_over_limit": slow_claims,
        },
    }
    figures = {
        "runs_file_events": dict(sorted(events.items())),
        "handler_runs": sum(runs_per_job.values()),
        "jobs_run_more_than_once": sum(1 for n in runs_per_job.values() if n > 1),
        "attempts_spent_by_failovers": len(attempts_spent),
        "attempts_spent_sample": attempts_spent[:10],
        "attempts": dict(sorted(Counter(j[3] for j in jobs.values()).items())),
    }
    return {"passed": all(c["passed"] for c in checks.values()), "checks": checks,
            "figures": figures}  # fmt: skip


def print_failover(result: dict[str, Any], console: Console) -> None:
    """The failovers one per row, then the checks."""
    head = result["failover"]
    table = Table(
        title=f"{len(result['failovers'])} failovers, {head['replication']} replication, "
        f"{head['jobs']:,} jobs, {head['workers']} workers x {head['concurrency']} "
        f"(cluster up in {head['cluster_started_s']} s)"
    )
    columns = ("#", "killed", "promoted", "timeline", "batch acked at kill",
               "writes after kill (s)", "claim after promotion (s)", "rejoined (s)")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for f in result["failovers"]:
        table.add_row(
            str(f["number"]), f["killed"], f["promoted"], str(f["timeline"]),
            f"{f['batch_acked_at_kill']}/{f['batch_size']}", str(f["promotion_s"]),
            str(f["first_claim_after_promotion_s"]),
            f"{f['rejoined_s']} ({f.get('rejoined_by', '?')})",
        )  # fmt: skip
    console.print(table)
    checks = Table(title="checks: " + ("PASSED" if result["passed"] else "FAILED"))
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("figures")
    for name, c in result["checks"].items():
        detail = {k: v for k, v in c.items()
                  if k not in ("passed", "sample", "histories", "statuses", "rule", "exits")
                  and not k.endswith("_sample") and v not in ([], {}, None)}  # fmt: skip
        figures = Text(json.dumps(detail, default=str))  # data, never markup
        checks.add_row(name, "ok" if c["passed"] else "FAILED", figures)
    console.print(checks)
    f = result["figures"]
    console.print(
        f"handler runs {f['handler_runs']:,}; jobs run more than once "
        f"{f['jobs_run_more_than_once']}; attempts spent by the failovers "
        f"{f['attempts_spent_by_failovers']}; drained in {result['drain']['seconds']} s, "
        f"{result['drain']['total_s']} s in all"
    )
