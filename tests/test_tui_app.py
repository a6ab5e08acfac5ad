"""The dashboard against a real PostgreSQL: counts, actions, workers, LISTEN, reconnects.

Every test drives the real app (App.run_test + Pilot) over `PgSource`; state is checked in the
database with the sync `queue` fixture, and waits poll a condition with a generous timeout.
"""

from __future__ import annotations

import asyncio
import os
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import dashboard, until
from textual.pilot import Pilot
from textual.widgets import Static, TabbedContent
from tui_support.pilot import quit_with_q, wait_for

from pgq_core import JobSpec, LeaseLost, Queue
from pgq_tui.app import DashboardApp, Notified
from pgq_tui.launch import make_app
from pgq_tui.screens.confirm import ConfirmScreen
from pgq_tui.screens.job_detail import JobDetailScreen
from pgq_tui.source import PgSource
from pgq_tui.widgets.jobs_table import JobsTable
from pgq_tui.widgets.keyed_table import KeyedTable, plain
from pgq_tui.widgets.leases_table import LeasesTable
from pgq_tui.widgets.queues_table import QueuesTable
from pgq_tui.widgets.status_header import StatusHeader
from pgq_tui.widgets.workers_table import WorkersTable

SIZE = (140, 40)
TIMEOUT = 20.0


def cells(table: KeyedTable, key: str) -> dict[str, str]:
    """A row of the table as column key -> plain text ({} if the row is not shown)."""
    if key not in table.rows:
        return {}
    row = table.get_row(key)
    return {c: plain(v) for c, v in zip(table.shown_columns, row, strict=True)}


def shown_counts(app: DashboardApp, queue: str) -> dict[str, int]:
    row = cells(app.dashboard.query_one(QueuesTable), queue)
    names = ("ready", "scheduled", "running", "expiring", "dead", "done")
    return {n: int(row[n].replace(",", "")) for n in names} if row else {}


def db_counts(queue: Queue, name: str) -> dict[str, int]:
    stats = next((s for s in queue.stats() if s.queue == name), None)
    if stats is None:
        return {}
    return {
        "ready": stats.ready, "scheduled": stats.scheduled, "running": stats.running,
        "expiring": stats.expiring, "dead": stats.dead, "done": stats.done,
    }


async def polled(pilot: Pilot[Any], app: DashboardApp, more: int = 2) -> None:
    """Wait until `more` further polls have completed (so the screen reflects the database)."""
    target = app.polls + more
    await wait_for(pilot, lambda: app.polls >= target, f"{more} polls")


def select_queue(app: DashboardApp, name: str) -> None:
    table = app.dashboard.query_one(QueuesTable)
    table.move_cursor(row=table.get_row_index(name))


def make_dead(queue: Queue, name: str, n: int) -> list[int]:
    ids = queue.enqueue_many([JobSpec(name, {"n": i}, max_attempts=1) for i in range(n)])
    for job in queue.claim(name, n, worker="test-worker"):
        queue.fail(job.id, job.fence, "boom")
    return ids


async def test_counts_match_database_after_enqueue_claim_complete(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue_many([JobSpec("emails", {"i": i}) for i in range(3)])
    queue.enqueue("emails", {"later": True}, delay=timedelta(hours=1))
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "emails").get("ready") == 3, "3 ready")
        assert shown_counts(app, "emails") == db_counts(queue, "emails")
        assert shown_counts(app, "emails")["scheduled"] == 1

        [job] = queue.claim("emails", 1, timedelta(seconds=60), "test-worker")
        await wait_for(pilot, lambda: shown_counts(app, "emails").get("running") == 1, "running")
        assert shown_counts(app, "emails") == db_counts(queue, "emails")
        leases = app.dashboard.query_one(LeasesTable)
        await wait_for(pilot, lambda: str(job.id) in leases.rows, "the lease row")
        lease = cells(leases, str(job.id))
        assert lease["worker"] == "test-worker"
        assert lease["fence"] == str(job.fence)

        queue.complete(job.id, job.fence)
        await wait_for(pilot, lambda: shown_counts(app, "emails").get("done") == 1, "done")
        assert shown_counts(app, "emails") == db_counts(queue, "emails")
        assert str(job.id) not in leases.rows
        assert "pgq" in app.dashboard.query_one(StatusHeader).render().plain


async def test_rows_keep_their_place_and_the_cursor_its_row(
    dsn: str, schema: str, queue: Queue
) -> None:
    for name in ("b-queue", "c-queue"):
        queue.enqueue(name, {})
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        table = app.dashboard.query_one(QueuesTable)
        await wait_for(pilot, lambda: table.row_count == 2, "two queues")
        select_queue(app, "c-queue")
        await pilot.pause()
        queue.enqueue("a-queue", {})
        queue.enqueue_many([JobSpec("c-queue", {}) for _ in range(5)])
        await wait_for(pilot, lambda: table.row_count == 3, "a new queue")
        await wait_for(pilot, lambda: shown_counts(app, "c-queue").get("ready") == 6, "6 ready")
        assert [r.key.value for r in table.ordered_rows] == ["a-queue", "b-queue", "c-queue"]
        assert table.selected_key == "c-queue"


async def test_listen_refreshes_without_polling(dsn: str, schema: str, queue: Queue) -> None:
    queue.enqueue("first", {})
    app = dashboard(dsn, schema, refresh=3600)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "first").get("ready") == 1, "first poll")
        await pilot.pause(0.5)  # let the LISTEN connection come up
        queue.enqueue("second", {})
        await wait_for(
            pilot, lambda: shown_counts(app, "second").get("ready") == 1, "a NOTIFY refresh"
        )


async def test_requeue_all_asks_and_yes_requeues_exactly_the_selected_queue(
    dsn: str, schema: str, queue: Queue
) -> None:
    chosen = make_dead(queue, "chosen", 3)
    make_dead(queue, "other", 2)
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "chosen").get("dead") == 3, "3 dead")
        select_queue(app, "chosen")
        await pilot.pause()
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm modal")
        await pilot.press("y")
        await wait_for(pilot, lambda: db_counts(queue, "chosen")["dead"] == 0, "requeued")
        assert db_counts(queue, "chosen")["ready"] == 3
        assert db_counts(queue, "other")["dead"] == 2
        assert {j.id for j in queue.jobs("chosen", "ready")} == set(chosen)
        await wait_for(pilot, lambda: shown_counts(app, "chosen").get("dead") == 0, "shown")


@pytest.mark.parametrize("answer", ["n", "escape"])
async def test_requeue_all_cancelled_changes_nothing(
    dsn: str, schema: str, queue: Queue, answer: str
) -> None:
    make_dead(queue, "chosen", 2)
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "chosen").get("dead") == 2, "2 dead")
        select_queue(app, "chosen")
        await pilot.press("R")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm modal")
        await pilot.press(answer)
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen), "dismissed")
        await polled(pilot, app)
        assert db_counts(queue, "chosen")["dead"] == 2
        assert db_counts(queue, "chosen")["ready"] == 0


async def test_kill_running_job_bumps_its_fence(dsn: str, schema: str, queue: Queue) -> None:
    queue.enqueue("work", {"x": 1})
    [job] = queue.claim("work", 1, timedelta(seconds=60), "sleepy-worker")
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        leases = app.dashboard.query_one(LeasesTable)
        await wait_for(pilot, lambda: str(job.id) in leases.rows, "the lease row")
        leases.focus()
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm modal")
        await pilot.press("y")
        await wait_for(pilot, lambda: queue.job(job.id).status == "dead", "killed")
        assert queue.job(job.id).fence == job.fence + 1
        with pytest.raises(LeaseLost):
            queue.complete(job.id, job.fence)
        await wait_for(pilot, lambda: str(job.id) not in leases.rows, "lease row gone")


async def test_requeue_selected_dead_job_from_the_jobs_view(
    dsn: str, schema: str, queue: Queue
) -> None:
    first, second = make_dead(queue, "mail", 2)
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "mail").get("dead") == 2, "2 dead")
        select_queue(app, "mail")
        await pilot.press("enter")  # browse the queue: dead first
        jobs = app.dashboard.query_one(JobsTable)
        await wait_for(pilot, lambda: jobs.row_count == 2, "2 dead jobs listed")
        assert app.dashboard.job_status == "dead"
        assert jobs.selected_key == str(second)  # newest first
        await pilot.press("r")
        await wait_for(pilot, lambda: queue.job(second).status == "ready", "requeued")
        assert queue.job(first).status == "dead"


async def test_job_detail_shows_payload_error_and_fence_history(
    dsn: str, schema: str, queue: Queue
) -> None:
    job_id = queue.enqueue("mail", {"to": "ada@example.com"}, max_attempts=2)
    [first] = queue.claim("mail", 1, timedelta(seconds=60), "worker-a")
    queue.fail(first.id, first.fence, "SMTP 451 try later", worker="worker-a")
    queue.conn.execute(  # skip the backoff so the second claim happens now
        sql.SQL("UPDATE {}.jobs SET run_at = now() WHERE id = %s").format(sql.Identifier(schema)),
        (job_id,),
    )
    [second] = queue.claim("mail", 1, timedelta(seconds=60), "worker-b")
    with pytest.raises(LeaseLost):
        queue.complete(first.id, first.fence)
    queue.record_stale([(first.id, first.fence)], "worker-a", "complete")
    queue.complete(second.id, second.fence, worker="worker-b")
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "mail").get("done") == 1, "done")
        select_queue(app, "mail")
        await pilot.press("enter")
        jobs = app.dashboard.query_one(JobsTable)
        await wait_for(pilot, lambda: str(job_id) in jobs.rows, "the job row")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), "job detail")
        detail = app.screen
        assert isinstance(detail, JobDetailScreen)
        await wait_for(pilot, lambda: detail.job is not None, "the job loaded")
        history = rendered(detail, "#history").splitlines()
        expected = [
            ("enqueued", "fence 0", ""),
            ("claimed", "fence 1", "worker-a"),
            ("failed, retry", "fence 1", "worker-a"),
            ("claimed", "fence 2", "worker-b"),
            ("stale write rejected", "fence 1", "worker-a"),
            ("completed", "fence 2", "worker-b"),
        ]
        assert len(history) == len(expected)
        for line, words in zip(history, expected, strict=True):
            assert all(w in line for w in words), (line, words)
        assert "ada@example.com" in rendered(detail, "#payload")
        assert "SMTP 451 try later" in rendered(detail, "#job-error")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.dashboard, "back to the dashboard")


def rendered(screen: JobDetailScreen, selector: str) -> str:
    """The plain text a Static shows, as laid out at the screen's width."""
    from rich.console import Console

    static = screen.query_one(selector, Static)
    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(static.content)
    return console.export_text()


async def test_filter_narrows_the_jobs_view(dsn: str, schema: str, queue: Queue) -> None:
    ids = make_dead(queue, "hooks", 3)
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET last_error = %s WHERE id = %s").format(sql.Identifier(schema)),
        ("HTTP 503", ids[1]),
    )
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "hooks").get("dead") == 3, "3 dead")
        select_queue(app, "hooks")
        await pilot.press("enter")
        jobs = app.dashboard.query_one(JobsTable)
        await wait_for(pilot, lambda: jobs.row_count == 3, "3 rows")
        # `/` opens prefilled with what the view lists (queue:hooks status:dead); on the server
        await pilot.press("slash", *" error:503", "enter")
        await wait_for(pilot, lambda: jobs.row_count == 1, "1 row after filtering")
        assert jobs.selected_key == str(ids[1])
        await pilot.press("escape")
        await wait_for(pilot, lambda: jobs.row_count == 3, "3 rows after clearing")


async def test_w_starts_a_worker_that_drains_the_queue_and_q_stops_it(
    dsn: str, schema: str, queue: Queue
) -> None:
    seen: list[int] = []

    def handler(ctx: Any) -> None:
        seen.append(ctx.id)

    queue.enqueue_many([JobSpec("drain", {"i": i}) for i in range(25)])
    app = dashboard(dsn, schema, handler=handler, lease=timedelta(seconds=5), grace=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "drain").get("ready") == 25, "25 ready")
        select_queue(app, "drain")
        await pilot.press("w")
        await wait_for(pilot, lambda: db_counts(queue, "drain")["done"] == 25, "drained")
        await wait_for(pilot, lambda: shown_counts(app, "drain").get("done") == 25, "shown")
        assert sorted(seen) == sorted(j.id for j in queue.jobs("drain", "done"))
        workers = app.dashboard.query_one(WorkersTable)
        await wait_for(pilot, lambda: workers.row_count == 1, "the worker row")
        [worker_id] = [r.key.value for r in workers.ordered_rows]
        assert worker_id is not None
        await wait_for(
            pilot, lambda: cells(workers, worker_id).get("done") == "25", "worker done count"
        )
        assert cells(workers, worker_id)["state"] == "running"
        await quit_with_q(pilot)
        await until(lambda: app.pool.active() == 0, TIMEOUT, "workers stopped")
    assert [s.state for s in app.pool.snapshots()] == ["stopped"]


async def test_W_stops_the_apps_workers(dsn: str, schema: str, queue: Queue) -> None:
    queue.enqueue("idle", {})
    app = dashboard(dsn, schema, handler=lambda ctx: None, grace=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "idle").get("done", -1) >= 0, "a poll")
        select_queue(app, "idle")
        await pilot.press("w", "w")
        await wait_for(pilot, lambda: app.pool.active() == 2, "two workers")
        await pilot.press("W")
        await wait_for(pilot, lambda: app.pool.active() == 0, "stopped")
        assert {s.state for s in app.pool.snapshots()} == {"stopped"}


async def test_read_only_refuses_every_action(dsn: str, schema: str, queue: Queue) -> None:
    make_dead(queue, "ro", 2)
    queue.enqueue("ro", {})
    [running] = queue.claim("ro", 1, timedelta(seconds=60), "w")
    app = dashboard(dsn, schema, handler=lambda ctx: None, read_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "ro").get("dead") == 2, "2 dead")
        select_queue(app, "ro")
        app.dashboard.query_one(LeasesTable).focus()
        await pilot.press("R")
        # refused where the operator looks, not silently (the browser's read-only sessions)
        assert "read-only: actions are disabled" in app.dashboard.message.plain
        assert app.screen is app.dashboard
        await pilot.press("k", "R", "w")
        await pilot.press("2")
        app.dashboard.query_one(JobsTable).focus()
        await pilot.press("r", "k")
        for action in (  # what the command palette calls
            app.action_requeue_job, app.action_requeue_queue, app.action_kill_job,
            app.action_start_worker, app.action_stop_workers,
        ):
            action()
        await polled(pilot, app)
        assert app.screen is app.dashboard
        assert app.pool.snapshots() == []
        assert db_counts(queue, "ro") | {"expiring": 0} == {
            "ready": 0, "scheduled": 0, "running": 1, "expiring": 0, "dead": 2, "done": 0
        }
        assert queue.job(running.id).fence == running.fence
        assert "read-only" in app.dashboard.query_one(StatusHeader).render().plain


async def test_survives_the_server_dropping_its_connections(
    dsn: str, schema: str, queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    queue.enqueue("alive", {})
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.connection == "connected", "connected")
        assert isinstance(app.source, PgSource)
        await wait_for(pilot, lambda: backends(conn, app.source) == 2, "poll and LISTEN links")
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (app.source.application_name,),
        )
        await wait_for(pilot, lambda: "disconnected" in app.connection_history, "disconnected")
        queue.enqueue("after", {})
        await wait_for(
            pilot, lambda: shown_counts(app, "after").get("ready") == 1, "fresh data after"
        )
        assert app.connection == "connected"
        assert app.connection_history[-2:] == ["disconnected", "connected"]
        await wait_for(pilot, lambda: backends(conn, app.source) == 2, "LISTEN back as well")


async def test_an_app_that_ends_without_q_closes_its_connections(
    dsn: str, schema: str, conn: psycopg.Connection[Any]
) -> None:
    """Leaving `run_test` (or a host ending the app) without `q` gives the dashboard's
    connections up too: they stayed open until the app was garbage-collected."""
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.connection == "connected", "connected")
        await wait_for(pilot, lambda: backends(conn, app.source) == 2, "poll and LISTEN links")
    await until(lambda: backends(conn, app.source) == 0, TIMEOUT, "its connections closed")


def backends(conn: psycopg.Connection[Any], source: Any) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
        (source.application_name,),
    ).fetchone()
    return int(row[0]) if row else 0


async def test_unreachable_server_is_shown_without_the_password() -> None:
    app = make_app(
        "postgresql://someone:hunter2secret@127.0.0.1:9/nowhere?connect_timeout=1",
        "pgq", "someone@127.0.0.1:9/nowhere", refresh=0.2,
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.connection == "disconnected", "disconnected")
        header = app.dashboard.query_one(StatusHeader).render().plain
        assert "disconnected" in header
        assert "hunter2secret" not in header
        await wait_for(pilot, lambda: app.poll_failures >= 3, "three failed polls")
        assert app.connection == "disconnected"
        assert app.is_running
        assert "hunter2secret" not in app.dashboard.query_one(StatusHeader).render().plain


async def test_expired_lease_stands_out_until_the_reaper(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue("short", {})
    [job] = queue.claim("short", 1, timedelta(seconds=1), "frozen")
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        leases = app.dashboard.query_one(LeasesTable)
        await wait_for(pilot, lambda: str(job.id) in leases.rows, "the lease row")
        await wait_for(
            pilot, lambda: "expired" in cells(leases, str(job.id)).get("left", ""), "expired"
        )
        assert "expired" in str(app.dashboard.query_one(TabbedContent).get_tab("leases").label)
        assert queue.reap() == [(job.id, "ready")]
        await wait_for(pilot, lambda: str(job.id) not in leases.rows, "reaped")


async def test_pause_freezes_the_screen_and_resume_catches_up(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue("p", {})
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "p").get("ready") == 1, "1 ready")
        await pilot.press("space")
        assert "paused" in app.dashboard.query_one(StatusHeader).render().plain
        await wait_for(pilot, lambda: not app._polling, "the poll in flight to land")
        queue.enqueue("p", {})
        polls = app.polls
        app.request_refresh()  # what the timer and NOTIFY do
        app.on_notified(Notified())
        assert not app._polling and app.polls == polls
        assert shown_counts(app, "p")["ready"] == 1
        await pilot.press("space")
        await wait_for(pilot, lambda: shown_counts(app, "p").get("ready") == 2, "caught up")


async def test_throughput_sparkline_follows_completions(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue_many([JobSpec("t", {}) for _ in range(10)])
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "t").get("ready") == 10, "10 ready")
        assert cells(app.dashboard.query_one(QueuesTable), "t")["spark"].strip() == ""
        jobs = queue.claim("t", 10, timedelta(seconds=30), "w")
        queue.complete_many([(j.id, j.fence) for j in jobs])
        await wait_for(pilot, lambda: shown_counts(app, "t").get("done") == 10, "10 done")
        assert sum(app.throughput.series("t", app.clock())) > 0
        await wait_for(
            pilot,
            lambda: cells(app.dashboard.query_one(QueuesTable), "t")["spark"].strip() != "",
            "a sparkline bar",
        )


async def test_wait_p95_column_shows_each_queues_latency(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Done jobs of `fast` waited 1 to 20 seconds from due to claimed (set by SQL): the
    column shows their p95 over the last 5 minutes (19.05 s: `19s`); `idle` has no done job
    (`—`)."""
    queue.enqueue_many([JobSpec("fast", {"n": i}) for i in range(20)])
    queue.enqueue("idle", {})
    jobs = queue.claim("fast", 20, timedelta(seconds=30), "w")
    queue.complete_many([(j.id, j.fence) for j in jobs])
    queue.conn.execute(
        sql.SQL(
            "UPDATE {}.jobs SET run_at = claimed_at - (payload->>'n')::int * interval '1 second'"
            " - interval '1 second' WHERE queue = 'fast'"
        ).format(sql.Identifier(schema))
    )
    assert queue.latency(queues=["fast"]).queues[0].windows["5m"].wait.p95 == 19.05
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        table = app.dashboard.query_one(QueuesTable)
        assert "wait" in table.shown_columns
        await wait_for(pilot, lambda: cells(table, "fast").get("wait") == "19s", "p95 wait")
        assert cells(table, "idle")["wait"] == "—"
        assert app.latency.p95("fast") == 19.05
        # the read's bucket: the newest, or the one before when a 10 s bucket boundary of the
        # clock passed between the read and this line (CI's PG 15 run: [-1] was 0.0)
        assert 19.05 in app.latency.series("fast", app.clock())[-2:]


async def test_command_palette_offers_the_actions(dsn: str, schema: str) -> None:
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE):
        titles = {c.title for c in app.get_system_commands(app.screen)}
    assert {
        "Requeue job", "Requeue all dead", "Kill job", "Start worker", "Stop workers",
        "Filter", "Pause / resume", "Keys",
    } <= titles


@pytest.mark.slow
async def test_demo_moves_every_kind_of_job(dsn: str, schema: str, queue: Queue) -> None:
    """The demo's mix on a real server: fast jobs finish, slow ones run, doomed ones die, and
    the frozen worker's late write is rejected as stale."""
    from pgq_cli.demo_jobs import DEMO_QUEUES, FROZEN_WORKER, DemoProducer, handle

    producer = DemoProducer(
        dsn, schema, tick=0.5, freeze_every=1000,
        freeze_lease=timedelta(seconds=1), wake_after=4.0,
    )
    assert producer.fill() > 0
    producer.start()
    app = dashboard(
        dsn, schema, handler=handle, lease=timedelta(seconds=2), grace=1.0,
        start_workers=list(DEMO_QUEUES),
    )
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.pool.active() == len(DEMO_QUEUES), "workers")
            await wait_for(pilot, lambda: db_counts(queue, "emails")["done"] > 0, "emails done")
            await wait_for(pilot, lambda: db_counts(queue, "reports")["running"] > 0, "reports")
            await wait_for(pilot, lambda: db_counts(queue, "webhooks")["dead"] > 0, "a dead job")

            def stale_write_recorded() -> bool:
                return any(
                    e.event == "stale" and e.worker == FROZEN_WORKER
                    for job in queue.jobs("reports", None, 500)
                    for e in queue.history(job.id)
                )

            await wait_for(pilot, stale_write_recorded, "the frozen worker's stale write")
            await wait_for(
                pilot, lambda: shown_counts(app, "webhooks").get("dead", 0) > 0, "dead shown"
            )
            await quit_with_q(pilot)
            await until(lambda: app.pool.active() == 0, TIMEOUT, "workers stopped")
    finally:
        producer.stop()


async def test_an_unmigrated_schema_is_explained_not_fatal(dsn: str) -> None:
    app = dashboard(dsn, "no_such_schema_here")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.poll_failures >= 2, "failed polls")
        header = app.dashboard.query_one(StatusHeader).render().plain
        assert "pgq migrate" in header
        assert app.is_running


async def test_kill_from_the_job_detail_screen(dsn: str, schema: str, queue: Queue) -> None:
    job_id = queue.enqueue("detail", {"x": 1})
    [job] = queue.claim("detail", 1, timedelta(seconds=60), "busy-worker")
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        leases = app.dashboard.query_one(LeasesTable)
        await wait_for(pilot, lambda: str(job_id) in leases.rows, "the lease row")
        leases.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobDetailScreen), "job detail")
        detail = app.screen
        assert isinstance(detail, JobDetailScreen)
        await wait_for(pilot, lambda: detail.job is not None, "the job loaded")
        await pilot.press("k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirm modal")
        await pilot.press("y")
        await wait_for(pilot, lambda: queue.job(job_id).status == "dead", "killed")
        await wait_for(
            pilot, lambda: detail.job is not None and detail.job.status == "dead", "detail live"
        )
        assert "killed" in rendered(detail, "#history")
        with pytest.raises(LeaseLost):
            queue.heartbeat(job.id, job.fence)


async def _hold_until_lost(ctx: Any) -> None:
    """A job far longer than any test: it ends only when its worker takes it back."""
    while not ctx.lost:
        await asyncio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
async def test_quit_with_slow_jobs_caps_the_grace_and_hands_them_back(
    dsn: str, schema: str, queue: Queue, presses: int
) -> None:
    """The workers' own grace (60 s) is longer than TIMEOUT: exiting within it shows the quit
    cap at work; a second q does not wait for the cap either."""
    ids = queue.enqueue_many([JobSpec("slow", {"i": i}) for i in range(3)])
    app = dashboard(dsn, schema, handler=_hold_until_lost, grace=60.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_counts(app, "slow").get("ready") == 3, "3 ready")
        select_queue(app, "slow")
        await pilot.press("w")
        await wait_for(pilot, lambda: db_counts(queue, "slow")["running"] == 3, "3 running")
        await quit_with_q(pilot, presses)
    await until(lambda: app.pool.active() == 0, TIMEOUT, "the worker to end")
    assert [s.state for s in app.pool.snapshots()] == ["stopped"]
    assert db_counts(queue, "slow")["ready"] == 3  # handed back, not left to expire
    assert {j.id for j in queue.jobs("slow", "ready")} == set(ids)


@pytest.mark.slow
async def test_quit_with_a_handler_that_ignores_its_stop_still_exits(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A sync handler that never looks at ctx.lost keeps its thread: the app exits all the same
    and the CLI is told, so it can leave without joining that thread."""
    import threading

    from pgq_cli.tui_cli import leave_stuck_handlers
    from pgq_core.config import Target

    release = threading.Event()

    def stubborn(ctx: Any) -> None:
        release.wait(TIMEOUT * 3)

    queue.enqueue("stuck", {})
    app = dashboard(dsn, schema, handler=stubborn, grace=60.0)
    exits: list[int] = []
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: shown_counts(app, "stuck").get("ready") == 1, "ready")
            select_queue(app, "stuck")
            await pilot.press("w")
            await wait_for(pilot, lambda: db_counts(queue, "stuck")["running"] == 1, "running")
            await quit_with_q(pilot)
        await until(lambda: app.pool.active() == 0, TIMEOUT, "the worker to end")
        assert app.pool.handlers_still_running() == 1
        assert db_counts(queue, "stuck")["ready"] == 1  # handed back all the same
        leave_stuck_handlers(app, Target(dsn, schema, embedded=False), exits.append)
        assert exits == [0]
    finally:
        release.set()
    await until(lambda: app.pool.handlers_still_running() == 0, TIMEOUT, "the handler to return")
    leave_stuck_handlers(app, Target(dsn, schema, embedded=False), exits.append)
    assert exits == [0]


async def test_leases_and_workers_show_a_jobs_progress(dsn: str, schema: str, queue: Queue) -> None:
    """A worker the app started runs a handler that reports progress: the Workers view shows it
    from the worker's memory, the Leases view once the heartbeat wrote it; the note as data."""
    release = threading.Event()

    def handler(ctx: Any) -> None:
        ctx.progress(2, 8, "[red]chunk[/red] two")
        release.wait(TIMEOUT)

    [job_id] = [queue.enqueue("slow", {})]
    app = dashboard(dsn, schema, handler=handler, lease=timedelta(seconds=3), grace=2.0)
    try:
        async with app.run_test(size=(180, 40)) as pilot:
            await wait_for(pilot, lambda: shown_counts(app, "slow").get("ready") == 1, "ready")
            select_queue(app, "slow")
            await pilot.press("w")
            leases = app.dashboard.query_one(LeasesTable)
            key = str(job_id)
            await wait_for(
                pilot, lambda: "25%" in cells(leases, key).get("progress", ""), "lease progress"
            )
            shown = cells(leases, key)["progress"]
            # markup shown as text, the note cut to its 16 cells
            assert shown == "██░░░░░░  25% [red]chunk[/red…"
            workers = app.dashboard.query_one(WorkersTable)
            await wait_for(pilot, lambda: workers.row_count == 1, "the worker row")
            [worker_id] = [str(r.key.value) for r in workers.ordered_rows]
            jobs = cells(workers, worker_id)["jobs"]
            assert f"#{job_id}" in jobs and "25%" in jobs and "[red]chunk" in jobs
            release.set()
            await wait_for(pilot, lambda: db_counts(queue, "slow")["done"] == 1, "done")
            await quit_with_q(pilot)
            await until(lambda: app.pool.active() == 0, TIMEOUT, "workers stopped")
    finally:
        release.set()
