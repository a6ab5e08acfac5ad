"""Each queue operation as data: a named statement, its parameters, and how to read its rows.

The sync `Queue` and the async `AsyncQueue` both run these, so the two can never drift apart:
neither holds SQL or decides anything on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from psycopg.types.json import Jsonb

from .config import check_queue_name
from .models import Job, JobDetail, JobEvent, JobRow, Lease, QueueStats, Settled

T = TypeVar("T")
Rows = list[tuple[Any, ...]]

DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_LEASE = timedelta(seconds=30)
#: Retry delay is min(cap, base * 2**attempts) seconds, less up to `jitter` of it at random.
BACKOFF_BASE = 1.0
BACKOFF_CAP = 3600.0
BACKOFF_JITTER = 0.25
REAP_BATCH = 1000
PRUNE_BATCH = 5000


@dataclass(frozen=True)
class Op(Generic[T]):
    """One round trip: run statement `name` with `params`, turn the rows into `T`."""

    name: str
    params: Mapping[str, Any]
    read: Callable[[Rows], T]


@dataclass(frozen=True)
class JobSpec:
    """A job to enqueue. `run_at` wins over `delay`; with neither the job is due now."""

    queue: str
    payload: Any
    run_at: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: higher is claimed first among due jobs of the queue
    priority: int = 0


def _ids(rows: Rows) -> list[int]:
    return [int(r[0]) for r in rows]


def _settled(held: Sequence[tuple[int, int]]) -> Callable[[Rows], Settled]:
    """Rows are (id, fence) of the members applied; every other member was stale."""

    def read(rows: Rows) -> Settled:
        applied = {(int(r[0]), int(r[1])) for r in rows}
        return Settled(
            applied=[i for i, f in held if (i, f) in applied],
            lost=[i for i, f in held if (i, f) not in applied],
        )

    return read


def _check_spec(spec: JobSpec) -> None:
    check_queue_name(spec.queue)
    if spec.max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {spec.max_attempts}")


def enqueue(specs: Iterable[JobSpec]) -> Op[list[int]]:
    specs = list(specs)
    for spec in specs:
        _check_spec(spec)
    return Op(
        "enqueue",
        {
            "queues": [s.queue for s in specs],
            "payloads": Jsonb([s.payload for s in specs]),
            "run_ats": [s.run_at for s in specs],
            "delays": [s.delay for s in specs],
            "max_attempts": [s.max_attempts for s in specs],
            "priorities": [s.priority for s in specs],
        },
        _ids,
    )


def claim(queue: str, limit: int, lease: timedelta, worker: str) -> Op[list[Job]]:
    def read(rows: Rows) -> list[Job]:
        return [Job(*r) for r in rows]

    return Op("claim", {"queue": queue, "limit": limit, "lease": lease, "worker": worker}, read)


def heartbeat(held: Sequence[tuple[int, int]]) -> Op[Settled]:
    return Op(
        "heartbeat", {"ids": [i for i, _ in held], "fences": [f for _, f in held]}, _settled(held)
    )


def complete(
    held: Sequence[tuple[int, int]],
    worker: str | None,
    results: Sequence[str | None] | None = None,
) -> Op[Settled]:
    """`results`: each job's result as JSON text (None: no result)."""
    return Op(
        "complete",
        {**_pairs(held), "worker": worker, "results": _results(held, results)},
        _settled(held),
    )


def _results(
    held: Sequence[tuple[int, int]], results: Sequence[str | None] | None
) -> list[str | None]:
    if results is None:
        return [None] * len(held)
    if len(results) != len(held):
        raise ValueError("one result per held job")
    return list(results)


def _outcomes(held: Sequence[tuple[int, int]], applied: str) -> Callable[[Rows], Settled]:
    """Rows are (outcome, id, fence) of the worker's lock-free writes: `applied`, 'busy' or
    'done'; a member with no row was stale."""

    def read(rows: Rows) -> Settled:
        seen = {(int(r[1]), int(r[2])): str(r[0]) for r in rows}
        by: dict[str, list[int]] = {applied: [], "busy": [], "done": [], "lost": []}
        for i, f in held:
            by[seen.get((i, f), "lost")].append(i)
        return Settled(by[applied], by["lost"], by["busy"], by["done"])

    return read


def _pairs(held: Sequence[tuple[int, int]]) -> dict[str, list[int]]:
    return {"ids": [i for i, _ in held], "fences": [f for _, f in held]}


def complete_and_claim(
    held: Sequence[tuple[int, int]],
    queue: str,
    limit: int,
    lease: timedelta,
    worker: str,
    results: Sequence[str | None] | None = None,
) -> Op[tuple[Settled, list[Job]]]:
    """The worker's hot path: complete `held` (with `results`, JSON text or None) and claim up
    to `limit` of `queue` in one statement, never waiting on a row lock: (settled, claimed)."""
    settled = _outcomes(held, "completed")

    def read(rows: Rows) -> tuple[Settled, list[Job]]:
        jobs = [Job(r[1], r[3], r[4], r[2], r[5], r[6], r[7]) for r in rows if r[0] == "claimed"]
        return settled([r for r in rows if r[0] != "claimed"]), jobs

    params = {
        **_pairs(held),
        "results": _results(held, results),
        "queue": queue,
        "limit": limit,
        "lease": lease,
        "worker": worker,
    }
    return Op("settle_complete_and_claim", params, read)


def settle_fail(
    held: Sequence[tuple[int, int, str]],
    worker: str | None,
    *,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
    jitter: float = BACKOFF_JITTER,
) -> Op[Settled]:
    """The worker's failures: as `fail`, never waiting on a row lock."""
    pairs = [(i, f) for i, f, _ in held]
    params = {
        **_pairs(pairs),
        "errors": [e for _, _, e in held],
        "worker": worker,
        "base": base,
        "cap": cap,
        "jitter": jitter,
    }
    return Op("settle_fail", params, _outcomes(pairs, "failed"))


def extend_leases(held: Sequence[tuple[int, int]]) -> Op[Settled]:
    """The worker's heartbeat, never waiting on a row lock."""
    return Op("extend_leases", _pairs(held), _outcomes(held, "extended"))


def hand_back(held: Sequence[tuple[int, int]], worker: str, reason: str) -> Op[Settled]:
    """The worker hands unfinished jobs back (attempt not counted), never waiting on a lock."""
    params = {**_pairs(held), "worker": worker, "reason": reason}
    return Op("hand_back", params, _outcomes(held, "released"))


def hand_back_orphans(held: Sequence[int], worker: str) -> Op[list[int]]:
    """Jobs running under `worker` that it does not hold (a claim's reply was lost) go back."""
    return Op("hand_back_orphans", {"held": list(held), "worker": worker}, _ids)


def fail(
    held: Sequence[tuple[int, int, str]],
    worker: str | None,
    *,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
    jitter: float = BACKOFF_JITTER,
) -> Op[Settled]:
    return Op(
        "fail",
        {
            "ids": [i for i, _, _ in held],
            "fences": [f for _, f, _ in held],
            "errors": [e for _, _, e in held],
            "worker": worker,
            "base": base,
            "cap": cap,
            "jitter": jitter,
        },
        _settled([(i, f) for i, f, _ in held]),
    )


def release(held: Sequence[tuple[int, int]], worker: str | None, reason: str) -> Op[Settled]:
    return Op(
        "release",
        {
            "ids": [i for i, _ in held],
            "fences": [f for _, f in held],
            "worker": worker,
            "reason": reason,
        },
        _settled(held),
    )


def record_stale(lost: Sequence[tuple[int, int]], worker: str | None, action: str) -> Op[None]:
    """History rows for writes that matched nothing: (job id, the stale fence it carried)."""
    return Op(
        "record_stale",
        {
            "ids": [i for i, _ in lost],
            "events": ["stale"] * len(lost),
            "fences": [f for _, f in lost],
            "workers": [worker] * len(lost),
            "details": [f"{action} rejected: stale fence"] * len(lost),
        },
        lambda rows: None,
    )


def reap(limit: int = REAP_BATCH) -> Op[list[tuple[int, str]]]:
    return Op("reap", {"limit": limit}, lambda rows: [(int(r[0]), str(r[1])) for r in rows])


def requeue(ids: Sequence[int], actor: str | None) -> Op[list[int]]:
    return Op("requeue_ids", {"ids": list(ids), "actor": actor}, _ids)


def requeue_dead(queue: str | None, actor: str | None) -> Op[list[int]]:
    return Op("requeue_queue", {"queue": queue, "actor": actor}, _ids)


def kill(
    ids: Sequence[int], actor: str | None, reason: str = "killed by operator"
) -> Op[list[int]]:
    return Op("kill", {"ids": list(ids), "actor": actor, "reason": reason}, _ids)


def prune(older_than: timedelta, limit: int = PRUNE_BATCH) -> Op[int]:
    return Op("prune", {"older_than": older_than, "limit": limit}, lambda rows: int(rows[0][0]))


def stats(soon: timedelta = timedelta(seconds=10)) -> Op[list[QueueStats]]:
    return Op("stats", {"soon": soon}, lambda rows: [QueueStats(*r) for r in rows])


def leases(limit: int = 100) -> Op[list[Lease]]:
    return Op("leases", {"limit": limit}, lambda rows: [Lease(*r) for r in rows])


def jobs(queue: str | None = None, status: str | None = None, limit: int = 50) -> Op[list[JobRow]]:
    return Op(
        "jobs",
        {"queue": queue, "status": status, "limit": limit},
        lambda rows: [JobRow(*r) for r in rows],
    )


def job(job_id: int) -> Op[JobDetail | None]:
    return Op("job", {"id": job_id}, lambda rows: JobDetail(*rows[0]) if rows else None)


def history(job_id: int) -> Op[list[JobEvent]]:
    return Op("history", {"id": job_id}, lambda rows: [JobEvent(*r) for r in rows])


def session_limits(
    statement_timeout: timedelta, lock_timeout: timedelta, *, force: bool
) -> Op[None]:
    """Timeouts in whole milliseconds (0 disables); see `session_limits` in queries.sql."""
    return Op(
        "session_limits",
        {
            "statement_timeout": str(int(statement_timeout.total_seconds() * 1000)),
            "lock_timeout": str(int(lock_timeout.total_seconds() * 1000)),
            "force": force,
        },
        lambda rows: None,
    )


@dataclass(frozen=True)
class PayloadPreview:
    """The first `chars` characters of a payload's JSON text, and its whole size in bytes."""

    text: str
    size: int

    @property
    def complete(self) -> bool:
        return len(self.text.encode("utf-8")) >= self.size


def job_preview(job_id: int, chars: int) -> Op[tuple[JobDetail, PayloadPreview] | None]:
    """The job without its payload (`payload` is None) and a bounded preview of it."""

    def read(rows: Rows) -> tuple[JobDetail, PayloadPreview] | None:
        if not rows:
            return None
        *columns, text, size = rows[0]
        return JobDetail(*columns), PayloadPreview(str(text), int(size))

    return Op("job_preview", {"id": job_id, "chars": chars}, read)


@dataclass(frozen=True)
class QueueLeases:
    """Per queue with running jobs: distinct workers holding them, leases already expired."""

    queue: str
    workers: int
    expired: int


def metrics_leases() -> Op[list[QueueLeases]]:
    return Op(
        "metrics_leases",
        {},
        lambda rows: [QueueLeases(str(r[0]), int(r[1]), int(r[2])) for r in rows],
    )


@dataclass(frozen=True)
class Activity:
    """Worker processes connected to the database, and the xmin horizon others hold back."""

    workers_connected: int
    xmin_horizon_seconds: float
    xmin_horizon_xids: int


def metrics_activity() -> Op[Activity]:
    def read(rows: Rows) -> Activity:
        connected, seconds, xids = rows[0]
        return Activity(int(connected), float(seconds), int(xids))

    return Op("metrics_activity", {}, read)


@dataclass(frozen=True)
class TableSize:
    """One of the queue's tables: heap (with TOAST) and index bytes, live and dead tuples."""

    table: str
    table_bytes: int
    index_bytes: int
    live_tuples: int
    dead_tuples: int


def table_sizes(schema: str) -> Op[list[TableSize]]:
    return Op(
        "table_sizes",
        {"schema": schema},
        lambda rows: [TableSize(str(r[0]), *(int(v) for v in r[1:])) for r in rows],
    )


@dataclass(frozen=True)
class ClaimLatency:
    """Jobs claimed since a time: count, enqueue->claim and enqueue->done seconds (p50, p99;
    None without jobs), and the server time to pass as the next `since`."""

    claimed: int
    claim_p50: float | None
    claim_p99: float | None
    done_p50: float | None
    done_p99: float | None
    until: datetime


def claim_latency(since: datetime) -> Op[ClaimLatency]:
    def read(rows: Rows) -> ClaimLatency:
        count, c50, c99, d50, d99, until = rows[0]

        def f(value: Any) -> float | None:
            return None if value is None else float(value)

        return ClaimLatency(int(count), f(c50), f(c99), f(d50), f(d99), until)

    return Op("claim_latency", {"since": since}, read)


#: Values of the `notify` setting (see `set_notify` in queries.sql).
NOTIFY_MODES = ("always", "edge", "off")


def check_notify_mode(mode: str) -> str:
    if mode not in NOTIFY_MODES:
        raise ValueError(f"notify must be one of {', '.join(NOTIFY_MODES)}, got {mode!r}")
    return mode


def settings() -> Op[dict[str, str]]:
    return Op("settings", {}, lambda rows: {str(r[0]): str(r[1]) for r in rows})


def set_notify(mode: str) -> Op[str]:
    return Op("set_notify", {"mode": check_notify_mode(mode)}, lambda rows: str(rows[0][0]))


def local_limits(statement_timeout: timedelta, lock_timeout: timedelta) -> Op[None]:
    """Timeouts of the current transaction alone (see `local_limits` in queries.sql)."""
    return Op(
        "local_limits",
        {
            "statement_timeout": str(int(statement_timeout.total_seconds() * 1000)),
            "lock_timeout": str(int(lock_timeout.total_seconds() * 1000)),
        },
        lambda rows: None,
    )
