"""A job's fence history as a timeline: who held which fence, and what each write did."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from pgq_core import JobEvent
from pgq_core.text import printable

from .. import humanize

#: event -> (marker, label, style)
EVENTS: dict[str, tuple[str, str, str]] = {
    "enqueued": ("○", "enqueued", "grey70"),
    "claimed": ("▶", "claimed", "bold cyan"),
    "completed": ("✔", "completed", "bold green"),
    "failed": ("✗", "failed, retry", "yellow"),
    "dead": ("☠", "dead", "bold red"),
    "reaped": ("⟲", "reaped", "bold yellow"),
    "requeued": ("↺", "requeued", "bold blue"),
    "killed": ("✖", "killed", "bold magenta"),
    "released": ("⇠", "released", "blue"),
    "snoozed": ("◔", "snoozed", "cyan"),
    "stale": ("⚠", "stale write rejected", "bold white on red"),
    "unblocked": ("⇢", "unblocked: parents done", "bold"),
    "parent died": ("☠", "parent died", "red"),
}


_RETRY_AT = re.compile(r"\(retry at \d{4}-\d\d-\d\d (\d\d:\d\d:\d\d)(?:\.\d+)?[^)]*\)")


def short_detail(detail: str) -> str:
    """Full timestamps inside a detail shortened to the time of day (the date is the event's)."""
    return _RETRY_AT.sub(r"(retry at \1)", detail)


#: below this many cells a detail goes on its own line under its event (beside it, it would
#: be squeezed to a character per line)
WIDE = 120


def event_line(event: JobEvent, start: datetime, first: bool, worker_width: int = 30) -> Text:
    """An event without its detail: UTC time, offset from the first event, event, fence,
    worker."""
    marker, label, style = EVENTS.get(event.event, ("·", printable(event.event), ""))
    offset = (event.at - start).total_seconds()
    text = Text(no_wrap=True)
    text.append(event.at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3], style="grey62")
    text.append(f" {'' if first else '+' + humanize.duration(offset):>8} ", style="grey50")
    text.append(f"{marker} ", style=style)
    text.append(f"{label:<21}", style=style)
    text.append(" fence ", style="grey50")
    text.append(f"{event.fence:<3}")
    text.append(f" {humanize.short_worker(event.worker, worker_width)}", style="grey70")
    return text


def timeline(
    history: Sequence[JobEvent], width: int = WIDE, start: datetime | None = None
) -> Table | Text:
    """One row per event, oldest first. At `width` WIDE and more a long detail wraps within
    its own column beside its event; narrower, it wraps on its own lines under its event.
    Claims bump the fence; a stale write carries the old fence it tried. `start`: the time
    offsets count from (the first event's by default)."""
    if not history:
        return Text("no history recorded", style="grey50")
    start = history[0].at if start is None else start
    table = Table.grid(padding=(0, 2))
    if width >= WIDE:
        table.add_column(no_wrap=True)
        table.add_column(overflow="fold")
    else:
        table.add_column(overflow="fold")
    for i, event in enumerate(history):
        detail = humanize.db_text(
            short_detail(event.detail or ""), multiline=True, style="italic grey62"
        )
        first = i == 0 and event.at == start
        if width >= WIDE:
            table.add_row(event_line(event, start, first=first), detail)
        else:
            table.add_row(event_line(event, start, first=first, worker_width=16))
            if detail.plain:
                table.add_row(Padding(detail, (0, 0, 0, 4)))
    return table
