"""LISTEN for new jobs on a connection of its own. A notification is only a hint to claim now;
the worker's polling stays the fallback, so a missed or late notification costs latency, never
a job."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

import psycopg

from ..config import listen_dsn
from ..queue import listen_statement
from .link import Timeouts, open_connection
from .policy import Backoff

log = logging.getLogger("pgq.worker")

#: How often a listener checks that it may still LISTEN where it does (a pooler found later).
RECHECK = 5.0


async def listen(
    dsn: str,
    schema: str,
    queues: Iterable[str],
    timeouts: Timeouts,
    on_hint: Callable[[], None],
    app: str = "pgq listen",
) -> None:
    """Call `on_hint` whenever one of `queues` may have jobs: on each notification naming it
    and each time LISTEN is (re-)established (notifications may have been missed). Runs until
    cancelled; reconnects with bounded backoff.

    Through a pooler in transaction mode (`config.pooled`) it LISTENs on PGQ_LISTEN_DSN, a
    direct connection; without one it says once that the worker polls alone, and returns (also
    when pooled mode begins while it listens: a pooler found later)."""
    wanted = set(queues)
    backoff = Backoff(first=0.25, cap=5.0)
    while True:
        target = listen_dsn(dsn)
        if target is None:
            log.info(
                "%s: connections go through a pooler and PGQ_LISTEN_DSN is not set: "
                "no LISTEN, polling alone",
                app,
            )
            return
        try:
            conn = await open_connection(target, timeouts, app)
        except psycopg.Error:
            await asyncio.sleep(backoff.next())
            continue
        try:
            await conn.execute("SET statement_timeout = 0")
            await conn.execute(listen_statement(schema))
            backoff.reset()
            on_hint()
            while listen_dsn(dsn) == target:
                async for note in conn.notifies(timeout=RECHECK):
                    if note.payload in wanted:
                        on_hint()
        except psycopg.Error:
            await asyncio.sleep(backoff.next())
        finally:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
