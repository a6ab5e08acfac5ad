"""Health and metrics reads (sql/observer.sql): latency percentiles, stuck and stranded jobs,
tables, the oldest xmin, the NOTIFY queue, lock waits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ..defaults import (
    LATENCY_CAP,
    LATENCY_RECENT,
    LATENCY_WINDOW,
    STRANDED_LIMIT,
    STUCK_FACTOR,
    STUCK_FLOOR,
    STUCK_LIMIT,
    STUCK_MIN_DONE,
)
from ..models import (
    Activity,
    LatencyReport,
    LatencyWindow,
    LockWait,
    Percentiles,
    QueueLatency,
    QueueLeases,
    StrandedJob,
    StrandedJobs,
    StuckJob,
    StuckJobs,
    TableHealth,
    TableSize,
    XminHolder,
)
from .op import Op, Rows


def health_tables(schema: str) -> Op[list[TableHealth]]:
    return Op("health_tables", {"schema": schema}, lambda rows: [TableHealth(*r) for r in rows])


def health_xmin() -> Op[XminHolder | None]:
    return Op("health_xmin", {}, lambda rows: XminHolder(*rows[0]) if rows else None)


def health_notify() -> Op[float]:
    return Op("health_notify", {}, lambda rows: float(rows[0][0]))


def health_lock_waits(schema: str) -> Op[list[LockWait]]:
    def read(rows: Rows) -> list[LockWait]:
        return [LockWait(r[0], r[1], r[2], r[3], list(r[4] or []), r[5]) for r in rows]

    return Op("health_lock_waits", {"schema": schema}, read)


def metrics_leases() -> Op[list[QueueLeases]]:
    return Op(
        "metrics_leases",
        {},
        lambda rows: [QueueLeases(str(r[0]), int(r[1]), int(r[2])) for r in rows],
    )


def metrics_activity() -> Op[Activity]:
    def read(rows: Rows) -> Activity:
        connected, seconds, xids = rows[0]
        return Activity(int(connected), float(seconds), int(xids))

    return Op("metrics_activity", {}, read)


def table_sizes(schema: str) -> Op[list[TableSize]]:
    """Heap and index bytes, live and dead tuples: the size columns of `health_tables`."""

    def read(rows: Rows) -> list[TableSize]:
        tables = [TableHealth(*r) for r in rows]
        return [
            TableSize(t.table, t.table_bytes, t.index_bytes, t.live_tuples, t.dead_tuples)
            for t in tables
        ]

    return Op("health_tables", {"schema": schema}, read)


def latency(
    since: timedelta = LATENCY_WINDOW,
    queues: Sequence[str] | None = None,
    limit: int | None = None,
    cap: int = LATENCY_CAP,
    recent: timedelta = LATENCY_RECENT,
) -> Op[LatencyReport]:
    """Wait (due to claimed) and run (claimed to done) percentiles of each queue's done jobs
    finished within `recent` and within `since` (one window when `since` is no longer than
    `recent`), at most `cap` jobs per queue, the most recent. `queues`: those (each gets a
    row, None figures without jobs); None: every queue that ever completed a job. `limit`:
    at most that many queues, by name (None: all)."""
    if since <= timedelta(0) or recent <= timedelta(0):
        raise ValueError("a latency window must be longer than 0")
    if cap < 1:
        raise ValueError(f"cap must be at least 1, got {cap}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    from ..durations import duration_label

    names = None if queues is None else list(queues)
    short = min(recent, since)
    labels = (
        (duration_label(since),)
        if short == since
        else (duration_label(short), duration_label(since))
    )

    def window(
        seconds: float, jobs: Any, wait: Any, run: Any, skewed: Any, skew: Any
    ) -> LatencyWindow:
        def pct(values: Any) -> Percentiles:
            if values is None:
                return Percentiles(None, None, None)
            p50, p95, p99 = (None if v is None else float(v) for v in values)
            return Percentiles(p50, p95, p99)

        return LatencyWindow(
            seconds, int(jobs), int(jobs) >= cap, pct(wait), pct(run), int(skewed),
            float(skew or 0.0),
        )

    def read(rows: Rows) -> LatencyReport:
        found = []
        for row in rows:
            queue, _total, n_short, n_long, w_short, w_long, r_short, r_long = row[:8]
            k_short, k_long, s_short, s_long = row[8:12]
            windows = {
                labels[-1]: window(since.total_seconds(), n_long, w_long, r_long, k_long, s_long)
            }
            if len(labels) == 2:
                windows = {
                    labels[0]: window(
                        short.total_seconds(), n_short, w_short, r_short, k_short, s_short
                    ),
                    **windows,
                }
            found.append(QueueLatency(str(queue), windows))
        total = int(rows[0][1]) if rows else 0
        return LatencyReport(found, total, cap, labels)

    params = {
        "queues": names,
        "limit": limit,
        "cap": cap,
        "short": short,
        "long": since,
    }
    return Op("latency", params, read)


def check_stuck(factor: float, floor: timedelta) -> None:
    """ValueError unless `factor` is a positive number and `floor` is not negative."""
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"the stuck factor must be a number over 0, got {factor}")
    if floor < timedelta(0):
        raise ValueError(f"the stuck floor must not be negative, got {floor}")


def _stuck_params(
    factor: float, floor: timedelta, window: timedelta, cap: int
) -> dict[str, Any]:
    check_stuck(factor, floor)
    if window <= timedelta(0):
        raise ValueError("a latency window must be longer than 0")
    if cap < 1:
        raise ValueError(f"cap must be at least 1, got {cap}")
    return {
        "factor": float(factor),
        "floor": floor.total_seconds(),
        "window": window,
        "cap": cap,
        "min_done": STUCK_MIN_DONE,
    }


def health_stuck(
    factor: float = STUCK_FACTOR,
    floor: timedelta = STUCK_FLOOR,
    limit: int = STUCK_LIMIT,
    window: timedelta = LATENCY_WINDOW,
    cap: int = LATENCY_CAP,
) -> Op[StuckJobs]:
    """Running jobs whose lease is live and whose run so far is past `factor` times their
    queue's p99 run time (done jobs finished within `window`, at most `cap` per queue), and
    past `floor` in any case: the longest running first, at most `limit`, and how many in all."""
    params = _stuck_params(factor, floor, window, cap)
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")

    def read(rows: Rows) -> StuckJobs:
        jobs = [
            StuckJob(
                id=int(r[0]),
                queue=str(r[1]),
                worker=r[2],
                claimed_at=r[3],
                lease_until=r[4],
                running_seconds=float(r[5]),
                p99_seconds=None if r[6] is None else float(r[6]),
                done_jobs=int(r[7]),
                threshold_seconds=float(r[8]),
                longest_seconds=None if r[10] is None else float(r[10]),
                factor=float(factor),
                trusted=int(r[7]) >= STUCK_MIN_DONE,
            )
            for r in rows
        ]
        total = int(rows[0][9]) if rows else 0
        return StuckJobs(
            float(factor), floor.total_seconds(), window.total_seconds(), limit, total, jobs
        )

    return Op("health_stuck", {**params, "limit": limit}, read)


def health_stranded(limit: int = STRANDED_LIMIT) -> Op[StrandedJobs]:
    """Waiting jobs that can never run (a parent dead, or one they wait on gone), lowest id
    first: at most `limit`, and how many in all."""
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")

    def read(rows: Rows) -> StrandedJobs:
        jobs = [
            StrandedJob(int(r[0]), str(r[1]), None if r[2] is None else int(r[2]), int(r[3]),
                        int(r[4]))
            for r in rows
        ]
        return StrandedJobs(limit, int(rows[0][5]) if rows else 0, jobs)

    return Op("health_stranded", {"limit": limit}, read)


def metrics_stuck(
    factor: float = STUCK_FACTOR,
    floor: timedelta = STUCK_FLOOR,
    window: timedelta = LATENCY_WINDOW,
    cap: int = LATENCY_CAP,
) -> Op[dict[str, int]]:
    """How many jobs are stuck (`health_stuck`) per queue that has any."""
    params = _stuck_params(factor, floor, window, cap)
    return Op("metrics_stuck", params, lambda rows: {str(r[0]): int(r[1]) for r in rows})
