"""Workers run inside the dashboard: pgq_core.worker.Worker instances on a thread of their own.

The pool's thread runs its own asyncio event loop, so a handler that blocks that loop (a
`time.sleep` inside an `async def`) slows the workers only, never the screen. The app talks
to the pool from its own thread: `start`, `stop_all`, `snapshots`, `active` and
`handlers_still_running` are thread-safe, `wait` is awaited on the app's loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

from pgq_core.config import first_line, scrub

from .state import WorkerView

#: on quit, how long running jobs of this app's workers may take to finish before they are
#: told to stop and handed back, and how long handing back may take
QUIT_GRACE = 2.5
QUIT_HAND_BACK = 3.0
THREAD_NAME = "pgq-dashboard-workers"


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
    def close(self) -> None: ...


class WorkerPool:
    """Starts `Worker(dsn, [queue], handler)` on the pool's own loop; stopping is graceful
    (`stop()`) unless asked otherwise.

    A worker that ends with an error is reported through `on_error` (called on the pool's
    thread) and stays listed with its last snapshot, so its counts remain visible.
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
        self._runs: dict[str, concurrent.futures.Future[None]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def can_start(self) -> bool:
        return self.handler is not None

    @property
    def thread(self) -> threading.Thread | None:
        """The thread the workers run on (None until the first start)."""
        return self._thread

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._serve, args=(loop,), name=THREAD_NAME, daemon=True
                )
                self._loop, self._thread = loop, thread
                thread.start()
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=2))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

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
        loop = self._ensure_loop()
        with self._lock:
            self._workers.append(worker)
            self._runs[worker.id] = asyncio.run_coroutine_threadsafe(self._run(worker), loop)
        return str(worker.id)

    async def _run(self, worker: Any) -> None:
        try:
            await worker.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed worker must not take the app down
            if self.on_error is not None:
                self.on_error(scrub(f"worker {worker.id}: {first_line(str(exc))}", self.dsn))

    def _listed(self) -> list[tuple[Any, concurrent.futures.Future[None]]]:
        with self._lock:
            return [(w, self._runs[w.id]) for w in self._workers]

    def snapshots(self) -> list[WorkerView]:
        return [w.snapshot() for w, _ in self._listed()]

    def active(self) -> int:
        return sum(1 for _, run in self._listed() if not run.done())

    def stop_all(self, immediately: bool = False) -> int:
        """Ask every running worker to stop (gracefully, or `immediately`: running handlers are
        told to stop and their jobs handed back at once); returns how many were asked."""
        asked = 0
        for worker, run in self._listed():
            if not run.done():
                worker.stop(immediately=immediately)
                asked += 1
        return asked

    async def wait(self, timeout: float, *, cancel: bool = True) -> int:
        """Wait up to `timeout` for the workers to end; returns how many still run.
        With `cancel`, whatever outlives `timeout` is cancelled (and given 2 s to unwind)."""
        pending = [run for _, run in self._listed() if not run.done()]
        if not pending:
            return 0
        await asyncio.wait([asyncio.wrap_future(r) for r in pending], timeout=timeout)
        late = [r for r in pending if not r.done()]
        if late and cancel:
            for run in late:
                run.cancel()  # cancels the task on the pool's loop
            await asyncio.wait([asyncio.wrap_future(r) for r in late], timeout=2)
            late = [r for r in late if not r.done()]
        return len(late)

    def handlers_still_running(self) -> int:
        """Handlers of this pool's workers that were told to stop and have not returned (a
        sync handler ignoring `ctx.lost` keeps its thread, and so the process, alive)."""
        return sum(w.handlers_still_running() for w, _ in self._listed())

    def close(self) -> None:
        """Stop the pool's loop once no worker runs (a worker still running keeps it)."""
        loop = self._loop
        if loop is not None and not self.active() and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)


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

    def close(self) -> None:
        return None
