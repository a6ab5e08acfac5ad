"""The dashboard through a proxy the test controls: the server vanishes, hangs, comes back.

The proxy forwards a Unix socket to the real server; `cut()` closes every link and refuses new
ones (the server went away), `freeze()` keeps links open but forwards nothing (the server
hangs), `restore()` puts things back. The app must say so in its header and recover by itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support import backends, lock_jobs, until
from textual.pilot import Pilot
from tui_support.pilot import wait_for as wait_until

from pgq_core import Queue
from pgq_tui.launch import make_app
from pgq_tui.source import Disconnected, PgSource
from pgq_tui.widgets.queues_table import QueuesTable
from pgq_tui.widgets.status_header import StatusHeader

TIMEOUT = 30.0
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Proxy:
    def __init__(self, upstream: Callable[[], Any]) -> None:
        self.upstream = upstream
        self.frozen = False
        self.refusing = False
        self.links: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self, path: str) -> None:
        self.server = await asyncio.start_unix_server(self._accept, path)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            return
        up_reader, up_writer = await self.upstream()
        self.links += [writer, up_writer]
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                while self.frozen:
                    await asyncio.sleep(0.02)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def cut(self) -> None:
        self.refusing = True
        for writer in self.links:
            writer.close()
        self.links.clear()

    def freeze(self) -> None:
        self.frozen = True

    def restore(self) -> None:
        self.frozen = False
        self.refusing = False

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def proxied(dsn: str, tmp_path: Path) -> AsyncIterator[tuple[Proxy, str]]:
    """(proxy, a DSN that goes through it)."""
    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or "localhost")
    port = int(params.get("port") or 5432)

    async def upstream() -> Streams:
        if host.startswith("/"):
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        return await asyncio.open_connection(host, port)

    sock_dir = tmp_path / "sock"
    sock_dir.mkdir()
    proxy = Proxy(upstream)
    await proxy.start(str(sock_dir / ".s.PGSQL.5432"))
    try:
        yield proxy, make_conninfo(dsn, host=str(sock_dir), port="5432", connect_timeout="2")
    finally:
        await proxy.close()


async def wait_for(pilot: Pilot[Any], condition: Callable[[], bool], what: str) -> None:
    await wait_until(pilot, condition, what, TIMEOUT)


def ready_shown(app: Any, queue: str) -> int | None:
    table = app.dashboard.query_one(QueuesTable)
    if queue not in table.rows:
        return None
    return int(str(table.get_row(queue)[1]).replace(",", ""))


async def test_server_going_away_and_coming_back(
    proxied: tuple[Proxy, str], schema: str, queue: Queue
) -> None:
    proxy, dsn = proxied
    queue.enqueue("before", {})
    app = make_app(dsn, schema, "proxied-db", refresh=0.2)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: ready_shown(app, "before") == 1, "data through the proxy")
        header = app.dashboard.query_one(StatusHeader)
        proxy.cut()
        await wait_for(pilot, lambda: app.connection == "disconnected", "disconnected")
        assert "disconnected" in header.render().plain
        failures = app.poll_failures
        await wait_for(pilot, lambda: app.poll_failures >= failures + 2, "retries failing")
        assert app.is_running
        queue.enqueue("after", {})
        proxy.restore()
        await wait_for(pilot, lambda: ready_shown(app, "after") == 1, "fresh data after")
        assert app.connection == "connected"
        assert "live" in header.render().plain


async def test_a_hung_server_times_the_poll_out_and_recovers(
    proxied: tuple[Proxy, str], schema: str, queue: Queue
) -> None:
    proxy, dsn = proxied
    queue.enqueue("before", {})
    app = make_app(dsn, schema, "proxied-db", refresh=0.2)
    app.poll_timeout = 1.0
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_for(pilot, lambda: ready_shown(app, "before") == 1, "data through the proxy")
        proxy.freeze()
        # another read may meet the connection the timed-out poll closed and say so first
        await wait_for(
            pilot,
            lambda: app.connection == "disconnected" and "no answer within" in app.problem,
            "the poll timing out",
        )
        queue.enqueue("after", {})
        proxy.restore()
        await wait_for(pilot, lambda: ready_shown(app, "after") == 1, "fresh data after")
        assert app.connection == "connected"


async def test_during_an_outage_the_old_data_is_marked_stale_and_the_clock_stays(
    proxied: tuple[Proxy, str], schema: str, queue: Queue
) -> None:
    from textual.widgets import Static

    proxy, dsn = proxied
    queue.enqueue("before", {})
    app = make_app(dsn, schema, "proxied-db", refresh=0.3)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: ready_shown(app, "before") == 1, "data through the proxy")
        header = app.dashboard.query_one(StatusHeader)
        assert app.dashboard.stale_for is None
        assert not app.dashboard.has_class("-stale")
        proxy.cut()
        await wait_for(pilot, lambda: app.dashboard.stale_for is not None, "stale")
        await pilot.pause(0.3)
        assert app.dashboard.has_class("-stale")  # the tables dim
        line = app.dashboard.query_one("#status-line", Static).content
        assert "STALE" in str(line)
        text = header.render().plain
        assert "stale" in text and "disconnected" in text
        assert text.rstrip().endswith("UTC")  # the clock stays, even at 80 columns
        proxy.restore()
        await wait_for(pilot, lambda: app.dashboard.stale_for is None, "fresh again")
        assert not app.dashboard.has_class("-stale")
        assert "stale" not in header.render().plain


async def test_a_table_locked_by_another_session_bounds_a_poll_by_the_lock_timeout(
    dsn: str, schema: str, queue: Queue
) -> None:
    """An operator's `LOCK TABLE` (a migration, a long `VACUUM FULL`) never hangs the
    dashboard's connection: every statement it sends is bounded by a lock and a statement
    timeout, so the poll fails (and is retried) instead of waiting for the lock."""
    source = PgSource(dsn, schema, lock_timeout=timedelta(milliseconds=200))
    try:
        await source.stats()
        with psycopg.connect(dsn) as holder:
            lock_jobs(holder, schema)
            with pytest.raises(Disconnected, match="lock timeout"):
                await asyncio.wait_for(source.stats(), 5)
            holder.rollback()
        assert await source.stats() == []
    finally:
        await source.close()


async def test_a_connection_given_up_under_a_call_is_closed_when_the_call_ends(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Quitting (or a hung poll's reset) while a call runs must not free libpq's connection
    under psycopg's statement (that crashed the process): the call ends normally, and only
    then is its connection closed."""
    queue.enqueue("held", {})
    source = PgSource(dsn, schema, lock_timeout=timedelta(seconds=20))
    name = source.application_name
    try:
        await source.stats()
        with psycopg.connect(dsn) as holder:
            lock_jobs(holder, schema)
            call = asyncio.ensure_future(source.stats())
            await until(lambda: backends(dsn, name, waiting=True) == 1, TIMEOUT, "the call to wait")
            await source.close()
            await asyncio.sleep(0.2)
            assert not call.done()
            assert backends(dsn, name) == 1  # still open under the call
            holder.rollback()
        stats = await asyncio.wait_for(call, TIMEOUT)
        assert [(s.queue, s.ready) for s in stats] == [("held", 1)]
        await until(lambda: backends(dsn, name) == 0, TIMEOUT, "the connection to close")
    finally:
        await source.close()


async def test_a_connection_opening_as_the_source_closes_is_closed_too(
    proxied: tuple[Proxy, str], dsn: str, schema: str, queue: Queue
) -> None:
    """Quitting while a call is still connecting (the server slow to answer): the connection
    that opens after close() is closed, not left open, and no later call opens another."""
    proxy, through = proxied
    source = PgSource(through, schema, connect_timeout=20)
    name = source.application_name
    try:
        proxy.freeze()
        call = asyncio.ensure_future(source.stats())
        await until(lambda: len(proxy.links) >= 2, TIMEOUT, "the call to connect")
        await source.close()
        proxy.restore()
        with pytest.raises(Disconnected):
            await asyncio.wait_for(call, TIMEOUT)
        with pytest.raises(Disconnected):
            await source.stats()
        await until(lambda: backends(dsn, name) == 0, TIMEOUT, "no connection left")
    finally:
        await source.close()


def listening(dsn: str, name: str) -> int:
    """Sessions of `name` whose last statement was a LISTEN."""
    query = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = %s AND query ILIKE 'LISTEN%%'"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, (name,)).fetchone()
    assert row is not None
    return int(row[0])


def unlinked(proxy: Proxy) -> bool:
    """Every link through the proxy is closed (the client's socket and the server's)."""
    return all(writer.is_closing() for writer in proxy.links)


async def test_notifications_after_close_open_no_connection(
    proxied: tuple[Proxy, str], schema: str
) -> None:
    """The notification loop trying again after close() (the dashboard quitting between its
    reconnect attempts): nothing connects, and the generator ends."""
    proxy, through = proxied
    source = PgSource(through, schema)
    await source.close()
    notes = source.notifications()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(notes), TIMEOUT)
    assert proxy.links == []


async def test_notifications_connecting_as_the_source_closes_close_that_connection(
    proxied: tuple[Proxy, str], dsn: str, schema: str
) -> None:
    """close() while LISTEN's connection is still opening (the server slow to answer): once
    open it is closed, no LISTEN session stays on the server, and the generator ends."""
    proxy, through = proxied
    source = PgSource(through, schema, connect_timeout=20)
    name = source.application_name
    notes = source.notifications()
    try:
        proxy.freeze()
        first = asyncio.ensure_future(anext(notes))
        await until(lambda: len(proxy.links) >= 2, TIMEOUT, "LISTEN to connect")
        await source.close()
        proxy.restore()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(first, TIMEOUT)
        await until(lambda: unlinked(proxy), TIMEOUT, "the connection to close")
        await until(lambda: backends(dsn, name) == 0, TIMEOUT, "no session left")
    finally:
        await notes.aclose()
        await source.close()


async def test_notifications_cancelled_while_connecting_close_that_connection(
    proxied: tuple[Proxy, str], dsn: str, schema: str
) -> None:
    """The dashboard quitting cancels its LISTEN loop, then closes the source: a connection
    the loop was opening is closed once open, not left on the server."""
    proxy, through = proxied
    source = PgSource(through, schema, connect_timeout=20)
    name = source.application_name
    notes = source.notifications()
    try:
        proxy.freeze()
        first = asyncio.ensure_future(anext(notes))
        await until(lambda: len(proxy.links) >= 2, TIMEOUT, "LISTEN to connect")
        first.cancel()
        await source.close()
        proxy.restore()
        with pytest.raises(asyncio.CancelledError):
            await first
        await until(lambda: unlinked(proxy), TIMEOUT, "the connection to close")
        await until(lambda: backends(dsn, name) == 0, TIMEOUT, "no session left")
    finally:
        await notes.aclose()
        await source.close()


async def test_notifications_listening_as_the_source_closes_end(dsn: str, schema: str) -> None:
    """close() while LISTEN waits for notifications: its connection closes and the generator
    ends."""
    source = PgSource(dsn, schema)
    name = source.application_name
    notes = source.notifications()
    try:
        first = asyncio.ensure_future(anext(notes))
        await until(lambda: listening(dsn, name) == 1, TIMEOUT, "LISTEN")
        await source.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(first, TIMEOUT)
        await until(lambda: backends(dsn, name) == 0, TIMEOUT, "no session left")
    finally:
        await notes.aclose()
        await source.close()
