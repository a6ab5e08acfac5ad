"""The worker's own row in `workers`: every live worker in view (`pgq workers`, the dashboard).

Invariants: the first beat is made as the worker starts, then one every `BEAT_EVERY` seconds
with its counts (running, done, failed); each row lives `MISSED_BEATS` beats past its last, so
a worker killed without a word drops out of view by itself (readers skip an expired row, and
any worker's next beat deletes it). A beat that cannot run is skipped, never raised into
`run()`; a stopping worker deletes its row, waiting at most `GONE_TIMEOUT` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from typing import Any

from .. import ops
from ..text import printable
from .link import DataFault, Disconnected, Transient

log = logging.getLogger("pgq.worker")

#: Seconds between two beats of a worker's row, and how many beats it may miss before it is
#: no longer shown.
BEAT_EVERY = 5.0
MISSED_BEATS = 3
#: Seconds a stopping worker waits for its row's deletion (else the row expires by itself).
GONE_TIMEOUT = 2.0

Call = Callable[..., Awaitable[list[Any]]]


def package_version() -> str:
    """pgq's installed version, or `unknown` (a checkout run without installing)."""
    try:
        return metadata.version("pgq-fence")
    except metadata.PackageNotFoundError:
        return "unknown"


async def beat_forever(
    call: Call,
    worker_id: str,
    queues: Sequence[str],
    concurrency: int,
    counts: Callable[[], tuple[int, int, int]],
    every: float = BEAT_EVERY,
) -> None:
    """Write this worker's row now and every `every` seconds until cancelled; `counts()`:
    jobs running, done and failed."""
    host, pid, version = socket.gethostname(), os.getpid(), package_version()
    refused = False
    while True:
        op = ops.worker_beat(
            worker_id, host, pid, queues, concurrency, version, every * MISSED_BEATS, counts()
        )
        try:
            await call(op)
            refused = False
        except (Disconnected, Transient):
            pass
        except DataFault as exc:
            if not refused:
                log.warning(
                    "worker %s: could not write its row in workers: %s",
                    worker_id,
                    printable(str(exc)),
                )
            refused = True
        await asyncio.sleep(every)


async def say_gone(call: Call, worker_id: str) -> None:
    """Delete this worker's row, within GONE_TIMEOUT; left to expire if that fails."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(call(ops.worker_gone(worker_id)), GONE_TIMEOUT)
