"""What a human view reads is bounded by the server: lists and error groups carry a cut of a
long `last_error` (with its size and a flag), only `pgq show` has it whole (and prints it
whole only with --full). Big errors are written by plain SQL, as any session can."""

from __future__ import annotations

import importlib
import json
import secrets
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import Pgq, ok

from pgq_core import JobSpec, Queue, QueueStats, migrate
from pgq_core.defaults import LIST_TEXT_CHARS
from pgq_core.filters import JobFilter

#: a first line of 150,000 characters, then a second line; 'é' is two bytes in UTF-8
BIG_ERROR = "RuntimeError: job failed " + "é" * 150_000 + "\nsecond line"
BIG_BYTES = len(BIG_ERROR.encode("utf-8"))


def dead_with(conn: psycopg.Connection[Any], schema: str, queue: str, error: str) -> int:
    row = conn.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (queue, payload, status, attempts, fence, last_error, worker,"
            " finished_at) VALUES (%s, '{{}}', 'dead', 5, 5, %s, 'w', now()) RETURNING id"
        ).format(sql.Identifier(schema)),
        [queue, error],
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_lists_and_groups_carry_a_cut_error_with_its_size(
    queue: Queue, conn: psycopg.Connection[Any], schema: str
) -> None:
    big = dead_with(conn, schema, "mail", BIG_ERROR)
    small = dead_with(conn, schema, "mail", "KeyError: 'x'")

    listed = {j.id: j for j in queue.jobs("mail", "dead")}
    assert len(listed[big].last_error or "") == LIST_TEXT_CHARS
    assert BIG_ERROR.startswith(listed[big].last_error or "")
    assert (listed[big].last_error_bytes, listed[big].last_error_truncated) == (BIG_BYTES, True)
    assert listed[small].last_error == "KeyError: 'x'"
    assert (listed[small].last_error_bytes, listed[small].last_error_truncated) == (13, False)

    for where in (JobFilter(queue="mail"), JobFilter(error="runtimeerror")):
        [found] = [j for j in queue.jobs_matching(where) if j.id == big]
        assert len(found.last_error or "") == LIST_TEXT_CHARS and found.last_error_truncated

    [group] = [g for g in queue.errors() if g.example_id == big]
    assert len(group.example_error) == LIST_TEXT_CHARS
    assert (group.example_error_bytes, group.example_error_truncated) == (BIG_BYTES, True)

    whole = queue.job(big)
    assert whole.last_error == BIG_ERROR and whole.last_error_bytes == BIG_BYTES


def test_cli_prints_cut_errors_and_show_has_them_whole(
    pgq: Pgq, conn: psycopg.Connection[Any], schema: str
) -> None:
    big = dead_with(conn, schema, "mail", BIG_ERROR)

    [row] = json.loads(ok(pgq("jobs", "--status", "dead", "--json")))
    assert len(row["last_error"]) == LIST_TEXT_CHARS
    assert (row["last_error_bytes"], row["last_error_truncated"]) == (BIG_BYTES, True)
    [row] = json.loads(ok(pgq("jobs", "--error", "RuntimeError", "--json")))
    assert row["last_error_truncated"] is True and len(row["last_error"]) == LIST_TEXT_CHARS
    listed = ok(pgq("jobs", "--status", "dead"))
    assert len(listed) < 4000 and "RuntimeError: job failed" in listed

    [group] = json.loads(ok(pgq("errors", "--json")))
    assert len(group["example_error"]) == LIST_TEXT_CHARS
    assert (group["example_error_bytes"], group["example_error_truncated"]) == (BIG_BYTES, True)
    grouped = ok(pgq("errors"))
    assert len(grouped.encode("utf-8")) < 8 * LIST_TEXT_CHARS
    assert f"cut: {BIG_BYTES:,} bytes in all; pgq show {big} --full" in grouped

    shown = ok(pgq("show", str(big)))
    assert "second line" not in shown and len(shown) < 80_000
    assert "--full shows all" in shown
    assert "second line" in ok(pgq("show", str(big), "--full"))
    detail = json.loads(ok(pgq("show", str(big), "--json")))
    assert detail["last_error"] == BIG_ERROR
    assert (detail["last_error_bytes"], detail["last_error_truncated"]) == (BIG_BYTES, False)


def test_error_groups_normalise_before_they_cut(
    queue: Queue, conn: psycopg.Connection[Any], schema: str
) -> None:
    """Ids of different lengths early in a first line over 200 characters: one group."""
    tail = " while reading " + "the order book " * 20
    ids = [dead_with(conn, schema, "mail", f"ValueError: order {n}{tail}") for n in (7, 123456)]
    dead_with(conn, schema, "mail", f"KeyError: 'customer_{'9' * 300}'")
    dead_with(conn, schema, "mail", f"KeyError: 'customer_{'1' * 5}'")
    groups = {g.pattern: g for g in queue.errors()}
    pattern = f"ValueError: order <n>{tail}"[:200]
    assert set(groups) == {pattern, "KeyError: <str>"}
    assert (groups[pattern].dead, groups[pattern].example_id) == (2, max(ids))
    assert groups["KeyError: <str>"].dead == 2


def test_errors_stored_before_version_13_are_regrouped_by_it(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = importlib.import_module("pgq_core.migrate")  # the package's `migrate` is the function
    shipped = m.migrations()
    name = f"t_{secrets.token_hex(5)}"
    tail = " at " + "frame " * 50
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            monkeypatch.setattr(m, "migrations", lambda: [v for v in shipped if v[0] < 13])
            migrate(conn, name)
            for n in (1, 22, 333):
                dead_with(conn, name, "mail", f"IndexError: row {n}{tail}")
            count = sql.SQL("SELECT count(DISTINCT error_group) FROM {}.jobs").format(
                sql.Identifier(name)
            )
            assert conn.execute(count).fetchone() == (3,)
            monkeypatch.setattr(m, "migrations", lambda: shipped)
            assert 13 in migrate(conn, name)
            assert conn.execute(count).fetchone() == (1,)
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def many_queues(conn: psycopg.Connection[Any], schema: str, count: int) -> list[str]:
    names = [f"queue-{n:04d}" for n in range(count)]
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (queue, payload) SELECT unnest(%s::text[]), '{{}}'"
        ).format(sql.Identifier(schema)),
        [names],
    )
    return names


def test_the_server_sends_a_window_of_the_queues(
    queue: Queue, conn: psycopg.Connection[Any], schema: str
) -> None:
    names = many_queues(conn, schema, 250)
    window = queue.stats_window(0, 100)
    assert [s.queue for s in window.stats] == names[:100]
    assert (window.offset, window.total) == (0, 250)
    window = queue.stats_window(200, 100)
    assert [s.queue for s in window.stats] == names[200:]
    assert all(s.ready == 1 for s in window.stats) and window.total == 250
    assert queue.stats_window(300, 100).stats == []
    assert [s.queue for s in queue.stats()] == names


def test_queue_stats_reads_the_named_queues_as_stats_does(queue: Queue) -> None:
    """The rows an action re-reads: the same figures as `stats` for those queues only."""
    queue.enqueue_many([JobSpec(q, {}, max_attempts=1) for q in ("a", "a", "b", "c", "c")])
    [job] = queue.claim("a", 1, worker="w")
    queue.fail(job.id, job.fence, "boom")
    queue.claim("c", 1, worker="w")
    queue.pause("b", "test")
    def timeless(stats: list[QueueStats]) -> list[QueueStats]:
        return [replace(s, oldest_due_seconds=None) for s in stats]

    every = {s.queue: s for s in timeless(queue.stats())}
    some = queue.queue_stats(["a", "b", "nothing"])
    assert timeless(some) == [every["a"], every["b"]]
    assert some[0].oldest_due_seconds is not None
    assert (some[0].ready, some[0].dead) == (1, 1) and some[1].paused
    assert queue.queue_stats([]) == []


def test_window_offset_moves_only_near_an_end_with_more_beyond() -> None:
    from pgq_tui.state import QUEUES_EDGE, QUEUES_WINDOW, window_offset

    assert window_offset(0, 100, 100, 99) is None  # every queue is shown
    assert window_offset(0, 100, 5000, 50) is None
    assert window_offset(0, 100, 5000, 100 - QUEUES_EDGE) == 100 - QUEUES_EDGE - 50
    assert window_offset(4900, 100, 5000, 99) is None  # the last queues are shown
    assert window_offset(4850, 100, 5000, 99) == 4899
    assert window_offset(300, 100, 5000, 0) == 250
    assert window_offset(20, 100, 5000, QUEUES_EDGE - 1) == 0
    assert window_offset(0, 100, 5000, 0) is None
    assert QUEUES_WINDOW == 100


async def test_the_dashboard_holds_a_window_of_the_queues_and_moves_it_with_the_cursor(
    dsn: str, conn: psycopg.Connection[Any], schema: str
) -> None:
    from tui_support.pilot import wait_for

    from pgq_tui.launch import make_app
    from pgq_tui.widgets.queues_table import QueuesTable

    names = many_queues(conn, schema, 250)
    app = make_app(dsn, schema, "db", refresh=0.2)
    async with app.run_test(size=(132, 38)) as pilot:
        table = app.dashboard.query_one(QueuesTable)
        await wait_for(pilot, lambda: table.row_count > 0, "the queues")
        assert table.row_count == 100
        assert str(table.border_title) == "queues 1-100 of 250"
        await pilot.press("ctrl+end")  # the last row of the window: it moves on
        await wait_for(pilot, lambda: table.get_row_at(0)[0].plain == names[49], "moved")
        assert table.row_count == 100 and table.selected_key == names[99]
        assert str(table.border_title) == "queues 50-149 of 250"
        for _ in range(4):
            await pilot.press("ctrl+end")
            await pilot.pause(0.3)
        await wait_for(pilot, lambda: table.selected_key == names[-1], "the last queue")
        assert str(table.border_title) == "queues 151-250 of 250"
        await pilot.press("ctrl+home")
        await wait_for(pilot, lambda: app.queues_offset < 101, "moving back")


def test_stats_counts_each_queue_once_without_joining_per_queue_counts(
    queue: Queue, conn: psycopg.Connection[Any], schema: str
) -> None:
    """The per-queue counts are summed, not joined: joined, the planner may nest loops over
    them (seen: 8.5 s for 5,000 queues on a freshly filled table), so the plan has no join."""
    from pgq_core import ops
    from pgq_core.queries import query

    names = many_queues(conn, schema, 1000)
    for status, which in (("dead", names[::2]), ("done", names), ("done", names)):
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.jobs (queue, payload, status, attempts, finished_at)"
                " SELECT unnest(%s::text[]), '{{}}', %s, 1, now()"
            ).format(sql.Identifier(schema)),
            [which, status],
        )
    queue.pause(names[1], "maintenance")
    queue.set_limit(names[3], 2)
    op = ops.stats()
    [[plan]] = conn.execute(
        sql.SQL("EXPLAIN (FORMAT JSON) ") + query(op.name, schema), op.params
    ).fetchall()

    def nodes(node: dict[str, Any]) -> list[str]:
        return [node["Node Type"]] + [n for child in node.get("Plans", []) for n in nodes(child)]

    assert not [n for n in nodes(plan[0]["Plan"]) if "Join" in n or "Nested Loop" in n]
    stats = {s.queue: s for s in queue.stats()}
    assert len(stats) == 1000 and stats[names[5]].done == 2
    assert (stats[names[0]].ready, stats[names[0]].dead) == (1, 1)
    assert (stats[names[1]].dead, stats[names[1]].paused) == (0, True)
    assert stats[names[1]].pause_reason == "maintenance" and stats[names[3]].limit == 2


async def test_the_dashboard_lists_and_opens_a_job_with_a_big_error_bounded(
    dsn: str, conn: psycopg.Connection[Any], schema: str
) -> None:
    from textual.widgets import Static
    from tui_support.pilot import wait_for

    from pgq_tui.launch import make_app
    from pgq_tui.screens.job_detail import ERROR_CHARS, JobDetailScreen
    from pgq_tui.widgets.jobs_table import JobsTable

    big = dead_with(conn, schema, "mail", BIG_ERROR)
    app = make_app(dsn, schema, "db", refresh=0.2)
    async with app.run_test(size=(132, 38)) as pilot:
        await wait_for(pilot, lambda: app.dashboard.data is not None, "the first poll")
        await pilot.press("enter")  # the queue's jobs: dead first
        jobs = app.dashboard.query_one(JobsTable)
        await wait_for(pilot, lambda: jobs.row_count == 1, "the dead job")
        [row] = app.dashboard.data.jobs if app.dashboard.data else []
        assert row.id == big and row.last_error_truncated
        assert len(row.last_error or "") == LIST_TEXT_CHARS
        assert jobs.get_row_at(0)[-1].plain.endswith("…")
        await pilot.press("enter")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, JobDetailScreen) and app.screen.job is not None,
            "the job detail",
        )
        shown = str(app.screen.query_one("#job-error", Static).render())
        assert shown.startswith("last error RuntimeError: job failed")
        assert len(shown) < ERROR_CHARS + 200
        assert f"pgq show {big} --full" in shown


async def test_the_queues_table_looks_only_at_rows_whose_figures_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tick with the same figures reads no row of the table; a changed queue is the only
    row read and updated."""
    from dataclasses import replace

    from textual.app import App, ComposeResult

    from pgq_core import QueueStats
    from pgq_tui.state import Snapshot
    from pgq_tui.throughput import Throughput
    from pgq_tui.widgets.queues_table import QueuesTable

    class Board(App[None]):
        def compose(self) -> ComposeResult:
            yield QueuesTable()

    stats = [QueueStats(f"q{n:03d}", n, 0, 0, 0, 1, 5, 5, None) for n in range(100)]
    throughput = Throughput()
    async with Board().run_test(size=(132, 38)) as pilot:
        table = pilot.app.query_one(QueuesTable)
        table.show(Snapshot(stats, [], [], (None, None, None), 1000.0, 0.1), throughput, 1000.0)
        await pilot.pause()
        assert table.row_count == 100
        read: list[object] = []
        updated: list[object] = []
        get_row, update_cell = table.get_row, table.update_cell
        monkeypatch.setattr(table, "get_row", lambda key: read.append(key) or get_row(key))
        monkeypatch.setattr(
            table,
            "update_cell",
            lambda key, *a, **kw: updated.append(key) or update_cell(key, *a, **kw),
        )
        again = [replace(s) for s in stats]  # equal figures, new objects (a new poll)
        table.show(Snapshot(again, [], [], (None, None, None), 1001.0, 0.1), throughput, 1001.0)
        assert (read, updated) == ([], [])
        again[7] = replace(again[7], dead=9)
        table.show(Snapshot(again, [], [], (None, None, None), 1002.0, 0.1), throughput, 1002.0)
        assert read == ["q007"] and set(updated) == {"q007"}
        await pilot.pause()
        assert table.get_row("q007")[5].plain == "9"
