"""Jobs of one queue and status, newest first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from rich.text import Text

from pgq_core import JobRow
from pgq_core.text import first_line

from .. import humanize
from ..state import Snapshot, urgency
from .fence import fence_text
from .keyed_table import Column, KeyedTable, Row

#: the most characters of an error's first line a row shows (the job screen shows more)
ERROR_CELLS = 160

STATUS_STYLE = {
    "ready": "bold",
    "scheduled": "blue",
    "running": "cyan",
    "done": "green",
    "dead": "bold red",
    "waiting": "magenta",
}


def display_status(job: JobRow, now: float) -> str:
    if job.status == "ready" and job.run_at.timestamp() > now:
        return "scheduled"
    return job.status


def when(job: JobRow, now: float, lease: tuple[float, float | None] | None = None) -> Text:
    """Due, lease left or finished, relative to `now`. For a running job, `lease` is (seconds
    left, lease length) from the leases (re-read every second), when the job is among them."""
    if job.status == "ready":
        due = job.run_at.timestamp() - now
        return Text(
            f"due in {humanize.duration(due)}" if due > 0 else f"due {humanize.ago(-due)}"
        )
    if job.status == "running" and job.lease_until is not None:
        left, length = lease if lease is not None else (job.lease_until.timestamp() - now, None)
        level = urgency(left, length)
        if level == "expired":
            return Text("lease expired", style="bold red")
        return Text(
            f"lease {humanize.duration(left)} left", style="bold yellow" if level == "low" else ""
        )
    if job.finished_at is not None:
        return Text(f"{job.status} {humanize.ago(now - job.finished_at.timestamp())}")
    return Text(f"queued {humanize.ago(now - job.queued_at.timestamp())}")


def job_row(job: JobRow, now: float, lease: tuple[float, float | None] | None = None) -> Row:
    return job_cells(job, display_status(job, now), when(job, now, lease))


def job_cells(job: JobRow, status: str, due: Text) -> Row:
    error = first_line(job.last_error, job.last_error_truncated, ERROR_CELLS)
    return (
        str(job.id),
        [
            Text(str(job.id)),
            humanize.name_text(job.queue),
            Text(status, style=STATUS_STYLE.get(status, "")),
            Text(
                f"{job.attempts}/{job.max_attempts}",
                style="yellow" if job.attempts > 1 else "",
            ),
            fence_text(job.fence),
            Text(humanize.short_worker(job.worker, 26), style="grey62"),
            due,
            humanize.db_text(error, style="red"),
        ],
    )


class JobsTable(KeyedTable):
    COLUMNS: tuple[Column, ...] = (
        ("id", "job", 8, 0),
        ("queue", "queue", 12, 2),
        ("status", "status", 9, 0),
        ("attempts", "attempt", 7, 4),
        ("fence", "fence", 5, 3),
        ("worker", "worker", 26, 5),
        ("when", "when", 18, 1),
        ("error", "last error", None, 0),
    )
    RIGHT = frozenset({"id", "attempts", "fence"})

    def show(self, jobs: Sequence[JobRow], now: float, data: Snapshot | None = None) -> None:
        """`data`: the leases to count a running job's lease down from (else its own row)."""

        def entry(job: JobRow) -> tuple[str, object, Callable[[], Row]]:
            lease = data.lease_of(job.id) if data is not None else None
            left = (
                (data.seconds_left(lease, now), lease.lease_seconds)
                if data is not None and lease is not None
                else None
            )
            status, due = display_status(job, now), when(job, now, left)
            inputs = (job, status, due.plain, str(due.style))
            return str(job.id), inputs, partial(job_cells, job, status, due)

        self.sync_built(entry(job) for job in jobs)
