"""The listener alone (pgq_core/worker/listener.py), on a real PostgreSQL: it hints once LISTEN
is established, wakes on a notification naming one of its queues, ignores other queues and
other schemas, and after its connection is killed it listens again and says so."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql
from support import make_worker, until

from pgq_core import JobSpec, Queue, migrate
from pgq_core.queue import channel
from pgq_core.worker.link import Timeouts
from pgq_core.worker.listener import listen

QUIET = 0.6  # how long a notification that must not wake it is given to do so


class Hints:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@contextlib.asynccontextmanager
async def listening(dsn: str, schema: str, queues: list[str], app: str) -> AsyncIterator[Hints]:
    hints = Hints()
    task = asyncio.create_task(listen(dsn, schema, queues, Timeouts(), hints, app))
    try:
        await until(lambda: hints.count == 1, timeout=10, what="LISTEN established")
        yield hints
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def app() -> str:
    return f"pgq listen test {secrets.token_hex(3)}"


async def test_wakes_for_its_queues_only(dsn: str, schema: str, queue: Queue, app: str) -> None:
    async with listening(dsn, schema, ["a", "b"], app) as hints:
        queue.enqueue_many([JobSpec("c", {})])
        await asyncio.sleep(QUIET)
        assert hints.count == 1, "woken for a queue it does not serve"
        queue.enqueue_many([JobSpec("a", {})])
        await until(lambda: hints.count == 2, timeout=5, what="woken for queue a")
        queue.enqueue_many([JobSpec("b", {}), JobSpec("b", {})])  # one notification per batch
        await until(lambda: hints.count == 3, timeout=5, what="woken for queue b")
        await asyncio.sleep(QUIET)
        assert hints.count == 3


async def test_ignores_the_same_queue_in_another_schema(
    dsn: str, schema: str, app: str, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    other = f"t_{secrets.token_hex(5)}"
    migrate(conn, other)
    try:
        async with listening(dsn, schema, ["a"], app) as hints:
            with Queue.connect(dsn, other) as elsewhere:
                elsewhere.enqueue_many([JobSpec("a", {})])
            conn.execute("SELECT pg_catalog.pg_notify(%s, 'a')", [channel(other)])
            await asyncio.sleep(QUIET)
            assert hints.count == 1, "woken by another schema's queue a"
            conn.execute("SELECT pg_catalog.pg_notify(%s, 'a')", [channel(schema)])
            await until(lambda: hints.count == 2, timeout=5, what="woken by its own channel")
    finally:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(other)))


async def test_listens_again_after_its_connection_is_killed(
    dsn: str, schema: str, queue: Queue, app: str, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    async with listening(dsn, schema, ["a"], app) as hints:
        killed = conn.execute(
            "SELECT pg_catalog.count(pg_catalog.pg_terminate_backend(pid))"
            " FROM pg_catalog.pg_stat_activity WHERE application_name = %s",
            [app],
        ).fetchone()
        assert killed == (1,)
        # LISTEN again: notifications may have been missed, so it hints on its own
        await until(lambda: hints.count == 2, timeout=10, what="LISTEN re-established")
        queue.enqueue_many([JobSpec("a", {})])
        await until(lambda: hints.count == 3, timeout=5, what="woken after the reconnect")


def _authenticating(dsn: str) -> set[int]:
    """The server's sessions still in authentication (pg_stat_activity state 'starting')."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE state = 'starting'")
        return {int(pid) for (pid,) in rows.fetchall()}


async def test_a_worker_stopped_while_its_listen_connection_opens_leaves_no_session_half_open(
    dsn: str, schema: str
) -> None:
    """A burst worker on an empty queue stops just as its LISTEN connection opens. Cancelled
    half-way, that connect left a session waiting in authentication until the socket was
    garbage-collected or `authentication_timeout` (60 s) passed; meanwhile every DROP DATABASE
    on the server waited for it (the test suite's ~58 s teardown stalls). Now the connection
    is closed once open, before `run()` returns."""
    before = _authenticating(dsn)
    for _ in range(3):
        worker = make_worker(dsn, schema, lambda job: None, burst=True)
        await asyncio.wait_for(worker.run(), 30)
    await until(lambda: _authenticating(dsn) <= before, timeout=5, what="no session half-open")
