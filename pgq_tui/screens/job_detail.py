"""One job: payload as highlighted JSON, where it stands, last error, and its fence history.

Every piece of database text is shown through `humanize.db_text` (never markup, never a
control character); a payload longer than PAYLOAD_CHARS shows its first part only."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

from rich.highlighter import JSONHighlighter
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from pgq_core import JobDetail, JobNotFound, PgqError

from .. import humanize
from ..source import Disconnected
from ..widgets.fence import fence_style, fence_text
from ..widgets.jobs_table import STATUS_STYLE
from ..widgets.status_header import StatusHeader
from ..widgets.timeline import timeline

if TYPE_CHECKING:
    from ..app import DashboardApp

#: characters of a payload's JSON text shown
PAYLOAD_CHARS = 64 * 1024


def facts(job: JobDetail, now: float) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="grey62", justify="right")
    table.add_column()
    status = job.status
    if status == "ready" and job.run_at.timestamp() > now:
        status = "scheduled"
    table.add_row("status", Text(status, style=STATUS_STYLE.get(status, "")))
    table.add_row("queue", humanize.db_text(job.queue))
    table.add_row(
        "attempts",
        Text(f"{job.attempts} of {job.max_attempts}", style="yellow" if job.attempts > 1 else ""),
    )
    table.add_row("fence", fence_text(job.fence))
    table.add_row("worker", humanize.db_text(job.worker or "—"))
    if job.unique_key is not None:
        table.add_row("unique key", humanize.db_text(job.unique_key))
    table.add_row("queued", humanize.ago(now - job.queued_at.timestamp()))
    if job.status == "ready":
        due = job.run_at.timestamp() - now
        table.add_row("due", f"in {humanize.duration(due)}" if due > 0 else humanize.ago(-due))
    if job.status == "running" and job.lease_until is not None:
        left = job.lease_until.timestamp() - now
        lease = f" of {humanize.duration(job.lease_seconds)}" if job.lease_seconds else ""
        table.add_row(
            "lease",
            Text(f"{humanize.duration(left)} left{lease}")
            if left >= 0
            else Text(" expired, awaiting the reaper ", style="bold white on red"),
        )
    if job.claimed_at is not None:
        table.add_row("claimed", humanize.ago(now - job.claimed_at.timestamp()))
    if job.finished_at is not None:
        table.add_row("finished", humanize.ago(now - job.finished_at.timestamp()))
    return table


def last_error(job: JobDetail) -> Text:
    if not job.last_error:
        return Text("none", style="grey50")
    return humanize.db_text(job.last_error, multiline=True, style="red")


def payload(job: JobDetail) -> Text:
    """Indented, highlighted JSON; past PAYLOAD_CHARS cut, with the whole size said."""
    shown = json.dumps(job.payload, default=str, indent=2, ensure_ascii=False)
    cut = len(shown) > PAYLOAD_CHARS
    text = humanize.db_text(shown[:PAYLOAD_CHARS] if cut else shown, multiline=True)
    JSONHighlighter().highlight(text)
    if cut:
        text.append(
            f"\n… cut: {humanize.count(len(shown))} characters in all (pgq show --full)",
            style="bold yellow",
        )
    return text


class JobDetailScreen(Screen[None]):
    """Reloads the job on every dashboard refresh, so it stays live while open."""

    CSS_PATH = "job_detail.tcss"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("backspace", "app.pop_screen", "Back", show=False),
    ]

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id
        self.job: JobDetail | None = None

    @property
    def dashboard(self) -> DashboardApp:
        return cast("DashboardApp", self.app)

    def compose(self) -> ComposeResult:
        yield StatusHeader()
        yield Static(f"job {self.job_id}", id="job-title")
        with Horizontal(id="job-body"):
            with VerticalScroll(id="payload-box"):
                yield Static(Text("loading…", style="grey50"), id="payload")
            with VerticalScroll(id="facts-box"):
                yield Static(id="facts")
                yield Static(id="error")
        with VerticalScroll(id="history-box"):
            yield Static(id="history")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#payload-box").border_title = "payload"
        self.query_one("#facts-box").border_title = "state · last error"
        self.query_one("#history-box").border_title = "fence history"
        self.dashboard.sync_header(self.query_one(StatusHeader))
        self.reload()

    def selected_job(self) -> tuple[int, str, str] | None:
        if self.job is None:
            return None
        return (self.job.id, self.job.status, self.job.queue)

    def data_refreshed(self) -> None:
        self.reload()

    @work(group="job-detail", exclusive=True, exit_on_error=False)
    async def reload(self) -> None:
        try:
            job = await self.dashboard.source.job(self.job_id)
        except JobNotFound:
            self.query_one("#payload", Static).update(
                Text(f"job {self.job_id} no longer exists (pruned)", style="yellow")
            )
            return
        except (Disconnected, PgqError) as exc:
            self.dashboard.alert(str(exc), title="could not load the job", severity="error")
            return
        self.show(job)

    def show(self, job: JobDetail) -> None:
        self.job = job
        now = self.dashboard.clock()
        title = Text.assemble(
            (f" job {job.id} ", "bold black on #5fafff"),
            ("  queue ", "grey62"),
            humanize.db_text(job.queue),
            ("  ·  ", "grey62"),
            (job.status, STATUS_STYLE.get(job.status, "")),
            ("  ·  fence ", "grey62"),
            (str(job.fence), fence_style(job.fence)),
        )
        self.query_one("#job-title", Static).update(title)
        self.query_one("#payload", Static).update(payload(job))
        self.query_one("#facts", Static).update(facts(job, now))
        self.query_one("#error", Static).update(
            Text.assemble(("\nlast error\n", "grey62"), last_error(job))
        )
        self.query_one("#history", Static).update(timeline(job.history))
