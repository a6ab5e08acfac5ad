"""Queues: one row per queue, counts updated in place, throughput as a sparkline."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from pgq_core import QueueStats

from .. import humanize
from ..throughput import Throughput
from .keyed_table import KeyedTable, Row

DIM = "grey50"


def number(n: int, style: str = "") -> Text:
    return Text(humanize.count(n), style=style if n else DIM)


def oldest_due(seconds: float | None) -> Text:
    if seconds is None:
        return Text("—", style=DIM)
    style = "bold red" if seconds >= 300 else "yellow" if seconds >= 30 else ""
    return Text(humanize.duration(seconds), style=style)


def queue_cell(stats: QueueStats) -> Text:
    """The queue's name, marked when it is paused (its workers claim nothing)."""
    cell = humanize.db_text(stats.queue, style="bold")
    if stats.paused:
        cell.append(" ⏸ paused", style="bold yellow")
    return cell


def queue_row(stats: QueueStats, throughput: Throughput, now: float) -> Row:
    series = throughput.series(stats.queue, now)
    rate = throughput.rate(stats.queue, now)
    return (
        stats.queue,
        [
            queue_cell(stats),
            number(stats.ready, "bold"),
            number(stats.scheduled, "blue"),
            number(stats.running, "cyan"),
            number(stats.expiring, "bold yellow"),
            number(stats.dead, "bold red"),
            number(stats.done, "green"),
            oldest_due(stats.oldest_due_seconds),
            Text(humanize.rate(rate), style="" if rate else DIM),
            Text(humanize.sparkline(series), style="green"),
        ],
    )


class QueuesTable(KeyedTable):
    """The selected row is the queue every queue action (w, R) and the Jobs view apply to."""

    COLUMNS = (
        ("queue", "queue", None),
        ("ready", "ready", 8),
        ("scheduled", "scheduled", 9),
        ("running", "running", 8),
        ("expiring", "expiring", 8),
        ("dead", "dead", 7),
        ("done", "done", 10),
        ("oldest", "oldest due", 10),
        ("rate", "done/s", 7),
        ("spark", "throughput (2 min)", 24),
    )
    RIGHT = frozenset(
        {"ready", "scheduled", "running", "expiring", "dead", "done", "oldest", "rate"}
    )

    def show(self, stats: Sequence[QueueStats], throughput: Throughput, now: float) -> None:
        self.sync([queue_row(s, throughput, now) for s in stats])
