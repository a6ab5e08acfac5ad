"""The `Worker`: composes the named parts and runs them through its states (state.py).

Its parts (pgq_core/worker/__init__.py lists them) each state their own invariants; the main
loop's are in mainloop.py. This one's:
- On stop nothing new is claimed or started; the buffered jobs go back at once, running
  handlers get `grace` seconds; then the finished jobs are settled before anything is handed
  back, on every way out of `run()`, and `run()` never raises for a handler's or a job's fault.
- At the start and after a reconnect, jobs running under a fence from before a promotion
  (anyone's: such a fence writes nothing) go back at once; after a reconnect, so do jobs
  running under this worker's id that it does not hold (a claim whose reply was lost). At the
  start those are left to their leases: a live twin under the same id may hold them. Neither
  counts the attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from .. import ops
from ..config import check_worker_settings, describe
from ..errors import PgqError, SchemaMissing
from ..queue import make_worker_id
from ..text import printable
from .background import Background
from .dispatch import Dispatcher
from .handback import Recovery, record_stale
from .heartbeater import Heartbeater
from .lanes import Lanes
from .ledger import Ledger
from .link import Lane, Link, Timeouts, application_name, open_checked
from .listener import listen
from .mainloop import HAND_BACK_TIMEOUT, MainLoop
from .policy import ClaimRound, FlushPolicy, PrefetchPolicy
from .registry import beat_forever, say_gone
from .runner import Handler
from .settler import Settler
from .snapshot import RunningJob, WorkerSnapshot, take_snapshot
from .state import Lifecycle, State
from .step import Stepper

__all__ = ["RunningJob", "Worker", "WorkerSnapshot"]

if TYPE_CHECKING:
    from .metrics import WorkerMetrics

log = logging.getLogger("pgq.worker")
log.addHandler(logging.NullHandler())  # silent unless the application configures logging


class Worker:
    """Runs `handler` on jobs of `queues` until `stop()` (or, with `burst`, until drained).

    `run()` is a coroutine: the CLI runs it under `asyncio.run`, the dashboard inside its own
    loop. `stop()` and `snapshot()` may be called from any thread.
    """

    def __init__(
        self,
        dsn: str,
        queues: Sequence[str],
        handler: Handler,
        *,
        schema: str = "pgq",
        concurrency: int = 10,
        lease: timedelta = timedelta(seconds=30),
        burst: bool = False,
        grace: float = 30.0,
        poll_interval: float = 1.0,
        max_poll_interval: float | None = None,
        reap_interval: float | None = None,
        flush_delay: float = 0.005,
        retry_base: float = ops.BACKOFF_BASE,
        worker_id: str | None = None,
        timeout: float | None = None,
        statement_timeout: float = 30.0,
        lock_timeout: float = 5.0,
        metrics: WorkerMetrics | None = None,
        prefetch: int | None = None,
    ) -> None:
        try:
            check_worker_settings(
                queues, concurrency, lease, timeout, statement_timeout, lock_timeout, prefetch
            )
        except ValueError as exc:
            raise PgqError(str(exc)) from None
        self.id = worker_id or make_worker_id()
        self.dsn = dsn
        self.schema = schema
        self.queues = tuple(dict.fromkeys(queues))
        self.handler = handler
        self.concurrency = concurrency
        self.lease = lease
        self.burst = burst
        self.grace = grace
        self.timeout = timeout
        self.poll_interval = poll_interval
        idle_cap = 10 * poll_interval if max_poll_interval is None else max_poll_interval
        lease_s = lease.total_seconds()
        self.heartbeat_interval = lease_s / 3
        self.reap_interval = reap_interval or min(5.0, max(0.5, lease_s / 2))
        self.retry_base = retry_base
        self.timeouts = Timeouts(statement=statement_timeout, lock=lock_timeout)
        self._claims = ClaimRound(self.queues, poll_interval, idle_cap)
        self._flush = FlushPolicy(flush_delay, max(concurrency, 100))
        self._prefetch = PrefetchPolicy(concurrency, prefetch)

        self._ledger = Ledger(lease_s, self._flush.busy_wait, on_release=self._untracked)
        self._life = Lifecycle(self.id, grace, lambda: len(self._ledger.held))
        self._recovery = Recovery()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        link = Link(
            dsn,
            schema,
            self.timeouts,
            self._on_link_down,
            self._on_link_up,
            application_name("main", self.id),
        )
        self._main_lane = Lane(link, self.id)
        self._call = self._main_lane.call
        self._lanes = Lanes(self._main_lane, self._second_lane)
        self._dispatcher: Dispatcher | None = None
        self._heart: Heartbeater | None = None
        self._background = Background()
        self.metrics = metrics
        if metrics is not None:
            metrics.attach(self.snapshot, self.id)

    # -- public ---------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """One of starting, running, draining, disconnected, stopped (state.py)."""
        return self._life.state.reported

    @property
    def statements(self) -> int:
        """Statements this worker's main loop ran."""
        return self._lanes.statements

    @property
    def idle_interval(self) -> float:
        """The current polling interval while the queues stay empty (it backs off)."""
        return self._claims.idle_delay

    def _beat_counts(self) -> tuple[int, int, int]:
        """Jobs running, done and failed, for this worker's row in `workers`."""
        snap = self.snapshot()
        return len(snap.running), snap.done, snap.failed

    def snapshot(self) -> WorkerSnapshot:
        """The worker now: its state, jobs running, done, failed and lost counts."""
        return take_snapshot(
            self.id,
            self.queues,
            self.state,
            self.concurrency,
            self._ledger,
            self._background.slots,
        )

    def stop(self, immediately: bool = False) -> None:
        """Graceful: stop claiming, let running jobs finish within `grace`, hand the rest back.

        With `immediately` (or on a second call after the grace period began) nothing waits:
        finished jobs are settled, running handlers are told to stop and their jobs are handed
        back at once.
        """
        loop = self._loop
        if loop is None or loop.is_closed():  # before run(): said once it has started
            self._life.stop(immediately, time.monotonic())
            return
        try:
            running_here = asyncio.get_running_loop() is loop
        except RuntimeError:
            running_here = False
        if running_here:
            self._request_stop(immediately)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._request_stop, immediately)

    def handlers_still_running(self) -> int:
        """Handlers executing now; after `run()` returned, those told to stop that did not."""
        return self._dispatcher.runner.still_running() if self._dispatcher is not None else 0

    async def run(self) -> None:
        """Work until stopped (or drained, with `burst`). Raises if the first connect fails.

        A worker runs once; make a new one to run again.
        """
        if self._loop is not None:
            raise PgqError(f"worker {self.id} has already run")
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._dispatcher = dispatcher = Dispatcher(
            self.handler,
            self.concurrency,
            self.id,
            self.schema,
            self.timeout,
            self._ledger,
            self._prefetch,
            self._nudge,
            lambda lost: self._background.chore(record_stale(self._call, lost, self.id)),
        )
        stepper = Stepper(
            Settler(self._call, self.id, self.lease, self.retry_base),
            dispatcher,
            self._claims,
            self._prefetch,
            self.metrics,
            self.id,
            self._stop_burst if self.burst else None,
        )
        self._heart = heart = Heartbeater(
            self.dsn,
            self.schema,
            self.timeouts,
            self.heartbeat_interval,
            self.id,
            self._loop,
            dispatcher.heartbeat_lost,
            on_renewing=self._wakeup,
        )
        main = MainLoop(
            self.id,
            self.burst,
            self._life,
            dispatcher,
            stepper,
            self._lanes,
            self._claims,
            self._flush,
            heart,
            self._recovery,
            self._wake,
            self._stop_burst,
        )
        self._ledger.on_hold = self._track
        link = self._main_lane.link
        started = registered = False
        try:
            if not await open_checked(
                link, self.dsn, self.schema, self.burst, lambda: self._life.state.stopping
            ):
                log.info("worker %s stopped before a writable primary answered", self.id)
                return
            log.info(
                "worker %s started: queues %s, concurrency %d, lease %gs, database %s%s",
                self.id,
                printable(",".join(self.queues)),
                self.concurrency,
                self.lease.total_seconds(),
                describe(self.dsn),
                ", burst" if self.burst else "",
            )
            self._life.started(time.monotonic())
            started = True
            if self._life.state.stopping:  # asked while starting
                dispatcher.stop(keep=0)
            heart.start()
            app = application_name("listen", self.id)
            hints = listen(self.dsn, self.schema, self.queues, self.timeouts, self._on_hint, app)
            beat = beat_forever(
                link.call, self.id, self.queues, self.concurrency, self._beat_counts
            )
            self._background.start(
                heart, hints, link.call, self.reap_interval, self.id, beat, on_due=self._on_hint
            )
            registered = True
            try:
                await main.run()
            except SchemaMissing:
                raise
            except BaseException as exc:
                if not isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                    log.exception("worker %s: internal error; settling and handing back", self.id)
                self._request_stop(immediately=True)
                with contextlib.suppress(Exception):
                    await self._lanes.wait()
                    await main.wind_down()
                raise
            await self._lanes.wait()
            await main.wind_down()
            if self._life.refusal is not None:
                raise PgqError(f"stopped before the queues drained: {self._life.refusal}")
        finally:
            await self._background.stop(HAND_BACK_TIMEOUT)
            if registered:
                await say_gone(link.call, self.id)
            await asyncio.to_thread(heart.stop)
            await self._lanes.close()
            await link.close()
            dispatcher.runner.shutdown()
            self._life.transition(State.STOPPED, "run() ended")
            if started:
                counts = self._ledger.counts
                faulted = self._ledger.faulted
                log.info(
                    "worker %s stopped: %d done, %d failed, %d lost%s",
                    self.id,
                    *counts,
                    f", {faulted} handed back for database faults" if faulted else "",
                )

    # -- callbacks from the parts ---------------------------------------------------------

    def _wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _nudge(self) -> None:
        """A job ended, started or left: wake the main loop unless every lane has a step in
        flight. Nothing it decides then can act before a lane is free, and a step's end wakes
        it; waking on each of C handlers' endings ran the loop's whole decision per job."""
        if not self._lanes.full or self._life.state.stopping:
            self._wakeup()

    def _track(self, job_id: int, fence: int) -> None:
        """A job came: the heartbeater keeps its lease and writes its handler's progress."""
        assert self._heart is not None
        held = self._ledger.held.get(job_id)
        self._heart.track(job_id, fence, held.ctx._progress if held is not None else None)

    def _untracked(self, job_id: int) -> None:
        if self._heart is not None:
            self._heart.untrack(job_id)
        self._nudge()

    def _second_lane(self) -> Lane:
        link = Link(
            self.dsn,
            self.schema,
            self.timeouts,
            self._on_second_down,
            self._wakeup,
            application_name("step", self.id),
            says_outages=False,  # the main link says it
        )
        return Lane(link, self.id)

    def _on_second_down(self, reason: str) -> None:
        """A step on the second lane may have claimed unseen: look for orphans (on the main
        lane, once no step is in flight)."""
        log.info(
            "worker %s: second statement connection lost (%s); steps take turns on the main one",
            self.id,
            printable(reason),
        )
        self._recovery.lane_lost()
        self._wakeup()

    def _on_hint(self) -> None:
        self._claims.notified()
        self._wakeup()

    def _request_stop(self, immediately: bool) -> None:
        if self._dispatcher is not None:
            self._dispatcher.stop(keep=0 if immediately else self.concurrency)
        self._life.stop(immediately, time.monotonic())
        self._wakeup()

    def _stop_burst(self, why: str) -> None:
        """A burst worker that cannot claim stops (its held jobs finish or go back) and `run()`
        raises: the queues were not drained."""
        if self._life.refuse(why, time.monotonic()) and self._dispatcher is not None:
            self._dispatcher.stop(keep=self.concurrency)
        self._wakeup()

    def _on_link_down(self, reason: str) -> None:
        self._life.link_lost(reason, time.monotonic())

    def _on_link_up(self) -> None:
        self._life.link_back(time.monotonic())
        self._recovery.reconnected()
        self._claims.notified()
        if self._heart is not None:
            self._heart.beat_now()
        self._wakeup()
