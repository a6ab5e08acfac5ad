"""The dashboard's `p` on a real PostgreSQL: it asks, then pauses (or resumes) the selected
queue in the database, and the queues table marks paused queues."""

from __future__ import annotations

from typing import Any

import pytest
from support import dashboard
from textual.pilot import Pilot
from tui_support.pilot import wait_for

from pgq_core import Queue
from pgq_tui.app import PAUSE_REASON, DashboardApp
from pgq_tui.screens.confirm import ConfirmScreen
from pgq_tui.screens.help import HelpScreen
from pgq_tui.widgets.keyed_table import plain
from pgq_tui.widgets.queues_table import QueuesTable

SIZE = (140, 40)


def queue_cell(app: DashboardApp, name: str) -> str:
    table = app.dashboard.query_one(QueuesTable)
    if name not in table.rows:
        return ""
    return plain(table.get_row(name)[0])


def paused(queue: Queue, name: str) -> bool:
    return any(s.paused for s in queue.stats() if s.queue == name)


async def select(pilot: Pilot[Any], app: DashboardApp, name: str) -> None:
    table = app.dashboard.query_one(QueuesTable)
    table.move_cursor(row=table.get_row_index(name))
    await pilot.pause()


async def test_p_asks_then_pauses_and_resumes_the_selected_queue(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue("chosen", {})
    queue.enqueue("other", {})
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: queue_cell(app, "chosen") == "chosen", "the queue row")
        await select(pilot, app, "chosen")
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm modal")
        await pilot.press("y")
        await wait_for(pilot, lambda: paused(queue, "chosen"), "paused in the database")
        [stats] = [s for s in queue.stats() if s.queue == "chosen"]
        assert stats.pause_reason == PAUSE_REASON
        assert not paused(queue, "other")
        assert queue.claim("chosen", 1) == []
        await wait_for(pilot, lambda: "paused" in queue_cell(app, "chosen"), "marked paused")
        assert "paused" not in queue_cell(app, "other")

        await select(pilot, app, "chosen")
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm modal")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.title_text == "Resume queue chosen?"
        await pilot.press("y")
        await wait_for(pilot, lambda: not paused(queue, "chosen"), "resumed in the database")
        await wait_for(pilot, lambda: queue_cell(app, "chosen") == "chosen", "mark gone")


@pytest.mark.parametrize("answer", ["n", "escape"])
async def test_p_cancelled_changes_nothing(
    dsn: str, schema: str, queue: Queue, answer: str
) -> None:
    queue.enqueue("chosen", {})
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: queue_cell(app, "chosen") == "chosen", "the queue row")
        await select(pilot, app, "chosen")
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm modal")
        await pilot.press(answer)
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "dismissed")
        assert not paused(queue, "chosen")


async def test_p_is_refused_read_only_and_listed_in_help(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue("chosen", {})
    app = dashboard(dsn, schema, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: queue_cell(app, "chosen") == "chosen", "the queue row")
        await select(pilot, app, "chosen")
        await pilot.press("p")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert not paused(queue, "chosen")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
