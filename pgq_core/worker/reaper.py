"""The reaper: every worker returns expired leases to `ready` (or `dead` at max_attempts), and
keeps the history's daily partitions created ahead.

The `reap` statement takes rows with SKIP LOCKED, so any number of reapers run at once without
waiting on each other or on a worker settling its job, and each expired lease is reaped once.
Partitions are made sure of at most once an hour per process (sooner again after a busy lock
or a lost connection); their creation never waits on a lock longer than
`ops.ENSURE_LOCK_TIMEOUT`, and a day it cannot create is said in one log line.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import ops
from ..models import PartitionDay
from ..ops import Op
from ..text import printable
from .link import DataFault, Disconnected, Transient

log = logging.getLogger("pgq.worker")

#: Seconds between two checks of the partitions ahead, and before another try after a busy lock.
PARTITIONS_EVERY = 3600.0
PARTITIONS_RETRY = 60.0

Call = Callable[[Op[Any]], Awaitable[list[Any]]]


async def reap_forever(call: Call, interval: float, worker_id: str) -> None:
    """Reap every `interval` seconds (jittered by 20%), the first time one interval after the
    start, until cancelled; check the partitions ahead on the first pass and then hourly."""
    partitions_due = time.monotonic()
    warned: set[object] = set()
    while True:
        await asyncio.sleep(interval * random.uniform(0.8, 1.2))
        try:
            (reaped,) = await call(ops.reap())
        except (Disconnected, Transient, DataFault):
            reaped = []
        if reaped:
            dead = sum(1 for _, status in reaped if status == "dead")
            log.info(
                "worker %s: reaped %d expired lease(s)%s",
                worker_id,
                len(reaped),
                f", {dead} dead" if dead else "",
            )
        if time.monotonic() >= partitions_due:
            partitions_due = time.monotonic() + await ensure_partitions(call, worker_id, warned)


async def ensure_partitions(call: Call, worker_id: str, warned: set[object]) -> float:
    """Make sure of the partitions ahead, log what was done or could not be (a day that cannot
    be created once per process: `warned` holds it); the seconds until the next check."""
    try:
        (days,) = await call(ops.ensure_partitions())
    except (Disconnected, Transient):
        return PARTITIONS_RETRY
    except DataFault as exc:
        log.warning(
            "worker %s: could not create history partitions: %s", worker_id, printable(str(exc))
        )
        return PARTITIONS_EVERY
    return _report(days, worker_id, warned)


def _report(days: list[PartitionDay], worker_id: str, warned: set[object]) -> float:
    created = [str(d.day) for d in days if d.outcome == "created"]
    if created:
        log.info("worker %s: created history partitions for %s", worker_id, ", ".join(created))
    for d in days:
        if (d.day, d.outcome) in warned:
            continue
        if d.outcome in ("default holds rows", "overlaps"):
            warned.add((d.day, d.outcome))
        if d.outcome == "default holds rows":
            log.warning(
                "worker %s: no history partition for %s: the default partition already holds "
                "rows of that day (they stay there; prune deletes them row by row)",
                worker_id,
                d.day,
            )
        elif d.outcome == "overlaps":
            log.warning(
                "worker %s: no history partition for %s: another partition covers part of it",
                worker_id,
                d.day,
            )
    if any(d.outcome in ("locked", "busy") for d in days):
        return PARTITIONS_RETRY
    return PARTITIONS_EVERY
