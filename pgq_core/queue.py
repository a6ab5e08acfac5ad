"""The queue API: `Queue` (sync, for producers, operators and the CLI) and `AsyncQueue` (for
the worker and the dashboard). Both are thin: every operation is an `ops.Op` run in one round
trip.

`AsyncQueue` is written once, in `queue_async`; `Queue`, in `queue_sync`, is generated from it
(tools/async_to_sync.py), so the two have one order and one docstring per operation. What they
share beside the ops lives in `queue_common`. This module is where both are imported from.
"""

from __future__ import annotations

from .defaults import ENQUEUE_CHUNK, RESULT_MAX_BYTES
from .queue_async import AsyncQueue
from .queue_common import (
    channel,
    listen_statement,
    log,
    make_worker_id,
    operator_id,
    result_json,
)
from .queue_sync import Queue

__all__ = [
    "ENQUEUE_CHUNK",
    "RESULT_MAX_BYTES",
    "AsyncQueue",
    "Queue",
    "channel",
    "listen_statement",
    "log",
    "make_worker_id",
    "operator_id",
    "result_json",
]
