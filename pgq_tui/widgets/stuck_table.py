"""Stuck jobs, in the Health view: running with their lease still renewed (the worker is
alive) past a factor of their queue's p99 run time and past a floor; the longest first, as
many as the server sent (it bounds the list and counts them all)."""

from __future__ import annotations

from rich.text import Text

from pgq_core.models import StuckJob, StuckJobs

from .. import humanize
from .keyed_table import Column, KeyedTable, Row


def stuck_row(job: StuckJob) -> Row:
    return (
        str(job.id),
        [
            Text(str(job.id), style="bold yellow"),
            humanize.name_text(job.queue),
            Text(humanize.duration(job.running_seconds), style="bold yellow"),
            Text(
                "no history" if job.p99_seconds is None else humanize.duration(job.p99_seconds),
                style="grey50" if job.p99_seconds is None else "",
            ),
            Text(humanize.duration(job.threshold_seconds), style="grey62"),
            Text(humanize.short_worker(job.worker, 34)),
        ],
    )


def stuck_bar(stuck: StuckJobs | None) -> Text:
    """What the list is: how many, the rule, and what Enter does."""
    bar = Text(no_wrap=True, overflow="ellipsis")
    if stuck is None:
        bar.append(" reading stuck jobs…", style="grey50")
        return bar
    rule = (
        f"running past {stuck.factor:g}x their queue's p99 run time "
        f"and {humanize.duration(stuck.floor_seconds)}, lease renewed"
    )
    if not stuck.total:
        bar.append(" no stuck jobs", style="green")
        bar.append(f" ({rule})", style="grey50")
        return bar
    bar.append(
        f" {humanize.count(stuck.total)} stuck job{'' if stuck.total == 1 else 's'}",
        style="bold yellow",
    )
    if len(stuck.jobs) < stuck.total:
        bar.append(f" (the {len(stuck.jobs)} longest shown)", style="yellow")
    bar.append(f" · {rule}", style="grey62")
    bar.append("   Enter open · k kill", style="grey50")
    return bar


class StuckTable(KeyedTable):
    COLUMNS: tuple[Column, ...] = (
        ("id", "job", 8, 0),
        ("queue", "queue", 14, 1),
        ("running", "running for", 11, 0),
        ("p99", "p99", 10, 2),
        ("past", "stuck past", 10, 3),
        ("worker", "worker", 34, 4),
    )
    RIGHT = frozenset({"id", "running", "p99", "past"})

    def show(self, stuck: StuckJobs | None) -> None:
        self.sync([stuck_row(j) for j in (stuck.jobs if stuck is not None else [])])
