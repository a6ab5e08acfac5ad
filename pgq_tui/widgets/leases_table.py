"""Leases: running jobs by time left, with a live countdown between reads."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from pgq_core import Lease

from .. import humanize
from ..state import Snapshot, urgency
from .fence import fence_text
from .keyed_table import Column, KeyedTable, Row

__all__ = [
    "LeasesTable", "countdown", "lease_left_text", "lease_row", "progress_cell", "urgency",
]

BAR_WIDTH = 10
#: cells of the progress bar, and of the note beside it (cut with an ellipsis)
PROGRESS_BAR = 8
PROGRESS_NOTE_CELLS = 16
LOW_STYLE = "bold yellow"
EXPIRED_STYLE = "bold white on red"


def lease_left_text(left: float) -> str:
    """Time left to a tenth of a second under a minute (the countdown is read every second
    and must stay within a second of the truth), else as any duration."""
    if abs(left) < 60:
        return f"{abs(left):.1f}s"
    return humanize.duration(left)


def countdown(left: float, length: float | None) -> Text:
    level = urgency(left, length)
    if level == "expired":
        return Text(f" expired {lease_left_text(-left)} ago ", style=EXPIRED_STYLE)
    style = LOW_STYLE if level == "low" else "green"
    filled = round(BAR_WIDTH * left / length) if length else BAR_WIDTH
    filled = max(0, min(BAR_WIDTH, filled))
    text = Text()
    text.append("█" * filled, style=style)
    text.append("░" * (BAR_WIDTH - filled), style="grey30")
    text.append(f" {lease_left_text(left):>6}", style=style)
    return text


def progress_cell(
    done: int | None,
    total: int | None,
    note: str | None,
    bar: int = PROGRESS_BAR,
    note_cells: int = PROGRESS_NOTE_CELLS,
) -> Text:
    """A handler's progress: a bar and its percentage (or a count when the total is unknown),
    then the note as data (escaped, cut to `note_cells`); a dash when none was reported."""
    text = Text()
    if done is None:
        text.append("—", style="grey50")
        return text
    if total:
        filled = max(0, min(bar, bar * done // total))
        text.append("█" * filled, style="cyan")
        text.append("░" * (bar - filled), style="grey30")
        text.append(f" {100 * done // total:>3}%", style="cyan")
    else:
        text.append(f"{humanize.count(done)} done", style="cyan")
    if note:
        shown = humanize.db_text(note, style="grey62")
        if shown.cell_len > note_cells:
            shown.truncate(note_cells, overflow="ellipsis")
        text.append(" ")
        text.append_text(shown)
    return text


def lease_row(lease: Lease, left: float) -> Row:
    level = urgency(left, lease.lease_seconds)
    id_style = {"expired": "bold red", "low": LOW_STYLE}.get(level, "")
    return (
        str(lease.id),
        [
            Text(str(lease.id), style=id_style),
            humanize.name_text(lease.queue),
            countdown(left, lease.lease_seconds),
            Text(humanize.duration(lease.lease_seconds) if lease.lease_seconds else "—"),
            Text(humanize.short_worker(lease.worker, 34)),
            fence_text(lease.fence),
            Text(
                f"{lease.attempts}/{lease.max_attempts}",
                style="yellow" if lease.attempts > 1 else "",
            ),
            progress_cell(lease.progress_done, lease.progress_total, lease.progress_note),
        ],
    )


class LeasesTable(KeyedTable):
    COLUMNS: tuple[Column, ...] = (
        ("id", "job", 8, 0),
        ("queue", "queue", 14, 1),
        ("left", "time left", 19, 0),
        ("length", "lease", 6, 4),
        ("worker", "worker", 34, 3),
        ("fence", "fence", 6, 2),
        ("attempts", "attempt", 7, 5),
        ("progress", "progress", PROGRESS_BAR + 6 + PROGRESS_NOTE_CELLS, 3),
    )
    RIGHT = frozenset({"id", "length", "fence", "attempts"})

    def show(self, data: Snapshot, now: float) -> None:
        """Ordered by time left; since the countdown is uniform, the order is the server's."""
        self.sync([lease_row(x, data.seconds_left(x, now)) for x in data.leases])

    def show_leases(self, leases: Sequence[Lease], lefts: Sequence[float]) -> None:
        self.sync([lease_row(x, left) for x, left in zip(leases, lefts, strict=True)])
