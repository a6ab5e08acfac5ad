"""No-op job handlers for the bench: `pgq worker --handler pgq_bench.handlers:noop_sync` (a plain
function, run on the worker's threads) or `...:noop_async` (an `async def`, run on its loop).
They do nothing, so a drain measures the queue, not the work."""

from __future__ import annotations

from typing import Any

#: `--handler` specs of the no-op handlers, by kind.
HANDLER_SPECS = {
    "sync": "pgq_bench.handlers:noop_sync",
    "async": "pgq_bench.handlers:noop_async",
}


def noop_sync(ctx: Any) -> None:
    """Completes the job at once (a plain function)."""
    return None


async def noop_async(ctx: Any) -> None:
    """Completes the job at once (a coroutine)."""
    return None
