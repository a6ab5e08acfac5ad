"""One job: where it stands (its progress, parents and children), its last error, its result,
the traceback of its last failed attempt, its payload as highlighted JSON, and its fence
history (`/` filters the history).

Every piece of database text is shown through `humanize.db_text` (never markup, never a
control character); a payload longer than PAYLOAD_CHARS shows its first part only."""

from __future__ import annotations

import json
from typing import cast

from rich.highlighter import JSONHighlighter
from rich.table import Table
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Input, Static

from pgq_core import JobDetail, JobEvent, JobLink, JobNotFound, PgqError

from .. import humanize
from ..host import Host
from ..source import Disconnected
from ..state import MESSAGE_SECONDS, urgency
from ..widgets.fence import fence_style, fence_text
from ..widgets.jobs_table import STATUS_STYLE
from ..widgets.keys_footer import KeysFooter
from ..widgets.leases_table import lease_left_text, progress_cell
from ..widgets.status_header import StatusHeader
from ..widgets.timeline import EVENTS, timeline

#: characters of a payload's JSON text shown
PAYLOAD_CHARS = 64 * 1024
#: characters of the last error shown (a traceback's worth; `pgq show --full` has it all)
ERROR_CHARS = 4000
#: characters of a result's JSON text shown (`pgq show --json` has it all)
RESULT_CHARS = 16 * 1024
#: parents and children listed each (the job's read holds at most ops.LINKS_LIMIT)
LINKS_SHOWN = 8


def links(items: list[JobLink], total: int) -> Text:
    """A job's parents or children, one a line: id, status, queue; past LINKS_SHOWN, how many
    more (`pgq show --json` lists them)."""
    text = Text()
    for n, link in enumerate(items[:LINKS_SHOWN]):
        if n:
            text.append("\n")
        text.append(str(link.id), style="bold")
        status = link.status or "gone"
        text.append(f" {status}", style=STATUS_STYLE.get(status, "grey50"))
        if link.queue is not None:
            text.append(" ")
            text.append_text(humanize.db_text(link.queue, style="grey62"))
    if total > min(len(items), LINKS_SHOWN):
        text.append(f"\n… and {humanize.count(total - min(len(items), LINKS_SHOWN))} more",
                    style="grey50")
    return text


def facts(job: JobDetail, now: float, lease: tuple[float, float | None] | None = None) -> Table:
    """`lease`: (seconds left now, length) from the leases read every second, when known."""
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
        left, length = lease if lease is not None else (
            job.lease_until.timestamp() - now, job.lease_seconds
        )
        of = f" of {humanize.duration(length)}" if length else ""
        level = urgency(left, length)
        table.add_row(
            "lease",
            Text(
                f"{lease_left_text(left)} left{of}",
                style="bold yellow" if level == "low" else "",
            )
            if level != "expired"
            else Text(" expired, awaiting the reaper ", style="bold white on red"),
        )
    if job.progress_done is not None:
        cell = progress_cell(job.progress_done, job.progress_total, job.progress_note, 12, 24)
        if job.progress_at is not None:
            cell.append(f" · {humanize.ago(now - job.progress_at.timestamp())}", style="grey50")
        table.add_row("progress", cell)
    if job.claimed_at is not None:
        table.add_row("claimed", humanize.ago(now - job.claimed_at.timestamp()))
    if job.finished_at is not None:
        table.add_row("finished", humanize.ago(now - job.finished_at.timestamp()))
    if job.parents_total:
        table.add_row("waits for", links(job.parents, job.parents_total))
    if job.children_total:
        table.add_row("dependents", links(job.children, job.children_total))
    return table


def last_error(job: JobDetail) -> Text:
    """The error, past ERROR_CHARS cut, with the whole size said."""
    if not job.last_error:
        return Text("none", style="grey50")
    error = job.last_error
    text = humanize.db_text(error[:ERROR_CHARS], multiline=True, style="red")
    if len(error) > ERROR_CHARS:
        text.append(
            f"\n… cut: {humanize.count(len(error))} characters in all"
            f" (pgq show {job.id} --full)",
            style="bold yellow",
        )
    return text


def _json(value: object, limit: int, whole: str) -> Text:
    """`value` as indented, highlighted JSON; past `limit` characters cut, the whole size said
    and where to read it all (`whole`)."""
    shown = json.dumps(value, default=str, indent=2, ensure_ascii=False)
    cut = len(shown) > limit
    text = humanize.db_text(shown[:limit] if cut else shown, multiline=True)
    JSONHighlighter().highlight(text)
    if cut:
        text.append(
            f"\n… cut: {humanize.count(len(shown))} characters in all ({whole})",
            style="bold yellow",
        )
    return text


def payload(job: JobDetail) -> Text:
    """Indented, highlighted JSON; past PAYLOAD_CHARS cut, with the whole size said."""
    return _json(job.payload, PAYLOAD_CHARS, "pgq show --full")


def last_traceback(job: JobDetail) -> JobEvent | None:
    """The history row of the latest attempt that failed with a traceback, or None."""
    return next((e for e in reversed(job.history) if e.traceback), None)


def result(job: JobDetail) -> Text:
    """What the handler returned, as highlighted JSON; past RESULT_CHARS cut, size said."""
    return _json(job.result, RESULT_CHARS, f"pgq show {job.id} --json")


def details(job: JobDetail) -> tuple[str, Text]:
    """The right-hand box: its title and its sections (the result if any, the last failed
    attempt's traceback if any, then the payload)."""
    titles: list[str] = []
    text = Text()
    if job.result is not None:
        titles.append("result")
        text.append("result\n", style="bold")
        text.append_text(result(job))
        text.append("\n\n")
    failed = last_traceback(job)
    if failed is not None and failed.traceback:
        titles.append("traceback")
        text.append(f"traceback · attempt at fence {failed.fence}\n", style="bold")
        text.append_text(humanize.db_text(failed.traceback, multiline=True, style="red"))
        text.append("\n\n")
    titles.append("payload")
    if len(titles) > 1:
        text.append("payload\n", style="bold")
    text.append_text(payload(job))
    return " · ".join(titles), text


def matches(event: JobEvent, needle: str) -> bool:
    """Case-insensitive: the event, its label, fence, worker or detail contains `needle`."""
    label = EVENTS.get(event.event, ("", event.event, ""))[1]
    hay = " ".join(
        (event.event, label, f"fence {event.fence}", event.worker or "", event.detail or "")
    )
    return needle.lower() in hay.lower()


class JobDetailScreen(Screen[None]):
    """Reloads the job on every dashboard refresh, so it stays live while open."""

    CSS_PATH = "job_detail.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("backspace", "app.pop_screen", "Back", show=False),
    ]

    def __init__(self, job_id: int) -> None:
        super().__init__()
        self.job_id = job_id
        self.job: JobDetail | None = None
        self.filter_text = ""
        self.message = Text("")
        self.message_until = 0.0

    @property
    def host(self) -> Host:
        return cast(Host, self.app)

    def compose(self) -> ComposeResult:
        yield StatusHeader()
        yield Static(f"job {self.job_id}", id="job-title")
        yield Static(id="job-error")
        with Horizontal(id="job-body"):
            with VerticalScroll(id="facts-box"):
                yield Static(id="facts")
            with VerticalScroll(id="payload-box"):
                yield Static(Text("loading…", style="grey50"), id="payload")
        with VerticalScroll(id="history-box"):
            yield Static(id="history")
        yield Input(
            placeholder="filter the history (Enter keeps it, Esc clears)",
            id="filter",
            restrict=humanize.TYPED_TEXT,
        )
        yield Static(id="status-line")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#payload-box").border_title = "payload"
        self.query_one("#facts-box").border_title = "state"
        self.query_one("#history-box").border_title = "fence history"
        self.query_one(Input).cursor_blink = self.host.blink
        self.query_one(StatusHeader).show(self.host.header_state(), self.host.clock())
        self.reload()

    def selected_job(self) -> tuple[int, str, str] | None:
        if self.job is None:
            return None
        return (self.job.id, self.job.status, self.job.queue)

    def data_refreshed(self) -> None:
        self.reload()

    def tick(self, now: float) -> None:
        """The lease countdown and ages move on between reloads."""
        if self.job is not None:
            self.query_one("#facts", Static).update(
                facts(self.job, now, self.host.lease_left(self.job.id))
            )
        self.render_status_line()

    @work(group="job-detail", exclusive=True, exit_on_error=False)
    async def reload(self) -> None:
        try:
            job = await self.host.source.job(self.job_id)
        except JobNotFound:
            self.query_one("#payload", Static).update(
                Text(f"job {self.job_id} no longer exists (pruned)", style="yellow")
            )
            return
        except (Disconnected, PgqError) as exc:
            self.host.alert(str(exc), title="could not load the job", severity="error")
            return
        self.show(job)

    def show(self, job: JobDetail) -> None:
        self.job = job
        now = self.host.clock()
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
        box_title, body = details(job)
        self.query_one("#payload-box").border_title = box_title
        self.query_one("#payload", Static).update(body)
        self.query_one("#facts", Static).update(facts(job, now, self.host.lease_left(job.id)))
        self.query_one("#job-error", Static).update(
            Text.assemble(("last error ", "grey62"), last_error(job))
        )
        self._render_history()

    def _render_history(self) -> None:
        if self.job is None:
            return
        history = self.job.history
        needle = self.filter_text
        shown = [e for e in history if matches(e, needle)] if needle else history
        box = self.query_one("#history-box")
        box.border_title = (
            f"fence history · {len(shown)} of {len(history)} events match /{self.filter_text}"
            if self.filter_text
            else "fence history"
        )
        width = self.size.width or 80
        start = history[0].at if history else None
        self.query_one("#history", Static).update(timeline(shown, width - 4, start))

    def on_resize(self, event: events.Resize) -> None:
        self._render_history()

    # status line and filter -------------------------------------------------------------
    def say(self, message: str, style: str = "") -> None:
        self.message = humanize.db_text(message, style=style)
        self.message_until = self.host.clock() + MESSAGE_SECONDS
        self.render_status_line()

    def render_status_line(self) -> None:
        line = Text(no_wrap=True, overflow="ellipsis")
        if self.filter_text:
            line.append(" filter ", style="grey62")
            line.append_text(humanize.db_text(f"/{self.filter_text}", style="bold yellow"))
        if self.message.plain and self.host.clock() < self.message_until:
            line.append(" · " if line.plain else " ", style="grey62")
            line.append_text(self.message)
        self.query_one("#status-line", Static).update(line)

    def open_filter(self) -> None:
        field = self.query_one(Input)
        field.value = self.filter_text
        field.add_class("open")
        field.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._render_history()
        self.render_status_line()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.remove_class("open")
        self.query_one("#history-box").focus()

    def action_back(self) -> None:
        """Esc: clears the history filter first, then goes back."""
        field = self.query_one(Input)
        if self.filter_text or field.has_class("open"):
            field.value = ""
            self.filter_text = ""
            field.remove_class("open")
            self._render_history()
            self.render_status_line()
            self.query_one("#history-box").focus()
            return
        self.app.pop_screen()
