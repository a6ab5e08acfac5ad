"""The `Worker`: the state machine that composes the named parts.

States: starting -> running <-> disconnected -> draining (stop asked) -> stopped. Its parts
(pgq_core/worker/__init__.py lists them) each state their own invariants; this one's:
- One step per round trip: what finished is settled together with the claim for the slots it
  frees; a handler's ending never waits for its settlement, and claims are made only while
  the heartbeater renews leases and there is room. Up to two steps are in flight, one per
  lane (lanes.py); the orphan check and the hand-backs wait until none is.
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
import functools
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

import psycopg

from .. import ops
from ..cluster import standby_worker
from ..config import check_worker_settings, describe, first_line, scrub
from ..errors import PgqError, SchemaMissing
from ..migrate import latest_version
from ..queue import make_worker_id
from ..text import printable
from .background import Background
from .dispatch import Dispatcher
from .handback import hand_back_orphans, record_stale, return_buffered, wind_down
from .heartbeater import Heartbeater
from .lanes import Lanes
from .ledger import Ledger
from .link import (
    DataFault,
    Disconnected,
    Lane,
    Link,
    Refused,
    Timeouts,
    Transient,
    application_name,
)
from .listener import listen
from .policy import ClaimRound, FlushPolicy, PrefetchPolicy
from .registry import beat_forever, say_gone
from .runner import Handler
from .settler import Settler
from .snapshot import RunningJob, WorkerSnapshot, take_snapshot
from .step import Step, Stepper

__all__ = ["RunningJob", "Worker", "WorkerSnapshot"]

if TYPE_CHECKING:
    from .metrics import WorkerMetrics

log = logging.getLogger("pgq.worker")
log.addHandler(logging.NullHandler())  # silent unless the application configures logging

HAND_BACK_TIMEOUT = 5.0


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

        self._state = "starting"
        self._ledger = Ledger(lease_s, self._flush.busy_wait, on_release=self._untracked)
        self._stopping = False
        self._immediate = False
        self._stop_requested = False
        self._grace_deadline = 0.0
        self._recover_orphans = False
        #: look for the jobs a failover left (handback.py): at the start and on every reconnect
        self._check_failover = True
        self._timeline: int | None = None
        self._burst_refused: str | None = None
        self._down_since: float | None = None
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
        self._drained = False
        self._dispatcher: Dispatcher | None = None
        self._stepper: Stepper | None = None
        self._heart: Heartbeater | None = None
        self._background = Background()
        self._registered = False
        self.metrics = metrics
        if metrics is not None:
            metrics.attach(self.snapshot, self.id)

    # -- public ---------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._state

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
            self._state,
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
        if loop is None or loop.is_closed():
            self._stop_requested = True
            self._immediate = self._immediate or immediately
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
        self._stepper = Stepper(
            Settler(self._call, self.id, self.lease, self.retry_base),
            dispatcher,
            self._claims,
            self._prefetch,
            self.metrics,
            self.id,
            self._stop_burst if self.burst else None,
        )
        self._heart = Heartbeater(
            self.dsn,
            self.schema,
            self.timeouts,
            self.heartbeat_interval,
            self.id,
            self._loop,
            dispatcher.heartbeat_lost,
            on_renewing=self._wakeup,
        )
        self._ledger.on_hold = self._track
        link = self._main_lane.link
        try:
            try:
                await link.open()
            except psycopg.OperationalError as exc:
                reason = scrub(first_line(str(exc)), self.dsn)
                raise PgqError(f"database unavailable: {reason}") from None
            try:
                await link.call(ops.require_schema(latest_version(), self.schema))
            except Refused as exc:  # in the operator's words, never the class's name
                raise PgqError(f"permission denied: {exc}") from None
            except DataFault as exc:
                raise PgqError(f"database error: {exc}") from None
            except (Disconnected, Transient) as exc:
                raise PgqError(f"database unavailable: {exc}") from None
            if self.burst:  # a standby never drains: nothing there can be claimed
                (role,) = await link.call(ops.server_role())
                if role.standby:
                    raise PgqError(standby_worker(role))
            log.info(
                "worker %s started: queues %s, concurrency %d, lease %gs, database %s%s",
                self.id,
                printable(",".join(self.queues)),
                self.concurrency,
                self.lease.total_seconds(),
                describe(self.dsn),
                ", burst" if self.burst else "",
            )
            self._set_state("running")
            if self._stop_requested:
                self._request_stop(self._immediate)
            self._heart.start()
            app = application_name("listen", self.id)
            hints = listen(self.dsn, self.schema, self.queues, self.timeouts, self._on_hint, app)
            beat = beat_forever(
                link.call, self.id, self.queues, self.concurrency, self._beat_counts
            )
            self._background.start(self._heart, hints, link.call, self.reap_interval, self.id, beat)
            self._registered = True
            try:
                await self._pump()
            except SchemaMissing:
                raise
            except BaseException as exc:
                if not isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                    log.exception("worker %s: internal error; settling and handing back", self.id)
                self._request_stop(immediately=True)
                with contextlib.suppress(Exception):
                    await self._lanes.wait()
                    await self._wind_down()
                raise
            await self._lanes.wait()
            await self._wind_down()
            if self._burst_refused is not None:
                raise PgqError(f"stopped before the queues drained: {self._burst_refused}")
        finally:
            await self._background.stop(HAND_BACK_TIMEOUT)
            if self._registered:
                await say_gone(link.call, self.id)
            await asyncio.to_thread(self._heart.stop)
            await self._lanes.close()
            await link.close()
            dispatcher.runner.shutdown()
            was = self._state
            self._set_state("stopped", quiet=True)
            if was != "starting":
                counts = self._ledger.counts
                faulted = self._ledger.faulted
                log.info(
                    "worker %s stopped: %d done, %d failed, %d lost%s",
                    self.id,
                    *counts,
                    f", {faulted} handed back for database faults" if faulted else "",
                )

    # -- state ----------------------------------------------------------------------------

    def _set_state(self, state: str, *, quiet: bool = False) -> None:
        if state != self._state:
            self._state = state
            if not quiet:
                log.debug("worker %s state %s", self.id, state)

    def _wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _nudge(self) -> None:
        """A job ended, started or left: wake the main loop unless every lane has a step in
        flight. Nothing it decides then can act before a lane is free, and a step's end wakes
        it; waking on each of C handlers' endings ran the loop's whole decision per job."""
        if not self._lanes.full or self._stopping:
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
        self._recover_orphans = True
        self._wakeup()

    def _on_hint(self) -> None:
        self._claims.notified()
        self._wakeup()

    def _request_stop(self, immediately: bool) -> None:
        if self._dispatcher is not None:
            self._dispatcher.stop(keep=0 if immediately else self.concurrency)
        now = time.monotonic()
        if not self._stopping:
            self._stopping = True
            self._grace_deadline = now if immediately else now + self.grace
            if self._state != "disconnected":
                self._set_state("draining")
            log.info(
                "worker %s stopping: no new claims, %d running job(s)%s",
                self.id,
                len(self._ledger.held),
                "" if immediately else f", grace {self.grace:g}s",
            )
        elif immediately and self._grace_deadline > now:
            self._grace_deadline = now
            held = len(self._ledger.held)
            log.info("worker %s stopping now: handing back %d job(s)", self.id, held)
        self._wakeup()

    def _on_link_down(self, reason: str) -> None:
        self._down_since = time.monotonic()
        self._set_state("disconnected", quiet=True)
        log.warning(
            "worker %s: database unavailable (%s); holding %d job(s), retrying with backoff",
            self.id,
            printable(reason),
            len(self._ledger.held),
        )

    def _on_link_up(self) -> None:
        since = self._down_since or time.monotonic()
        self._down_since = None
        self._set_state("draining" if self._stopping else "running", quiet=True)
        log.info(
            "worker %s: database reachable again after %.1fs; checking %d held job(s)",
            self.id,
            time.monotonic() - since,
            len(self._ledger.held),
        )
        self._recover_orphans = self._check_failover = True
        self._claims.notified()
        if self._heart is not None:
            self._heart.beat_now()
        self._wakeup()

    # -- the main loop: settle, claim, wait ---------------------------------------------------

    async def _pump(self) -> None:
        """One step per round trip and lane: settle what finished and claim for the free
        slots."""
        assert self._dispatcher is not None and self._stepper is not None
        lanes = self._lanes
        while True:
            lanes.check()
            if self._drained:
                log.info("worker %s: queues drained (burst)", self.id)
                return
            self._dispatcher.fill()
            now = time.monotonic()
            ledger = self._ledger
            recover = self._recover_orphans or self._check_failover
            if recover or (self._stopping and ledger.buffer):
                if not lanes.quiet:  # a claim in flight is not held yet
                    await self._sleep(self._next_timeout(now))
                    continue
                can_talk = self._main_lane.ready(now)
                if can_talk and recover:
                    timeline = await hand_back_orphans(
                        self._call, ledger, self.id, self._timeline, self._recover_orphans
                    )
                    if timeline is not None:
                        self._timeline = timeline
                        self._recover_orphans = self._check_failover = False
                    continue
                if can_talk and self._stopping and now >= ledger.buffer_retry_at:
                    await return_buffered(self._call, ledger, self.id)
                    continue
            due = ledger.due(now)
            flush = self._flush.due(
                pending=len(due),
                held=len(ledger.held),
                oldest=ledger.first_pending_at,
                now=now,
                stopping=self._stopping,
            )
            claim = (
                not self._stopping
                and now >= self._stepper.paused_until
                and (self._claims.due(now) or (self.burst and not ledger.held and lanes.quiet))
                and self._can_renew(now)
            )
            wanted = False
            if claim:
                self._dispatcher.size_buffer()
                wanted = self._dispatcher.wanted(len(due) if self._dispatcher.target else 0)
            self._dispatcher.starved()
            if flush or wanted:
                lane = lanes.free(now, self._wakeup)
                if lane is not None:
                    step = self._stepper.begin(due, claim)
                    alone = lanes.started + 1 if lanes.quiet else None
                    lanes.start(lane, self._step(step, lane, claim, alone))
                    continue
            if self._stopping and lanes.quiet and (not ledger.held or now >= self._grace_deadline):
                return
            await self._sleep(self._next_timeout(now))

    async def _step(self, step: Step, lane: Lane, claim: bool, alone: int | None) -> None:
        """Run `step` on `lane`; `alone`: its number among the steps started if no other step
        was in flight when it began (else None).

        A burst worker is drained only by a claim that found nothing, settled nothing itself
        and was the only step from its beginning to its end, holding nothing: settling a job
        may make others ready (a workflow's dependents) that a claim in the same statement
        cannot see, and so may a step settling beside it; one begun beside it may still
        claim."""
        assert self._dispatcher is not None and self._stepper is not None
        claimed = await self._stepper.run(step, lane.call)
        drained = (
            claimed == 0 and not step.batch and not self._claims.mid_round and self._dispatcher.idle
        )
        only = alone is not None and self._lanes.started == alone
        if self.burst and claim and self._burst_refused is None and drained and only:
            self._drained = True

    def _can_renew(self, now: float) -> bool:
        """Claim only while the heartbeater renews leases (renewal.py)."""
        assert self._heart is not None
        if self._heart.may_claim(now):
            return True
        if self.burst and (refusal := self._heart.refusal(now)) is not None:
            self._stop_burst(f"renewing leases refused ({refusal})")
        return False

    def _next_timeout(self, now: float) -> float:
        ledger = self._ledger
        deadlines = [now + 1.0]
        if self._stopping:
            deadlines.append(self._grace_deadline)
            if ledger.buffer:
                deadlines.append(ledger.buffer_retry_at)
        ready_at = self._main_lane.ready_at
        if not self._main_lane.link.up:
            pass  # woken when the link is back
        elif ready_at > now:
            deadlines.append(ready_at)
        else:
            deadlines += ledger.settle_deadlines(now, self._flush.delay)
            assert self._dispatcher is not None and self._stepper is not None
            if not self._stopping and self._dispatcher.wanted(0) and self._can_renew(now):
                deadlines.append(max(self._claims.next_poll, self._stepper.paused_until))
        return max(0.0, min(deadlines) - now)

    async def _sleep(self, timeout: float) -> None:
        assert self._wake is not None
        if timeout <= 0 or self._wake.is_set():
            await asyncio.sleep(0)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        self._wake.clear()

    def _stop_burst(self, why: str) -> None:
        """A burst worker that cannot claim stops (its held jobs finish or go back) and `run()`
        raises: the queues were not drained."""
        if self._burst_refused is None:
            self._burst_refused = why
            log.error(
                "worker %s: %s; stopping (burst), the queues are not drained",
                self.id,
                printable(why),
            )
            self._request_stop(immediately=False)

    async def _wind_down(self) -> None:
        """Settle every finished job, then hand back the jobs still running."""
        assert self._dispatcher is not None and self._stepper is not None
        settle = functools.partial(self._stepper.step, claim=False)
        ready = self._main_lane.ready
        await wind_down(self._call, self._dispatcher, ready, settle, self.id, HAND_BACK_TIMEOUT)
