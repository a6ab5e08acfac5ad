"""LISTEN for new jobs on a connection of its own. A notification is only a hint to claim now;
the worker's polling stays the fallback, so a missed or late notification costs latency, never
a job."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

import psycopg

from ..queue import listen_statement
from .link import Timeouts, open_connection
from .policy import Backoff


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
    cancelled; reconnects with bounded backoff."""
    wanted = set(queues)
    backoff = Backoff(first=0.25, cap=5.0)
    while True:
        try:
            conn = await open_connection(dsn, timeouts, app)
        except psycopg.Error:
            await asyncio.sleep(backoff.next())
            continue
        try:
            await conn.execute("SET statement_timeout = 0")
            await conn.execute(listen_statement(schema))
            backoff.reset()
            on_hint()
            async for note in conn.notifies():
                if note.payload in wanted:
                    on_hint()
        except psycopg.Error:
            await asyncio.sleep(backoff.next())
        finally:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
