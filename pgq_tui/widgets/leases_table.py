"""Leases: running jobs by time left, with a live countdown between polls."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from pgq_core import Lease

from .. import humanize
from .fence import fence_text
from .keyed_table import KeyedTable, Row

BAR_WIDTH = 10


def seconds_left(lease: Lease, polled_at: float, now: float) -> float:
    """Time left now, from the server's own figure at poll time (no client/server clock skew)."""
    return lease.seconds_left - (now - polled_at)


def urgency(left: float, length: float | None) -> str:
    """expired (awaiting the reaper) > low (under a third of its length) > ok."""
    if left < 0:
        return "expired"
    if length and left < length / 3:
        return "low"
    return "ok"


def countdown(left: float, length: float | None) -> Text:
    level = urgency(left, length)
    if level == "expired":
        return Text(f" expired {humanize.duration(-left)} ago ", style="bold white on red")
    style = "bold yellow" if level == "low" else "green"
    filled = round(BAR_WIDTH * left / length) if length else BAR_WIDTH
    filled = max(0, min(BAR_WIDTH, filled))
    text = Text()
    text.append("█" * filled, style=style)
    text.append("░" * (BAR_WIDTH - filled), style="grey30")
    text.append(f" {humanize.duration(left):>6}", style=style)
    return text


def lease_row(lease: Lease, polled_at: float, now: float) -> Row:
    left = seconds_left(lease, polled_at, now)
    level = urgency(left, lease.lease_seconds)
    id_style = {"expired": "bold red", "low": "bold yellow"}.get(level, "")
    return (
        str(lease.id),
        [
            Text(str(lease.id), style=id_style),
            humanize.db_text(lease.queue),
            countdown(left, lease.lease_seconds),
            Text(humanize.duration(lease.lease_seconds) if lease.lease_seconds else "—"),
            Text(humanize.short_worker(lease.worker, 34)),
            fence_text(lease.fence),
            Text(
                f"{lease.attempts}/{lease.max_attempts}",
                style="yellow" if lease.attempts > 1 else "",
            ),
        ],
    )


class LeasesTable(KeyedTable):
    COLUMNS = (
        ("id", "job", 8),
        ("queue", "queue", 14),
        ("left", "time left", 26),
        ("length", "lease", 6),
        ("worker", "worker", 34),
        ("fence", "fence", 6),
        ("attempts", "attempt", 7),
    )
    RIGHT = frozenset({"id", "length", "fence", "attempts"})

    def show(self, leases: Sequence[Lease], polled_at: float, now: float) -> None:
        """Ordered by time left; since the countdown is uniform, the order is the server's."""
        self.sync([lease_row(lease, polled_at, now) for lease in leases])
