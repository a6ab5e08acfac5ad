"""When the dashboard's reads run: each named read (the poll, the leases, a slow view, the
latency, the primary) is in flight at most once, starts no sooner than its gap after it last
started, and one asked for while it runs (with `again`) is owed: the caller runs it once the
read in flight ends. No I/O and no Textual: the app starts the reads it is allowed to."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["PollScheduler"]


class PollScheduler:
    """In-flight reads by name, when each last started, and which are owed a run."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._running: set[str] = set()
        self._owed: set[str] = set()
        self._started: dict[str, float] = {}

    def start(self, name: str, gap: float = 0.0, *, again: bool = False) -> bool:
        """True, and `name` is in flight from now, when it may start: it is not in flight and
        at least `gap` seconds passed since it last started. In flight, `again` owes it a run
        after this one (`end` says so); otherwise the ask is dropped."""
        if name in self._running:
            if again:
                self._owed.add(name)
            return False
        now = self._clock()
        last = self._started.get(name)
        if last is not None and now - last < gap:
            return False
        self._running.add(name)
        self._owed.discard(name)
        self._started[name] = now
        return True

    def end(self, name: str) -> bool:
        """`name` is no longer in flight. True when a run was asked for meanwhile (`again`):
        the caller asks for it now; the debt is paid either way."""
        self._running.discard(name)
        owed = name in self._owed
        self._owed.discard(name)
        return owed

    def running(self, name: str) -> bool:
        return name in self._running

    def wait(self, name: str, gap: float) -> float:
        """Seconds until `gap` has passed since `name` last started (0 when it has, or when it
        never started)."""
        last = self._started.get(name)
        if last is None:
            return 0.0
        return max(0.0, last + gap - self._clock())
