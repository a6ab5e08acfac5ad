"""PgQueuer, the peer of `pgq bench --same-resources --peers`, driven as its docs and its own
benchmark drive it: C `QueueManager`s in one process, each on its own asyncpg connection (its
recommended driver), `batch_size` 10 (its default), `QueueExecutionMode.drain` (each exits
once the queue is empty and its jobs are settled), an `async def` no-op entrypoint, on uvloop
when installed (as its CLI runs). Its objects live in the bench's throwaway schema
(`DBSettings(db_schema=...)`) with a NOTIFY channel of that schema's name.

This module imports PgQueuer and asyncpg (the `bench` extra); only `peers.py` and the child
process it starts (`python -m pgq_bench.pgqueuer_side`) load it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Coroutine
from typing import Any

import asyncpg
from pgqueuer import types
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.adapters.persistence import qb
from pgqueuer.domain.settings import DBSettings
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries

#: The entrypoint every bench job goes to.
ENTRYPOINT = "bench"
#: Seconds to connect, and the longest one statement may take.
CONNECT_TIMEOUT = 10.0
COMMAND_TIMEOUT = 60.0


def settings(schema: str) -> DBSettings:
    """PgQueuer's object names in `schema`, with a channel no other schema shares."""
    return DBSettings(db_schema=schema, channel=types.Channel(f"ch_{schema}"))


def queries(conn: Any, schema: str) -> Queries:
    names = settings(schema)
    return Queries(
        AsyncpgDriver(conn),
        qbe=qb.QueryBuilderEnvironment(names),
        qbq=qb.QueryQueueBuilder(names),
        qbs=qb.QuerySchedulerBuilder(names),
    )


def connect_params(dsn: str) -> dict[str, Any]:
    """asyncpg.connect's arguments for the server of a libpq `dsn` (URI or key=value, as pgq
    takes), read by psycopg: imported here, so that `pgqueuer_file`'s process never loads it."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    port = params.get("port")
    return {
        "host": params.get("host"),
        "port": int(str(port)) if port else None,
        "user": params.get("user"),
        "password": params.get("password"),
        "database": params.get("dbname"),
    }


async def connect(dsn: str) -> Any:
    """An asyncpg connection to the server of a libpq `dsn`."""
    return await connect_with(connect_params(dsn))


async def connect_with(params: dict[str, Any]) -> Any:
    """An asyncpg connection made with `connect_params`' arguments, its timeouts set."""
    return await asyncpg.connect(
        **params, timeout=CONNECT_TIMEOUT, command_timeout=COMMAND_TIMEOUT
    )


async def install_and_fill(dsn: str, schema: str, payloads: list[bytes]) -> None:
    """PgQueuer's schema in `schema` (which exists), then one job per payload in one batch."""
    conn = await connect(dsn)
    try:
        q = queries(conn, schema)
        await q.install(create_schema=False)
        if payloads:
            await q.enqueue([ENTRYPOINT] * len(payloads), list(payloads), [0] * len(payloads))
    finally:
        await conn.close()


async def enqueue_batches(dsn: str, schema: str, payloads: list[bytes], size: int) -> float:
    """One job per payload, `size` per `Queries.enqueue` call (PgQueuer's batch enqueue), on
    one connection opened first; the seconds the enqueues took (its connecting, and its
    event loop's start, are not the enqueue's: pgq's and the baseline's connections are open
    already)."""
    conn = await connect(dsn)
    try:
        q = queries(conn, schema)
        t0 = time.perf_counter()
        for i in range(0, len(payloads), size):
            chunk: list[bytes | None] = list(payloads[i : i + size])
            await q.enqueue([ENTRYPOINT] * len(chunk), chunk, [0] * len(chunk))
        return time.perf_counter() - t0
    finally:
        await conn.close()


async def noop(job: Any) -> None:
    """PgQueuer's entrypoint: completes the job at once (a coroutine)."""
    return None


async def drain(dsn: str, schema: str, consumers: int, batch: int) -> float:
    """C queue managers drain the queue; seconds from their start to the last one's exit
    (connecting excluded)."""
    conns = [await connect(dsn) for _ in range(consumers)]
    channel = settings(schema).channel
    managers = [QueueManager(queries(conn, schema), channel=channel) for conn in conns]
    for manager in managers:
        manager.entrypoint(ENTRYPOINT)(noop)

    t0 = time.perf_counter()
    try:
        await asyncio.gather(
            *(m.run(batch_size=batch, mode=types.QueueExecutionMode.drain) for m in managers)
        )
    finally:
        for conn in conns:
            if not conn.is_closed():
                await conn.close()
    return time.perf_counter() - t0


def run_loop(coro: Coroutine[Any, Any, float]) -> tuple[float, str]:
    """Run on uvloop when it is installed (PgQueuer's CLI does), else asyncio; (result, loop)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro), "asyncio"
    return uvloop.run(coro), "uvloop"


def main(argv: list[str] | None = None) -> None:
    """The child process: drain, then print one JSON line with its own timing."""
    parser = argparse.ArgumentParser(prog="python -m pgq_bench.pgqueuer_side")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--consumers", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    args = parser.parse_args(argv)
    seconds, loop = run_loop(drain(os.environ["PGQ_DSN"], args.schema, args.consumers, args.batch))
    sys.stdout.write(json.dumps({"seconds": seconds, "loop": loop}) + "\n")


if __name__ == "__main__":
    main()
