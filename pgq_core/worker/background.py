"""The background tasks of a worker's main loop: the listener, the reaper, the scheduler and the
worker's beat in `workers`, started
once the worker runs, and the chores it starts on the way (stale writes recorded).

Invariants: the listener waits for the heartbeater's first successful round trip (it must not
take the last connection a server allows before the heartbeat has one); on `stop` the chores
get up to `timeout` seconds to finish, then every task is cancelled and awaited, so none
outlives `run()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from .heartbeater import Heartbeater
from .reaper import reap_forever
from .scheduler import SlotCounts, schedule_forever


class Background:
    """The background tasks and chores of one running worker."""

    def __init__(self) -> None:
        #: the scheduler's slots enqueued and skipped, kept across its restarts
        self.slots = SlotCounts()
        self._tasks: list[asyncio.Task[None]] = []
        self._chores: set[asyncio.Task[None]] = set()

    def start(
        self,
        heart: Heartbeater,
        listener: Coroutine[Any, Any, None],
        call: Callable[..., Awaitable[list[Any]]],
        reap_interval: float,
        worker_id: str,
        beat: Coroutine[Any, Any, None] | None = None,
        on_due: Callable[[], None] | None = None,
    ) -> None:
        """`beat`: the worker's row kept in `workers` (registry.py); `on_due`: told when schedule
        slots enqueued ahead come due (their NOTIFY came early)."""
        self._tasks = [
            asyncio.create_task(heart.after_first_beat(listener)),
            asyncio.create_task(reap_forever(call, reap_interval, worker_id)),
            asyncio.create_task(
                schedule_forever(call, worker_id, counts=self.slots, on_due=on_due)
            ),
        ]
        if beat is not None:
            self._tasks.append(asyncio.create_task(beat))

    def chore(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` beside the main loop; it is awaited (or cancelled) by `stop`."""
        task = asyncio.create_task(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def stop(self, timeout: float) -> None:
        if self._chores:
            await asyncio.wait(self._chores, timeout=timeout)
        every = [*self._tasks, *self._chores]
        for task in every:
            task.cancel()
        await asyncio.gather(*every, return_exceptions=True)
