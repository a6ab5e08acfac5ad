"""The public batch API's settles (sql/api.sql): heartbeat, complete, fail and release by
(id, fence). Unlike the worker's twins in `protocol`, they wait on row locks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..defaults import BACKOFF_BASE, BACKOFF_CAP, BACKOFF_JITTER
from ..models import Settled
from .op import Op, Rows
from .protocol import fail_params, pairs, results_of


def _settled(held: Sequence[tuple[int, int]]) -> Callable[[Rows], Settled]:
    """Rows are (id, fence) of the members applied; every other member was stale."""

    def read(rows: Rows) -> Settled:
        applied = {(int(r[0]), int(r[1])) for r in rows}
        return Settled(
            applied=[i for i, f in held if (i, f) in applied],
            lost=[i for i, f in held if (i, f) not in applied],
        )

    return read


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
        {**pairs(held), "worker": worker, "results": results_of(held, results)},
        _settled(held),
    )


def fail(
    held: Sequence[tuple[int, int, str]],
    worker: str | None,
    *,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
    jitter: float = BACKOFF_JITTER,
) -> Op[Settled]:
    params = fail_params(held, worker, base, cap, jitter)
    return Op("fail", params, _settled([(i, f) for i, f, _ in held]))


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
