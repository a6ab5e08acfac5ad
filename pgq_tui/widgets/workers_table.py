"""Workers started inside this app, with what each one is doing right now."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from rich.text import Text

from .. import humanize
from .fence import fence_style
from .keyed_table import KeyedTable, Row

STATE_STYLE = {
    "starting": "blue",
    "running": "bold green",
    "disconnected": "bold red",
    "draining": "yellow",
    "stopped": "grey50",
}


class RunningJobView(Protocol):
    """What the table reads of a pgq_core.worker.RunningJob."""

    @property
    def id(self) -> int: ...
    @property
    def queue(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def attempts(self) -> int: ...
    @property
    def started_at(self) -> float: ...


class WorkerView(Protocol):
    """What the table reads of a pgq_core.worker.WorkerSnapshot."""

    @property
    def id(self) -> str: ...
    @property
    def queues(self) -> tuple[str, ...]: ...
    @property
    def state(self) -> str: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def done(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def lost(self) -> int: ...
    @property
    def running(self) -> Sequence[RunningJobView]: ...


def current_jobs(worker: WorkerView, now: float, limit: int = 4) -> Text:
    """Oldest first: "#id fN age", jobs apart by " · "; beyond `limit`, only a count."""
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
            humanize.db_text(", ".join(worker.queues)),
            Text(worker.state, style=STATE_STYLE.get(worker.state, "")),
            Text(f"{busy}/{worker.concurrency}", style="cyan" if busy else "grey50"),
            Text(humanize.count(worker.done), style="green" if worker.done else "grey50"),
            Text(humanize.count(worker.failed), style="red" if worker.failed else "grey50"),
            Text(humanize.count(worker.lost), style="bold yellow" if worker.lost else "grey50"),
            current_jobs(worker, now),
        ],
    )


class WorkersTable(KeyedTable):
    COLUMNS = (
        ("id", "worker", 22),
        ("queues", "queues", 12),
        ("state", "state", 9),
        ("busy", "busy", 5),
        ("done", "done", 7),
        ("failed", "failed", 6),
        ("lost", "lost", 4),
        ("jobs", "current jobs (job, fence, running for)", None),
    )
    RIGHT = frozenset({"busy", "done", "failed", "lost"})

    def show(self, workers: Sequence[WorkerView], now: float) -> None:
        self.sync([worker_row(w, now) for w in workers])
