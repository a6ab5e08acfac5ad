"""Every live worker: the ones started inside this app, with what each one is doing right now,
and beside them the others that beat their row in `workers` (any process, any host)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from pgq_core import Lease, WorkerInfo

from .. import humanize
from ..state import WorkerView
from .fence import fence_style
from .keyed_table import Column, KeyedTable, Row
from .leases_table import progress_cell

#: cells of a running job's progress bar and note in the Workers view
JOB_BAR = 5
JOB_NOTE_CELLS = 16

STATE_STYLE = {
    "starting": "blue",
    "running": "bold green",
    "disconnected": "bold red",
    "draining": "yellow",
    "stopped": "grey50",
}


def current_jobs(worker: WorkerView, now: float, limit: int = 4) -> Text:
    """Oldest first: "#id fN age" and the progress its handler reported (a bar and the note),
    jobs apart by " · "; beyond `limit`, only a count."""
    text = Text()
    jobs = sorted(worker.running, key=lambda j: j.started_at)
    for i, job in enumerate(jobs[:limit]):
        if i:
            text.append(" · ", style="grey50")
        text.append(f"#{job.id}")
        text.append(" ")
        text.append(f"f{job.fence}", style=fence_style(job.fence))
        text.append(" ")
        text.append(humanize.duration(now - job.started_at), style="grey62")
        p = job.progress
        if p is not None:
            text.append(" ")
            text.append_text(progress_cell(p.done, p.total, p.note, JOB_BAR, JOB_NOTE_CELLS))
    if len(jobs) > limit:
        text.append(f" · +{len(jobs) - limit} more", style="grey50")
    if not jobs:
        text.append("idle", style="grey50")
    return text


def worker_row(worker: WorkerView, now: float) -> Row:
    busy = len(worker.running)
    return (
        worker.id,
        [
            humanize.db_text(worker.id),
            humanize.name_text(", ".join(worker.queues)),
            Text(worker.state, style=STATE_STYLE.get(worker.state, "")),
            Text(f"{busy}/{worker.concurrency}", style="cyan" if busy else "grey50"),
            Text(humanize.count(worker.done), style="green" if worker.done else "grey50"),
            Text(humanize.count(worker.failed), style="red" if worker.failed else "grey50"),
            Text(humanize.count(worker.lost), style="bold yellow" if worker.lost else "grey50"),
            current_jobs(worker, now),
        ],
    )


def live_row(worker: WorkerInfo, leases: Sequence[Lease], limit: int = 4) -> Row:
    """A worker of another process, from its row: its counts as of its last beat, where it
    runs, and the jobs it holds (from the leases read)."""
    busy = worker.running
    held = sorted((x for x in leases if x.worker == worker.id), key=lambda x: x.id)
    jobs = Text()
    for i, lease in enumerate(held[:limit]):
        if i:
            jobs.append(" · ", style="grey50")
        jobs.append(f"#{lease.id} ")
        jobs.append(f"f{lease.fence}", style=fence_style(lease.fence))
    if len(held) > limit:
        jobs.append(f" · +{len(held) - limit} more", style="grey50")
    if held:
        jobs.append("  ")
    jobs.append_text(humanize.db_text(f"{worker.host} pid {worker.pid}", style="grey62"))
    jobs.append(f" · beat {humanize.ago(worker.beat_seconds)}", style="grey50")
    jobs.append_text(humanize.db_text(f" · {worker.version}", style="grey50"))
    return (
        worker.id,
        [
            humanize.db_text(worker.id),
            humanize.name_text(", ".join(worker.queues)),
            Text("elsewhere", style="green"),
            Text(f"{busy}/{worker.concurrency}", style="cyan" if busy else "grey50"),
            Text(humanize.count(worker.done), style="green" if worker.done else "grey50"),
            Text(humanize.count(worker.failed), style="red" if worker.failed else "grey50"),
            Text("—", style="grey50"),
            jobs,
        ],
    )


class WorkersTable(KeyedTable):
    COLUMNS: tuple[Column, ...] = (
        ("id", "worker", 22, 0),
        ("queues", "queues", 12, 3),
        ("state", "state", 9, 0),
        ("busy", "busy", 5, 1),
        ("done", "done", 7, 2),
        ("failed", "failed", 6, 2),
        ("lost", "lost", 4, 4),
        ("jobs", "current jobs (job, fence, running for, progress)", None, 0),
    )
    RIGHT = frozenset({"busy", "done", "failed", "lost"})

    def show(
        self,
        workers: Sequence[WorkerView],
        now: float,
        live: Sequence[WorkerInfo] = (),
        leases: Sequence[Lease] = (),
    ) -> None:
        """This app's `workers`, then the `live` rows of the others (an own worker's row is
        left out: its snapshot is newer)."""
        own = {w.id for w in workers}
        rows = [worker_row(w, now) for w in workers]
        rows += [live_row(w, leases) for w in live if w.id not in own]
        self.sync(rows)
