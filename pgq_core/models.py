"""Plain records the queue hands out. None of them holds a connection."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

#: `waiting`: a job with dependencies (`JobSpec.depends_on`) whose parents are not all done.
STATUSES = ("ready", "running", "done", "dead", "waiting")


@dataclass(frozen=True)
class Job:
    """A claimed job: what a handler gets. `fence` is the token every write must carry."""

    id: int
    queue: str
    payload: Any
    fence: int
    attempts: int
    max_attempts: int
    lease_until: datetime
    #: the enqueue's W3C trace context (`tracing`), when it had one
    trace: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class FailedOver:
    """What `hand_back_failed_over` found: the server's timeline, and the jobs it handed back
    because their fence came from an older one (claimed before a promotion)."""

    timeline: int
    released: list[int]


@dataclass(frozen=True)
class Settled:
    """What a write to several jobs did, job by job: `applied`, or `lost` (a stale fence:
    another claim holds the job). A worker's own writes also report `busy` (the row was
    locked, nothing written: try again) and `already_done` (an earlier completion had
    committed). Every job is in exactly one list.
    """

    applied: list[int]
    lost: list[int]
    busy: list[int] = field(default_factory=list)
    already_done: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class QueueStats:
    """One queue's jobs by status (`expiring`: running with under a third of the lease left;
    `completed`: done ever), the age of its oldest due job, and its pause and limit."""

    queue: str
    ready: int
    scheduled: int
    running: int
    expiring: int
    dead: int
    done: int
    completed: int
    oldest_due_seconds: float | None
    paused: bool = False
    limit: int | None = None
    paused_at: datetime | None = None
    paused_by: str | None = None
    pause_reason: str | None = None
    #: jobs waiting for their parents (`JobSpec.depends_on`)
    waiting: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QueueWindow:
    """The queues a view shows: `stats` of the queues from the `offset`th by name (0: the
    first), out of `total` queues in all."""

    stats: list[QueueStats]
    offset: int
    total: int


@dataclass(frozen=True)
class Lease:
    """A running job's lease: who holds it, with which fence, and how long it has left."""

    id: int
    queue: str
    worker: str | None
    fence: int
    attempts: int
    max_attempts: int
    lease_until: datetime
    seconds_left: float
    lease_seconds: float | None
    #: what its handler last reported (`JobContext.progress`; None: nothing yet this attempt);
    #: `progress_note` cut to `ops.LEASE_NOTE_CHARS` characters
    progress_done: int | None = None
    progress_total: int | None = None
    progress_note: str | None = None
    progress_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def progress_text(done: int, total: int | None) -> str:
    """`40 of 100 (40%)`, or `40 done` when the total is unknown."""
    if total is None:
        return f"{done:,} done"
    return f"{done:,} of {total:,} ({int(100 * done / total)}%)"


@dataclass(frozen=True)
class JobProgress:
    """A running job's progress as its handler reported it (`JobContext.progress`): `done` of
    `total` (None: unknown), a short `note`, and `age`: seconds since it was reported (what the
    heartbeat that writes it sends, so the row says when it was reported, by the server's clock).
    """

    done: int
    total: int | None = None
    note: str | None = None
    age: float = 0.0


@dataclass(frozen=True)
class JobRow:
    """A job as `Queue.jobs` lists it: everything but the payload, and only the start of
    `last_error`: `last_error_bytes` is the whole error's size and `last_error_truncated`
    says it was cut (`Queue.job` has it all)."""

    id: int
    queue: str
    status: str
    attempts: int
    max_attempts: int
    fence: int
    run_at: datetime
    lease_until: datetime | None
    worker: str | None
    last_error: str | None
    queued_at: datetime
    finished_at: datetime | None
    priority: int = 0
    unique_key: str | None = None
    last_error_bytes: int | None = None
    last_error_truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WorkerInfo:
    """A live worker, as it last said in its beat (`pgq workers`, the dashboard)."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    version: str
    started_at: datetime
    beat_at: datetime
    #: jobs its handlers were running, and its jobs done and failed since it started
    running: int
    done: int
    failed: int
    #: seconds since it started and since its last beat, on the database's clock
    up_seconds: float
    beat_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobEvent:
    """One row of a job's fence history."""

    at: datetime
    event: str
    fence: int
    worker: str | None
    detail: str | None
    #: a failed attempt's traceback (bounded, the cut shown); None on other rows
    traceback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobDetail:
    """One job, whole: its row, payload and result, its history, its parents and children
    (the first of each, and how many), and its latest progress."""

    id: int
    queue: str
    status: str
    payload: Any
    run_at: datetime
    attempts: int
    max_attempts: int
    lease_until: datetime | None
    fence: int
    last_error: str | None
    queued_at: datetime
    worker: str | None
    claimed_at: datetime | None
    lease_seconds: float | None
    finished_at: datetime | None
    priority: int = 0
    #: what the handler returned (JSON), stored with its completion
    result: Any = None
    unique_key: str | None = None
    #: the whole last_error's size in bytes; `last_error_truncated`: `last_error` is its start
    #: (a bounded read, `ops.job_preview`)
    last_error_bytes: int | None = None
    last_error_truncated: bool = False
    history: list[JobEvent] = field(default_factory=list)
    #: the jobs this one waits for and the jobs waiting for it, lowest id first, at most
    #: `ops.LINKS_LIMIT` of each; the totals count them all
    parents: list[JobLink] = field(default_factory=list)
    parents_total: int = 0
    children: list[JobLink] = field(default_factory=list)
    children_total: int = 0
    #: what its handler last reported (`JobContext.progress`): done of total (None: unknown),
    #: a short note, and when; kept after the job ends, cleared by its next claim
    progress_done: int | None = None
    progress_total: int | None = None
    progress_note: str | None = None
    progress_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobLink:
    """A job's parent or child: its id, queue and status (None: deleted since)."""

    id: int
    queue: str | None
    status: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Enqueued:
    """What one enqueued spec became: the job's id, and whether this enqueue inserted it
    (False: a ready or running job already held the spec's unique key, and `id` is that job)."""

    id: int
    inserted: bool

    @property
    def duplicate(self) -> bool:
        return not self.inserted


@dataclass(frozen=True)
class Schedule:
    """A periodic job: `cron` (UTC; 5 fields, or 6 with seconds first) enqueues `payload` on
    `queue`. `last_slot` is the latest slot enqueued (None: none yet); `next_slot` is computed
    from the cron expression (None when it never fires again or cannot be parsed)."""

    name: str
    queue: str
    cron: str
    payload: Any
    max_attempts: int
    created_at: datetime
    last_slot: datetime | None
    next_slot: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ErrorGroup:
    """Failed (ready, waiting to retry) and dead jobs whose errors differ only in ids, numbers,
    quoted values and URLs. `group` is the id `--error-group` takes; `example_id` is the
    group's newest job and `example_error` the first characters of its error
    (`ops.LIST_TEXT_CHARS`): `example_error_bytes` is the whole error's size in bytes and
    `example_error_truncated` says it was cut."""

    group: str
    pattern: str
    dead: int
    failed: int
    first_seen: datetime
    last_seen: datetime
    queues: list[str]
    example_id: int
    example_error: str
    example_error_bytes: int = 0
    example_error_truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TableHealth:
    table: str
    live_tuples: int
    dead_tuples: int
    last_vacuum: datetime | None
    last_autovacuum: datetime | None
    last_analyze: datetime | None
    last_autoanalyze: datetime | None
    table_bytes: int
    index_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class XminHolder:
    """The session holding back the xmin horizon; `query` is its first 80 characters."""

    pid: int
    age_seconds: float | None
    state: str | None
    database: str | None
    user: str | None
    application: str | None
    query: str | None
    xid_age: int | None


@dataclass(frozen=True)
class LockWait:
    pid: int
    locktype: str
    mode: str
    waited_seconds: float | None
    blocked_by: list[int]
    query: str | None


@dataclass(frozen=True)
class StuckJob:
    """A running job whose lease is still renewed (its worker is alive) but whose run so far,
    `running_seconds` (since claimed_at), is past `threshold_seconds`: the greatest of `factor`
    times its queue's p99 run time (`p99_seconds`, over `done_jobs` done jobs of the window,
    when `trusted`: enough of them; else `factor` times the longest), the longest of those runs
    and the floor."""

    id: int
    queue: str
    worker: str | None
    claimed_at: datetime
    lease_until: datetime
    running_seconds: float
    p99_seconds: float | None
    done_jobs: int
    threshold_seconds: float
    #: the longest run of those done jobs (None: none)
    longest_seconds: float | None = None
    #: the factor applied to the p99
    factor: float = 3.0
    #: whether `done_jobs` were enough to trust the p99 (`ops.STUCK_MIN_DONE`; fewer: `factor`
    #: times the longest run stands for it)
    trusted: bool = True

    @property
    def reason(self) -> str:
        """Why it is flagged: the largest of the limits it ran past, in words."""
        from .durations import duration_label

        def span(seconds: float) -> str:
            return duration_label(timedelta(seconds=round(seconds, 1)))

        parts = []
        if self.p99_seconds is not None and self.trusted:
            parts.append(f"{self.factor:g}x the p99 of {self.done_jobs:,} done jobs "
                         f"({span(self.p99_seconds)})")
        elif self.longest_seconds is not None:
            parts.append(f"{self.factor:g}x the longest of {self.done_jobs:,} done jobs "
                         f"({span(self.longest_seconds)}; too few for a p99)")
        else:
            parts.append("no done job in the window")
        if self.longest_seconds is not None and self.trusted:
            parts.append(f"the longest done run ({span(self.longest_seconds)})")
        parts.append("the floor")
        return (f"running {span(self.running_seconds)}, past "
                + ", ".join(parts) + f": stuck past {span(self.threshold_seconds)}")


@dataclass(frozen=True)
class StuckJobs:
    """The stuck jobs (`StuckJob`), the longest running first: `jobs` holds at most `limit`
    of them, `total` how many there are. A job is stuck past `factor` times its queue's p99
    run time over the done jobs finished within the last `window_seconds`, and never before
    `floor_seconds`."""

    factor: float
    floor_seconds: float
    window_seconds: float
    limit: int
    total: int
    jobs: list[StuckJob] = field(default_factory=list)


@dataclass(frozen=True)
class StrandedJob:
    """A waiting job that can never run: `dead_parent` is dead, or (None) a parent it waits on
    is gone: `parents_left` counted, only `parents_found` of them still there and not done."""

    id: int
    queue: str
    dead_parent: int | None
    parents_left: int
    parents_found: int

    @property
    def reason(self) -> str:
        if self.dead_parent is not None:
            return f"its parent {self.dead_parent} is dead"
        gone = self.parents_left - self.parents_found
        return f"{gone} of the parents it waits on {'is' if gone == 1 else 'are'} gone"


@dataclass(frozen=True)
class StrandedJobs:
    """The stranded jobs (`StrandedJob`), lowest id first: at most `limit` in `jobs`, `total`
    in all."""

    limit: int
    total: int
    jobs: list[StrandedJob] = field(default_factory=list)


@dataclass(frozen=True)
class Health:
    """Database health for the queue; `warnings` are the lines past a threshold; `stuck_jobs`
    the running jobs stuck, `stranded` the waiting jobs that can never run (None when not
    read)."""

    tables: list[TableHealth]
    xmin: XminHolder | None
    notify_usage: float
    lock_waits: list[LockWait]
    warnings: list[str] = field(default_factory=list)
    stuck_jobs: StuckJobs | None = None
    stranded: StrandedJobs | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EventPartition:
    """A partition of `job_events` (version 9): one UTC day, or the legacy one (from the
    beginning, `from_at` None, to the migration)."""

    name: str
    from_at: datetime | None
    to_at: datetime


@dataclass(frozen=True)
class PartitionDay:
    """What `ensure_partitions` did for one day: 'created' | 'exists' | 'default holds rows' |
    'overlaps' | 'locked', or 'busy' (day None: another session was creating partitions)."""

    day: date | None
    outcome: str


@dataclass
class PruneReport:
    """What one prune did. `history_rows_kept`: rows of jobs still present that were moved out
    of the dropped partitions into the default one; `partitions_locked`: partitions entirely
    before the cutoff left for the next prune (their locks were not free);
    `days_not_created`: days ahead it could not make a partition for, with the reason (see
    `PartitionDay`)."""

    deleted: int = 0
    partitions_dropped: list[str] = field(default_factory=list)
    history_rows_kept: int = 0
    partitions_locked: list[str] = field(default_factory=list)
    orphan_rows_deleted: int = 0
    days_not_created: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PayloadPreview:
    """The first `chars` characters of a payload's JSON text, and its whole size in bytes
    (-1: the role may not read payloads)."""

    text: str
    size: int

    @property
    def readable(self) -> bool:
        return self.size >= 0

    @property
    def complete(self) -> bool:
        return len(self.text.encode("utf-8")) >= self.size


@dataclass(frozen=True)
class QueueLeases:
    """Per queue with running jobs: distinct workers holding them, leases already expired."""

    queue: str
    workers: int
    expired: int


@dataclass(frozen=True)
class Activity:
    """Worker processes connected to the database, and the xmin horizon others hold back."""

    workers_connected: int
    xmin_horizon_seconds: float
    xmin_horizon_xids: int


@dataclass(frozen=True)
class TableSize:
    """One of the queue's tables: heap (with TOAST) and index bytes, live and dead tuples."""

    table: str
    table_bytes: int
    index_bytes: int
    live_tuples: int
    dead_tuples: int


@dataclass(frozen=True)
class ServerRole:
    """The server a session reached (`ops.server_role`): its address, whether it is a standby
    in recovery, and how far behind its primary it is (seconds; 0 once replay has caught up
    with what it received; None on a primary, or before anything was replayed). `timeline` is a
    primary's WAL timeline (a promotion raises it at once); None on a standby."""

    host: str | None
    port: int | None
    standby: bool
    lag_seconds: float | None
    timeline: int | None

    @property
    def address(self) -> str:
        """`host:port`, or "local socket" for a session over a Unix socket."""
        if self.host is None:
            return "local socket"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.port is not None else host

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "address": self.address}


@dataclass(frozen=True)
class Percentiles:
    """Seconds at the 50th, 95th and 99th percentile (continuous); None without jobs."""

    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class LatencyWindow:
    """A queue's done jobs finished within the last `seconds`: `jobs` of them were read, at
    most the cap (`capped`: the window may hold more; the most recent ones were read). `wait`
    is due to claimed (claimed_at - run_at), `run` claimed to done (finished_at - claimed_at)."""

    seconds: float
    jobs: int
    capped: bool
    wait: Percentiles
    run: Percentiles
    #: jobs whose wait or run was negative (clocks that disagree): counted as 0 above
    skewed: int = 0
    #: the most negative of those, as seconds (0 when none)
    skew_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        def pct(p: Percentiles) -> dict[str, float | None]:
            return {"p50": p.p50, "p95": p.p95, "p99": p.p99}

        return {
            "seconds": self.seconds,
            "jobs": self.jobs,
            "capped": self.capped,
            "wait": pct(self.wait),
            "run": pct(self.run),
            "skewed": self.skewed,
            "skew_seconds": self.skew_seconds,
        }


@dataclass(frozen=True)
class QueueLatency:
    """One queue's latency windows by label (`5m`, `1h`), the shortest first."""

    queue: str
    windows: dict[str, LatencyWindow]

    def to_dict(self) -> dict[str, Any]:
        return {label: window.to_dict() for label, window in self.windows.items()}


@dataclass(frozen=True)
class LatencyReport:
    """Latency of the queues asked for, by name. `total`: how many queues there are in all
    (more than `queues` holds when a limit cut the list); `cap`: the most jobs read per queue
    and window; `windows`: the labels, the shortest first."""

    queues: list[QueueLatency]
    total: int
    cap: int
    windows: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cap_per_queue": self.cap,
            "windows": list(self.windows),
            "queues_in_all": self.total,
            "queues": [{"queue": q.queue, "windows": q.to_dict()} for q in self.queues],
        }
