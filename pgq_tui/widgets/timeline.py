"""A job's fence history as a timeline: who held which fence, and what each write did."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC

from rich.text import Text

from pgq_core import JobEvent

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
    "stale": ("⚠", "stale write rejected", "bold white on red"),
}


_RETRY_AT = re.compile(r"\(retry at \d{4}-\d\d-\d\d (\d\d:\d\d:\d\d)(?:\.\d+)?[^)]*\)")


def short_detail(detail: str) -> str:
    """Full timestamps inside a detail shortened to the time of day (the date is the event's)."""
    return _RETRY_AT.sub(r"(retry at \1)", detail)


def timeline(history: Sequence[JobEvent]) -> Text:
    """One line per event, oldest first: UTC time, offset from the first event, event, fence,
    worker, detail. Claims bump the fence; a stale write carries the old fence it tried."""
    text = Text()
    if not history:
        return Text("no history recorded", style="grey50")
    start = history[0].at
    for i, event in enumerate(history):
        marker, label, style = EVENTS.get(event.event, ("·", event.event, ""))
        offset = (event.at - start).total_seconds()
        if i:
            text.append("\n")
        text.append(event.at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3], style="grey62")
        text.append(f" {'+' + humanize.duration(offset) if i else '':>8} ", style="grey50")
        text.append(f"{marker} ", style=style)
        text.append(f"{label:<21}", style=style)
        text.append(" fence ", style="grey50")
        text.append(f"{event.fence:<3}")
        text.append(f" {humanize.short_worker(event.worker, 30)}", style="grey70")
        if event.detail:
            text.append(f"  {short_detail(event.detail)}", style="italic grey62")
    return text
