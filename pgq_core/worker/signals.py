"""Stop signals: SIGTERM stops a worker gracefully, a second one (or SIGINT twice) at once.

Invariants: a signal received while the worker starts (importing its handler, connecting) is
recorded and stops the worker as soon as it runs, never kills the process; the handlers found
before are put back when the worker is done (`restore`, and `run_until_stopped` on return).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .runtime import Worker


class CaughtSignals:
    """SIGTERM and SIGINT recorded in `received` from `catch_stop_signals()` until
    `run_until_stopped` takes them over: a worker told to stop while it starts (importing its
    handler, connecting) stops as soon as it runs, never dies of the signal. `restore()` puts
    back the handlers found, for a worker started in a process that goes on."""

    def __init__(self) -> None:
        import signal

        self.received: list[str] = []
        self._previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        for sig in self._previous:
            signal.signal(sig, self._record)

    def _record(self, signum: int, frame: object) -> None:
        import signal

        self.received.append(signal.Signals(signum).name)

    def restore(self) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def catch_stop_signals() -> CaughtSignals:
    """Record SIGTERM and SIGINT from now on (see `CaughtSignals`); call it first thing."""
    return CaughtSignals()


async def run_until_stopped(
    worker: Worker,
    on_signal: Callable[[str, int], None] | None = None,
    caught: Sequence[str] = (),
) -> None:
    """Run `worker` with SIGTERM/SIGINT handled: the first stops gracefully, the second at once.
    `caught` are the signals `catch_stop_signals` recorded before; they count as received now."""
    import signal

    loop = asyncio.get_running_loop()
    received: list[str] = []

    def handle(name: str) -> None:
        received.append(name)
        if on_signal is not None:
            on_signal(name, len(received))
        worker.stop(immediately=len(received) > 1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, handle, sig.name)
    for name in list(caught):
        handle(name)
    try:
        await worker.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
