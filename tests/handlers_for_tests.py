"""Handlers the worker tests run, in-process and in real worker processes.

Process handlers read PGQ_DSN and PGQ_SCHEMA (set by the tests) for their own connections.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from typing import Any

import psycopg
import psycopg.sql

from pgq_core import fenced_write
from pgq_core.worker import JobContext

_local = threading.local()


def _conn() -> psycopg.Connection[Any]:
    conn: psycopg.Connection[Any] | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(os.environ["PGQ_DSN"])
        _local.conn = conn
    return conn


async def noop(ctx: JobContext) -> None:
    return None


def noop_sync(ctx: JobContext) -> None:
    return None


def fenced(ctx: JobContext) -> None:
    """Sleep `payload["sleep"]`, then write the effect and complete, in one transaction."""
    time.sleep(float(ctx.payload.get("sleep", 0)))
    conn = _conn()
    with conn.transaction():
        fenced_write(
            conn,
            "effects",
            {"job_id": ctx.id},
            {"worker": ctx.worker_id},
            ctx.fence,
            schema=ctx.schema,
        )
        ctx.complete(conn)


def sleepy(ctx: JobContext) -> None:
    """Sleep without looking at ctx.lost (an uncooperative handler)."""
    time.sleep(float(ctx.payload.get("sleep", 0)))


def crash(ctx: JobContext) -> None:
    """Kill the whole worker process, as a segfault would."""
    os._exit(3)


async def wait_forever(ctx: JobContext) -> None:
    await asyncio.sleep(3600)


def until_lost(ctx: JobContext) -> None:
    """Run until told the lease is gone, then note when that was seen."""
    while not ctx.lost:
        time.sleep(0.01)
    with psycopg.connect(os.environ["PGQ_DSN"], autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("INSERT INTO {}.observed (job_id) VALUES (%s)").format(
                psycopg.sql.Identifier(ctx.schema)
            ),
            (ctx.id,),
        )


HOSTILE_TEXTS = {
    "nul": "bad\x00byte",
    "surrogate": "lone \ud800 surrogate",
    "huge": "x" * 10_000_000,
}


def hostile(ctx: JobContext) -> None:
    """Record the run; then raise an error text the database would refuse as it stands (NUL,
    a lone surrogate, 10 MB), or do the fenced work of `fenced`."""
    time.sleep(float(ctx.payload.get("sleep", 0)))
    conn = _conn()
    conn.execute(
        psycopg.sql.SQL("INSERT INTO {}.runs (job_id, fence) VALUES (%s, %s)").format(
            psycopg.sql.Identifier(ctx.schema)
        ),
        (ctx.id, ctx.fence),
    )
    conn.commit()
    text = HOSTILE_TEXTS.get(ctx.payload.get("kind", ""))
    if text is not None:
        raise ValueError(text)
    fenced(ctx)


def fail_with(ctx: JobContext) -> None:
    """Raise an error whose text is `payload["error"]` (terminal control sequences included)."""
    raise RuntimeError(ctx.payload["error"])


def _forked(ctx: JobContext) -> dict[str, int]:
    """Fork; the child sleeps `payload["child_sleep"]` and calls sys.exit(payload["code"])."""
    pid = os.fork()
    if pid == 0:
        time.sleep(float(ctx.payload.get("child_sleep", 0)))
        sys.exit(int(ctx.payload.get("code", 0)))
    return {"child": pid}


def fork_exit(ctx: JobContext) -> dict[str, int]:
    return _forked(ctx)


async def fork_exit_async(ctx: JobContext) -> dict[str, int]:
    return _forked(ctx)


def close_stdio(ctx: JobContext) -> None:
    """Close fds 0-2 (as a careless daemonising library does), then end this worker's
    connections, so it opens new sockets while they are closed (only if `payload["close"]`)."""
    if not ctx.payload.get("close"):
        return
    with psycopg.connect(os.environ["PGQ_DSN"], autocommit=True) as conn:
        for fd in (0, 1, 2):
            os.close(fd)
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            [f"pgq % {ctx.worker_id}"],
        )
