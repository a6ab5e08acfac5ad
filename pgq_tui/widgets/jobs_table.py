"""Jobs of one queue and status, newest first."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from pgq_core import JobRow

from .. import humanize
from .fence import fence_text
from .keyed_table import KeyedTable, Row

STATUS_STYLE = {
    "ready": "bold",
    "scheduled": "blue",
    "running": "cyan",
    "done": "green",
    "dead": "bold red",
}


def display_status(job: JobRow, now: float) -> str:
    if job.status == "ready" and job.run_at.timestamp() > now:
        return "scheduled"
    return job.status


def when(job: JobRow, now: float) -> str:
    if job.status == "ready":
        due = job.run_at.timestamp() - now
        return f"due in {humanize.duration(due)}" if due > 0 else f"due {humanize.ago(-due)}"
    if job.status == "running" and job.lease_until is not None:
        left = job.lease_until.timestamp() - now
        return f"lease {humanize.duration(left)} left" if left >= 0 else "lease expired"
    if job.finished_at is not None:
        return f"{job.status} {humanize.ago(now - job.finished_at.timestamp())}"
    return f"queued {humanize.ago(now - job.queued_at.timestamp())}"


def job_row(job: JobRow, now: float) -> Row:
    status = display_status(job, now)
    error = (job.last_error or "").splitlines()[0] if job.last_error else ""
    return (
        str(job.id),
        [
            Text(str(job.id)),
            humanize.db_text(job.queue),
            Text(status, style=STATUS_STYLE.get(status, "")),
            Text(
                f"{job.attempts}/{job.max_attempts}",
                style="yellow" if job.attempts > 1 else "",
            ),
            fence_text(job.fence),
            Text(humanize.short_worker(job.worker, 26), style="grey62"),
            Text(when(job, now)),
            humanize.db_text(error, style="red"),
        ],
    )


class JobsTable(KeyedTable):
    COLUMNS = (
        ("id", "job", 8),
        ("queue", "queue", 12),
        ("status", "status", 9),
        ("attempts", "attempt", 7),
        ("fence", "fence", 5),
        ("worker", "worker", 26),
        ("when", "when", 18),
        ("error", "last error", None),
    )
    RIGHT = frozenset({"id", "attempts", "fence"})

    def show(self, jobs: Sequence[JobRow], now: float) -> None:
        self.sync([job_row(job, now) for job in jobs])
