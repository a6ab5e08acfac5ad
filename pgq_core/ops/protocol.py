"""What a worker runs (sql/protocol.sql): claim, settle and claim, extend, snooze, hand back,
reap. None of these statements waits on a row lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from ..defaults import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    BACKOFF_JITTER,
    REAP_BATCH,
)
from ..models import FailedOver, Job, JobProgress, Settled
from .op import NamedRows, Op, Rows, read_ids


def claim(queue: str, limit: int, lease: timedelta, worker: str) -> Op[list[Job]]:
    def read(rows: NamedRows) -> list[Job]:
        return [Job(**r._asdict()) for r in rows]

    params = {"queue": queue, "limit": limit, "lease": lease, "worker": worker}
    return Op("claim", params, read, named=True)


def results_of(
    held: Sequence[tuple[int, int]], results: Sequence[str | None] | None
) -> list[str | None]:
    if results is None:
        return [None] * len(held)
    if len(results) != len(held):
        raise ValueError("one result per held job")
    return list(results)


def _outcomes(held: Sequence[tuple[int, int]], applied: str) -> Callable[[NamedRows], Settled]:
    """Rows are (outcome, id, fence), by name, of the worker's lock-free writes: `applied`,
    'busy' or 'done'; a member with no row was stale."""

    def read(rows: NamedRows) -> Settled:
        seen = {(int(r.id), int(r.fence)): str(r.outcome) for r in rows}
        by: dict[str, list[int]] = {applied: [], "busy": [], "done": [], "lost": []}
        for i, f in held:
            by[seen.get((i, f), "lost")].append(i)
        return Settled(by[applied], by["lost"], by["busy"], by["done"])

    return read


def pairs(held: Sequence[tuple[int, int]]) -> dict[str, list[int]]:
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

    def read(rows: NamedRows) -> tuple[Settled, list[Job]]:
        jobs = [
            Job(r.id, r.queue, r.payload, r.fence, r.attempts, r.max_attempts, r.lease_until,
                r.trace)
            for r in rows
            if r.outcome == "claimed"
        ]
        return settled([r for r in rows if r.outcome != "claimed"]), jobs

    params = {
        **pairs(held),
        "results": results_of(held, results),
        "queue": queue,
        "limit": limit,
        "lease": lease,
        "worker": worker,
    }
    return Op("settle_complete_and_claim", params, read, named=True)


def fail_params(
    held: Sequence[tuple[int, int, str]], worker: str | None, base: float, cap: float, jitter: float
) -> dict[str, Any]:
    return {
        **pairs([(i, f) for i, f, _ in held]),
        "errors": [e for _, _, e in held],
        "worker": worker,
        "base": base,
        "cap": cap,
        "jitter": jitter,
    }


def settle_fail(
    held: Sequence[tuple[int, int, str]],
    worker: str | None,
    *,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
    jitter: float = BACKOFF_JITTER,
    final: Sequence[bool] | None = None,
    tracebacks: Sequence[str | None] | None = None,
) -> Op[Settled]:
    """The worker's failures: as `fail`, never waiting on a row lock. A job whose `final` is
    true dies at once (its handler raised DontRetry); `tracebacks` (bounded text or None per
    job) go on the attempt's history row."""
    params = fail_params(held, worker, base, cap, jitter)
    params["finals"] = list(final) if final is not None else [False] * len(held)
    params["tracebacks"] = list(tracebacks) if tracebacks is not None else [None] * len(held)
    return Op(
        "settle_fail", params, _outcomes([(i, f) for i, f, _ in held], "failed"), named=True
    )


def extend_leases(
    held: Sequence[tuple[int, int]],
    channel: str | None = None,
    progress: Mapping[int, JobProgress] | None = None,
) -> Op[Settled]:
    """The worker's heartbeat, never waiting on a row lock; notifies `channel` (payload '')
    when a lease moved. `progress`: by job id, the new progress to write with the lease (a
    held job without an entry keeps the progress its row has)."""
    new = [(progress or {}).get(i) for i, _ in held]
    params = {
        **pairs(held),
        "done": [p.done if p else None for p in new],
        "total": [p.total if p else None for p in new],
        "notes": [p.note if p else None for p in new],
        "ages": [p.age if p else None for p in new],
        "channel": channel,
    }
    return Op("extend_leases", params, _outcomes(held, "extended"), named=True)


def settle_snooze(
    held: Sequence[tuple[int, int]], delays: Sequence[float], worker: str
) -> Op[Settled]:
    """Held jobs whose handler raised Snooze go back to ready `delays` seconds from now, the
    attempt not counted; never waits on a row lock."""
    params = {**pairs(held), "delays": [float(d) for d in delays], "worker": worker}
    return Op("settle_snooze", params, _outcomes(held, "snoozed"), named=True)


def hand_back(held: Sequence[tuple[int, int]], worker: str, reason: str) -> Op[Settled]:
    """The worker hands unfinished jobs back (attempt not counted), never waiting on a lock."""
    params = {**pairs(held), "worker": worker, "reason": reason}
    return Op("hand_back", params, _outcomes(held, "released"), named=True)


def _failed_over(rows: Rows) -> FailedOver:
    return FailedOver(int(rows[0][0]), [int(r[1]) for r in rows if r[1] is not None])


def hand_back_failed_over(limit: int = REAP_BATCH) -> Op[FailedOver]:
    """Jobs running under a fence from before a promotion go back, the attempt not counted."""
    return Op("hand_back_failed_over", {"limit": limit}, _failed_over)


def hand_back_orphans(held: Sequence[int], worker: str) -> Op[list[int]]:
    """Jobs running under `worker` that it does not hold (a claim's reply was lost) go back."""
    return Op("hand_back_orphans", {"held": list(held), "worker": worker}, read_ids)


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
