"""Job handlers for the bench: `pgq worker --handler pgq_bench.handlers:noop_sync` (a plain
function, run on the worker's threads) or `...:noop_async` (an `async def`, run on its loop)
do nothing, so a drain measures the queue, not the work; `...:fenced_effect` (the fleet's)
applies one counted effect per job in the transaction that completes it; `...:failover_effect`
(`pgq bench --failover`'s) does the same with a fenced write, and records each run in a file
outside the database."""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

from pgq_core.config import connect_options
from pgq_core.errors import LeaseLost
from pgq_core.fenced import fenced_write

#: `--handler` specs of the no-op handlers, by kind.
HANDLER_SPECS = {
    "sync": "pgq_bench.handlers:noop_sync",
    "async": "pgq_bench.handlers:noop_async",
}
FENCED_EFFECT_SPEC = "pgq_bench.handlers:fenced_effect"
#: `--handler` specs of the handlers that record when they start (`pgq bench --pickup`).
RECORD_START_SPECS = {
    "sync": "pgq_bench.handlers:record_start_sync",
    "async": "pgq_bench.handlers:record_start_async",
}
#: The file those handlers append `job_id unix_time` lines to.
STARTS_FILE_ENV = "PGQ_BENCH_STARTS"
FAILOVER_EFFECT_SPEC = "pgq_bench.handlers:failover_effect"
#: The file `failover_effect` appends its JSON lines to (one per start, commit, refusal...).
FAILOVER_RUNS_ENV = "PGQ_BENCH_FAILOVER_RUNS"
#: How long `failover_effect` keeps retrying its transaction while no primary takes writes.
FAILOVER_RETRY_FOR_S = 60.0

#: The fleet's effects: one row per job, written in the transaction that completes the job.
#: `fence` is the fence of the last application; `fences` lists every application that
#: committed, in order, so an effect applied twice is a row with two fences, never hidden by an
#: overwrite (a plain fenced write would keep only the newest).
EFFECTS_TABLE = """
CREATE TABLE {s}.effects (
  job_id  bigint      PRIMARY KEY,
  fence   bigint      NOT NULL,
  worker  text        NOT NULL,
  fences  bigint[]    NOT NULL,
  at      timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
APPLY_EFFECT = """
INSERT INTO {s}.effects AS e (job_id, fence, worker, fences)
VALUES (%(id)s, %(fence)s, %(worker)s, ARRAY[%(fence)s]::bigint[])
ON CONFLICT (job_id) DO UPDATE
   SET fence = excluded.fence, worker = excluded.worker, fences = e.fences || excluded.fence,
       at = clock_timestamp()
"""

#: `failover_effect`'s side tables: `effects` holds one row per job, written with
#: `fenced_write` (only a newer fence overwrites it); `applied` gets a row from every
#: transaction that committed an effect, so an effect applied twice leaves two rows.
FAILOVER_TABLES = """
CREATE TABLE {s}.effects (
  job_id  bigint      PRIMARY KEY,
  fence   bigint      NOT NULL,
  worker  text        NOT NULL,
  run     text        NOT NULL
);
CREATE TABLE {s}.applied (
  job_id  bigint      NOT NULL,
  fence   bigint      NOT NULL,
  worker  text        NOT NULL,
  run     text        NOT NULL,
  at      timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
RECORD_APPLIED = "INSERT INTO {s}.applied (job_id, fence, worker, run) VALUES (%s, %s, %s, %s)"

_local = threading.local()
#: The starts file, opened once per worker process.
_starts_fd: dict[str, int] = {}
_starts_lock = threading.Lock()


def noop_sync(ctx: Any) -> None:
    """Completes the job at once (a plain function)."""
    return None


async def noop_async(ctx: Any) -> None:
    """Completes the job at once (a coroutine)."""
    return None


def _record_start(job_id: int) -> None:
    """One `job_id unix_time` line, appended in one write (O_APPEND: lines never interleave)."""
    line = f"{job_id} {time.time():.6f}\n".encode()
    fd = _starts_fd.get("fd")
    if fd is None:
        with _starts_lock:
            fd = _starts_fd.get("fd")
            if fd is None:
                path = os.environ[STARTS_FILE_ENV]
                fd = _starts_fd["fd"] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, line)


def record_start_sync(ctx: Any) -> None:
    """Records when it started, then completes the job (a plain function)."""
    _record_start(ctx.id)


async def record_start_async(ctx: Any) -> None:
    """Records when it started, then completes the job (a coroutine)."""
    _record_start(ctx.id)


def _conn() -> psycopg.Connection[Any]:
    """This handler thread's own connection to PGQ_DSN (through the pool when PGQ_POOLED: then
    without prepared statements, as `connect_options` says)."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        dsn = os.environ["PGQ_DSN"]
        conn = psycopg.connect(dsn, autocommit=True, **connect_options(dsn))
        _local.conn = conn
    return conn


def fenced_effect(ctx: Any) -> None:
    """Sleep `payload["sleep"]` seconds (the work), then apply the job's effect and complete
    the job in one transaction: if the fence is stale, `complete` raises LeaseLost and the
    effect rolls back with it."""
    time.sleep(float(ctx.payload.get("sleep", 0)))
    conn = _conn()
    statement = sql.SQL(APPLY_EFFECT).format(s=sql.Identifier(ctx.schema))
    try:
        with conn.transaction():
            conn.execute(statement, {"id": ctx.id, "fence": ctx.fence, "worker": ctx.worker_id})
            ctx.complete(conn)
    except psycopg.OperationalError:
        conn.close()  # a broken link: the next job on this thread connects anew
        raise


_runs = itertools.count(1)


def _record_run(event: str, ctx: Any, run: str, **extra: Any) -> None:
    """One JSON line in the runs file, appended in one write (O_APPEND): what happened to
    this run of the job, with the worker's id, this process and both clocks."""
    fd = _starts_fd.get("runs")
    if fd is None:
        with _starts_lock:
            fd = _starts_fd.get("runs")
            if fd is None:
                path = os.environ[FAILOVER_RUNS_ENV]
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                _starts_fd["runs"] = fd
    line = {"event": event, "job": ctx.id, "fence": ctx.fence, "worker": ctx.worker_id,
            "pid": os.getpid(), "run": run, "mono": time.monotonic(), "wall": time.time(),
            **extra}  # fmt: skip
    os.write(fd, (json.dumps(line) + "\n").encode())


def failover_effect(ctx: Any) -> None:
    """The exactly-once pattern under failovers: sleep `payload["sleep"]` seconds (the work),
    then in ONE transaction on this thread's own connection (PGQ_DSN, a multi-host DSN): a
    fenced write of the job's effect, a row in `applied`, and `ctx.complete(conn)`.

    Each run appends to the runs file: `start`, then `acked` once its commit returned (the
    database may still lose that commit in a failover), `refused` (LeaseLost: rolled back), or
    `broken` per connection lost on the way. A lost connection retries the transaction on a
    new one (for up to FAILOVER_RETRY_FOR_S, while the job is not lost): a commit that had
    landed unseen makes the retry's `complete` refuse, so no job's attempt goes on a failover
    the worker itself rides out."""
    run = f"{ctx.worker_id}/{os.getpid()}/{next(_runs)}"
    _record_run("start", ctx, run)
    time.sleep(float(ctx.payload.get("sleep", 0)))
    effects = sql.SQL(RECORD_APPLIED).format(s=sql.Identifier(ctx.schema))
    deadline = time.monotonic() + FAILOVER_RETRY_FOR_S
    while True:
        try:
            conn = _conn()
            with conn.transaction():
                fenced_write(
                    conn, "effects", {"job_id": ctx.id}, {"worker": ctx.worker_id, "run": run},
                    ctx.fence, schema=ctx.schema,
                )  # fmt: skip
                conn.execute(effects, [ctx.id, ctx.fence, ctx.worker_id, run])
                ctx.complete(conn)
        except LeaseLost:
            _record_run("refused", ctx, run)
            raise
        except psycopg.OperationalError as exc:
            broken: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
            if broken is not None:
                broken.close()
            _record_run("broken", ctx, run, error=(str(exc).strip().splitlines() or [""])[0])
            if ctx.lost or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.1, 0.3))
            continue
        _record_run("acked", ctx, run)
        return
