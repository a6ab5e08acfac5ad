"""The dashboard's server-side jobs filter, bulk R/k over it, the Errors and the Health views,
against a real PostgreSQL (App.run_test + Pilot over PgSource; state checked in the database)."""

from __future__ import annotations

import io
from typing import Any

import psycopg
from rich.console import Console
from support import dashboard, statuses
from textual.pilot import Pilot
from tui_support.pilot import wait_for

from pgq_core import JobSpec, Queue
from pgq_tui.app import DashboardApp
from pgq_tui.screens.confirm import BulkConfirmScreen, ConfirmScreen
from pgq_tui.widgets.errors_table import ErrorsTable
from pgq_tui.widgets.health_panel import health_renderable
from pgq_tui.widgets.jobs_table import JobsTable
from pgq_tui.widgets.leases_table import LeasesTable
from pgq_tui.widgets.queues_table import QueuesTable

SIZE = (140, 40)


def make_dead(queue: Queue, name: str, errors: list[str]) -> list[int]:
    ids = queue.enqueue_many([JobSpec(name, {"n": i}, max_attempts=1) for i in range(len(errors))])
    jobs = sorted(queue.claim(name, len(errors), worker="test-worker"), key=lambda j: j.id)
    for job, error in zip(jobs, errors, strict=True):
        queue.fail(job.id, job.fence, error)
    return ids


def shown_ids(app: DashboardApp) -> set[int]:
    table = app.dashboard.query_one(JobsTable)
    return {int(str(row.key.value)) for row in table.ordered_rows}


async def type_filter(pilot: Pilot[Any], text: str) -> None:
    await pilot.press("2", "slash", "ctrl+u", *text, "enter")


async def confirm_all(pilot: Pilot[Any], app: DashboardApp, key: str) -> str:
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, BulkConfirmScreen), "the bulk confirm")
    screen = app.screen
    assert isinstance(screen, BulkConfirmScreen)
    question = screen.title_text
    await pilot.press("y")
    await wait_for(pilot, lambda: not isinstance(app.screen, BulkConfirmScreen), "dismissed")
    return question


async def test_filter_lists_matching_jobs_and_requeue_all_changes_exactly_them(
    dsn: str, schema: str, queue: Queue
) -> None:
    timeouts = make_dead(queue, "emails", ["timeout after 30s"] * 3)
    others = make_dead(queue, "emails", ["boom", "boom"])
    elsewhere = make_dead(queue, "reports", ["timeout after 9s"] * 2)
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await type_filter(pilot, "queue:emails status:dead error:timeout")
        await wait_for(pilot, lambda: shown_ids(app) == set(timeouts), "the matching jobs")
        question = await confirm_all(pilot, app, "R")
        assert "Requeue all 3 jobs matching queue:emails status:dead error:timeout" in question
        await wait_for(pilot, lambda: statuses(queue, timeouts) == {"ready"}, "requeued")
        assert statuses(queue, others + elsewhere) == {"dead"}
        requeued = [e for e in queue.history(timeouts[0]) if e.event == "requeued"]
        assert requeued and (requeued[-1].worker or "").startswith("operator:")
        detail = requeued[-1].detail or ""
        assert detail.startswith("filter: ") and "queue=emails" in detail and "timeout" in detail
        await wait_for(pilot, lambda: "requeued 3 jobs" in app.dashboard.message.plain, "said")


async def test_kill_all_matching_a_payload_filter(dsn: str, schema: str, queue: Queue) -> None:
    mine = queue.enqueue_many([JobSpec("orders", {"customer": {"id": 42}}) for _ in range(2)])
    theirs = queue.enqueue_many([JobSpec("orders", {"customer": {"id": 7}}) for _ in range(3)])
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await type_filter(pilot, "payload:customer.id=42 status:ready")
        await wait_for(pilot, lambda: shown_ids(app) == set(mine), "the matching jobs")
        question = await confirm_all(pilot, app, "k")
        assert question.startswith("Kill all 2 jobs matching")
        await wait_for(pilot, lambda: statuses(queue, mine) == {"dead"}, "killed")
        assert statuses(queue, theirs) == {"ready"}


async def test_bad_filter_is_one_line_on_the_status_line(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue("emails", {})
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await type_filter(pilot, "status:zombie")
        await wait_for(pilot, lambda: "bad filter" in app.dashboard.message.plain, "an error")
        assert "unknown status 'zombie'" in app.dashboard.message.plain
        assert app.dashboard.job_filter is None  # nothing applied; the field stays open
        await type_filter(pilot, "older")
        await wait_for(pilot, lambda: "is not KEY:VALUE" in app.dashboard.message.plain, "err")
        polls = app.polls
        await wait_for(pilot, lambda: app.polls > polls + 1, "still polling")


async def test_errors_view_enter_lists_the_group_and_requeue_acts_on_it(
    dsn: str, schema: str, queue: Queue
) -> None:
    http = make_dead(
        queue,
        "hooks",
        [f"HTTP 50{i} from https://{i}.example/{i * 11}" for i in range(3)],
    )
    boom = make_dead(queue, "hooks", ["boom"])
    [group] = [g.group for g in queue.errors() if g.dead == 3]
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await pilot.press("5")
        table = app.dashboard.query_one(ErrorsTable)
        await wait_for(pilot, lambda: group in table.rows, "the error group")
        table.move_cursor(row=table.get_row_index(group))
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.dashboard.active_view() == "jobs", "the Jobs view")
        await wait_for(pilot, lambda: shown_ids(app) == set(http), "the group's jobs")
        await pilot.press("5")
        await wait_for(pilot, lambda: table.selected_key == group, "the group selected")
        question = await confirm_all(pilot, app, "R")
        assert question == f"Requeue all 3 jobs of error group {group}?"
        await wait_for(pilot, lambda: statuses(queue, http) == {"ready"}, "the group requeued")
        assert statuses(queue, boom) == {"dead"}


async def test_health_view_shows_a_held_open_transaction_as_the_xmin_holder(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue("emails", {})
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT txid_current()")
        pid = holder.info.backend_pid
        app = dashboard(dsn, schema)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.polls > 0, "the first poll")
            await pilot.press("6")
            dash = app.dashboard
            # the oldest transaction of the whole server: another test's may be older for a
            # while, so wait (the view re-reads) until ours is the one named
            await wait_for(
                pilot,
                lambda: (
                    dash.health is not None
                    and dash.health.xmin is not None
                    and dash.health.xmin.pid == pid
                ),
                "the holder named in a health read",
                timeout=60.0,
            )
            assert dash.health is not None and dash.health.xmin is not None
            console = Console(width=200, file=io.StringIO(), record=True)
            console.print(health_renderable(dash.health, app.clock(), 200))
            text = console.export_text()
            assert f"xmin holder pid {pid}" in text and "idle in transaction" in text


def quiet_dashboard(dsn: str, schema: str) -> DashboardApp:
    """No poll but those asked for, no LISTEN: after `space` (live updates paused) nothing
    but an action's own re-read can change the screen."""
    app = dashboard(dsn, schema, refresh=3600)
    app.listen = False
    return app


def queue_row(app: DashboardApp, name: str) -> tuple[str, str]:
    """(ready, dead) as the Queues view shows them."""
    table = app.dashboard.query_one(QueuesTable)
    return str(table.get_cell(name, "ready")), str(table.get_cell(name, "dead"))


async def pause_after_first_poll(pilot: Pilot[Any], app: DashboardApp) -> int:
    await wait_for(pilot, lambda: app.polls > 0, "the first poll")
    await pilot.press("space")  # paused: no poll from now on
    return app.polls


async def test_an_actions_rows_show_their_new_state_before_any_poll(
    dsn: str, schema: str, queue: Queue
) -> None:
    """`r` on a dead job: as soon as the requeue committed, the job leaves the Jobs view's dead
    list and the queue's row counts it ready, with no poll (paused, no LISTEN)."""
    [job_id, other] = make_dead(queue, "emails", ["boom", "boom"])
    app = quiet_dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await pilot.press("2")
        table = app.dashboard.query_one(JobsTable)
        await wait_for(pilot, lambda: shown_ids(app) == {job_id, other}, "the dead jobs")
        table.move_cursor(row=table.get_row_index(str(job_id)))
        polls = await pause_after_first_poll(pilot, app)
        assert queue_row(app, "emails") == ("0", "2")
        await pilot.press("r")
        await wait_for(pilot, lambda: queue.job(job_id).status == "ready", "the requeue")
        await wait_for(pilot, lambda: shown_ids(app) == {other}, "the dead list without it")
        await wait_for(pilot, lambda: queue_row(app, "emails") == ("1", "1"), "the queue row")
        assert app.polls == polls


async def test_requeue_all_shows_the_queues_new_counts_before_any_poll(
    dsn: str, schema: str, queue: Queue
) -> None:
    """`R` then `y` on a queue: its row says 0 dead, 3 ready once the requeue committed, with
    no poll (it waited for the next poll before)."""
    make_dead(queue, "emails", ["boom"] * 3)
    app = quiet_dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        polls = await pause_after_first_poll(pilot, app)
        assert queue_row(app, "emails") == ("0", "3")
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm")
        await pilot.press("y")
        await wait_for(pilot, lambda: queue_row(app, "emails") == ("3", "0"), "the queue row")
        assert app.polls == polls
        assert queue.stats()[0].ready == 3


async def test_kill_and_pause_show_their_effect_before_any_poll(
    dsn: str, schema: str, queue: Queue
) -> None:
    """`k` on a lease: the lease leaves the Leases view and the queue counts it dead; `p`: the
    queue's row says paused; no poll meanwhile."""
    [job_id] = queue.enqueue_many([JobSpec("emails", {})])
    queue.claim("emails", 1, worker="w")
    app = quiet_dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        leases = app.dashboard.query_one(LeasesTable)
        await wait_for(pilot, lambda: str(job_id) in leases.rows, "the lease")
        polls = await pause_after_first_poll(pilot, app)
        leases.focus()
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm")
        await pilot.press("y")
        await wait_for(pilot, lambda: str(job_id) not in leases.rows, "the lease gone")
        await wait_for(pilot, lambda: queue_row(app, "emails")[1] == "1", "one dead")
        assert queue.job(job_id).status == "dead"
        app.dashboard.query_one(QueuesTable).focus()
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm")
        await pilot.press("y")
        stats = app.dashboard.query_one(QueuesTable)
        await wait_for(pilot, lambda: "paused" in str(stats.get_row("emails")), "paused shown")
        assert queue.stats()[0].paused
        assert app.polls == polls
