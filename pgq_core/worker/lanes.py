"""The lanes: the worker's statement connections for steps, so two steps' commits overlap.

A step (step.py) is one transaction and one round trip. On one connection the next step waits
for the last one's commit, and the worker's slots wait with it once the buffer runs dry; the
plain-SQL baseline's C connections commit side by side. So while a step is in flight on the
main lane (the worker's link, which the orphan check, the hand-backs and the chores use too),
the next one may run on a second lane: one settles and claims while the other does the same for
the handlers that ended meanwhile.

Invariants:
- At most one step per lane in flight. The second lane is opened only when a step is wanted
  while the main one is busy; failing to open it only means the steps take turns on the main
  lane until it is tried again (`REOPEN` seconds later); losing it, the same until its link
  reconnects (the worker then looks for orphans: its step's claim may have committed unseen).
- `quiet`: no step in flight on any lane. The orphan check and the hand-backs run only then,
  on the main lane: a claim in flight is not held yet and would be taken for an orphan.
- A step that raised for anything but the database (a bug) is not lost: `check()` re-raises
  it in the main loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg

from .link import Lane

log = logging.getLogger("pgq.worker")

#: Seconds before a second lane that failed to open (or was lost) is tried again.
REOPEN = 5.0


class Lanes:
    """The main lane (`main`) and up to `extra` more made by `make_second` when needed."""

    def __init__(
        self, main: Lane, make_second: Callable[[], Lane] | None, extra: int = 1
    ) -> None:
        """`make_second`: None keeps every step on the main lane. A third lane measured no
        faster than two on a 2-core machine (C = 10, no-op jobs), hence `extra` = 1."""
        self.main = main
        self._make_second = make_second
        self._extra = extra
        self._others: list[Lane] = []
        self._opening: asyncio.Task[None] | None = None
        self._reopen_at = 0.0
        self._busy: dict[Lane, asyncio.Task[Any]] = {}
        #: steps started so far
        self.started = 0
        self._failure: BaseException | None = None
        self._wake: Callable[[], None] = lambda: None

    @property
    def quiet(self) -> bool:
        """No step in flight."""
        return not self._busy

    @property
    def in_flight(self) -> int:
        """Steps in flight (a step's own task counts itself)."""
        return len(self._busy)

    @property
    def full(self) -> bool:
        """Every lane has a step in flight and none can be opened now: only a step's end
        (which wakes the worker) frees one."""
        if len(self._busy) < 1 + len(self._others):
            return False
        return self._make_second is None or self._opening is not None or (
            len(self._others) >= self._extra
        )

    @property
    def statements(self) -> int:
        return self.main.statements + sum(lane.statements for lane in self._others)

    def free(self, now: float, wake: Callable[[], None]) -> Lane | None:
        """A lane that may take a step now: the main one first; else the second, opened in
        the background (`wake` called once it is) if it is not yet."""
        self._wake = wake
        if self.main not in self._busy and self.main.ready(now):
            return self.main
        for lane in self._others:
            if lane not in self._busy and lane.ready(now):
                return lane
        if len(self._others) < self._extra:
            self._open_second(now)
        return None

    def start(self, lane: Lane, step: Coroutine[Any, Any, Any]) -> None:
        """Run `step` on `lane` (free, from `free`) as a task of its own."""
        task = asyncio.get_running_loop().create_task(step)
        self.started += 1
        self._busy[lane] = task
        task.add_done_callback(lambda t: self._ended(lane, t))

    def check(self) -> None:
        """Re-raise what a step raised that was not the database's doing."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    async def wait(self) -> None:
        """Until no step is in flight."""
        while self._busy:
            await asyncio.wait(list(self._busy.values()))

    async def close(self) -> None:
        if self._opening is not None:
            self._opening.cancel()
            with contextlib.suppress(BaseException):
                await self._opening
        for lane in self._others:
            await lane.link.close()

    def _ended(self, lane: Lane, task: asyncio.Task[Any]) -> None:
        if self._busy.get(lane) is task:
            del self._busy[lane]
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._failure = self._failure or exc
        self._wake()

    def _open_second(self, now: float) -> None:
        if self._make_second is None or self._opening is not None or now < self._reopen_at:
            return
        self._opening = asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        assert self._make_second is not None
        lane = self._make_second()
        try:
            await lane.link.open()
        except (psycopg.Error, OSError) as exc:
            log.debug("second statement connection not opened (%s); steps take turns", exc)
            self._reopen_at = time.monotonic() + REOPEN
            with contextlib.suppress(psycopg.Error):
                await lane.link.close()
        else:
            self._others.append(lane)
        finally:
            self._opening = None
            self._wake()
