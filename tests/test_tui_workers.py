"""The Workers view shows every live worker (this app's own and any other process's beating
its row), and `o` on a lease opens its worker there."""

from __future__ import annotations

from psycopg import sql
from support import dashboard
from textual.widgets import TabbedContent
from tui_support.pilot import SIZE, VIEWS, sample_app, settle, wait_for
from tui_support.sample import W_OLD

from pgq_core import Queue, ops
from pgq_tui.widgets.leases_table import LeasesTable
from pgq_tui.widgets.workers_table import WorkersTable


def keys(table: WorkersTable) -> list[str]:
    return [str(row.key.value) for row in table.ordered_rows]


async def test_o_on_a_lease_opens_its_worker_in_the_workers_view() -> None:
    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await VIEWS["leases"](pilot)
        leases = app.dashboard.query_one(LeasesTable)
        assert leases.selected_key == "10488"  # W_OLD's: another process's worker
        await pilot.press("o")
        await settle(pilot)
        assert app.dashboard.query_one(TabbedContent).active == "workers"
        table = app.dashboard.query_one(WorkersTable)
        assert table.selected_key == W_OLD
        assert W_OLD in keys(table) and "demo-host:4242:a1b2c3" in keys(table)
        assert keys(table).count("demo-host:4242:a1b2c3") == 1  # its own snapshot, not twice
        row = " ".join(str(c) for c in table.get_row(W_OLD))
        assert "elsewhere" in row and "batch-07 pid 311" in row


async def test_a_worker_of_another_process_shows_in_the_workers_view(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.run(ops.worker_beat("far:99:abcdef", "far", 99, ["emails"], 6, "0.1.0", 60, (2, 40, 3)))
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 0, "the first poll")
        await pilot.press("3")
        table = app.dashboard.query_one(WorkersTable)
        await wait_for(pilot, lambda: keys(table) == ["far:99:abcdef"], "the live worker")
        row = " ".join(str(c) for c in table.get_row("far:99:abcdef"))
        assert "2/6" in row and "40" in row and "far pid 99" in row
        queue.run(ops.worker_gone("far:99:abcdef"))
        app.request_refresh()
        await wait_for(pilot, lambda: keys(table) == [], "gone once its row is")


async def test_a_schema_without_the_workers_table_still_polls(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A dashboard upgraded before `pgq migrate` ran: no live workers shown, the rest polled."""
    queue.enqueue("emails", {})
    queue.conn.execute(sql.SQL("DROP TABLE {}.workers").format(sql.Identifier(schema)))
    app = dashboard(dsn, schema)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.polls > 1, "two polls")
        data = app.dashboard.data
        assert data is not None and data.workers == []
        assert [s.queue for s in data.stats] == ["emails"]

