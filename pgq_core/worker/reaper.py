"""The reaper: every worker returns expired leases to `ready` (or `dead` at max_attempts).

The `reap` statement takes rows with SKIP LOCKED, so any number of reapers run at once without
waiting on each other or on a worker settling its job, and each expired lease is reaped once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from .. import ops
from ..ops import Op
from .link import DataFault, Disconnected, Transient

log = logging.getLogger("pgq.worker")


async def reap_forever(
    call: Callable[[Op[Any]], Awaitable[list[Any]]], interval: float, worker_id: str
) -> None:
    """Reap every `interval` seconds (jittered by 20%), the first time one interval after the
    start, until cancelled."""
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
