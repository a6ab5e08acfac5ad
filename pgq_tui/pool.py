"""Workers run inside the dashboard: pgq_core.worker.Worker instances as asyncio tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

from pgq_core.config import first_line, scrub

from .widgets.workers_table import WorkerView

#: on quit, how long running jobs of this app's workers may take to finish before they are
#: told to stop and handed back, and how long handing back may take
QUIT_GRACE = 2.5
QUIT_HAND_BACK = 3.0


class Pool(Protocol):
    """What the app needs of its workers; `StaticPool` stands in for layout snapshots."""

    @property
    def can_start(self) -> bool: ...
    def start(self, queue: str) -> str: ...
    def snapshots(self) -> Sequence[WorkerView]: ...
    def active(self) -> int: ...
    def stop_all(self, immediately: bool = False) -> int: ...
    async def wait(self, timeout: float, *, cancel: bool = True) -> int: ...
    def handlers_still_running(self) -> int: ...


class WorkerPool:
    """Starts `Worker(dsn, [queue], handler)` tasks; stopping is always graceful (`stop()`).

    A worker that ends with an error is reported through `on_error` and stays listed with its
    last snapshot, so its counts remain visible.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        handler: Callable[..., Any] | None,
        *,
        concurrency: int = 4,
        lease: timedelta = timedelta(seconds=30),
        grace: float = 5.0,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.handler = handler
        self.concurrency = concurrency
        self.lease = lease
        self.grace = grace
        self.on_error = on_error
        self._workers: list[Any] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def can_start(self) -> bool:
        return self.handler is not None

    def start(self, queue: str) -> str:
        from pgq_core.worker import Worker

        if self.handler is None:
            raise RuntimeError("no handler")
        worker = Worker(
            self.dsn,
            [queue],
            self.handler,
            schema=self.schema,
            concurrency=self.concurrency,
            lease=self.lease,
            grace=self.grace,
        )
        self._workers.append(worker)
        self._tasks[worker.id] = asyncio.create_task(self._run(worker), name=f"pgq {worker.id}")
        return str(worker.id)

    async def _run(self, worker: Any) -> None:
        try:
            await worker.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed worker must not take the app down
            if self.on_error is not None:
                self.on_error(scrub(f"worker {worker.id}: {first_line(str(exc))}", self.dsn))

    def snapshots(self) -> list[WorkerView]:
        return [w.snapshot() for w in self._workers]

    def active(self) -> int:
        return sum(1 for task in self._tasks.values() if not task.done())

    def stop_all(self, immediately: bool = False) -> int:
        """Ask every running worker to stop (gracefully, or `immediately`: running handlers are
        told to stop and their jobs handed back at once); returns how many were asked."""
        asked = 0
        for worker in self._workers:
            if not self._tasks[worker.id].done():
                worker.stop(immediately=immediately)
                asked += 1
        return asked

    async def wait(self, timeout: float, *, cancel: bool = True) -> int:
        """Wait up to `timeout` for the workers to end; returns how many still run.
        With `cancel`, whatever outlives `timeout` is cancelled (and given 2 s to unwind)."""
        pending = [t for t in self._tasks.values() if not t.done()]
        if not pending:
            return 0
        _, late = await asyncio.wait(pending, timeout=timeout)
        if late and cancel:
            for task in late:
                task.cancel()
            _, late = await asyncio.wait(late, timeout=2)
        return len(late)

    def handlers_still_running(self) -> int:
        """Handlers of this pool's workers that were told to stop and have not returned (a
        sync handler ignoring `ctx.lost` keeps its thread, and so the process, alive)."""
        return sum(w.handlers_still_running() for w in self._workers)


class StaticPool:
    """Fixed worker snapshots, for layout snapshots and screenshots; cannot start workers."""

    def __init__(self, snapshots: Sequence[WorkerView]) -> None:
        self._snapshots = list(snapshots)

    @property
    def can_start(self) -> bool:
        return False

    def start(self, queue: str) -> str:
        raise RuntimeError("static pool")

    def snapshots(self) -> Sequence[WorkerView]:
        return self._snapshots

    def active(self) -> int:
        return 0

    def stop_all(self, immediately: bool = False) -> int:
        return 0

    async def wait(self, timeout: float, *, cancel: bool = True) -> int:
        return 0

    def handlers_still_running(self) -> int:
        return 0
