"""Pure pieces of the dashboard: throughput from a monotonic counter, humane formatting,
lease urgency, and the CLI's one-line errors."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rich.text import Text
from tui_support.sample import latency_report

from pgq_cli.group import PgqGroup
from pgq_cli.session import Settings
from pgq_cli.tui_cli import dashboard_command, demo_command
from pgq_tui import humanize
from pgq_tui.latency import LatencyTrend
from pgq_tui.throughput import Throughput
from pgq_tui.widgets.leases_table import urgency


def test_first_observation_is_only_a_baseline() -> None:
    t = Throughput(bucket_seconds=5, buckets=4)
    t.observe("q", 1000, at=100.0)
    assert t.series("q", now=100.0) == [0.0, 0.0, 0.0, 0.0]


def test_deltas_between_polls_become_rates_per_bucket() -> None:
    t = Throughput(bucket_seconds=5, buckets=4)
    t.observe("q", 0, at=100.0)
    t.observe("q", 50, at=105.0)  # 50 jobs in [100, 105): 10/s
    t.observe("q", 60, at=110.0)  # 10 jobs in [105, 110): 2/s
    assert t.series("q", now=110.0) == [0.0, 10.0, 2.0, 0.0]
    assert t.rate("q", now=110.0, window=10) == pytest.approx(6.0)


def test_a_delta_spanning_buckets_is_spread_evenly() -> None:
    t = Throughput(bucket_seconds=5, buckets=4)
    t.observe("q", 0, at=100.0)
    t.observe("q", 40, at=120.0)  # 2 jobs/s for 20 s; the window holds the last 4 buckets
    assert t.series("q", now=120.0) == pytest.approx([2.0, 2.0, 2.0, 0.0])


def test_a_counter_going_backwards_restarts_the_baseline() -> None:
    t = Throughput(bucket_seconds=5, buckets=4)
    t.observe("q", 500, at=100.0)
    t.observe("q", 10, at=105.0)  # schema recreated
    t.observe("q", 20, at=110.0)
    assert min(t.series("q", now=110.0)) >= 0
    assert sum(t.series("q", now=110.0)) == pytest.approx(2.0)


def test_old_buckets_fall_off_the_window() -> None:
    t = Throughput(bucket_seconds=5, buckets=4)
    t.observe("q", 0, at=100.0)
    t.observe("q", 50, at=105.0)
    assert t.series("q", now=200.0) == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250ms"), (4.21, "4.2s"), (37.9, "37s"), (185, "3m05s"), (8040, "2h14m"),
     (3 * 86400 + 4 * 3600, "3d04h")],
)
def test_durations_read_short(seconds: float, text: str) -> None:
    assert humanize.duration(seconds) == text


def test_ago_and_rates() -> None:
    assert humanize.ago(0.2) == "just now"
    assert humanize.ago(75) == "1m15s ago"
    assert humanize.ago(-5) == "in 5.0s"
    assert humanize.rate(0) == "0/s"
    assert humanize.rate(2.345) == "2.3/s"
    assert humanize.count(1234567) == "1,234,567"


def test_sparkline_scales_to_the_largest_and_keeps_small_values_visible() -> None:
    assert humanize.sparkline([0, 1, 8]) == " ▁█"
    assert humanize.sparkline([0, 0]) == "  "
    assert len(humanize.sparkline([1.0] * 24)) == 24


def test_lease_urgency_thresholds() -> None:
    assert urgency(20.0, 30.0) == "ok"
    assert urgency(9.9, 30.0) == "low"  # under a third of its length
    assert urgency(-0.1, 30.0) == "expired"  # awaiting the reaper


def _cli() -> click.Group:
    @click.group(cls=PgqGroup)
    @click.option("--dsn")
    @click.pass_context
    def main(ctx: click.Context, dsn: str | None) -> None:
        ctx.obj = Settings(dsn, None)

    main.add_command(dashboard_command)
    main.add_command(demo_command)
    return main


def test_dashboard_bad_handler_is_one_line() -> None:
    result = CliRunner().invoke(_cli(), ["dashboard", "--handler", "no_such_module_x:run"])
    assert result.exit_code == 1
    assert result.output.startswith("pgq: error: cannot import handler module")
    assert len(result.output.strip().splitlines()) == 1


def test_dashboard_rejects_a_bad_refresh() -> None:
    result = CliRunner().invoke(_cli(), ["dashboard", "--refresh", "0"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_libpq_reasons_read_as_one_line() -> None:
    from pgq_core.text import libpq_reason as reason

    refused = Exception(
        'connection failed: connection to server at "127.0.0.1", port 9 failed:\n'
        "Connection refused\n\tIs the server running on that host and accepting TCP/IP?"
    )
    assert reason(refused) == (
        'connection to server at "127.0.0.1", port 9 failed: Connection refused'
    )
    assert reason(Exception("terminating connection due to administrator command")) == (
        "terminating connection due to administrator command"
    )


def test_retry_times_in_history_details_are_shortened() -> None:
    from pgq_tui.widgets.timeline import short_detail

    assert short_detail("boom (retry at 2026-11-29 19:59:23.467455+00)") == (
        "boom (retry at 19:59:23)"
    )
    assert short_detail("lease expired") == "lease expired"


ERROR_COLOURS = ("red", "magenta", "pink")


def _styles(text: Text) -> list[str]:
    return [str(text.style)] + [str(span.style) for span in text.spans]


def test_a_fence_is_neutral_and_a_repeated_one_only_bold() -> None:
    from tui_support.sample import DETAIL, JOBS, LEASES, WORKERS

    from pgq_tui.widgets.fence import fence_text
    from pgq_tui.widgets.jobs_table import job_row
    from pgq_tui.widgets.leases_table import lease_row
    from pgq_tui.widgets.timeline import event_line
    from pgq_tui.widgets.workers_table import current_jobs

    assert str(fence_text(1).style) == ""
    assert str(fence_text(3).style) == "bold"
    fence_cells = [job_row(job, 0.0)[1][4] for job in JOBS]
    fence_cells += [lease_row(lease, lease.seconds_left)[1][5] for lease in LEASES]
    fence_cells += [current_jobs(worker, 0.0) for worker in WORKERS]
    for event in DETAIL.history:
        line = event_line(event, DETAIL.history[0].at, first=False)
        at = line.plain.index(" fence ")
        fence_spans = [s for s in line.spans if s.start <= at + 8 and s.end > at]
        assert fence_spans and all(
            not any(colour in str(s.style) for colour in ERROR_COLOURS) for s in fence_spans
        )
    for cell in fence_cells:
        assert isinstance(cell, Text)
        for style in _styles(cell):
            assert not any(colour in style for colour in ERROR_COLOURS), (cell.plain, style)


def test_current_jobs_keep_id_fence_and_age_apart() -> None:
    from tui_support.sample import EPOCH, WORKERS

    from pgq_tui.widgets.workers_table import current_jobs

    assert current_jobs(WORKERS[0], EPOCH).plain == "#10502 f1 22s · #10503 f1 17s · #10506 f1 2.5s"
    assert current_jobs(WORKERS[3], EPOCH).plain == "idle"


async def test_the_sample_app_shows_its_refresh_but_polls_only_when_asked() -> None:
    from textual.widgets import Static
    from tui_support.pilot import SIZE, sample_app, settle

    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        line = app.dashboard.query_one("#status-line", Static).content
        assert isinstance(line, Text)
        assert "every 1s + on NOTIFY" in line.plain
        assert app.refresh_seconds == 1
        assert not app.timed_polls
        assert not [t for t in app._timers if t._callback == app.request_refresh]


async def test_each_tab_counts_the_rows_of_its_table() -> None:
    from textual.widgets import TabbedContent
    from tui_support.pilot import SIZE, VIEWS, sample_app, settle
    from tui_support.sample import EVERY_JOB, LEASES, LIVE_WORKERS, STATS, WORKERS

    from pgq_tui.widgets.jobs_table import JobsTable

    def labels() -> list[str]:
        tabs = app.dashboard.query_one(TabbedContent)
        return [tabs.get_tab(pane).label.plain for pane in ("leases", "jobs", "workers")]

    own = {w.id for w in WORKERS}  # and beside them the other processes' live workers
    shown_workers = len(WORKERS) + len([w for w in LIVE_WORKERS if w.id not in own])
    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await VIEWS["queues"](pilot)  # reports: its dead jobs are listed first
        reports = next(s for s in STATS if s.queue == "reports")
        assert app.dashboard.query_one(JobsTable).row_count == reports.dead
        assert labels() == [
            f"Leases {len(LEASES)} (2 expiring) (1 expired)",
            f"Jobs {reports.dead}",
            f"Workers {shown_workers}",
        ]
        await pilot.press("3", "slash", *"a1b2c3")  # a row filter: shown of all
        await settle(pilot)
        assert labels()[2] == f"Workers 1 of {shown_workers}"
        await pilot.press("escape", "2", "slash", "ctrl+u", *"queue:webhooks error:503", "enter")
        await settle(pilot)  # the Jobs view's filter is the server's: every row it sent
        webhooks_503 = [
            j for j in EVERY_JOB if j.queue == "webhooks" and "503" in (j.last_error or "")
        ]
        assert labels()[1] == f"Jobs {len(webhooks_503)}"


async def test_the_header_keeps_database_and_schema_apart() -> None:
    from tui_support.pilot import SIZE, sample_app, settle

    from pgq_tui.widgets.status_header import StatusHeader

    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        header = app.dashboard.query_one(StatusHeader).render()
        assert " ops@db.example.com:5432/shop  ·  schema pgq  " in header.plain
        database = header.plain.index("ops@")
        assert all("bold" not in str(s.style) for s in header.spans if s.start == database)


async def test_a_cell_growing_in_place_widens_its_column() -> None:
    """E.g. a job that fails after it was first listed: its error must not be cut short."""
    from tui_support.pilot import VIEWS, sample_app, settle

    from pgq_tui.widgets.jobs_table import JobsTable

    app = sample_app()
    async with app.run_test(size=(220, 40)) as pilot:
        await settle(pilot)
        await VIEWS["jobs"](pilot)
        table = app.dashboard.query_one(JobsTable)
        error = next(c for c in table.columns.values() if c.key.value == "error")
        before = error.content_width
        longer = "x" * (before + 20)
        app.paused = True  # the tick re-shows the sample rows otherwise
        rows = [(key, [*cells[:-1], Text(longer)]) for key, cells in table._all_rows]
        table.sync(rows)
        await pilot.pause()
        assert error.content_width == len(longer)


async def test_view_keys_put_the_cursor_in_the_view_they_show() -> None:
    """2 from the queues puts the cursor in the Jobs view (Enter opens a job at once); from
    the Jobs view, 1 then Enter opens the highlighted lease (not the queue above it)."""
    from tui_support.pilot import SIZE, VIEWS, sample_app, settle

    from pgq_tui.screens.job_detail import JobDetailScreen
    from pgq_tui.widgets.jobs_table import JobsTable
    from pgq_tui.widgets.leases_table import LeasesTable
    from pgq_tui.widgets.queues_table import QueuesTable

    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.focused, QueuesTable)
        await pilot.press("2")
        assert isinstance(app.focused, JobsTable)
        await pilot.press("tab")
        assert isinstance(app.focused, QueuesTable)
        await VIEWS["jobs"](pilot)
        assert isinstance(app.focused, JobsTable)
        await pilot.press("1")
        await settle(pilot)
        assert isinstance(app.focused, LeasesTable)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, JobDetailScreen)
        assert app.screen.job_id == int(app.dashboard.query_one(LeasesTable).selected_key or 0)


def test_a_long_history_detail_wraps_in_its_own_column() -> None:
    from datetime import timedelta

    from rich.console import Console
    from tui_support.sample import NOW

    from pgq_core import JobEvent
    from pgq_tui.widgets.timeline import timeline

    detail = "HTTPError: 503 Service Unavailable from https://hooks.example.com/orders " * 2
    history = [
        JobEvent(NOW, "claimed", 1, "w", None),
        JobEvent(NOW + timedelta(seconds=1), "failed", 1, "w", detail),
    ]
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(timeline(history))
    lines = console.export_text().splitlines()
    assert len(lines) > 2  # the detail wrapped
    column = lines[1].index("HTTPError")
    assert all(line[:column].strip() == "" for line in lines[2:])


async def test_paused_the_status_line_still_tells_the_age_of_the_data() -> None:
    from textual.widgets import Static
    from tui_support.pilot import SIZE, sample_app, settle
    from tui_support.sample import EPOCH

    now = [EPOCH]
    app = sample_app()
    app.clock = lambda: now[0]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("space")
        now[0] += 30
        app.tick()
        line = app.dashboard.query_one("#status-line", Static).content
        assert isinstance(line, Text)
        assert "refreshed 30s ago" in line.plain
        assert all("red" not in str(span.style) for span in line.spans)


async def test_tab_never_lands_on_the_tab_bar() -> None:
    from textual.widgets import Tabs
    from tui_support.pilot import NARROW, sample_app, settle

    app = sample_app()
    async with app.run_test(size=NARROW) as pilot:  # focus only: the smallest redraws
        await settle(pilot)
        for key in ["tab"] * 6 + ["shift+tab"] * 6:
            await pilot.press(key)
            assert not isinstance(app.focused, Tabs), key


async def test_slash_on_the_job_screen_filters_its_history() -> None:
    from rich.console import Console
    from textual.widgets import Static
    from tui_support.pilot import SIZE, VIEWS, sample_app, settle
    from tui_support.sample import DETAIL

    from pgq_tui.screens.job_detail import JobDetailScreen

    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await VIEWS["job-detail"](pilot)
        screen = app.screen
        assert isinstance(screen, JobDetailScreen)
        await pilot.press("slash", *"reaped")
        await settle(pilot)
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(screen.query_one("#history", Static).content)
        history = console.export_text()
        reaped = sum(1 for e in DETAIL.history if e.event == "reaped")
        assert history.count("reaped") == reaped and "claimed" not in history
        title = str(screen.query_one("#history-box").border_title)
        assert f"{reaped} of {len(DETAIL.history)}" in title
        await pilot.press("escape")  # clears the filter first
        await settle(pilot)
        assert app.screen is screen and screen.filter_text == ""
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is app.dashboard


async def test_messages_go_to_the_status_line_never_a_toast_over_the_tables() -> None:
    from textual.widgets import Static
    from tui_support.pilot import SIZE, sample_app, settle

    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for key, says in (("w", "no handler"), ("r", "only dead jobs are requeued")):
            await pilot.press(key)  # refused, with a message
            await settle(pilot)
            assert len(app._notifications) == 0
            line = app.dashboard.query_one("#status-line", Static).content
            assert says in str(line)


def test_the_header_never_says_live_and_paused_at_once() -> None:
    from pgq_tui.state import CONNECTED, DISCONNECTED, HeaderState
    from pgq_tui.widgets.status_header import header_text

    paused = header_text(HeaderState("db", "pgq", CONNECTED, paused=True), 0.0, 120).plain
    assert "paused" in paused and "live" not in paused
    live = header_text(HeaderState("db", "pgq", CONNECTED), 0.0, 120).plain
    assert "live" in live and "paused" not in live
    long_problem = HeaderState("db", "pgq", DISCONNECTED, "x" * 300, stale_for=12.0)
    for width in (40, 80, 200):
        text = header_text(long_problem, 0.0, width).plain
        assert text.endswith("00:00:00 UTC") and len(text) <= width


async def test_at_80x24_the_footer_shows_help_and_quit_and_help_fits() -> None:
    from textual.widgets._footer import FooterKey
    from tui_support.pilot import sample_app, settle

    from pgq_tui.screens.help import HelpScreen

    app = sample_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        keys = {k.action: k.region for k in app.screen.query(FooterKey)}
        for action in ("help", "quit"):
            region = keys[action]
            assert region.width and region.right <= 80, action
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        box = app.screen.query_one("#help").region
        assert box.right <= 80 and box.bottom <= 24


async def test_at_80x24_the_footer_keeps_every_key_it_shows_wider() -> None:
    """Compact below 110 columns, without the palette's key: every key shown at 132 columns
    fits at 80, on the dashboard and (but `w`) on a job's screen."""
    from textual.geometry import Region
    from textual.widgets._footer import FooterKey
    from tui_support.pilot import VIEWS, sample_app, settle

    from pgq_tui.app import DashboardApp
    from pgq_tui.screens.job_detail import JobDetailScreen

    def keys(app: DashboardApp) -> dict[str, Region]:
        return {k.action: k.region for k in app.screen.query(FooterKey)}

    wide = sample_app()
    async with wide.run_test(size=(132, 38)) as pilot:
        await settle(pilot)
        shown = set(keys(wide)) - {"app.command_palette", "command_palette"}
    assert {"filter", "pause", "stop_workers", "start_worker"} <= shown
    app = sample_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        regions = keys(app)
        for action in shown:
            assert regions[action].width and regions[action].right <= 80, action
        await VIEWS["job-detail"](pilot)
        assert isinstance(app.screen, JobDetailScreen)
        regions = keys(app)
        for action in shown - {"start_worker"} | {"back"}:
            assert regions[action].width and regions[action].right <= 80, action


def test_at_80_columns_the_header_cuts_the_database_before_the_schema() -> None:
    from pgq_tui.state import CONNECTED, HeaderState
    from pgq_tui.widgets.status_header import header_text

    database = "ops@db-primary.eu-west-1.example.com:5432/shop"
    state = HeaderState(database, "pgq_billing_eu_west", CONNECTED, host="10.0.0.5:5432")
    text = header_text(state, 0.0, 80).plain
    assert len(text) <= 80 and text.endswith("00:00:00 UTC")
    assert "schema pgq_billing_eu_west " in text
    assert "ops@db-" in text and "/shop" in text and "…" in text  # its middle went
    wide = header_text(state, 0.0, 160).plain
    assert f"{database}  ·  schema pgq_billing_eu_west  ·  10.0.0.5:5432" in wide


async def test_at_80_columns_low_priority_columns_hide_and_the_rest_fit() -> None:
    from tui_support.pilot import sample_app, settle

    from pgq_tui.widgets.keyed_table import plain
    from pgq_tui.widgets.queues_table import QueuesTable

    app = sample_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.dashboard.query_one(QueuesTable)
        assert {"queue", "ready", "dead", "oldest", "expiring"} <= set(table.shown_columns)
        assert "spark" not in table.shown_columns
        oldest = [plain(table.get_row(k)[table.shown_columns.index("oldest")]) for k in table.rows]
        assert "6m52s" in [o.strip() for o in oldest]
        await pilot.resize_terminal(200, 40)
        await settle(pilot)
        assert table.shown_columns == [c[0] for c in table.COLUMNS]


def test_the_worker_log_handler_posts_lines_escaped_when_shown() -> None:
    import logging

    from pgq_tui.state import LogLine
    from pgq_tui.widgets.log_panel import log_text
    from pgq_tui.worker_log import WorkerLogHandler

    got: list[LogLine] = []
    handler = WorkerLogHandler(got.append)
    logger = logging.getLogger("pgq.worker")
    before = logger.level
    handler.attach()
    try:
        logger.info("worker %s started", "w\x1b[31m[red]x[/red]")
        logger.debug("not shown")
    finally:
        handler.detach()
    logger.info("after detach")
    assert logger.level == before
    assert [x.level for x in got] == ["INFO"]
    shown = log_text(got[0])
    assert "\\x1b[31m[red]x[/red]" in shown.plain
    assert "\x1b" not in shown.plain and not shown.spans[2:]


def test_the_demo_exit_hint_names_pgq_as_it_was_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a virtualenv not on PATH, the hint said `pgq --schema pgq_demo stats`, which the
    shell could not find (the test failed before)."""
    from pgq_cli.tui_cli import demo_exit_hint

    bin_dir = tmp_path / "my venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "pgq"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    quoted = f"'{script}'"
    assert demo_exit_hint("pgq_demo") == (
        f"demo data is in schema pgq_demo: {quoted} --schema pgq_demo stats   "
        f"(or {quoted} --schema pgq_demo dashboard)"
    )
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin")
    assert demo_exit_hint("s").startswith("demo data is in schema s: pgq --schema s stats")
    monkeypatch.setattr(sys, "argv", ["/src/pgq_cli/__main__.py", "demo"])
    assert f"{sys.executable} -m pgq_cli --schema s stats" in demo_exit_hint("s")


def test_latency_trend_one_value_per_bucket_and_only_the_queues_kept() -> None:
    trend = LatencyTrend(bucket_seconds=10, buckets=4)
    first = latency_report(["emails", "webhooks", "unknown"], 0)  # emails 0.42, webhooks 2.2
    trend.observe(first, 100.0)
    assert trend.p95("emails") == 0.42 and trend.p95("unknown") is None
    later = latency_report(["emails", "webhooks"], 3)  # emails 0.51, webhooks none
    trend.observe(later, 105.0)  # same bucket: replaces the first read
    assert trend.series("emails", 105.0) == [0.0, 0.0, 0.0, 0.51]
    trend.observe(latency_report(["emails"], 7), 121.0)  # two buckets on: 0.90
    assert trend.series("emails", 121.0) == [0.0, 0.51, 0.0, 0.90]
    assert trend.series("webhooks", 121.0) == [0.0, 0.0, 0.0, 0.0]  # None shows as no bar
    assert trend.series("emails", 161.0) == [0.0, 0.0, 0.0, 0.0]  # all older than 4 buckets
    trend.keep(["emails"])
    assert not trend.known("webhooks") and trend.known("emails")


async def test_what_is_typed_at_once_after_slash_extends_the_prefilled_jobs_filter() -> None:
    """`/` in the Jobs view prefills the filter; keys that arrive before the screen next
    refreshes (a fast typist, a paste, a loaded machine) go after it, never replace it: the
    field selects nothing on focus (CI's PG 15 run drew ' error:503' alone once)."""
    from textual import events
    from textual.widgets import Input
    from tui_support.pilot import SIZE, VIEWS, sample_app, settle

    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await VIEWS["jobs"](pilot)
        await settle(pilot)
        field = app.dashboard.query_one(Input)
        app.dashboard.open_filter()
        prefilled = field.value
        assert prefilled.startswith("queue:")
        await asyncio.sleep(0)  # the focus event goes first; no refresh yet
        for char in " error:503":
            field.post_message(events.Key("space" if char == " " else char, char))
        await pilot.pause()
        assert field.value == prefilled + " error:503"


async def test_a_pushed_screens_header_shows_the_clock_from_its_first_frame() -> None:
    """The job screen's header got the app's state on mount but its clock only at the app's
    next header refresh, so it drew 00:00:00 UTC until then (a 160x45 snapshot caught it once
    in CI). Here no refresh comes after the push: the screen's own mount must set both."""
    from tui_support.pilot import SIZE, sample_app, settle
    from tui_support.sample import EPOCH

    from pgq_tui.screens.job_detail import JobDetailScreen
    from pgq_tui.widgets.status_header import StatusHeader

    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app._sync_headers = lambda: None  # type: ignore[method-assign]
        screen = JobDetailScreen(1)
        await app.push_screen(screen)
        await pilot.pause()
        header = screen.query_one(StatusHeader)
        assert header.now == EPOCH
        assert "00:00:00 UTC" not in header.render().plain


async def test_an_unforeseen_poll_error_reads_as_a_sentence_and_the_log_keeps_it() -> None:
    """A poll that fails in a way nothing foresaw (not the database's refusal, not a lost
    connection) puts a plain sentence in the header, never an exception's class name; the
    Log view gets the exception."""
    from tui_support.pilot import sample_app, settle, wait_for

    from pgq_core import QueueWindow
    from pgq_tui.app import POLL_FAILED
    from pgq_tui.widgets.status_header import StatusHeader

    async def broken(offset: int, limit: int) -> QueueWindow:
        raise ZeroDivisionError("division by zero")

    app = sample_app()
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        app.source.stats_window = broken  # type: ignore[method-assign]
        failures = app.poll_failures
        app.request_refresh()
        await wait_for(pilot, lambda: app.poll_failures > failures, "the poll failing")
        await settle(pilot)
        assert app.problem == POLL_FAILED
        header = app.dashboard.query_one(StatusHeader).render().plain
        assert "could not read the queues" in header and "ZeroDivision" not in header
        errors = [line.text for line in app.dashboard.log_book.lines if line.level == "ERROR"]
        assert errors == ["the dashboard's poll failed: ZeroDivisionError: division by zero"]
