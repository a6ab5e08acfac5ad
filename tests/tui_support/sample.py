"""A fixed, deterministic dashboard state: for layout snapshots and the screenshots script.

Nothing here touches a database; every id, time and count is a constant, and the clock is
frozen at `NOW`, so two renders are identical byte for byte.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

from pgq_core import (
    JobDetail,
    JobEvent,
    JobNotFound,
    JobRow,
    LatencyReport,
    LatencyWindow,
    Lease,
    Percentiles,
    QueueLatency,
    QueueStats,
    QueueWindow,
    WorkerInfo,
)
from pgq_core.filters import ACTION_STATUSES, JobFilter
from pgq_core.models import (
    ErrorGroup,
    Health,
    JobProgress,
    LockWait,
    ServerRole,
    StuckJob,
    StuckJobs,
    TableHealth,
    XminHolder,
)
from pgq_core.worker import RunningJob, WorkerSnapshot
from pgq_tui.latency import LatencyTrend
from pgq_tui.throughput import Throughput

NOW = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)
EPOCH = NOW.timestamp()

W1 = "demo-host:4242:a1b2c3"
W2 = "demo-host:4242:d4e5f6"
W_OLD = "batch-07:311:9f8e7d"
W3 = "demo-host:4242:0a0b0c"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def clock() -> float:
    return EPOCH


#: running and expiring agree with LEASES; dead, ready and scheduled with `SampleSource.jobs`
STATS = [
    QueueStats("emails", 42, 3, 3, 1, 0, 12873, 12873, 1.8),
    QueueStats("reports", 7, 12, 2, 1, 4, 961, 961, 48.2),
    QueueStats("thumbnails", 318, 0, 1, 0, 0, 40211, 40211, 412.0),
    QueueStats("webhooks", 0, 25, 1, 1, 17, 5530, 5530, None),
]

#: completed counts observed over the last two minutes, per queue (for the sparklines)
HISTORY: dict[str, list[int]] = {
    "emails": [11990, 12050, 12130, 12190, 12260, 12330, 12400, 12480, 12560, 12640, 12730, 12873],
    "reports": [930, 933, 935, 938, 941, 944, 946, 950, 953, 955, 958, 961],
    "thumbnails": [
        38900,
        39000,
        39140,
        39250,
        39390,
        39500,
        39640,
        39770,
        39900,
        40010,
        40120,
        40211,
    ],
    "webhooks": [5480, 5484, 5490, 5494, 5500, 5504, 5510, 5514, 5520, 5524, 5528, 5530],
}


def warm(throughput: Throughput) -> Throughput:
    for queue, counts in HISTORY.items():
        for i, completed in enumerate(counts):
            throughput.observe(queue, completed, EPOCH - 10 * (len(counts) - 1 - i))
    return throughput


#: p95 wait (seconds, last 5 minutes) per queue, read every 10 s over the last two minutes,
#: oldest first; the last is the latest read (what `SampleSource.latency` answers). None: no
#: done job in the window (webhooks has completed none in the last 5 minutes).
WAIT_P95: dict[str, list[float | None]] = {
    "emails": [0.42, 0.40, 0.45, 0.51, 0.48, 0.44, 0.62, 0.90, 1.30, 1.10, 0.85, 0.71],
    "reports": [3.1, 3.4, 2.9, 3.0, 3.8, 4.6, 5.2, 6.1, 6.8, 7.4, 8.0, 8.6],
    "thumbnails": [380.0, 392.0, 401.0, 398.0, 405.0, 410.0, 407.0, 409.0, 412.0, 411.0, 414.0,
                   412.0],
    "webhooks": [2.2, 2.0, 1.8, None, None, None, None, None, None, None, None, None],
}
NO_FIGURES = Percentiles(None, None, None)


def _window(seconds: float, p95: float | None, jobs: int) -> LatencyWindow:
    """A window with its p95 wait; the other figures made up from it (p50 a third, p99
    twice; run times fixed)."""
    if p95 is None or not jobs:
        return LatencyWindow(seconds, 0, False, NO_FIGURES, NO_FIGURES)
    wait = Percentiles(p95 / 3, p95, 2 * p95)
    return LatencyWindow(seconds, jobs, False, wait, Percentiles(0.1, 0.4, 0.9))


def latency_report(queues: Sequence[str], read: int = -1) -> LatencyReport:
    """Read number `read` of `WAIT_P95` (the latest by default) as `latency` answers it."""
    found = []
    for queue in queues:
        series = WAIT_P95.get(queue, [None])
        done = next((s.done for s in STATS if s.queue == queue), 0)
        hour = next((v for v in series if v is not None), None)
        windows = {
            "5m": _window(300.0, series[read], min(done, 600)),
            "1h": _window(3600.0, hour, min(done, 7200)),
        }
        found.append(QueueLatency(queue, windows))
    return LatencyReport(found, len(found), 20_000, ("5m", "1h"))


def warm_latency(latency: LatencyTrend) -> LatencyTrend:
    """`WAIT_P95` as twelve reads `bucket_seconds` apart, the last at `NOW`."""
    reads = len(WAIT_P95["emails"])
    for i in range(reads):
        at = EPOCH - latency.bucket_seconds * (reads - 1 - i)
        latency.observe(latency_report(list(WAIT_P95), i), at)
    return latency


#: What some running jobs' handlers reported (the same in the Leases and Workers views).
PROGRESS = {
    10391: JobProgress(37, 120, "page 37: rendering charts"),
    10477: JobProgress(1_840, None, "rows exported"),
    10505: JobProgress(3, 4, "resizing to 1920x1080"),
}


def lease(
    job_id: int, queue: str, worker: str, fence: int, attempts: int, left: float, length: float
) -> Lease:
    until = NOW + timedelta(seconds=left)
    p = PROGRESS.get(job_id)
    if p is None:
        return Lease(job_id, queue, worker, fence, attempts, 5, until, left, length)
    at = NOW - timedelta(seconds=2)
    return Lease(
        job_id, queue, worker, fence, attempts, 5, until, left, length, p.done, p.total, p.note, at
    )


LEASES = [
    lease(10488, "webhooks", W_OLD, 3, 3, -4.6, 30),
    lease(10391, "reports", W1, 2, 2, 3.2, 30),
    lease(10502, "emails", W2, 1, 1, 7.9, 30),
    lease(10503, "emails", W2, 1, 1, 12.4, 30),
    lease(10477, "reports", W1, 1, 1, 19.0, 30),
    lease(10505, "thumbnails", W3, 1, 1, 24.7, 30),
    lease(10506, "emails", W2, 1, 1, 27.5, 30),
]


def job_row(
    job_id: int,
    queue: str,
    status: str,
    attempts: int,
    fence: int,
    worker: str | None,
    error: str | None,
    queued: float,
    finished: float | None = None,
    run_at: float = 0.0,
) -> JobRow:
    return JobRow(
        job_id,
        queue,
        status,
        attempts,
        5,
        fence,
        ago(run_at),
        NOW + timedelta(seconds=20) if status == "running" else None,
        worker,
        error,
        ago(queued),
        ago(finished) if finished is not None else None,
    )


JOBS = [
    job_row(
        10490,
        "webhooks",
        "dead",
        5,
        5,
        W1,
        "HTTP 503 from https://hooks.example.com/orders",
        610,
        41,
    ),
    job_row(
        10480,
        "webhooks",
        "dead",
        5,
        5,
        W2,
        "HTTP 503 from https://hooks.example.com/orders",
        900,
        95,
    ),
    job_row(10471, "webhooks", "dead", 5, 5, W_OLD, "lease expired on attempt 5 of 5", 1300, 212),
    job_row(
        10466, "webhooks", "dead", 1, 2, "operator:ops@demo-host", "killed by operator", 1500, 400
    ),
    job_row(10460, "webhooks", "dead", 5, 5, W1, "ConnectionResetError: peer reset", 2100, 980),
    job_row(10452, "webhooks", "ready", 2, 2, W2, "HTTP 429 Too Many Requests", 300, None, -14),
    job_row(10488, "webhooks", "running", 3, 3, W_OLD, "timeout after 30s", 700),
]

FILLER_ERRORS = {
    "emails": "SMTPServerDisconnected: connection unexpectedly closed",
    "reports": "TimeoutError: report query ran past 120s",
    "thumbnails": "UnidentifiedImageError: cannot identify image file",
    "webhooks": "HTTP 503 from https://hooks.example.com/orders",
}


def _every_job() -> list[JobRow]:
    """JOBS, one running row per lease, and generated rows up to each queue's counts in STATS
    (done only up to what one page shows), so every view agrees with the queue counts."""
    rows = list(JOBS)
    known = {job.id for job in rows}
    rows += [
        job_row(x.id, x.queue, "running", x.attempts, x.fence, x.worker, None, 60)
        for x in LEASES
        if x.id not in known
    ]
    newer = iter(range(10507, 20000))
    older = iter(range(10440, 0, -3))
    done_ids = iter(range(10300, 0, -1))
    for stats in STATS:
        have = Counter(job.status for job in rows if job.queue == stats.queue)
        waiting = stats.ready + stats.scheduled - have["ready"]
        oldest = stats.oldest_due_seconds or 0.0
        for i in range(waiting):
            # the scheduled ones first (due later), then ready ones, the oldest due first
            if i < stats.scheduled:
                run_at = -(30.0 + 7 * i)
            else:
                run_at = oldest * (waiting - i) / (waiting - stats.scheduled)
            rows.append(
                job_row(next(newer), stats.queue, "ready", 0, 0, None, None, 5 + i, None, run_at)
            )
        for i in range(stats.dead - have["dead"]):
            error = FILLER_ERRORS[stats.queue]
            queued, finished = 2400 + 120 * i, 1100 + 120 * i
            rows.append(
                job_row(next(older), stats.queue, "dead", 5, 5, W1, error, queued, finished)
            )
    for i in range(200):
        for stats in STATS:
            if i < stats.done:
                worker = (W2, W1, W3, W1)[STATS.index(stats)]
                rows.append(
                    job_row(
                        next(done_ids),
                        stats.queue,
                        "done",
                        1,
                        1,
                        worker,
                        None,
                        60 + 4 * i,
                        58 + 4 * i,
                    )
                )
    return sorted(rows, key=lambda job: job.id, reverse=True)


EVERY_JOB = _every_job()

DETAIL = JobDetail(
    id=10471,
    queue="webhooks",
    status="dead",
    payload={
        "event": "order.paid",
        "order_id": "ord_8F3K2",
        "amount": {"value": 4990, "currency": "EUR"},
        "endpoint": "https://hooks.example.com/orders",
        "attempt_timeout_s": 30,
        "tags": ["checkout", "eu-west"],
        "replay": False,
    },
    run_at=ago(212),
    attempts=5,
    max_attempts=5,
    lease_until=None,
    fence=5,
    last_error="lease expired on attempt 5 of 5",
    queued_at=ago(1300),
    worker=W_OLD,
    claimed_at=ago(242),
    lease_seconds=30.0,
    finished_at=ago(212),
    history=[
        JobEvent(ago(1300), "enqueued", 0, None, None),
        JobEvent(ago(1299.6), "claimed", 1, W1, None),
        JobEvent(ago(1298.1), "failed", 1, W1, "HTTP 503 (retry at 09:05:17)"),
        JobEvent(ago(1296.0), "claimed", 2, W2, None),
        JobEvent(ago(1266.0), "reaped", 2, W2, "lease expired"),
        JobEvent(ago(1265.2), "claimed", 3, W1, None),
        JobEvent(ago(1262.9), "stale", 2, W2, "complete rejected: stale fence"),
        JobEvent(
            ago(1261.0), "failed", 3, W1, "HTTP 503 (retry at 09:05:56)",
            'Traceback (most recent call last):\n'
            '  File "/srv/shop/hooks.py", line 41, in deliver\n'
            '    response.raise_for_status()\n'
            '  File "/srv/shop/http.py", line 88, in raise_for_status\n'
            '    raise HTTPError(self.status)\n'
            'shop.http.HTTPError: HTTP 503',
        ),
        JobEvent(ago(1000.0), "killed", 4, "operator:ops@demo-host", "killed by operator"),
        JobEvent(ago(400.0), "requeued", 4, "operator:ops@demo-host", None),
        JobEvent(ago(242.0), "claimed", 5, W_OLD, None),
        JobEvent(ago(212.0), "dead", 5, W_OLD, "lease expired"),
    ],
)


WORKERS = [
    WorkerSnapshot(
        W2,
        ("emails",),
        "running",
        4,
        1288,
        3,
        0,
        (
            RunningJob(10502, "emails", 1, 1, EPOCH - 22.1),
            RunningJob(10503, "emails", 1, 1, EPOCH - 17.6),
            RunningJob(10506, "emails", 1, 1, EPOCH - 2.5),
        ),
    ),
    WorkerSnapshot(
        W1,
        ("reports",),
        "running",
        4,
        311,
        12,
        1,
        (
            RunningJob(10391, "reports", 2, 2, EPOCH - 26.8, PROGRESS[10391]),
            RunningJob(10477, "reports", 1, 1, EPOCH - 11.0, PROGRESS[10477]),
        ),
    ),
    WorkerSnapshot(
        W3,
        ("thumbnails",),
        "draining",
        4,
        5210,
        0,
        0,
        (RunningJob(10505, "thumbnails", 1, 1, EPOCH - 5.3, PROGRESS[10505]),),
    ),
    WorkerSnapshot("demo-host:4242:777aaa", ("webhooks",), "stopped", 4, 87, 41, 2, ()),
]


#: the live workers' rows: this app's own (left out of the Workers view: their snapshots are
#: newer) and one of another process
LIVE_WORKERS = [
    *(
        WorkerInfo(w.id, "demo-host", 4242, list(w.queues), w.concurrency, "0.1.0",
                   ago(1500), ago(2.0), len(w.running), w.done, w.failed, 1500.0, 2.0)
        for w in WORKERS
        if w.state != "stopped"
    ),
    WorkerInfo(W_OLD, "batch-07", 311, ["webhooks", "reports"], 8, "0.1.0", ago(5400),
               ago(1.4), 1, 4210, 97, 5400.0, 1.4),
]


ERRORS = [
    ErrorGroup(
        "3f9a1c2b7d4e",
        "HTTP N from URL",
        14,
        0,
        ago(2100),
        ago(41),
        ["webhooks"],
        10490,
        "HTTP 503 from https://hooks.example.com/orders",
    ),
    ErrorGroup(
        "a81be0c3d2f5",
        "TimeoutError: report query ran past Ns",
        4,
        0,
        ago(5400),
        ago(1100),
        ["reports"],
        10437,
        "TimeoutError: report query ran past 120s\n  in build_report(customer_id=42)",
    ),
    ErrorGroup(
        "e2d47b1a9c03",
        "lease expired on attempt N of N",
        1,
        0,
        ago(1300),
        ago(212),
        ["webhooks"],
        10471,
        "lease expired on attempt 5 of 5",
    ),
    ErrorGroup(
        "7b6c5d4e3f21",
        "HTTP N Too Many Requests",
        0,
        1,
        ago(300),
        ago(300),
        ["webhooks"],
        10452,
        "HTTP 429 Too Many Requests",
    ),
]

MB = 2**20
HEALTH = Health(
    tables=[
        TableHealth("jobs", 59310, 18422, ago(3600), ago(640), ago(3600), ago(630),
                    41 * MB, 23 * MB, 64 * MB),
        TableHealth("job_events", 412870, 1203, None, ago(1800), None, ago(1790),
                    88 * MB, 31 * MB, 119 * MB),
        TableHealth("queues", 4, 2, None, ago(86400), None, ago(86400), 8192, 16384, 24576),
        TableHealth("schedules", 3, 0, None, None, None, None, 8192, 16384, 24576),
    ],
    xmin=XminHolder(
        31337, 1843.2, "idle in transaction", "shop", "reporting", "psql",
        "SELECT * FROM orders WHERE created_at > now() - interval '1 day'", 48211,
    ),
    notify_usage=0.0004,
    lock_waits=[
        LockWait(31502, "transactionid", "ShareLock", 3.4, [31337],
                 "UPDATE pgq.jobs SET status = 'dead' WHERE id = 10466"),
    ],
    warnings=[
        "jobs: 18,422 dead tuples (31% of live): vacuum is behind",
        "pid 31337 (psql, idle in transaction) has held back vacuum for 30m43s",
        "1 running job stuck (past 3x the queue's p99 run time and 1m, lease still renewed):"
        " the longest, job 10477 on 'reports', for 41m1s",
    ],
    stuck_jobs=StuckJobs(
        3.0, 60.0, 3600.0, 100, 1,
        [StuckJob(10477, "reports", W1, ago(2461), NOW + timedelta(seconds=19), 2461.0,
                  252.4, 1840, 757.2)],
    ),
)


def _failed(job: JobRow) -> bool:
    return job.status == "ready" and job.attempts > 0 and job.last_error is not None


def matches(job: JobRow, where: JobFilter) -> bool:
    """`where` as `pgq_core.filters` words it in SQL, for the parts the dashboard's filters
    here use: queue, statuses (`failed` is ready, tried, with an error), error text (a
    case-blind substring) and error group (of dead and failed jobs; the group is the sample's
    own id, matched by its example's first line). tests/test_tui_sample.py holds the two
    readings equal on these rows."""
    if where.payload or where.older_than is not None or where.newer_than is not None:
        raise NotImplementedError("the sample reads no payload or age filter")
    group = next((g for g in ERRORS if g.group == where.error_group), None)
    return (
        (where.queue is None or job.queue == where.queue)
        and (
            not where.statuses
            or job.status in where.statuses
            or ("failed" in where.statuses and _failed(job))
        )
        and (where.error is None or where.error.lower() in (job.last_error or "").lower())
        and (
            where.error_group is None
            or (
                group is not None
                and job.last_error == group.example_error.splitlines()[0]
                and (job.status == "dead" or _failed(job))
            )
        )
    )


class SampleSource:
    """Serves the constants above; actions change nothing and report nothing done."""

    async def stats(self) -> list[QueueStats]:
        return list(STATS)

    async def stats_window(self, offset: int, limit: int) -> QueueWindow:
        return QueueWindow(STATS[offset : offset + limit], offset, len(STATS))

    async def queue_stats(self, queues: Sequence[str]) -> list[QueueStats]:
        return [s for s in STATS if s.queue in queues]

    async def latency(self, queues: Sequence[str]) -> LatencyReport:
        return latency_report(queues)

    async def leases(self, limit: int) -> list[Lease]:
        return LEASES[:limit]

    async def workers(self) -> list[WorkerInfo]:
        return list(LIVE_WORKERS)

    async def jobs(self, queue: str | None, status: str | None, limit: int) -> list[JobRow]:
        """Newest first; dead jobs by time of death, the latest first (as `Queue.jobs`)."""
        rows = [
            j
            for j in EVERY_JOB
            if (queue is None or j.queue == queue) and (status is None or j.status == status)
        ]
        if status == "dead":
            rows.sort(key=lambda j: (j.finished_at is not None, j.finished_at or NOW, j.id))
            rows.reverse()
        return rows[:limit]

    async def job(self, job_id: int) -> JobDetail:
        if job_id != DETAIL.id:
            raise JobNotFound(job_id)
        return DETAIL

    async def requeue(self, ids: Sequence[int]) -> list[int]:
        return []

    async def requeue_dead(self, queue: str) -> list[int]:
        return []

    async def kill(self, ids: Sequence[int]) -> list[int]:
        return []

    async def pause_queue(self, queue: str, reason: str | None) -> None:
        return None

    async def resume_queue(self, queue: str) -> None:
        return None

    async def jobs_matching(self, where: JobFilter, limit: int) -> list[JobRow]:
        return [j for j in EVERY_JOB if matches(j, where)][:limit]

    async def count_matching(self, where: JobFilter, action: str) -> int:
        narrowed = where.for_action(action)
        return sum(1 for j in EVERY_JOB if matches(j, narrowed))

    async def bulk(self, action: str, where: JobFilter) -> list[int]:
        assert action in ACTION_STATUSES
        return []

    async def errors(self, limit: int) -> list[ErrorGroup]:
        return ERRORS[:limit]

    async def health(self) -> Health:
        return HEALTH

    async def server(self) -> ServerRole | None:
        return None  # the header names no host: the layouts stay as they were

    async def primary(self) -> ServerRole | None:
        return None

    async def notifications(self) -> AsyncIterator[str]:
        await asyncio.Event().wait()
        yield ""

    async def reset(self) -> None:
        return None

    async def close(self) -> None:
        return None

