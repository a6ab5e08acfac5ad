"""The dashboard's truth on a real PostgreSQL: NOTIFY to screen, the lease countdown after a
heartbeat, one "expiring", dead jobs by time of death, the workers' log, and a screen that
answers while a handler blocks its worker's event loop.

Time bounds here are loose (slack for a shared machine); the figures themselves come from
benchmarks/dashboard_latency.py."""

from __future__ import annotations

import asyncio
import re
import statistics
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import dashboard, until
from tui_support.pilot import quit_with_q, wait_for

from pgq_core import JobSpec, Queue
from pgq_tui.app import DashboardApp
from pgq_tui.pool import THREAD_NAME, WorkerPool
from pgq_tui.widgets.jobs_table import JobsTable
from pgq_tui.widgets.keyed_table import KeyedTable, plain
from pgq_tui.widgets.leases_table import LeasesTable
from pgq_tui.widgets.queues_table import QueuesTable

SIZE = (140, 40)


def cell(table: KeyedTable, key: str, column: str) -> str:
    if key not in table.rows:
        return ""
    row = dict(zip(table.shown_columns, table.get_row(key), strict=True))
    return plain(row[column])


def shown_int(app: DashboardApp, queue: str, column: str) -> int | None:
    text = cell(app.dashboard.query_one(QueuesTable), queue, column)
    return int(text.replace(",", "")) if text else None


def shown_left(app: DashboardApp, job_id: int) -> float | None:
    """The countdown as the Leases view shows it, in seconds."""
    text = cell(app.dashboard.query_one(LeasesTable), str(job_id), "left")
    match = re.search(r"(\d+(?:\.\d+)?)s\s*$", text)
    return float(match.group(1)) if match else None


def true_left(conn: psycopg.Connection[Any], schema: str, job_id: int) -> float:
    row = conn.execute(
        sql.SQL(
            "SELECT extract(epoch FROM lease_until - now())::float8 FROM {}.jobs WHERE id = %s"
        ).format(sql.Identifier(schema)),
        (job_id,),
    ).fetchone()
    assert row is not None
    return float(row[0])


def set_lease_left(conn: psycopg.Connection[Any], schema: str, job_id: int, left: float) -> None:
    conn.execute(
        sql.SQL(
            "UPDATE {}.jobs SET lease_until = now() + %s * interval '1 second' WHERE id = %s"
        ).format(sql.Identifier(schema)),
        (left, job_id),
    )


async def test_a_notify_reaches_the_screen_without_waiting_for_a_poll(
    dsn: str, schema: str, queue: Queue
) -> None:
    """No poll timer runs (`timed_polls=False`): after the first poll, only a NOTIFY asks for
    another, so every change seen came through LISTEN. How fast is measured by
    benchmarks/dashboard_latency.py, not here."""
    queue.enqueue("n", {})
    app = dashboard(dsn, schema, refresh=3600)
    app.timed_polls = False  # read when the screen is ready: no poll timer is ever set
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_int(app, "n", "ready") == 1, "first poll")
        await pilot.pause(0.5)  # the LISTEN connection comes up
        for expected in range(2, 7):
            polls = app.polls
            queue.enqueue("n", {})
            await wait_for(
                pilot, lambda e=expected: shown_int(app, "n", "ready") == e, f"{expected} ready"
            )
            assert app.polls > polls  # a poll the notification asked for, none other can run
            await pilot.pause(0.1)


async def test_the_countdown_follows_a_heartbeat_within_a_second(
    dsn: str, schema: str, queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    """A heartbeat made outside any worker (plain `Queue.heartbeat`, no NOTIFY) is seen by the
    leases read every half second."""
    queue.enqueue("hb", {})
    [job] = queue.claim("hb", 1, timedelta(seconds=30), "beating-worker")
    set_lease_left(conn, schema, job.id, 12.0)  # as if the last heartbeat was 18 s ago
    app = dashboard(dsn, schema, refresh=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: (shown_left(app, job.id) or 99) < 13, "about 12 s left")
        queue.heartbeat(job.id, job.fence)  # lease_until = now() + 30 s
        await wait_for(pilot, lambda: (shown_left(app, job.id) or 0) > 25, "the heartbeat")
        errors, shown_values = [], []
        for _ in range(20):
            shown = shown_left(app, job.id)
            assert shown is not None
            shown_values.append(shown)
            errors.append(abs(shown - true_left(conn, schema, job.id)))
            await pilot.pause(0.1)
        # the median, not the worst sample: on a loaded machine one frame may come late
        assert statistics.median(errors) < 1.0, errors
        assert shown_values[-1] < shown_values[0], shown_values  # it counts down


async def test_expiring_means_a_third_of_the_lease_in_every_view_and_in_stats(
    dsn: str, schema: str, queue: Queue, conn: psycopg.Connection[Any]
) -> None:
    # Leases long enough that no job changes class while a loaded machine draws the screen:
    # the first would be expiring after 150 s, the short one after 60 s.
    queue.enqueue_many([JobSpec("x", {}) for _ in range(4)])
    jobs = queue.claim("x", 4, timedelta(seconds=300), "w")
    lefts = {jobs[0].id: 250.0, jobs[1].id: 50.0, jobs[2].id: -2.0}  # ok, expiring, expired
    for job_id, left in lefts.items():
        set_lease_left(conn, schema, job_id, left)
    short = queue.enqueue("x", {})
    [short_job] = queue.claim("x", 1, timedelta(seconds=90), "w")  # 90 s lease, 90 s left: ok
    assert short_job.id == short
    # the fourth job keeps its full 300 s lease
    [stats] = queue.stats()
    assert stats.expiring == 2  # under a third of the lease left, expired included
    app = dashboard(dsn, schema, refresh=2.0)
    async with app.run_test(size=SIZE) as pilot:
        leases = app.dashboard.query_one(LeasesTable)
        await wait_for(pilot, lambda: leases.row_count == 5, "five leases")
        await wait_for(pilot, lambda: shown_int(app, "x", "expiring") == 2, "2 expiring")
        marked = [
            key
            for key in (str(j) for j in [*lefts, short, jobs[3].id])
            if "bold" in str(leases.get_row(key)[0].style)
        ]
        assert sorted(marked) == sorted(str(j) for j in (jobs[1].id, jobs[2].id))
        label = str(app.dashboard.query_one("#views").get_tab("leases").label)  # type: ignore[attr-defined]
        assert "1 expiring" in label and "1 expired" in label


async def test_dead_jobs_are_listed_by_time_of_death(dsn: str, schema: str, queue: Queue) -> None:
    first, second, third = queue.enqueue_many([JobSpec("d", {"i": i}) for i in range(3)])
    for job_id in (second, third, first):  # die in this order, unlike their ids
        queue.kill([job_id])
        time.sleep(0.01)
    assert [j.id for j in queue.jobs("d", "dead")] == [first, third, second]
    app = dashboard(dsn, schema, refresh=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: shown_int(app, "d", "dead") == 3, "3 dead")
        await pilot.press("enter")  # browse the queue: dead first
        table = app.dashboard.query_one(JobsTable)
        await wait_for(pilot, lambda: table.row_count == 3, "3 dead listed")
        assert [r.key.value for r in table.ordered_rows] == [str(first), str(third), str(second)]
        assert app.focused is table
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is not app.dashboard, "the first Enter opens")


async def test_the_log_view_shows_what_the_apps_workers_log(
    dsn: str, schema: str, queue: Queue
) -> None:
    release = asyncio.Event()

    async def until_released(ctx: Any) -> None:
        while not release.is_set():
            await asyncio.sleep(0.02)

    job_id = queue.enqueue("logged", {})
    app = dashboard(dsn, schema, refresh=2.0, handler=until_released, start_workers=["logged"])
    async with app.run_test(size=SIZE) as pilot:
        book = app.dashboard.log_book
        await wait_for(
            pilot, lambda: any("started" in x.text for x in book.lines), "the started line"
        )
        await wait_for(pilot, lambda: queue.job(job_id).status == "running", "running")
        queue.kill([job_id])
        release.set()  # the handler returns; its completion matches no row: lease lost
        await wait_for(pilot, lambda: book.unseen_warnings >= 1, "a warning")
        tab = app.dashboard.query_one("#views").get_tab("log")  # type: ignore[attr-defined]
        assert "⚠" in str(tab.label)
        assert any(x.level == "WARNING" and "lease lost" in x.text for x in book.lines)
        await pilot.press("4")
        assert book.unseen_warnings == 0
        assert "⚠" not in str(tab.label)
        await quit_with_q(pilot)
        await until(lambda: app.pool.active() == 0, 20.0, "workers stopped")


@pytest.mark.slow
async def test_a_handler_blocking_its_loop_never_freezes_the_screen(
    dsn: str, schema: str, queue: Queue
) -> None:
    """`time.sleep` inside an async handler blocks the workers' event loop: that loop runs on
    the pool's own thread, so the app still answers a key at once."""
    started = threading.Event()

    async def blocking(ctx: Any) -> None:
        started.set()
        time.sleep(8)  # blocks this worker's event loop: the point of the test

    queue.enqueue("block", {})
    app = dashboard(dsn, schema, refresh=2.0, handler=blocking, start_workers=["block"], grace=10.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, started.is_set, "the handler to block")
        assert isinstance(app.pool, WorkerPool) and app.pool.thread is not None
        assert app.pool.thread.name == THREAD_NAME
        assert app.pool.thread is not threading.current_thread()
        for view, key in (("workers", "3"), ("jobs", "2"), ("leases", "1")):
            t0 = time.monotonic()
            await pilot.press(key)
            await wait_for(pilot, lambda v=view: app.dashboard.active_view() == v, view)
            # a frozen screen would wait out the handler's 8 s; the bound leaves room for a
            # busy machine, not for a freeze
            assert time.monotonic() - t0 < 1.5, view
        assert started.is_set() and app.pool.active() == 1  # the handler is still sleeping
        await wait_for(pilot, lambda: queue.stats()[0].done == 1, "the job to finish")
        await quit_with_q(pilot)
        await until(lambda: app.pool.active() == 0, 20.0, "workers stopped")
