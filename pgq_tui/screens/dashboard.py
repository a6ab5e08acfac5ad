"""The main screen: queues on top; leases, jobs, workers, the workers' log, error groups and
database health below; filter and status line.

`/` in the Jobs view is a server-side filter in the grammar of `pgq_core.filters.parse_filter`
(the CLI's options as `key:value`); in the other views it filters the rows shown.

It never imports the app: it reads what it needs through `Host` and asks for data with
messages (`RefreshRequested`, `JobsRequested`, `OpenJob`)."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static, TabbedContent, TabPane, Tabs
from textual.widgets.data_table import RowDoesNotExist

from pgq_core import JobRow, Lease, QueueStats
from pgq_core.filters import FILTER_SYNTAX, FilterError, JobFilter, format_filter, parse_filter
from pgq_core.models import ErrorGroup, Health

from .. import humanize
from ..host import Host
from ..messages import ActionRead, DashboardReady, JobsRequested, OpenJob, SlowViewShown
from ..state import (
    JOB_STATUSES,
    JOBS_LIMIT,
    MESSAGE_SECONDS,
    JobsQuery,
    LogBook,
    LogLine,
    Snapshot,
    is_expiring,
    window_offset,
)
from ..widgets.errors_table import ErrorsTable, example_text
from ..widgets.health_panel import HealthPanel
from ..widgets.jobs_table import STATUS_STYLE, JobsTable
from ..widgets.keyed_table import KeyedTable
from ..widgets.keys_footer import KeysFooter
from ..widgets.leases_table import LeasesTable
from ..widgets.log_panel import LogPanel
from ..widgets.queues_table import QueuesTable
from ..widgets.status_header import StatusHeader
from ..widgets.stuck_table import StuckTable, stuck_bar
from ..widgets.workers_table import WorkersTable

__all__ = ["JOBS_LIMIT", "JOB_STATUSES", "DashboardScreen", "Snapshot"]

VIEWS = ("leases", "jobs", "workers", "log", "errors", "health")
#: read on their own, every few seconds at most, only while shown
SLOW_VIEWS = ("errors", "health")
ROWS_PROMPT = "filter rows (Enter keeps it, Esc clears)"
JOBS_PROMPT = f"jobs filter, Enter applies, Esc clears: {FILTER_SYNTAX}"


class DashboardScreen(Screen[None]):
    """Styles: dashboard.tcss, loaded by the app."""

    BINDINGS = [
        Binding("1", "show_tab('leases')", "Leases", show=False),
        Binding("2", "show_tab('jobs')", "Jobs", show=False),
        Binding("3", "show_tab('workers')", "Workers", show=False),
        Binding("4", "show_tab('log')", "Log", show=False),
        Binding("5", "show_tab('errors')", "Errors", show=False),
        Binding("6", "show_tab('health')", "Health", show=False),
        Binding("s", "next_status", "Status", show=False),
        Binding("o", "open_worker", "Open worker", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.data: Snapshot | None = None
        self.job_status: str | None = None
        self.status_chosen = False
        self.filter_text = ""
        #: the Jobs view's server-side filter (None: browsing the selected queue by status)
        self.job_filter: JobFilter | None = None
        #: what the open filter field edits: "rows" (client-side) or "jobs" (server-side)
        self.filter_mode = "rows"
        self.errors: list[ErrorGroup] | None = None
        self.health: Health | None = None
        self.message = Text("")
        self.message_until = 0.0
        self.stale_for: float | None = None
        self.log_book = LogBook()
        self._tab_labels: dict[str, str] = {}
        self._lines: dict[str, str] = {}

    @property
    def host(self) -> Host:
        return cast(Host, self.app)

    def compose(self) -> ComposeResult:
        yield StatusHeader()
        yield QueuesTable(id="queues")
        with TabbedContent(initial="leases", id="views"):
            with TabPane("Leases", id="leases"):
                yield LeasesTable(id="leases-table")
            with TabPane("Jobs", id="jobs"):
                yield Static(id="jobs-bar")
                yield JobsTable(id="jobs-table")
            with TabPane("Workers", id="workers"):
                yield Static(id="workers-hint")
                yield WorkersTable(id="workers-table")
            with TabPane("Log", id="log"):
                yield Static(id="log-hint")
                yield LogPanel(id="log-table")
            with TabPane("Errors", id="errors"):
                yield Static(id="errors-bar")
                yield ErrorsTable(id="errors-table")
                yield Static(example_text(None), id="errors-example")
            with TabPane("Health", id="health"):
                yield Static(stuck_bar(None), id="stuck-bar")
                yield StuckTable(id="stuck-table")
                yield HealthPanel(id="health-table")
        # typing after `/` extends what the field holds (no select-all on focus to replace)
        yield Input(
            placeholder=ROWS_PROMPT,
            id="filter",
            restrict=humanize.TYPED_TEXT,
            select_on_focus=False,
        )
        yield Static(id="status-line")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#queues").border_title = "queues"
        self.query_one(Input).cursor_blink = self.host.blink
        # Tab moves between the tables only; views change with 1 2 3 4 (or a click)
        self.query_one(TabbedContent).query_one(Tabs).can_focus = False
        self.query_one(StatusHeader).show(self.host.header_state(), self.host.clock())
        self._render_jobs_bar()
        self._render_workers_hint()
        self._render_log_hint()
        self._render_errors_bar()
        self.query_one(QueuesTable).focus()
        self.post_message(DashboardReady())

    # selection -------------------------------------------------------------------------
    def selected_queue(self) -> str | None:
        return self.query_one(QueuesTable).selected_key

    def selected_stats(self) -> QueueStats | None:
        name = self.selected_queue()
        if self.data is None or name is None:
            return None
        return next((s for s in self.data.stats if s.queue == name), None)

    def active_view(self) -> str:
        return self.query_one(TabbedContent).active or "leases"

    def selected_job(self) -> tuple[int, str, str] | None:
        """(id, status, queue) of the job under the cursor of the Jobs or Leases view."""
        if self.data is None:
            return None
        view = self.active_view()
        if view == "jobs":
            key = self.query_one(JobsTable).selected_key
            job = next((j for j in self.data.jobs if str(j.id) == key), None)
            return (job.id, job.status, job.queue) if job else None
        if view == "leases":
            key = self.query_one(LeasesTable).selected_key
            lease = next((x for x in self.data.leases if str(x.id) == key), None)
            return (lease.id, "running", lease.queue) if lease else None
        if view == "health" and self.health is not None and self.health.stuck_jobs is not None:
            key = self.query_one(StuckTable).selected_key
            stuck = next((j for j in self.health.stuck_jobs.jobs if str(j.id) == key), None)
            return (stuck.id, "running", stuck.queue) if stuck else None
        return None

    def selected_group(self) -> ErrorGroup | None:
        """The error group under the Errors view's cursor."""
        key = self.query_one(ErrorsTable).selected_key
        return next((g for g in self.errors or [] if g.group == key), None)

    def bulk_target(self) -> tuple[JobFilter, str] | None:
        """(filter, what it is) that `R` and `k` act on as a whole in the current view: the
        Jobs view's filter, or the Errors view's selected group; None elsewhere."""
        view = self.active_view()
        if view == "jobs" and self.job_filter is not None:
            return self.job_filter, f"matching {format_filter(self.job_filter)}"
        if view == "errors":
            group = self.selected_group()
            if group is not None:
                return JobFilter(error_group=group.group), f"of error group {group.group}"
        return None

    def jobs_query(self) -> JobsQuery:
        if self.job_filter is not None:
            return (None, None, self.job_filter)
        return (self.selected_queue(), self.job_status, None)

    # data ------------------------------------------------------------------------------
    def show(self, data: Snapshot) -> None:
        self.data = data
        now = self.host.clock()
        self._show_rows(now, jobs=False)
        self._render_queues_title()
        self._auto_status()  # after the queues' rows: the cursor's queue picks the jobs
        if data.jobs_query == self.jobs_query():
            self.query_one(JobsTable).show(data.jobs, now, data)
        else:
            self.post_message(JobsRequested())
        self._show_workers(now)
        self._render_workers_hint()
        self._render_tab_labels()
        self._render_jobs_bar()
        self.render_status_line()

    def show_leases(self, leases: list[Lease], at: float) -> None:
        """Fresh leases alone (heartbeats move `lease_until` without a NOTIFY)."""
        if self.data is None:
            return
        self.data = replace(self.data, leases=leases, leases_at=at)
        self.tick(self.host.clock())

    def show_jobs(self, jobs: list[JobRow], jobs_query: JobsQuery) -> None:
        """Fresh rows for the Jobs view alone (a queue or status was just chosen)."""
        if self.data is None or jobs_query != self.jobs_query():
            return
        self.data = replace(self.data, jobs=jobs, jobs_query=jobs_query)
        self.query_one(JobsTable).show(jobs, self.host.clock(), self.data)
        self._render_tab_labels()
        self._render_jobs_bar()

    def jobs_moved(self, queue: str, ids: list[int], was: str, became: str) -> None:
        """An action just committed: `ids`, of `queue`, went from `was` to `became`. The
        queue's counts, the Jobs view's rows and the leases say so at once; the re-read
        that follows (`show_touched`) confirms them."""
        if self.data is None:
            return
        self.data = self.data.with_moved(queue, ids, was, became)
        self._show_rows(self.host.clock())

    def show_touched(self, read: ActionRead) -> None:
        """An action committed: the rows it touched, read again at once, replace theirs (the
        Jobs view's only when read for the query it shows); the refresh it asks for brings the
        rest."""
        if self.data is None:
            return
        jobs = read.jobs if read.jobs_query == self.jobs_query() else None
        self.data = self.data.with_touched(read.stats, jobs, read.jobs_query, read.leases, read.at)
        now = self.host.clock()
        self._show_rows(now, jobs=jobs is not None)
        self._show_workers(now)
        self._render_tab_labels()
        self._render_jobs_bar()
        self.render_status_line()

    def show_errors(self, groups: list[ErrorGroup], now: float) -> None:
        self.errors = groups
        self.query_one(ErrorsTable).show(groups, now)
        self._render_errors_example()
        self._render_errors_bar()
        self._render_tab_labels()

    def show_health(self, health: Health, now: float) -> None:
        self.health = health
        self.query_one("#stuck-bar", Static).update(stuck_bar(health.stuck_jobs))
        table, panel = self.query_one(StuckTable), self.query_one(HealthPanel)
        table.show(health.stuck_jobs)
        shown = table.display
        table.display = table.total_rows > 0
        if table.display and not shown and self.focused is panel:
            table.focus()  # the cursor goes to the list that just came, as Enter acts on it
        panel.show(health, now)
        self._render_tab_labels()

    def tick(self, now: float) -> None:
        """Between polls: countdowns, worker activity and the status line move on."""
        self._show_rows(now, jobs=self.active_view() == "jobs")
        self._show_workers(now)
        self._render_workers_hint()
        self._render_tab_labels()
        self.render_status_line()

    def _show_rows(self, now: float, *, jobs: bool = True) -> None:
        """The Queues and Leases tables and (`jobs`) the Jobs view's from `data` as of `now`:
        each table edits only the cells that changed."""
        data = self.data
        if data is None:
            return
        self.query_one(QueuesTable).show(data, self.host.throughput, now, self.host.latency)
        self.query_one(LeasesTable).show(data, now)
        if jobs:
            self.query_one(JobsTable).show(data.jobs, now, data)

    def set_stale(self, stale_for: float | None) -> None:
        """Data older than a refresh during an outage: the tables dim and the age shows."""
        self.stale_for = stale_for
        self.set_class(stale_for is not None, "-stale")
        self._render_queues_title()

    def _render_queues_title(self) -> None:
        """"queues", with which of them the window shows when it does not show them all."""
        title = "queues"
        data = self.data
        if data is not None and len(data.stats) < data.queues_total:
            first = data.queues_offset + 1
            last = data.queues_offset + len(data.stats)
            title += f" {first:,}-{last:,} of {data.queues_total:,}"
        if self.stale_for is not None:
            title += f" · stale {humanize.duration(self.stale_for)}"
        self.query_one("#queues").border_title = title

    def say(self, message: str, style: str = "") -> None:
        """Show `message` (printable: it may quote a queue name) on the status line for
        MESSAGE_SECONDS."""
        self.message = humanize.db_text(message, style=style)
        self.message_until = self.host.clock() + MESSAGE_SECONDS
        self.render_status_line()

    def add_log(self, line: LogLine) -> None:
        seen = self.active_view() == "log"
        self.log_book.add(line, seen)
        self.query_one(LogPanel).add(line)
        self._render_log_hint()
        self._render_tab_labels()

    def render_status_line(self) -> None:
        host = self.host
        line = Text(no_wrap=True, overflow="ellipsis")
        if self.data is not None:
            age = max(0.0, host.clock() - self.data.polled_at)
            if self.stale_for is not None and not host.paused:
                line.append(f" STALE: data from {humanize.duration(age)} ago ", "bold white on red")
            else:
                line.append(" refreshed ", style="grey62")
                line.append("just now" if age < 1 else f"{humanize.duration(age)} ago")
                line.append(f" in {self.data.took * 1000:.0f}ms", style="grey62")
        else:
            line.append(" waiting for the first refresh…", style="grey62")
        if self.filter_text:
            line.append(" · filter ", style="grey62")
            line.append_text(humanize.db_text(f"/{self.filter_text}", style="bold yellow"))
        if self.message.plain and host.clock() < self.message_until:
            line.append(" · ", style="grey62")
            line.append_text(self.message)
        line.append(f" · every {host.refresh_seconds:g}s + on NOTIFY", style="grey62")
        self._set_line("#status-line", line)

    def _set_line(self, selector: str, text: Text) -> None:
        """A one-line Static (height 1 in the stylesheet) gets `text` only when it changed, and
        without a layout pass: the tick runs four times a second, and a layout pass re-renders
        every table on the screen."""
        if self._lines.get(selector) != text.markup:
            self._lines[selector] = text.markup
            self.query_one(selector, Static).update(text, layout=False)

    def _render_tab_labels(self) -> None:
        """Each label counts the rows its table holds ("shown of all" while a filter hides some)."""
        expired = expiring = 0
        if self.data is not None:
            now = self.host.clock()
            for x in self.data.leases:
                left = self.data.seconds_left(x, now)
                expired += left < 0
                expiring += left >= 0 and is_expiring(left, x.lease_seconds)
        leases = self._count_label("Leases", self.query_one(LeasesTable))
        if expiring:
            leases.append(f" ({expiring} expiring)", style="bold yellow")
        if expired:
            leases.append(f" ({expired} expired)", style="bold red")
        self._set_tab_label("leases", leases)
        self._set_tab_label("jobs", self._count_label("Jobs", self.query_one(JobsTable)))
        self._set_tab_label("workers", self._count_label("Workers", self.query_one(WorkersTable)))
        log = Text(f"Log {len(self.log_book.lines)}")
        if self.log_book.unseen_warnings:
            log.append(f" ({self.log_book.unseen_warnings} new ⚠)", style="bold yellow")
        self._set_tab_label("log", log)
        if self.errors is None:
            self._set_tab_label("errors", Text("Errors"))
        else:
            self._set_tab_label("errors", self._count_label("Errors", self.query_one(ErrorsTable)))
        health = Text("Health")
        if self.health is not None and self.health.warnings:
            health.append(f" ({len(self.health.warnings)} ⚠)", style="bold yellow")
        self._set_tab_label("health", health)

    @staticmethod
    def _count_label(name: str, table: KeyedTable) -> Text:
        if table.row_count == table.total_rows:
            return Text(f"{name} {table.row_count}")
        return Text(f"{name} {table.row_count} of {table.total_rows}")

    def _set_tab_label(self, pane: str, label: Text) -> None:
        """Only on change: a new label re-lays out the tabs and restarts their underline."""
        if self._tab_labels.get(pane) != label.markup:
            self._tab_labels[pane] = label.markup
            self.query_one(TabbedContent).get_tab(pane).label = label
            self.call_after_refresh(self._scroll_to_active_tab)

    def _scroll_to_active_tab(self) -> None:
        """A narrow terminal shows the tab bar in part: keep the active tab in it when a label
        grows (Textual scrolls to it only when it is activated)."""
        tabs = self.query_one(TabbedContent).query_one(Tabs)
        if tabs.active_tab is not None:
            tabs.query_one("#tabs-scroll").scroll_to_center(
                tabs.active_tab, animate=False, force=True
            )

    def _render_jobs_bar(self) -> None:
        if self.job_filter is not None:
            self._render_filtered_jobs_bar(self.job_filter)
            return
        queue, status, _ = self.jobs_query()
        stats = self.selected_stats()
        counts: dict[str, int] = {}
        if stats is not None:
            counts = {
                "dead": stats.dead,
                "ready": stats.ready + stats.scheduled,
                "running": stats.running,
                "done": stats.done,
                "waiting": stats.waiting,
            }
        bar = Text(no_wrap=True, overflow="ellipsis")
        bar.append(" queue ", style="grey62")
        bar.append_text(humanize.db_text(queue or "all", style="bold"))
        bar.append("   ")
        for choice in JOB_STATUSES:
            name = choice or "all"
            label = f" {name} {humanize.count(counts[name])} " if name in counts else f" {name} "
            if choice == status:
                bar.append(label, style=f"reverse {STATUS_STYLE.get(name, 'bold')}")
            else:
                bar.append(label, style="grey50")
        shown = len(self.data.jobs) if self.data is not None else 0
        if shown >= JOBS_LIMIT:
            order = "latest dead" if status == "dead" else "newest"
            bar.append(f"   {order} {JOBS_LIMIT} shown", style="yellow")
        bar.append("   s status · / filter · Enter open · r requeue · k kill", style="grey50")
        self.query_one("#jobs-bar", Static).update(bar)

    def _render_filtered_jobs_bar(self, where: JobFilter) -> None:
        bar = Text(no_wrap=True, overflow="ellipsis")
        bar.append(" filter ", style="grey62")
        text = f"/{format_filter(where) or 'all jobs'}"
        bar.append_text(humanize.db_text(text, style="bold yellow"))
        shown = len(self.data.jobs) if self.data is not None else 0
        bar.append(f"   {'newest ' if shown >= JOBS_LIMIT else ''}{shown} shown", style="grey62")
        bar.append("   R/k: all matching · Esc clears · / edit", style="grey50")
        self.query_one("#jobs-bar", Static).update(bar)

    def _render_errors_bar(self) -> None:
        bar = Text(no_wrap=True, overflow="ellipsis")
        if self.errors is None:
            bar.append(" reading error groups…", style="grey50")
        else:
            dead = sum(g.dead for g in self.errors)
            failed = sum(g.failed for g in self.errors)
            bar.append(f" {len(self.errors)} groups · ", style="grey62")
            bar.append(f"{humanize.count(dead)} dead", style="bold red")
            bar.append(" · ", style="grey62")
            bar.append(f"{humanize.count(failed)} failed", style="yellow")
        bar.append("   Enter jobs · R requeue group · k kill group", style="grey50")
        self.query_one("#errors-bar", Static).update(bar)

    def _render_errors_example(self) -> None:
        group = self.selected_group() if self.errors else None
        self.query_one("#errors-example", Static).update(example_text(group))

    def _show_workers(self, now: float) -> None:
        data = self.data
        live, leases = (data.workers, data.leases) if data is not None else ([], [])
        self.query_one(WorkersTable).show(self.host.pool.snapshots(), now, live, leases)

    def action_open_worker(self) -> None:
        """`o` in the Leases view: the Workers view, the cursor on the lease's worker."""
        if self.data is None or self.active_view() != "leases":
            return
        key = self.query_one(LeasesTable).selected_key
        lease = next((x for x in self.data.leases if str(x.id) == key), None)
        if lease is None or lease.worker is None:
            return
        table = self.query_one(WorkersTable)
        self.action_show_tab("workers")
        try:
            table.move_cursor(row=table.get_row_index(lease.worker))
        except RowDoesNotExist:
            self.say(
                f"worker {lease.worker} is not live: no beat in its row (stopped, killed or "
                "an older pgq)",
                "yellow",
            )

    def _render_workers_hint(self) -> None:
        host = self.host
        hint = self.query_one("#workers-hint", Static)
        if host.pool.snapshots() or (self.data is not None and self.data.workers):
            hint.display = False
            return
        hint.display = True
        if host.read_only:
            self._set_line(
                "#workers-hint", Text(" read-only: no workers can be started", style="grey50")
            )
        elif host.pool.can_start:
            self._set_line(
                "#workers-hint",
                Text(" no workers in this app yet: press w to start one on the selected queue"),
            )
        else:
            self._set_line(
                "#workers-hint",
                Text(
                    " no handler: start the dashboard with --handler MODULE:CALLABLE"
                    " to run workers here",
                    style="grey50",
                ),
            )

    def _render_log_hint(self) -> None:
        hint = self.query_one("#log-hint", Static)
        hint.display = not self.log_book.lines
        hint.update(
            Text(" the log of this app's workers (pgq.worker): nothing logged yet", style="grey50")
        )

    def _auto_status(self) -> None:
        """Until the operator picks a status, a queue with dead jobs shows them first."""
        if self.status_chosen:
            return
        stats = self.selected_stats()
        self.job_status = "dead" if stats is not None and stats.dead else None

    # events ----------------------------------------------------------------------------
    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "errors-table":
            self._render_errors_example()
        if event.data_table.id == "queues" and self.data is not None:
            data = self.data
            # where the cursor is now, not where this event saw it: a poll's rows may have
            # moved it on the way (and back onto its queue)
            cursor = self.query_one(QueuesTable).cursor_row
            moved = window_offset(data.queues_offset, len(data.stats), data.queues_total, cursor)
            if moved is not None:
                self.host.move_queues_window(moved)
            self.status_chosen = False
            before = self.job_status
            self._auto_status()
            self._render_jobs_bar()
            if self.data.jobs_query != self.jobs_query() or before != self.job_status:
                self.post_message(JobsRequested())

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "queues":
            self.status_chosen = False
            self._auto_status()
            self.set_job_filter(None)
            self.action_show_tab("jobs")
        elif event.data_table.id == "errors-table":
            key = event.row_key.value
            if key is not None:
                self.set_job_filter(JobFilter(error_group=key))
                self.action_show_tab("jobs")
        elif event.data_table.id in ("jobs-table", "leases-table", "stuck-table"):
            key = event.row_key.value
            if key is not None:
                self.post_message(OpenJob(int(key)))

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self._apply_filter()
        if self.active_view() in SLOW_VIEWS:
            self.post_message(SlowViewShown(self.active_view()))
        if self.active_view() == "log" and self.log_book.unseen_warnings:
            self.log_book.unseen_warnings = 0
            self._render_tab_labels()

    def action_show_tab(self, tab: str) -> None:
        """The view is shown and the cursor goes into it."""
        self.query_one(TabbedContent).active = tab
        self._apply_filter()
        self._active_view_widget().focus()
        if tab == "log" and self.log_book.unseen_warnings:
            self.log_book.unseen_warnings = 0
            self._render_tab_labels()

    def action_next_status(self) -> None:
        if self.job_filter is not None:
            # a filtered view: `s` cycles the filter's status (a filter with several: the first)
            now = self.job_filter.statuses[0] if self.job_filter.statuses else None
            now = now if now in JOB_STATUSES else None
            after = JOB_STATUSES[(JOB_STATUSES.index(now) + 1) % len(JOB_STATUSES)]
            try:
                where = replace(self.job_filter, statuses=(after,) if after else ())
            except FilterError as exc:
                self.say(f"bad filter: {exc}", "bold red")
                return
            self.set_job_filter(where)
            self.action_show_tab("jobs")
            return
        index = JOB_STATUSES.index(self.job_status)
        self.job_status = JOB_STATUSES[(index + 1) % len(JOB_STATUSES)]
        self.status_chosen = True
        self.action_show_tab("jobs")
        self._render_jobs_bar()
        self.post_message(JobsRequested())

    # filter ----------------------------------------------------------------------------
    def open_filter(self) -> None:
        """In the Jobs view: the server-side filter, prefilled with what the view lists now;
        elsewhere: a text filter over the rows shown."""
        field = self.query_one(Input)
        if self.active_view() == "jobs":
            self.filter_mode = "jobs"
            field.placeholder = JOBS_PROMPT
            field.border_title = f"jobs filter: {FILTER_SYNTAX}"
            if self.job_filter is not None:
                field.value = format_filter(self.job_filter)
            else:
                queue, status = self.selected_queue(), self.job_status
                field.value = format_filter(
                    JobFilter(queue=queue, statuses=(status,) if status else ())
                )
        else:
            self.filter_mode = "rows"
            field.placeholder = ROWS_PROMPT
            field.border_title = None
            field.value = self.filter_text
        field.cursor_position = len(field.value)
        field.add_class("open")
        field.focus()
        # once shown: the cursor at the end, scrolled for the field's real width
        self.call_after_refresh(field.action_home)
        self.call_after_refresh(field.action_end)

    def set_job_filter(self, where: JobFilter | None) -> None:
        """The Jobs view lists `where`'s jobs (None: the selected queue by status again)."""
        self.job_filter = where
        self._render_jobs_bar()
        self.post_message(JobsRequested())

    def on_input_changed(self, event: Input.Changed) -> None:
        if self.filter_mode == "jobs":
            return
        self.filter_text = event.value
        self._apply_filter()
        self.render_status_line()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.filter_mode == "jobs":
            try:
                where = parse_filter(event.value)
            except FilterError as exc:
                self.say(f"bad filter: {exc}", "bold red")
                return  # the field stays open to be corrected
            self.set_job_filter(where)
            self.say(f"jobs matching {format_filter(where) or 'all jobs'}")
        event.input.remove_class("open")
        self._active_view_widget().focus()

    def action_clear_filter(self) -> None:
        field = self.query_one(Input)
        field.value = ""
        field.remove_class("open")
        if self.filter_mode == "jobs" or (
            self.active_view() == "jobs" and self.job_filter is not None
        ):
            self.filter_mode = "rows"
            if self.job_filter is not None:
                self.set_job_filter(None)
        else:
            self.filter_text = ""
            self._apply_filter()
        self.render_status_line()
        self._active_view_widget().focus()

    def _active_view_widget(self) -> KeyedTable | LogPanel | HealthPanel:
        if self.active_view() == "log":
            return self.query_one(LogPanel)
        if self.active_view() == "health":
            stuck = self.query_one(StuckTable)
            return stuck if stuck.display else self.query_one(HealthPanel)
        return self._active_table() or self.query_one(LeasesTable)

    def _active_table(self) -> KeyedTable | None:
        view = self.active_view()
        if view == "log":
            return None
        if view == "health":
            return self.query_one(StuckTable)
        table: KeyedTable = self.query_one(f"#{view}-table", KeyedTable)
        return table

    def _apply_filter(self) -> None:
        active = self._active_table()
        for table in self.query(KeyedTable):
            if table.id == "queues":
                continue
            rows = table is active and table.id != "jobs-table"  # Jobs: filtered by the server
            table.set_filter(self.filter_text if rows else "")
        self._render_tab_labels()

    def data_refreshed(self) -> None:
        return None
