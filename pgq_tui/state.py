"""The dashboard's state as plain data: what a poll brought, how leases count down, what
"expiring" means, and what the header says. Imports no Textual, so every layer may use it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pgq_core import JobRow, Lease, QueueStats, WorkerInfo
from pgq_core.filters import JobFilter
from pgq_core.models import JobProgress, ServerRole

CONNECTED = "connected"
CONNECTING = "connecting"
DISCONNECTED = "disconnected"

#: rows fetched per poll for the Leases and Jobs views
JOBS_LIMIT = 200
#: queues fetched per poll (a window by name around the cursor: the server sends no more)
QUEUES_WINDOW = 100
#: the cursor this close to an end of the window moves the window (when there are more)
QUEUES_EDGE = 10
#: Jobs view status choices, in the order `s` cycles them; None is every status.
JOB_STATUSES: tuple[str | None, ...] = ("dead", "ready", "running", "done", "waiting", None)
#: What the Jobs view lists: (queue, status, None) while browsing a queue by status, or
#: (None, None, filter) for a server-side filter typed at `/`.
JobsQuery = tuple[str | None, str | None, JobFilter | None]
#: the Errors and Health views are read at most this often (and only while shown)
SLOW_REFRESH = 5.0
#: error groups read for the Errors view
ERRORS_LIMIT = 100
#: how long a message stays on the status line
MESSAGE_SECONDS = 15.0

#: The one definition of "expiring", in every view, in help and in the `stats` statement:
#: a lease with under this fraction of its length left (expired leases included).
EXPIRING_FRACTION = 1 / 3


def urgency(left: float, length: float | None) -> str:
    """expired (awaiting the reaper) > low (expiring: under a third of its length) > ok."""
    if left < 0:
        return "expired"
    if length and left < length * EXPIRING_FRACTION:
        return "low"
    return "ok"


def is_expiring(left: float, length: float | None) -> bool:
    return urgency(left, length) != "ok"


@dataclass(frozen=True)
class Snapshot:
    """One poll's worth of data, and when (app clock) it was taken.

    `leases_at` is when the leases were read (they are re-read more often than the rest): a
    lease's `seconds_left` is the server's figure at that moment."""

    stats: list[QueueStats]
    leases: list[Lease]
    jobs: list[JobRow]
    jobs_query: JobsQuery
    polled_at: float
    took: float
    leases_at: float = 0.0
    #: `stats` are the queues from the `queues_offset`th by name, of `queues_total` (0: as
    #: many as `stats` holds)
    queues_offset: int = 0
    queues_total: int = 0
    #: the server the poll read (its address, standby or not, lag, timeline); None: not known
    server: ServerRole | None = None
    #: the live workers' rows (any process's, this app's own included)
    workers: list[WorkerInfo] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.leases_at:
            object.__setattr__(self, "leases_at", self.polled_at)
        if not self.queues_total:
            object.__setattr__(self, "queues_total", self.queues_offset + len(self.stats))

    def with_touched(
        self,
        stats: Sequence[QueueStats],
        jobs: list[JobRow] | None,
        jobs_query: JobsQuery,
        leases: list[Lease] | None,
        at: float,
    ) -> Snapshot:
        """This snapshot with what an action touched, read again after it committed: the
        fresh `stats` replace their queues' rows (a queue not among them keeps its row until
        a poll), `jobs` (read for `jobs_query`) the Jobs view's rows, `leases` (read at `at`)
        the leases; None: not read."""
        fresh = {s.queue: s for s in stats}
        data = replace(self, stats=[fresh.get(s.queue, s) for s in self.stats])
        if jobs is not None:
            data = replace(data, jobs=jobs, jobs_query=jobs_query)
        if leases is not None:
            data = replace(data, leases=leases, leases_at=at)
        return data

    def with_moved(self, queue: str, ids: list[int], was: str, became: str) -> Snapshot:
        """This snapshot once `ids` of `queue` went from status `was` to `became` (ready,
        running or dead; others leave the counts alone): the queue's counts, the jobs' rows and
        (no longer running) their leases."""
        counted = ("ready", "running", "dead")
        moved = set(ids)

        def count(stats: QueueStats) -> QueueStats:
            if stats.queue != queue:
                return stats
            changes: dict[str, Any] = {}
            if was in counted:
                changes[was] = max(0, getattr(stats, was) - len(moved))
            if became in counted:
                changes[became] = getattr(stats, became) + len(moved)
            return replace(stats, **changes)

        jobs = [replace(j, status=became) if j.id in moved else j for j in self.jobs]
        leases = self.leases
        if was == "running":
            leases = [x for x in leases if x.id not in moved]
        return replace(self, stats=[count(s) for s in self.stats], jobs=jobs, leases=leases)

    def seconds_left(self, lease: Lease, now: float) -> float:
        """Time left now, from the server's own figure when read (no client/server skew)."""
        return lease.seconds_left - (now - self.leases_at)

    def lease_of(self, job_id: int) -> Lease | None:
        return next((x for x in self.leases if x.id == job_id), None)

    def leases_complete(self) -> bool:
        """True when every running job is in `leases` (the list was not cut at JOBS_LIMIT)."""
        return len(self.leases) < JOBS_LIMIT

    def expiring(self, queue: str, now: float) -> int:
        """A queue's expiring count now: from the (fresher) leases when they are all here,
        else the server's count from the last poll. Both use EXPIRING_FRACTION."""
        if not self.leases_complete():
            stats = next((s for s in self.stats if s.queue == queue), None)
            return stats.expiring if stats else 0
        return sum(
            1
            for x in self.leases
            if x.queue == queue and is_expiring(self.seconds_left(x, now), x.lease_seconds)
        )


@dataclass(frozen=True)
class HeaderState:
    """What the top line says; set by the app, read by the header widget."""

    database: str = ""
    schema: str = ""
    connection: str = CONNECTING
    problem: str = ""
    paused: bool = False
    read_only: bool = False
    #: seconds since the data on screen was read, when that is older than a refresh
    stale_for: float | None = None
    #: the host the data is read from (`host:port`); empty: not known (nothing is shown)
    host: str = ""
    #: that host is a standby, `lag` seconds behind its primary (None: not known)
    standby: bool = False
    lag: float | None = None
    #: e.g. "primary changed 12:03:07 (timeline 2)", once the dashboard saw a failover
    primary_changed: str = ""
    #: reading a standby: why the primary (the actions, LISTEN) is out of reach, in plain words
    writes: str = ""


@dataclass(frozen=True)
class LogLine:
    """One record of the app's own workers, as logged (escaped only when shown)."""

    at: float
    level: str
    text: str


@dataclass
class LogBook:
    """The last `size` log lines of the app's workers; `unseen_warnings` counts warnings and
    errors that arrived while the Log view was not shown."""

    size: int = 500
    lines: list[LogLine] = field(default_factory=list)
    unseen_warnings: int = 0

    def add(self, line: LogLine, seen: bool) -> None:
        self.lines.append(line)
        del self.lines[: -self.size]
        if not seen and line.level in ("WARNING", "ERROR", "CRITICAL"):
            self.unseen_warnings += 1


class RunningJobView(Protocol):
    """What the Workers view reads of a pgq_core.worker.RunningJob."""

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
    @property
    def progress(self) -> JobProgress | None: ...


class WorkerView(Protocol):
    """What the Workers view reads of a pgq_core.worker.WorkerSnapshot."""

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


def window_offset(offset: int, shown: int, total: int, cursor: int) -> int | None:
    """Where the queues window should start once the cursor is on row `cursor` of the `shown`
    rows of the window at `offset` (of `total` queues): None to stay, else an offset that puts
    the cursor mid-window. The window moves only when the cursor is within QUEUES_EDGE rows of
    an end that has more queues beyond it."""
    near_end = cursor >= shown - QUEUES_EDGE and offset + shown < total
    near_start = cursor < QUEUES_EDGE and offset > 0
    if not (near_end or near_start):
        return None
    start = max(0, min(offset + cursor - QUEUES_WINDOW // 2, total - QUEUES_WINDOW))
    return None if start == offset else start
