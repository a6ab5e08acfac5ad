"""Database health for the queue: its tables (tuples, vacuum, sizes), the transaction holding
back vacuum, NOTIFY queue use and lock waits on jobs; warnings first and highlighted."""

from __future__ import annotations

from datetime import datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from pgq_core.models import Health

from .. import humanize


def _mb(count: int) -> str:
    return f"{count / 2**20:,.1f} MB"


def _when(value: datetime | None, now: float) -> Text:
    if value is None:
        return Text("never", style="grey50")
    return Text(humanize.ago(now - value.timestamp()))


def health_renderable(health: Health | None, now: float, width: int) -> RenderableType:
    if health is None:
        return Text(" reading database health…", style="grey50")
    parts: list[RenderableType] = []
    for warning in health.warnings:
        line = Text(" ⚠ ", style="bold yellow")
        line.append_text(humanize.db_text(warning, style="bold yellow"))
        parts.append(line)
    if not health.warnings:
        parts.append(Text(" no warnings", style="green"))
    narrow = width < 100
    table = Table(box=None, padding=(0, 1), header_style="bold grey62", expand=False)
    columns = ["table", "live", "dead", "vacuumed", "analyzed", "size"]
    if not narrow:
        columns += ["indexes", "total"]
    for col in columns:
        table.add_column(col, justify="left" if col == "table" else "right", no_wrap=True)
    for t in health.tables:
        vacuum = max((v for v in (t.last_vacuum, t.last_autovacuum) if v), default=None)
        analyze = max((v for v in (t.last_analyze, t.last_autoanalyze) if v), default=None)
        dead_share = t.dead_tuples / t.live_tuples if t.live_tuples else 0.0
        cells: list[RenderableType] = [
            humanize.db_text(t.table),
            humanize.count(t.live_tuples),
            Text(humanize.count(t.dead_tuples), style="bold yellow" if dead_share > 0.2 else ""),
            _when(vacuum, now),
            _when(analyze, now),
            _mb(t.table_bytes),
        ]
        if not narrow:
            cells += [_mb(t.index_bytes), _mb(t.total_bytes)]
        table.add_row(*cells)
    parts.append(table)
    x = health.xmin
    line = Text(" xmin holder ", style="bold")
    if x is None:
        line.append("none: no transaction holds back vacuum", style="green")
    else:
        age = "" if x.age_seconds is None else f" open {humanize.duration(x.age_seconds)}"
        line.append(f"pid {x.pid}{age} ", style="bold yellow")
        line.append_text(
            humanize.db_text(f"{x.state or '?'} · {x.user or '?'} · {x.application or '?'}")
        )
        line.append(": ", style="grey62")
        line.append_text(humanize.db_text(x.query, style="grey62"))
    parts.append(line)
    notify = Text(" NOTIFY queue ", style="bold")
    notify.append(
        f"{health.notify_usage:.2%} used", style="bold yellow" if health.notify_usage > 0.5 else ""
    )
    parts.append(notify)
    if not health.lock_waits:
        parts.append(Text.assemble((" lock waits ", "bold"), ("none on jobs", "green")))
    for w in health.lock_waits:
        waited = "" if w.waited_seconds is None else f" {humanize.duration(w.waited_seconds)}"
        by = ", ".join(map(str, w.blocked_by)) or "?"
        wait = Text(" lock wait ", style="bold")
        wait.append(f"pid {w.pid}{waited} blocked by {by} ", style="yellow")
        wait.append_text(
            humanize.db_text(f"{w.mode} ({w.locktype}): {w.query or ''}", style="grey62")
        )
        parts.append(wait)
    return Group(*parts)


class HealthPanel(VerticalScroll, can_focus=True):
    """Scrolls when the readings do not fit."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.health: Health | None = None
        self.now = 0.0

    def compose(self) -> ComposeResult:
        yield Static(Text(" reading database health…", style="grey50"), id="health-body")

    def show(self, health: Health | None, now: float) -> None:
        self.health, self.now = health, now
        self.query_one("#health-body", Static).update(
            health_renderable(health, now, self.size.width or 80)
        )

    def on_resize(self) -> None:
        if self.health is not None:
            self.show(self.health, self.now)
