"""The worker's statement connection (pgq_core/worker/link.py) given up while a statement runs
on it, against a real PostgreSQL: libpq's connection is never freed under psycopg's statement
(a crash, or a statement that committed reported as failed); the statement ends as it would
have, and only then is its connection closed."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
from support import backends, lock_jobs, until

from pgq_core import Queue, ops
from pgq_core.worker.link import Link, Timeouts

TIMEOUT = 30.0


async def test_a_link_closed_under_a_call_closes_its_connection_when_the_call_ends(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A worker stopping (Link.close) while a statement of another task waits on a lock: the
    statement still runs to its end and returns its rows, and the connection closes then."""
    job_id = queue.enqueue("held", {})
    app = f"pgq test-link-{schema}"[:63]
    link = Link(dsn, schema, Timeouts(statement=30, lock=20), lambda _: None, lambda: None, app)
    await link.open()
    try:
        with psycopg.connect(dsn) as holder:
            lock_jobs(holder, schema)
            claim = ops.claim("held", 1, timedelta(seconds=30), "w")
            call = asyncio.ensure_future(link.call(claim))
            await until(lambda: backends(dsn, app, waiting=True) == 1, TIMEOUT, "the wait")
            await link.close()
            await asyncio.sleep(0.2)
            assert not call.done()
            assert backends(dsn, app) == 1  # still open under the call
            holder.rollback()
        (claimed,) = await asyncio.wait_for(call, TIMEOUT)
        assert [job.id for job in claimed] == [job_id]
        await until(lambda: backends(dsn, app) == 0, TIMEOUT, "the connection to close")
        assert not link.up
    finally:
        await link.close()
