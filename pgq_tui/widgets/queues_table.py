"""Queues: one row per queue, counts updated in place, throughput as a sparkline, and the p95
wait of the last 5 minutes with its recent trend (`LatencyTrend`, read on its own schedule)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from rich.text import Text

from pgq_core import QueueStats

from .. import humanize
from ..latency import LatencyTrend
from ..state import Snapshot
from ..throughput import Throughput
from .keyed_table import Column, KeyedTable, Row

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
    cell = humanize.name_text(stats.queue, style="bold")
    if stats.paused:
        cell.append(" ⏸ paused", style="bold yellow")
    return cell


def wait_p95(seconds: float | None) -> Text:
    """The p95 wait: `—` without done jobs in the window (or before the first read)."""
    if seconds is None:
        return Text("—", style=DIM)
    style = "bold red" if seconds >= 60 else "yellow" if seconds >= 5 else ""
    return Text(humanize.duration(seconds), style=style)


def queue_row(
    stats: QueueStats,
    expiring: int,
    throughput: Throughput,
    now: float,
    latency: LatencyTrend | None = None,
) -> Row:
    """`expiring`: running jobs with under a third of their lease left (or expired)."""
    series = throughput.series(stats.queue, now)
    rate = throughput.rate(stats.queue, now)
    wait = latency.p95(stats.queue) if latency is not None else None
    trend = latency.series(stats.queue, now) if latency is not None else []
    return queue_cells(stats, expiring, series, rate, wait, trend)


def queue_cells(
    stats: QueueStats,
    expiring: int,
    series: list[float],
    rate: float,
    wait: float | None = None,
    trend: list[float] | None = None,
) -> Row:
    return (
        stats.queue,
        [
            queue_cell(stats),
            number(stats.ready, "bold"),
            number(stats.scheduled, "blue"),
            number(stats.running, "cyan"),
            number(expiring, "bold yellow"),
            number(stats.dead, "bold red"),
            number(stats.done, "green"),
            oldest_due(stats.oldest_due_seconds),
            Text(humanize.rate(rate), style="" if rate else DIM),
            Text(humanize.sparkline(series), style="green"),
            wait_p95(wait),
            Text(humanize.sparkline(trend or []), style="yellow"),
        ],
    )


class QueuesTable(KeyedTable):
    """The selected row is the queue every queue action (w, R) and the Jobs view apply to."""

    COLUMNS: tuple[Column, ...] = (
        ("queue", "queue", None, 0),
        ("ready", "ready", 8, 0),
        ("scheduled", "scheduled", 9, 3),
        ("running", "running", 8, 1),
        ("expiring", "expiring", 8, 2),
        ("dead", "dead", 7, 0),
        ("done", "done", 10, 4),
        ("oldest", "oldest due", 10, 1),
        ("rate", "done/s", 7, 5),
        ("spark", "throughput (2 min)", 24, 6),
        ("wait", "wait p95", 8, 3),
        ("waitspark", "p95 wait (2 min)", 16, 7),
    )
    RIGHT = frozenset(
        {"ready", "scheduled", "running", "expiring", "dead", "done", "oldest", "rate", "wait"}
    )

    def show(
        self,
        data: Snapshot,
        throughput: Throughput,
        now: float,
        latency: LatencyTrend | None = None,
    ) -> None:
        """Rows are built again only for queues whose figures changed (`sync_built`)."""

        def entry(s: QueueStats) -> tuple[str, object, Callable[[], Row]]:
            expiring = data.expiring(s.queue, now)
            series = throughput.series(s.queue, now)
            rate = throughput.rate(s.queue, now)
            wait = latency.p95(s.queue) if latency is not None else None
            trend = latency.series(s.queue, now) if latency is not None else []
            inputs = (s, expiring, tuple(series), rate, wait, tuple(trend))
            return s.queue, inputs, partial(queue_cells, s, expiring, series, rate, wait, trend)

        self.sync_built(entry(s) for s in data.stats)
