"""The dashboard on a real server with queue names, errors and worker ids that hold Rich markup
and terminal control: no crash, no link, no control sequence in what reaches the terminal."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from psycopg import sql
from rich.console import Console
from textual import events
from textual.pilot import Pilot
from textual.widgets import Input
from tui_support.pilot import wait_for

from pgq_core import Queue
from pgq_tui.app import DashboardApp
from pgq_tui.launch import make_app
from pgq_tui.screens.confirm import ConfirmScreen
from pgq_tui.screens.job_detail import JobDetailScreen
from pgq_tui.widgets.errors_table import ErrorsTable
from pgq_tui.widgets.jobs_table import JobsTable
from pgq_tui.widgets.leases_table import LeasesTable
from pgq_tui.widgets.queues_table import QueuesTable

SIZE = (160, 44)
QUEUES = ("mk[/]x", "mk[link=file:///etc/passwd]x", "esc\x1b[2J\x1b]0;title\x07x")
WORKER = "w[b]\x1b[6n"
ERROR = "boom [/] [link=file:///etc/passwd]click[/link] \x1b]0;title\x07 \x1b[2J"


def screen_output(app: DashboardApp) -> tuple[str, bool]:
    """What the current screen sends to a terminal, and whether any segment carries a link."""
    update = app.screen._compositor.render_update(full=True)
    console = Console(
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        width=SIZE[0],
        height=SIZE[1],
        legacy_windows=False,
    )
    linked = any(s.style is not None and s.style.link for s in console.render(update))
    console.print(update)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    return output, linked


def assert_inert(app: DashboardApp, *visible: str) -> None:
    output, linked = screen_output(app)
    assert not linked
    assert "\x1b]8;" not in output  # OSC 8: a hyperlink
    assert "\x07" not in output and "\x1b[2J" not in output and "\x1b]0;" not in output
    assert "\x1b[6n" not in output
    for text in visible:
        assert text in output, text


@pytest.mark.parametrize("browsed", QUEUES, ids=("close-tag", "link", "control"))
async def test_hostile_queue_names_render_as_text(
    dsn: str, schema: str, queue: Queue, browsed: str
) -> None:
    """All three queues drawn as text; one browsed per case (its jobs, a job's detail and the
    requeue-all dialog), so xdist spreads the three."""
    for name in QUEUES:
        queue.enqueue(name, {"n": 1})
        [job] = queue.claim(name, 1, timedelta(seconds=60), WORKER)
        queue.fail(job.id, job.fence, ERROR)  # retried: ready again
        queue.enqueue(name, {"running": True}, max_attempts=1)
        queue.claim(name, 1, timedelta(seconds=600), WORKER)
        queue.enqueue(name, {"dead": True}, max_attempts=1)
        [dead] = queue.claim(name, 1, timedelta(seconds=60), WORKER)
        queue.fail(dead.id, dead.fence, ERROR)
    app = make_app(dsn, schema, "db[/]\x1b[2J", refresh=0.2)
    async with app.run_test(size=SIZE) as pilot:
        queues = app.dashboard.query_one(QueuesTable)
        leases = app.dashboard.query_one(LeasesTable)
        await wait_for(pilot, lambda: queues.row_count == 3, "three queues")
        await wait_for(pilot, lambda: leases.row_count == 3, "three leases")
        names = ("mk[/]x", "mk[link=file:///etc/passwd]x", "\\x1b[2J")
        # the rows are in the tables before the next frame draws them
        await wait_for(
            pilot, lambda: all(n in screen_output(app)[0] for n in names), "the names drawn"
        )
        assert_inert(app, *names)

        await _browse(pilot, app, browsed)
        assert app.is_running


async def test_a_hostile_error_group_renders_as_text(dsn: str, schema: str, queue: Queue) -> None:
    """The group column is plain SQL's to write too (the trigger only follows last_error)."""
    queue.enqueue("q", {}, max_attempts=1)
    [job] = queue.claim("q", 1, timedelta(seconds=60), WORKER)
    queue.fail(job.id, job.fence, ERROR)
    group = "g[/]\x1b]0;title\x07\x1b[2J"
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET error_group = %s WHERE id = %s").format(sql.Identifier(schema)),
        (group, job.id),
    )
    app = make_app(dsn, schema, "db", refresh=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("5")
        table = app.dashboard.query_one(ErrorsTable)
        await wait_for(pilot, lambda: table.row_count == 1, "the error group")
        await pilot.pause(0.2)
        assert_inert(app, "g[/]", "boom [/]")


async def test_a_filter_paste_holding_terminal_control_is_refused(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A paste into the filter field is echoed by the field and the status line: one holding
    terminal control is refused, so neither can put it on the screen."""
    queue.enqueue("q", {})
    app = make_app(dsn, schema, "db", refresh=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await pilot.press("slash")
        field = app.dashboard.query_one(Input)
        field.post_message(events.Paste("q\x1b[2J\x07"))  # refused whole: it holds control
        await pilot.press("q")
        await pilot.pause(0.2)
        assert field.value == "q" and app.dashboard.filter_text == "q"
        assert_inert(app, "/q")


async def _browse(pilot: Pilot[Any], app: DashboardApp, name: str) -> None:
    """Jobs of `name` (dead first), one job's detail, and the requeue-all confirmation."""
    queues = app.dashboard.query_one(QueuesTable)
    queues.focus()
    queues.move_cursor(row=queues.get_row_index(name))
    await pilot.press("enter")
    jobs = app.dashboard.query_one(JobsTable)
    await wait_for(pilot, lambda: jobs.row_count >= 1, f"jobs of {name!r}")
    await pilot.pause(0.3)
    assert_inert(app, "boom [/]")

    await pilot.press("enter")
    await wait_for(
        pilot,
        lambda: isinstance(app.screen, JobDetailScreen) and app.screen.job is not None,
        "the job detail",
    )
    await pilot.pause(0.2)
    assert_inert(app, "[link=file:///etc/passwd]click[/link]", "\\x1b]0;title\\x07")
    await pilot.press("escape")
    await wait_for(pilot, lambda: app.screen is app.dashboard, "back on the dashboard")

    queues.focus()
    await pilot.press("R")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
    await pilot.pause(0.2)
    assert_inert(app, "Requeue every dead job of queue")
    await pilot.press("y")
    await wait_for(pilot, lambda: app.screen is app.dashboard, "confirmed")
    await pilot.pause(0.5)  # the notification naming the queue
    assert_inert(app, "requeued 1 dead job")


async def test_a_job_whose_payload_python_cannot_read_says_so_in_its_detail(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A payload stored by plain SQL nested past what Python's JSON reads: the job detail says
    why it cannot show the job (before, the read failed silently in its worker and the screen
    stayed empty)."""
    queue.conn.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (queue, payload)"
            " VALUES ('q', ('{{\"a\":' || repeat('[', 5000) || repeat(']', 5000) || '}}')::jsonb)"
        ).format(sql.Identifier(schema))
    )
    app = make_app(dsn, schema, "db", refresh=0.2)
    async with app.run_test(size=SIZE) as pilot:
        queues = app.dashboard.query_one(QueuesTable)
        await wait_for(pilot, lambda: queues.row_count == 1, "the queue")
        queues.focus()
        await pilot.press("enter")
        jobs = app.dashboard.query_one(JobsTable)
        await wait_for(pilot, lambda: jobs.row_count == 1, "the job")
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, JobDetailScreen)
            and "cannot be read by Python" in app.screen.message.plain,
            "the reason on the job detail",
        )
        assert app.is_running
