"""What observers read (sql/observer.sql): queues, leases, workers, jobs, a job, its history
and payload preview, error groups. Lists are bounded and long texts cut by the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from ..defaults import LEASE_NOTE_CHARS, LIST_TEXT_CHARS, WORKERS_LIMIT
from ..filters import JobFilter
from ..models import (
    ErrorGroup,
    JobDetail,
    JobEvent,
    JobRow,
    Lease,
    PayloadPreview,
    QueueStats,
    QueueWindow,
    WorkerInfo,
)
from .op import Op, Rows
from .spec import check_queue


def stats(soon: timedelta | None = None) -> Op[list[QueueStats]]:
    """Every queue. `expiring` counts leases with under a third of their length left, or
    under `soon`."""
    params = {"soon": soon, "offset": 0, "limit": None}
    return Op("stats", params, lambda rows: [QueueStats(*r[:-1]) for r in rows])


def stats_window(offset: int, limit: int, soon: timedelta | None = None) -> Op[QueueWindow]:
    """At most `limit` queues by name from the `offset`th (0: the first), and how many there
    are in all (0 when the window starts past the last)."""

    def read(rows: Rows) -> QueueWindow:
        total = int(rows[0][-1]) if rows else 0
        return QueueWindow([QueueStats(*r[:-1]) for r in rows], offset, total)

    return Op("stats", {"soon": soon, "offset": offset, "limit": limit}, read)


def queue_stats(queues: Sequence[str], soon: timedelta | None = None) -> Op[list[QueueStats]]:
    """The `stats` rows of these queues only, by name (a queue with no jobs and no settings
    has none): what an action just changed, read again without reading every queue."""
    params = {"soon": soon, "queues": list(queues)}
    return Op("queue_stats", params, lambda rows: [QueueStats(*r) for r in rows])


def leases(limit: int = 100, note_chars: int = LEASE_NOTE_CHARS) -> Op[list[Lease]]:
    """Running jobs, the lease closest to expiry first; progress notes cut to `note_chars`."""
    params = {"limit": limit, "note_chars": note_chars}
    return Op("leases", params, lambda rows: [Lease(*r) for r in rows])


def workers(limit: int = WORKERS_LIMIT) -> Op[list[WorkerInfo]]:
    """The live workers (rows not expired), oldest first."""
    return Op("workers", {"limit": limit}, lambda rows: [WorkerInfo(*r) for r in rows])


def cut_bytes(text: str | None, size: int | None) -> bool:
    """True when `text` is a cut of a stored text of `size` bytes (UTF-8)."""
    return text is not None and size is not None and len(text.encode("utf-8")) < size


def _job_row(row: tuple[Any, ...]) -> JobRow:
    """A list row: its columns, then last_error's whole size in bytes (the text is cut)."""
    *columns, size = row
    job = JobRow(*columns)
    return replace(
        job, last_error_bytes=size, last_error_truncated=cut_bytes(job.last_error, size)
    )


def jobs(
    queue: str | None = None,
    status: str | None = None,
    limit: int = 50,
    error_chars: int = LIST_TEXT_CHARS,
) -> Op[list[JobRow]]:
    """Of each job's last_error only the first `error_chars` characters (`JobRow`)."""
    return Op(
        "jobs",
        {"queue": queue, "status": status, "limit": limit, "error_chars": error_chars},
        lambda rows: [_job_row(r) for r in rows],
    )


#: Columns of `job` and `job_preview` before the progress (JobDetail's, up to last_error_bytes).
_DETAIL_COLUMNS = 19


def _detail(columns: Sequence[Any]) -> JobDetail:
    """A JobDetail from `job`'s columns: its own, then the four of its progress."""
    head, progress = columns[:_DETAIL_COLUMNS], columns[_DETAIL_COLUMNS:]
    done, total, note, at = progress
    return replace(
        JobDetail(*head), progress_done=done, progress_total=total, progress_note=note,
        progress_at=at,
    )


def job(job_id: int) -> Op[JobDetail | None]:
    return Op("job", {"id": job_id}, lambda rows: _detail(rows[0]) if rows else None)


def history(job_id: int) -> Op[list[JobEvent]]:
    """A job's history, oldest first; a failed attempt's row with its traceback."""
    return Op("history", {"id": job_id}, lambda rows: [JobEvent(*r) for r in rows])


def job_preview(
    job_id: int, chars: int, readable: bool = True
) -> Op[tuple[JobDetail, PayloadPreview] | None]:
    """The job without its payload (`payload` is None) and a bounded preview of it; its
    last_error cut to `chars` characters too. `readable` False: for a role that may not read
    payloads and results, which are then left out (the preview's `readable` is False)."""

    def read(rows: Rows) -> tuple[JobDetail, PayloadPreview] | None:
        if not rows:
            return None
        *columns, text, size = rows[0]
        job = _detail(columns)
        job = replace(job, last_error_truncated=cut_bytes(job.last_error, job.last_error_bytes))
        return job, PayloadPreview(str(text), int(size))

    if not readable:
        return Op("job_preview_unread", {"id": job_id, "chars": chars}, read)
    return Op("job_preview", {"id": job_id, "chars": chars}, read)


def has_jobs(queue: str) -> Op[bool]:
    """Whether `queue` has a job, or had one that completed."""
    check_queue(queue)
    return Op("queue_has_jobs", {"queue": queue}, lambda rows: bool(rows[0][0]))


def retries_waiting(queues: Sequence[str]) -> Op[tuple[int, datetime | None]]:
    """How many failed jobs of `queues` wait for a later retry, and the earliest run_at."""
    return Op(
        "retries_waiting", {"queues": list(queues)}, lambda rows: (int(rows[0][0]), rows[0][1])
    )


def jobs_filtered(
    where: JobFilter, limit: int = 50, error_chars: int = LIST_TEXT_CHARS
) -> Op[list[JobRow]]:
    """As `jobs`: each last_error cut to `error_chars` characters."""

    def read(rows: Rows) -> list[JobRow]:
        return [_job_row(r) for r in rows]

    params = {"limit": limit, "error_chars": error_chars}
    if where.payload and where.live_only():
        return Op("jobs_filtered_live", params, read, where)
    return Op("jobs_filtered", params, read, where)


def count_filtered(where: JobFilter) -> Op[int]:
    return Op("count_filtered", {}, lambda rows: int(rows[0][0]), where)


def errors(
    queue: str | None = None,
    since: timedelta | None = None,
    limit: int = 100,
    error_chars: int = LIST_TEXT_CHARS,
) -> Op[list[ErrorGroup]]:
    """Each group's example error cut to `error_chars` characters (`ErrorGroup`)."""

    def read(rows: Rows) -> list[ErrorGroup]:
        groups = []
        for r in rows:
            (group, pattern, dead, failed, first, last, queues, example, error, size) = r
            groups.append(
                ErrorGroup(
                    group=group,
                    pattern=pattern,
                    dead=dead,
                    failed=failed,
                    first_seen=first,
                    last_seen=last,
                    queues=list(queues),
                    example_id=int(example),
                    example_error=error,
                    example_error_bytes=size,
                    example_error_truncated=cut_bytes(error, size),
                )
            )
        return groups

    params = {"queue": queue, "since": since, "limit": limit, "error_chars": error_chars}
    return Op("errors", params, read)
