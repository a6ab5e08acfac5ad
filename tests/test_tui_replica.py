"""The dashboard on a real primary and its streaming standby: the header names the host each
poll read (a standby: how far behind), says in plain words while no host takes writes, and
when the primary changed; reading a standby, actions still reach the primary; a LISTEN the
standby refuses is said once."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from replication import SCHEMA, Pair, running_pair
from textual.pilot import Pilot
from tui_support.pilot import wait_for

from pgq_core import Queue
from pgq_tui.app import DashboardApp
from pgq_tui.launch import make_app
from pgq_tui.source import PgSource
from pgq_tui.widgets.queues_table import QueuesTable
from pgq_tui.widgets.status_header import StatusHeader

TIMEOUT = 30.0
SIZE = (240, 40)  # wide enough that nothing of the header is cut
CHANGED = re.compile(r"primary changed \d\d:\d\d:\d\d \(timeline 2\)")


@pytest.fixture
def pair() -> Iterator[Pair]:
    with running_pair() as found:
        yield found


def header(app: DashboardApp) -> str:
    return app.dashboard.query_one(StatusHeader).render().plain


def shown(app: DashboardApp, queue: str) -> bool:
    return queue in app.dashboard.query_one(QueuesTable).rows


async def until(pilot: Pilot[Any], condition: Any, what: str) -> None:
    await wait_for(pilot, condition, what, TIMEOUT)


async def test_the_header_names_the_primary_the_gap_and_the_failover(pair: Pair) -> None:
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        queue.enqueue("mail", {})
    primary, standby = (f"127.0.0.1:{s.port}" for s in (pair.primary, pair.standby))
    app = make_app(pair.dsn, SCHEMA, "cluster", refresh=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: shown(app, "mail"), "the first poll")
        text = header(app)
        assert f"·  {primary}  " in text, text
        assert "standby" not in text and "primary changed" not in text, text

        pair.primary.stop("immediate")
        await until(
            pilot, lambda: "no writable primary among 2 hosts" in header(app), "the gap said"
        )
        assert app.problem == (
            f"no writable primary among 2 hosts ({primary} refused; {standby} read-only "
            "standby): waiting for a failover"
        ), app.problem
        assert "disconnected" in header(app)

        pair.standby.promote()
        await until(pilot, lambda: CHANGED.search(header(app)) is not None, "the change said")
        text = header(app)
        assert f"·  {standby}  " in text and "live" in text, text
        assert "no writable primary" not in text, text
        with Queue.connect(pair.dsn, SCHEMA) as queue:
            queue.enqueue("after", {})
        await until(pilot, lambda: shown(app, "after"), "a job enqueued on the new primary")
        assert CHANGED.search(header(app)) is not None  # it stays said


async def test_reading_a_standby_shows_its_lag_and_acts_on_the_primary(pair: Pair) -> None:
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        queue.enqueue("mail", {})
    pair.caught_up()
    primary, standby = (f"127.0.0.1:{s.port}" for s in (pair.primary, pair.standby))
    app = make_app(pair.dsn, SCHEMA, "cluster", refresh=0.2, read_dsn=pair.standby.dsn)
    source = app.source
    assert isinstance(source, PgSource)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: shown(app, "mail"), "the first poll")
        await until(pilot, lambda: f"·  {standby} standby, " in header(app), "the standby named")
        assert re.search(r"standby, \d+\.\d s behind", header(app)), header(app)
        assert source._queue is not None
        row = await (
            await source._queue.conn.execute("SHOW default_transaction_read_only")
        ).fetchone()
        assert row == ("on",)  # the reads' session writes nothing

        # the action reaches the primary; the poll shows it once the standby replayed it
        await source.pause_queue("mail", "from the test")
        with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
            assert next(s for s in queue.stats() if s.queue == "mail").paused
            queue.enqueue("fresh", {})
        await until(pilot, lambda: shown(app, "fresh"), "a job replayed on the standby")

        pair.primary.stop("immediate")
        await until(
            pilot,
            lambda: "primary: no writable primary among 2 hosts" in header(app),
            "the primary out of reach said",
        )
        assert app.connection == "connected"  # the standby still answers the polls
        pair.standby.promote()
        # the primary's answer and the next poll of the (promoted) standby each say their part
        await until(
            pilot,
            lambda: CHANGED.search(header(app)) is not None and "standby," not in header(app),
            "the change said",
        )
        text = header(app)
        assert f"·  {standby}  " in text, text  # read from the server promoted
        assert "primary: " not in text and primary not in text, text


async def test_a_listen_the_standby_refuses_is_said_once(pair: Pair) -> None:
    pair.caught_up()
    standby = f"127.0.0.1:{pair.standby.port}"
    app = make_app(pair.standby.dsn, SCHEMA, "standby", refresh=0.2)
    said: list[str] = []
    alert = app.alert

    def record(message: str, *, title: str = "", **kwargs: Any) -> None:
        said.append(f"{title}: {message}" if title else message)
        alert(message, title=title, **kwargs)

    app.alert = record  # type: ignore[method-assign]
    source = app.source
    assert isinstance(source, PgSource)
    tries = 0
    notifications = source.notifications

    async def counted() -> AsyncIterator[str]:
        nonlocal tries
        tries += 1
        async for name in notifications():
            yield name

    source.notifications = counted  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: f"·  {standby} standby, " in header(app), "the standby named")
        await until(pilot, lambda: tries >= 3, "LISTEN tried three times")
        off = [line for line in said if line.startswith("live updates off")]
        assert off == ["live updates off: the server is a standby; polling every 0.2 s"], said

        # an action there says in plain words why it did not happen
        app._act(source.pause_queue("mail", "from the test"), lambda _: "paused")
        await until(pilot, lambda: any("action failed" in line for line in said), "a refusal")
        (failed,) = [line for line in said if "action failed" in line]
        assert failed == (
            f"action failed: the server ({standby}) takes no writes (a standby, or read-only "
            "sessions): name the primary, or every host of the cluster with "
            "target_session_attrs=read-write"
        ), failed


def test_the_header_text_names_a_standby_its_lag_and_a_change() -> None:
    from pgq_tui.state import CONNECTED, HeaderState
    from pgq_tui.widgets.status_header import header_text

    state = HeaderState(
        "ops@db/app", "pgq", CONNECTED, host="10.0.0.2:5432", standby=True, lag=0.44,
        primary_changed="primary changed 12:03:07 (timeline 2)",
        writes="no writable primary among 2 hosts: waiting for a failover",
    )
    text = header_text(state, 0.0, 220).plain
    assert "·  10.0.0.2:5432 standby, 0.4 s behind  primary changed 12:03:07 (timeline 2)" in text
    assert "primary: no writable primary among 2 hosts: waiting for a failover" in text
    assert text.rstrip().endswith("00:00:00 UTC")
    plain = header_text(HeaderState("ops@db/app", "pgq", CONNECTED), 0.0, 220).plain
    assert "standby" not in plain and "·  " not in plain.split("schema pgq")[1]
