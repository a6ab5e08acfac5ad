"""`pgq bench --same-resources`: the baseline and pgq at equal resources, one process and C-way
concurrency per side, for each C of `--concurrency-levels`.

- **baseline**: the baseline's SQL as written (`baseline.sql`), C threads in one Python process
  (this one), each on its own autocommit connection, looping: claim `LIMIT 10`, then complete
  each claimed job with its own UPDATE, until a claim comes back empty.
- **pgq**: one `pgq worker QUEUE --concurrency C --burst --handler <no-op>` subprocess, a real
  separate process as users run it, once with a plain-function no-op handler (`sync`) and once
  with an `async def` one (`async`).

Every run gets its own throwaway schema, filled with the same N jobs (unmeasured) and dropped
afterwards. Both sides are timed from the first claim to the last completion: the baseline's
threads read the clock before their first claim and after each completion; pgq's span is read
from the database afterwards (`max(finished_at) - min(claimed_at)`). The total wall time is
reported too: for pgq from starting the worker process to its exit (Python start-up, imports,
connecting and the burst exit included), for the baseline from starting its threads to joining
them (connecting included). Every job must end `done`, or the run fails.

With `--peers` a third side runs at every C in the same run: PgQueuer, one process with C
consumers (`peers.py`). With `--db-work` the whole run happens in a throwaway database and
every drain's database work per job is read around it (`dbwork.py`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pgq_core import JobSpec, PgqError, Queue
from pgq_core.text import printable

from .baseline import (
    BASELINE_CLAIM,
    BASELINE_COMPLETE,
    BASELINE_ENQUEUE,
    BASELINE_LIMIT,
    baseline_connection,
    setup_baseline,
)
from .common import (
    CONNECT_TIMEOUT,
    QUEUE_NAME,
    cpu_ticks,
    load_average,
    machine,
    payload,
    server_version,
    steal_percent,
    throwaway_database,
    throwaway_schema,
)
from .dbwork import DbWork
from .handlers import HANDLER_SPECS
from .peers import PEER_BATCH, PEER_NAME, drain_peer, fill_peer, missing_peer, peer_versions

#: What each side gets, said in every output.
RESOURCES = (
    "both sides get one process and C-way concurrency: baseline = C threads in one process, one "
    "connection each, the baseline's SQL with LIMIT {limit}; pgq = one `pgq worker --concurrency C "
    "--burst` process with a no-op handler (sync: a plain function, async: an async def)"
)
#: What the peer side gets, said in every output that has it.
PEER_RESOURCES = (
    "PgQueuer = one process, C QueueManagers each on its own asyncpg connection, batch_size "
    "{batch} (its default), drain mode, an async no-op entrypoint, uvloop (as its CLI runs)"
)
#: How database work is read, said in every output that has it.
DB_WORK_HOW = (
    "each drain in a throwaway database: statement time, calls and statement WAL from "
    "pg_stat_statements filtered to that database; WAL from pg_current_wal_lsn() before and "
    "after (server-wide: other sessions' WAL counts too on a shared server)"
)
#: The bench's own bookkeeping: done / all jobs and, for pgq, the drain's span by the server clock.
PGQ_TALLY = """
SELECT count(*) FILTER (WHERE status = 'done'), count(*),
       extract(epoch FROM max(finished_at) - min(claimed_at))
  FROM {s}.jobs"""
BASELINE_TALLY = "SELECT count(*) FILTER (WHERE status = 'done'), count(*) FROM {s}.jobs"
VACUUM = "VACUUM ANALYZE {s}.jobs"
#: Longest a pgq worker process may run before the bench gives up on it.
PROCESS_TIMEOUT = 1800.0
#: Lines of a failed worker's output quoted in the error.
OUTPUT_TAIL = 5


@dataclass(frozen=True)
class SameResourcesOptions:
    jobs: int = 10_000
    levels: tuple[int, ...] = (1, 4, 10, 50)
    #: Handler kinds of the pgq side, of HANDLER_SPECS.
    handlers: tuple[str, ...] = ("sync", "async")
    #: The baseline's LIMIT (10 unless `--batch` says otherwise).
    batch: int = BASELINE_LIMIT
    payload_bytes: int = 100
    #: Add the peer side (PgQueuer, `peers.py`) at every level.
    peers: bool = False
    #: Meter every drain's database work (`dbwork.py`), in a throwaway database.
    db_work: bool = False


@dataclass
class Run:
    """One side's drain at one concurrency level."""

    side: str
    concurrency: int
    jobs: int
    done: int
    #: First claim to last completion.
    drain_seconds: float
    #: Including start-up (pgq: the worker process's whole life; baseline: threads and connects).
    wall_seconds: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def drain_rate(self) -> float:
        return self.jobs / self.drain_seconds if self.drain_seconds > 0 else 0.0

    @property
    def wall_rate(self) -> float:
        return self.jobs / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        details = data.pop("details")
        return {**data, "drain_rate": self.drain_rate, "wall_rate": self.wall_rate, **details}


# ---------------------------------------------------------------- enqueue (unmeasured)


def fill_baseline(dsn: str, schema: str, opts: SameResourcesOptions) -> None:
    """The baseline's table and indexes, then N jobs by its plain INSERT (pipelined, one commit)."""
    setup_baseline(dsn, schema)
    with baseline_connection(dsn, schema) as conn:
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                BASELINE_ENQUEUE,
                (
                    {"queue": QUEUE_NAME, "payload": Jsonb(payload(opts.payload_bytes, n))}
                    for n in range(opts.jobs)
                ),
            )
        conn.execute(sql.SQL(VACUUM).format(s=sql.Identifier(schema)))


def fill_pgq(dsn: str, schema: str, opts: SameResourcesOptions) -> None:
    with Queue.connect(dsn, schema) as q:
        q.enqueue_many(
            JobSpec(QUEUE_NAME, payload(opts.payload_bytes, n)) for n in range(opts.jobs)
        )
        q.conn.execute(sql.SQL(VACUUM).format(s=sql.Identifier(schema)))


def _tally(dsn: str, query: str, schema: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        row = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema))).fetchone()
    assert row is not None
    return tuple(row)


def _check_done(side: str, concurrency: int, done: int, total: int, jobs: int) -> None:
    if done != jobs or total != jobs:
        raise PgqError(
            f"{side} at concurrency {concurrency}: {done} of {total} jobs done, "
            f"expected all {jobs} done"
        )


# ---------------------------------------------------------------- the baseline: C threads


@dataclass
class _ThreadReport:
    first_claim: float | None = None
    last_completion: float | None = None
    completed: int = 0
    lost: int = 0


def drain_baseline(
    dsn: str,
    schema: str,
    threads: int,
    opts: SameResourcesOptions,
    meter: DbWork | None = None,
) -> Run:
    """C threads in this process, one autocommit connection each, the baseline's loop as written.

    The threads connect, then start together; each reads `time.perf_counter()` just before its
    first claim and after every completion. Drain: the earliest first claim to the latest
    completion. Wall: starting the threads to joining them."""
    start = threading.Barrier(threads)
    reports = [_ThreadReport() for _ in range(threads)]
    errors: list[Exception] = []
    params = {"queue": QUEUE_NAME, "limit": opts.batch}

    def loop(report: _ThreadReport) -> None:
        try:
            with baseline_connection(dsn, schema) as conn:
                start.wait()
                report.first_claim = time.perf_counter()
                while rows := conn.execute(BASELINE_CLAIM, params).fetchall():
                    for job_id, _payload, fence in rows:
                        cur = conn.execute(BASELINE_COMPLETE, {"id": job_id, "fence": fence})
                        report.completed += cur.rowcount
                        report.lost += cur.rowcount == 0
                    report.last_completion = time.perf_counter()
        except threading.BrokenBarrierError:
            pass  # another thread failed; its error is reported
        except Exception as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)
            start.abort()

    workers = [
        threading.Thread(target=loop, args=(r,), name=f"baseline-{i}", daemon=True)
        for i, r in enumerate(reports)
    ]
    metered = meter.read() if meter else None
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    db_work = meter.per_job(metered, opts.jobs) if meter and metered else None
    if errors:
        raise errors[0]
    firsts = [r.first_claim for r in reports if r.first_claim is not None]
    lasts = [r.last_completion for r in reports if r.last_completion is not None]
    drain = max(lasts) - min(firsts) if firsts and lasts else 0.0
    done, total = _tally(dsn, BASELINE_TALLY, schema)
    _check_done("baseline", threads, int(done), int(total), opts.jobs)
    return Run(
        "baseline",
        threads,
        opts.jobs,
        int(done),
        drain,
        wall,
        {
            "threads": threads,
            "processes": 1,
            "claim": opts.batch,
            "completed": sum(r.completed for r in reports),
            "lost": sum(r.lost for r in reports),
            "timed_by": "client clock: first claim sent to last completion returned",
            **({"db_work": db_work} if db_work else {}),
        },
    )


# ---------------------------------------------------------------- pgq: one worker process


def worker_command(
    schema: str, concurrency: int, kind: str, *, handler: str | None = None, burst: bool = True
) -> list[str]:
    """The `pgq worker` command line of one pgq run (the DSN goes in the environment): the
    no-op handler of `kind` unless another `handler` spec is given, draining and exiting when
    `burst`."""
    return [
        sys.executable,
        "-m",
        "pgq_cli",
        "--schema",
        schema,
        "worker",
        QUEUE_NAME,
        "--concurrency",
        str(concurrency),
        *(["--burst"] if burst else []),
        "--handler",
        handler or HANDLER_SPECS[kind],
    ]


def drain_pgq(
    dsn: str,
    schema: str,
    concurrency: int,
    kind: str,
    opts: SameResourcesOptions,
    meter: DbWork | None = None,
) -> Run:
    """One `pgq worker --burst` subprocess drains the queue and exits.

    The DSN reaches it as PGQ_DSN (what `--dsn` reads), so a password never shows in the
    process list. Drain: `max(finished_at) - min(claimed_at)` of the jobs, by the server's
    clock. Wall: starting the process to its exit."""
    command = worker_command(schema, concurrency, kind)
    env = {**os.environ, "PGQ_DSN": dsn}
    metered = meter.read() if meter else None
    with tempfile.TemporaryFile() as output:
        t0 = time.perf_counter()
        try:
            exited = subprocess.run(
                command,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                timeout=PROCESS_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise PgqError(
                f"pgq worker ({kind}, concurrency {concurrency}) still running after "
                f"{PROCESS_TIMEOUT:.0f}s; killed"
            ) from None
        wall = time.perf_counter() - t0
        db_work = meter.per_job(metered, opts.jobs) if meter and metered else None
        if exited.returncode != 0:
            output.seek(0)
            tail = output.read().decode(errors="replace").strip().splitlines()[-OUTPUT_TAIL:]
            raise PgqError(
                f"pgq worker ({kind}, concurrency {concurrency}) exited with "
                f"{exited.returncode}: {' | '.join(tail) or 'no output'}"
            )
    done, total, span = _tally(dsn, PGQ_TALLY, schema)
    _check_done(f"pgq ({kind})", concurrency, int(done), int(total), opts.jobs)
    shown = ["pgq", *command[3:]]
    return Run(
        f"pgq_{kind}",
        concurrency,
        opts.jobs,
        int(done),
        float(span or 0.0),
        wall,
        {
            "handler": kind,
            "processes": 1,
            "claim": concurrency,
            "command": " ".join(shown),
            "timed_by": "server clock: min(claimed_at) to max(finished_at)",
            **({"db_work": db_work} if db_work else {}),
        },
    )


# ---------------------------------------------------------------- the run


def run_same_resources(
    dsn: str, embedded: bool, opts: SameResourcesOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """Every figure of one --same-resources run, as plain data."""
    result: dict[str, Any] = {
        "mode": "same_resources",
        "resources": RESOURCES.format(limit=opts.batch),
        "params": {
            "jobs": opts.jobs,
            "concurrency_levels": list(opts.levels),
            "handlers": list(opts.handlers),
            "baseline_limit": opts.batch,
            "payload_bytes": opts.payload_bytes,
            "peers": opts.peers,
            "db_work": opts.db_work,
        },
        "machine": machine(),
    }
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        result["server"] = {"version": server_version(conn), "embedded": embedded}
    peer = opts.peers
    if opts.peers:
        skipped = missing_peer()
        if skipped:
            say(skipped)
            peer = False
        result["peer"] = {
            "name": PEER_NAME,
            "skipped": skipped,
            "resources": PEER_RESOURCES.format(batch=PEER_BATCH),
            **({} if skipped else {"versions": peer_versions()}),
        }
    with contextlib.ExitStack() as stack:
        meter: DbWork | None = None
        if opts.db_work:
            dsn = stack.enter_context(throwaway_database(dsn, "bench_dbw"))
            meter = stack.enter_context(DbWork(dsn))
            if meter.statement_stats_missing:
                say(escape(printable(meter.statement_stats_missing)))
            result["db_work"] = {
                "database": conninfo_to_dict(dsn)["dbname"],
                "statement_stats_missing": meter.statement_stats_missing,
                "how": DB_WORK_HOW,
            }
        result["levels"] = [_level(dsn, c, opts, peer, meter, say) for c in opts.levels]
    result["machine"]["load_at_end"] = load_average()
    return result


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _level(
    dsn: str,
    c: int,
    opts: SameResourcesOptions,
    peer: bool,
    meter: DbWork | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """One concurrency level: the baseline, pgq with each handler, then the peer."""
    with throwaway_schema(dsn, "bench_sr_baseline", pgq=False) as schema:
        say(f"C={c}: baseline, enqueue {opts.jobs} jobs")
        fill_baseline(dsn, schema, opts)
        say(f"C={c}: baseline drain, {c} thread(s) in one process, LIMIT {opts.batch}")
        ticks = cpu_ticks()
        baseline = drain_baseline(dsn, schema, c, opts, meter)
        baseline_steal = steal_percent(ticks, cpu_ticks())
    level: dict[str, Any] = {
        "concurrency": c,
        "baseline": {**baseline.to_dict(), "steal_percent": baseline_steal},
        "pgq": {},
    }
    level["ratio"], level["ratio_wall"] = {}, {}
    runs: dict[str, dict[str, Any]] = {}
    for kind in opts.handlers:
        with throwaway_schema(dsn, "bench_sr_pgq") as schema:
            say(f"C={c}: pgq ({kind}), enqueue_many {opts.jobs} jobs")
            fill_pgq(dsn, schema, opts)
            say(f"C={c}: pgq drain, one `pgq worker --concurrency {c}` process, {kind} handler")
            ticks = cpu_ticks()
            run = drain_pgq(dsn, schema, c, kind, opts, meter)
            steal = steal_percent(ticks, cpu_ticks())
        runs[kind] = level["pgq"][kind] = {**run.to_dict(), "steal_percent": steal}
        level["ratio"][kind] = _ratio(run.drain_rate, baseline.drain_rate)
        level["ratio_wall"][kind] = _ratio(run.wall_rate, baseline.wall_rate)
    if peer:
        with throwaway_schema(dsn, "bench_sr_peer", pgq=False) as schema:
            say(f"C={c}: PgQueuer, install its schema and enqueue {opts.jobs} jobs")
            fill_peer(dsn, schema, opts.jobs, opts.payload_bytes)
            say(f"C={c}: PgQueuer drain, one process, {c} consumers, batch {PEER_BATCH}")
            ticks = cpu_ticks()
            peer_run = drain_peer(dsn, schema, c, opts.jobs, meter)
            peer_run["steal_percent"] = steal_percent(ticks, cpu_ticks())
        level[PEER_NAME] = peer_run
        level["ratio_peer"] = {
            k: _ratio(run["drain_rate"], peer_run["drain_rate"]) for k, run in runs.items()
        }
        level["ratio_peer_wall"] = {
            k: _ratio(run["wall_rate"], peer_run["wall_rate"]) for k, run in runs.items()
        }
        runs[PEER_NAME] = peer_run
    if meter:
        base = level["baseline"]["db_work"]
        level["db_work_ratio"] = {
            name: {
                key: _ratio(run["db_work"][key], base[key])
                for key in ("statement_us_per_job", "wal_bytes_per_job")
            }
            for name, run in runs.items()
        }
    return level


# ---------------------------------------------------------------- output


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def print_same_resources(result: dict[str, Any], console: Console) -> None:
    server_info, params = result["server"], result["params"]
    table = Table(
        title=(
            f"pgq bench --same-resources · PostgreSQL {server_info['version']}"
            f"{' (embedded)' if server_info['embedded'] else ''} · {params['jobs']} jobs per run"
        ),
        caption=(
            f"{RESOURCES.format(limit=params['baseline_limit'])}.\n"
            "drain: first claim to last completion (baseline: the threads' clock; pgq: "
            "min(claimed_at) to max(finished_at) in the database). wall: including start-up "
            "(pgq: the worker process from start to exit; baseline: threads and connects).\n"
            "ratio = pgq drain jobs/s / baseline drain jobs/s at the same C; ratio (wall): the "
            "same with wall times.\nsteal: the share of the machine's CPU time the hypervisor "
            "gave to other guests during that drain (a drain with much of it ran on less)."
        ),
        caption_justify="left",
    )
    for col in ("C", "side", "drain s", "drain jobs/s", "wall s", "wall jobs/s", "jobs done"):
        table.add_column(col, justify="left" if col == "side" else "right")
    table.add_column("steal", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("ratio (wall)", justify="right")
    for level in result["levels"]:
        c = level["concurrency"]
        baseline = level["baseline"]
        rows: list[tuple[str, dict[str, Any], str, str]] = [
            (f"baseline, {c} thread{'s' if c > 1 else ''}", baseline, "", "")
        ]
        for kind, run in level["pgq"].items():
            rows.append(
                (
                    f"pgq {kind}",
                    run,
                    f"[bold]{_x(level['ratio'][kind])}[/bold]",
                    _x(level["ratio_wall"][kind]),
                )
            )
        if PEER_NAME in level:
            rows.append((f"PgQueuer, {c} consumer{'s' if c > 1 else ''}", level[PEER_NAME], "", ""))
        for n, (label, run, ratio, ratio_wall) in enumerate(rows):
            table.add_row(
                str(c) if n == 0 else "",
                label,
                _f(run["drain_seconds"], 2),
                _f(run["drain_rate"]),
                _f(run["wall_seconds"], 2),
                _f(run["wall_rate"]),
                f"{run['done']}/{run['jobs']}",
                _percent(run.get("steal_percent")),
                ratio,
                ratio_wall,
                end_section=n == len(rows) - 1,
            )
    console.print(table)
    if "peer" in result:
        _print_peer(result, console)
    if "db_work" in result:
        _print_db_work(result, console)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _print_peer(result: dict[str, Any], console: Console) -> None:
    peer = result["peer"]
    if peer["skipped"]:
        console.print(peer["skipped"])
        return
    versions = ", ".join(f"{k} {v}" for k, v in peer["versions"].items())
    table = Table(
        title=f"pgq / PgQueuer at equal resources ({versions})",
        caption=(
            f"{peer['resources']}.\nPgQueuer's drain: first 'picked' to last 'successful' row "
            "of its log (server clock); wall: its process from start to exit. "
            "ratio = pgq jobs/s / PgQueuer jobs/s at the same C, same run."
        ),
        caption_justify="left",
    )
    for col in ("C", "PgQueuer drain jobs/s", "PgQueuer wall jobs/s"):
        table.add_column(col, justify="right")
    kinds = list(result["params"]["handlers"])
    for kind in kinds:
        table.add_column(f"pgq {kind} / PgQueuer", justify="right")
        table.add_column(f"pgq {kind} / PgQueuer (wall)", justify="right")
    for level in result["levels"]:
        run = level[PEER_NAME]
        cells = [str(level["concurrency"]), _f(run["drain_rate"]), _f(run["wall_rate"])]
        for kind in kinds:
            cells.append(f"[bold]{_x(level['ratio_peer'][kind])}[/bold]")
            cells.append(_x(level["ratio_peer_wall"][kind]))
        table.add_row(*cells)
    console.print(table)


def _print_db_work(result: dict[str, Any], console: Console) -> None:
    missing = result["db_work"]["statement_stats_missing"]
    table = Table(
        title="database work per job, each drain",
        caption=f"{result['db_work']['how']}.\n{escape(printable(missing or ''))}".rstrip(),
        caption_justify="left",
    )
    for col in (
        "C",
        "side",
        "statements",
        "statement µs",
        "statement WAL B",
        "WAL B (server)",
        "statement µs / baseline",
        "WAL / baseline",
    ):
        table.add_column(col, justify="left" if col == "side" else "right")
    for level in result["levels"]:
        runs = {"baseline": level["baseline"], **{f"pgq {k}": r for k, r in level["pgq"].items()}}
        if PEER_NAME in level:
            runs["PgQueuer"] = level[PEER_NAME]
        ratios = {f"pgq {k}": level["db_work_ratio"][k] for k in level["pgq"]}
        ratios["PgQueuer"] = level["db_work_ratio"].get(PEER_NAME)
        for n, (label, run) in enumerate(runs.items()):
            work, ratio = run["db_work"], ratios.get(label)
            table.add_row(
                str(level["concurrency"]) if n == 0 else "",
                label,
                _f(work["statements_per_job"], 2),
                _f(work["statement_us_per_job"], 1),
                _f(work["statement_wal_bytes_per_job"]),
                _f(work["wal_bytes_per_job"]),
                _x(ratio["statement_us_per_job"]) if ratio else "",
                _x(ratio["wal_bytes_per_job"]) if ratio else "",
                end_section=n == len(runs) - 1,
            )
    console.print(table)
