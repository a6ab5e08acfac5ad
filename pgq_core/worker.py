"""The worker runtime: claims jobs, runs a handler on each, heartbeats, settles, reaps.

Invariants:
- A job is *held* from its claim until its settlement (complete, fail or release) committed or
  a write of it matched no row (lease lost). Held jobs never exceed `concurrency`: claims are
  sized to the free capacity, and a handler still running after its lease was lost keeps its
  slot until it returns.
- Every write carries the job's fence; a write that matches no row means another claim (or an
  operator) owns the job: the handler is told (`JobContext.lost`, async tasks are cancelled),
  its result is thrown away, a `stale` event is recorded, and the worker goes on.
- Completions and failures are settled in batches, each member checked against its own
  id + fence, flushed as soon as every held job has finished, a batch is full, or the oldest
  has waited `flush_delay`. The hot path is one statement per step: complete what finished
  and claim for the slots that frees (`complete_and_claim`): one round trip, one commit.
- A job counts as done only once the statement completing it committed.
- One connection carries the queue's statements, a second one LISTENs. Losing the database
  keeps the process: it logs one line, retries with backoff, and resumes; held jobs are then
  either still its own (the fence matches) or given up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import inspect
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from . import ops
from .config import describe, first_line, scrub
from .errors import LeaseLost, PgqError, SchemaMissing
from .models import Job
from .ops import Op
from .queries import query
from .queue import AsyncQueue, Queue, listen_statement, make_worker_id

log = logging.getLogger("pgq.worker")
log.addHandler(logging.NullHandler())  # silent unless the application configures logging

#: libpq options for every worker connection: fail fast when the server is gone.
CONNECT_OPTIONS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
RECONNECT_FIRST = 0.25
RECONNECT_MAX = 5.0
ERROR_TEXT_MAX = 2000
HAND_BACK_TIMEOUT = 5.0


class JobContext:
    """What a handler gets: the claimed job, and whether its lease is still held."""

    __slots__ = (
        "_completed",
        "_lost",
        "attempts",
        "fence",
        "id",
        "lease_until",
        "max_attempts",
        "payload",
        "queue",
        "schema",
        "worker_id",
    )

    def __init__(self, job: Job, worker_id: str, schema: str) -> None:
        self.id: int = job.id
        self.queue: str = job.queue
        self.payload: Any = job.payload
        self.fence: int = job.fence
        self.attempts: int = job.attempts
        self.max_attempts: int = job.max_attempts
        self.lease_until: datetime = job.lease_until
        self.worker_id = worker_id
        self.schema = schema
        self._lost = False
        self._completed = False

    @property
    def lost(self) -> bool:
        """True once the lease is lost or handed back: stop, the result will be thrown away."""
        return self._lost

    def complete(self, conn: psycopg.Connection[Any]) -> None:
        """Complete this job inside `conn`'s open transaction, together with the handler's writes.

        Raises LeaseLost if the fence is stale (the caller's transaction must then roll back).
        The worker does not complete the job again once this returned and the handler returns.
        """
        Queue(conn, self.schema).complete(self.id, self.fence, worker=self.worker_id, conn=conn)
        self._completed = True

    async def complete_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """`complete` for async handlers."""
        await AsyncQueue(conn, self.schema).complete(
            self.id, self.fence, worker=self.worker_id, conn=conn
        )
        self._completed = True

    def completed_in_transaction(self) -> None:
        """Mark the job as completed by the handler itself (it ran `Queue.complete(conn=...)`)."""
        self._completed = True

    def __repr__(self) -> str:
        return f"JobContext(id={self.id}, queue={self.queue!r}, fence={self.fence})"


Handler = Callable[[JobContext], Any]


@dataclass(frozen=True)
class RunningJob:
    id: int
    queue: str
    fence: int
    attempts: int
    started_at: float


@dataclass(frozen=True)
class WorkerSnapshot:
    id: str
    queues: tuple[str, ...]
    state: str
    concurrency: int
    done: int
    failed: int
    lost: int
    running: tuple[RunningJob, ...]


@dataclass(eq=False)
class _Held:
    job: Job
    ctx: JobContext
    started_at: float
    task: asyncio.Task[None] | None = None
    error: str | None = None
    #: its completion was in flight when the connection broke: it may have committed unseen
    uncertain: bool = False


class _Disconnected(Exception):
    """The database connection is down; the link is reconnecting."""


class _Transient(Exception):
    """A statement failed but the connection is fine (deadlock, timeout...): retry later."""


def load_handler(spec: str) -> Handler:
    """`module:callable` (the callable may be dotted); the current directory is importable."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise PgqError(f"invalid handler {spec!r}: use MODULE:CALLABLE, e.g. myapp.jobs:send_mail")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is one line for the operator
        raise PgqError(
            f"cannot import handler module {module_name!r}: {type(exc).__name__}: "
            f"{first_line(str(exc))}"
        ) from None
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise PgqError(
                f"handler {spec!r}: module {module_name} has no attribute {attr_path!r}"
            ) from None
    if not callable(target):
        raise PgqError(f"handler {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def _is_async(handler: Handler) -> bool:
    call = getattr(handler, "__call__", None)  # noqa: B004 - async __call__ of an object
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:ERROR_TEXT_MAX]


class _Link:
    """The worker's statement connection: one statement at a time, reconnecting on loss."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        on_down: Callable[[str], None],
        on_up: Callable[[], None],
    ) -> None:
        self._dsn = dsn
        self._schema = schema
        self._on_down = on_down
        self._on_up = on_up
        self._queue: AsyncQueue | None = None
        self._lock = asyncio.Lock()
        self._reconnecting: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def up(self) -> bool:
        return self._queue is not None

    async def _connect(self) -> AsyncQueue:
        conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, **CONNECT_OPTIONS)
        return AsyncQueue(conn, self._schema, owns=True)

    async def open(self) -> None:
        self._queue = await self._connect()

    async def call(self, *step: Op[Any]) -> list[Any]:
        """Run the ops in order; several run in one transaction, pipelined in one round trip."""
        async with self._lock:
            q = self._queue
            if q is None:
                raise _Disconnected
            try:
                if len(step) == 1:
                    return [await q.run(step[0])]
                return await self._pipelined(q, step)
            except psycopg.errors.UndefinedTable:
                raise SchemaMissing(
                    f"schema {self._schema!r} has no pgq tables: run `pgq migrate` first"
                ) from None
            except psycopg.Error as exc:
                reason = scrub(first_line(str(exc)) or type(exc).__name__, self._dsn)
                if q.conn.broken or q.conn.closed:
                    self._down(q, reason)
                    raise _Disconnected from None
                raise _Transient(reason) from None

    async def _pipelined(self, q: AsyncQueue, step: Sequence[Op[Any]]) -> list[Any]:
        conn = q.conn
        cursors = []
        async with conn.pipeline(), conn.transaction():
            for op in step:
                cur = conn.cursor()
                await cur.execute(query(op.name, self._schema), op.params)
                cursors.append(cur)
        return [op.read(await cur.fetchall()) for op, cur in zip(step, cursors, strict=True)]

    def _down(self, q: AsyncQueue, reason: str) -> None:
        if self._queue is not q:
            return
        self._queue = None
        self._on_down(reason)
        self._reconnecting = asyncio.create_task(self._reconnect(q))

    async def _reconnect(self, old: AsyncQueue) -> None:
        with contextlib.suppress(psycopg.Error):
            await old.close()
        delay = RECONNECT_FIRST
        while not self._closed:
            await asyncio.sleep(delay)
            try:
                fresh = await self._connect()
            except psycopg.Error:
                delay = min(delay * 2, RECONNECT_MAX)
                continue
            if self._closed:
                await fresh.close()
                return
            self._queue = fresh
            self._on_up()
            return

    async def close(self) -> None:
        self._closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
        q, self._queue = self._queue, None
        if q is not None:
            with contextlib.suppress(psycopg.Error):
                await q.close()


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
    ) -> None:
        if not queues or not all(queues):
            raise PgqError("a worker needs at least one non-empty queue name")
        if concurrency < 1:
            raise PgqError(f"concurrency must be at least 1, got {concurrency}")
        if lease.total_seconds() <= 0:
            raise PgqError("lease must be positive")
        self.id = worker_id or make_worker_id()
        self.dsn = dsn
        self.schema = schema
        self.queues = tuple(dict.fromkeys(queues))
        self.handler = handler
        self.concurrency = concurrency
        self.lease = lease
        self.burst = burst
        self.grace = grace
        self.poll_interval = poll_interval
        idle_cap = 10 * poll_interval if max_poll_interval is None else max_poll_interval
        self.max_poll_interval = max(poll_interval, idle_cap)
        lease_s = lease.total_seconds()
        self.heartbeat_interval = lease_s / 3
        self.reap_interval = reap_interval or min(5.0, max(0.5, lease_s / 2))
        self.flush_delay = flush_delay
        self.flush_max = max(concurrency, 100)
        self.retry_base = retry_base
        self._async_handler = _is_async(handler)

        self._state = "starting"
        self._done = 0
        self._failed = 0
        self._lost = 0
        self._held: dict[int, _Held] = {}
        self._pending: list[_Held] = []
        self._first_pending_at = 0.0
        self._zombies: set[_Held] = set()
        self._stopping = False
        self._immediate = False
        self._stop_requested = False
        self._grace_deadline = 0.0
        self._retry_at = 0.0
        self._next_poll = 0.0
        self._idle_delay = poll_interval
        self._maybe_more = True
        self._queue_turn = -1
        self._round: list[str] = []
        self._round_got = 0
        self._down_since: float | None = None
        self.idle_seconds = 0.0
        self.statements = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._beat_now: asyncio.Event | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._threads_lock = threading.Lock()
        self._in_threads = 0
        self._link: _Link | None = None

    # -- public ---------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self._state

    def snapshot(self) -> WorkerSnapshot:
        held = list(self._held.values())
        return WorkerSnapshot(
            id=self.id,
            queues=self.queues,
            state=self._state,
            concurrency=self.concurrency,
            done=self._done,
            failed=self._failed,
            lost=self._lost,
            running=tuple(
                RunningJob(h.job.id, h.job.queue, h.job.fence, h.job.attempts, h.started_at)
                for h in held
            ),
        )

    def stop(self, immediately: bool = False) -> None:
        """Graceful: stop claiming, let running jobs finish within `grace`, hand the rest back.

        With `immediately` (or on a second call after the grace period began) nothing waits:
        running handlers are told to stop and their jobs are handed back at once.
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
            loop.call_soon_threadsafe(self._request_stop, immediately)

    async def run(self) -> None:
        """Work until stopped (or drained, with `burst`). Raises if the first connect fails.

        A worker runs once; make a new one to run again.
        """
        if self._loop is not None:
            raise PgqError(f"worker {self.id} has already run")
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._beat_now = asyncio.Event()
        if not self._async_handler:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.concurrency, thread_name_prefix=f"pgq-job-{self.id}"
            )
        self._link = _Link(self.dsn, self.schema, self._on_link_down, self._on_link_up)
        background: list[asyncio.Task[None]] = []
        try:
            try:
                await self._link.open()
            except psycopg.OperationalError as exc:
                reason = scrub(first_line(str(exc)), self.dsn)
                raise PgqError(f"database unavailable: {reason}") from None
            log.info(
                "worker %s started: queues %s, concurrency %d, lease %gs, database %s%s",
                self.id,
                ",".join(self.queues),
                self.concurrency,
                self.lease.total_seconds(),
                describe(self.dsn),
                ", burst" if self.burst else "",
            )
            self._set_state("running")
            if self._stop_requested:
                self._request_stop(self._immediate)
            background = [
                asyncio.create_task(self._keep_running(loop))
                for loop in (self._listen, self._heartbeats, self._reaper)
            ]
            try:
                await self._pump()
            except BaseException:
                self._request_stop(immediately=True)
                with contextlib.suppress(Exception):
                    await self._hand_back()
                raise
            await self._hand_back()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self._link.close()
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
            was = self._state
            self._set_state("stopped", quiet=True)
            if was != "starting":
                log.info(
                    "worker %s stopped: %d done, %d failed, %d lost",
                    self.id,
                    self._done,
                    self._failed,
                    self._lost,
                )

    def handlers_still_running(self) -> int:
        """Handlers executing now; after `run()` returned, those told to stop that did not."""
        with self._threads_lock:
            in_threads = self._in_threads
        return in_threads + sum(1 for h in self._zombies if self._async_handler)

    def _call_sync(self, ctx: JobContext) -> Any:
        with self._threads_lock:
            self._in_threads += 1
        try:
            return self.handler(ctx)
        finally:
            with self._threads_lock:
                self._in_threads -= 1

    # -- state ----------------------------------------------------------------------------

    def _set_state(self, state: str, *, quiet: bool = False) -> None:
        if state != self._state:
            self._state = state
            if not quiet:
                log.debug("worker %s state %s", self.id, state)

    def _wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _request_stop(self, immediately: bool) -> None:
        now = time.monotonic()
        if not self._stopping:
            self._stopping = True
            self._grace_deadline = now if immediately else now + self.grace
            if self._state != "disconnected":
                self._set_state("draining")
            log.info(
                "worker %s stopping: no new claims, %d running job(s)%s",
                self.id,
                len(self._held),
                "" if immediately else f", grace {self.grace:g}s",
            )
        elif immediately and self._grace_deadline > now:
            self._grace_deadline = now
            log.info("worker %s stopping now: handing back %d job(s)", self.id, len(self._held))
        self._wakeup()

    def _on_link_down(self, reason: str) -> None:
        self._down_since = time.monotonic()
        self._set_state("disconnected", quiet=True)
        log.warning(
            "worker %s: database unavailable (%s); holding %d job(s), retrying with backoff",
            self.id,
            reason,
            len(self._held),
        )

    def _on_link_up(self) -> None:
        since = self._down_since or time.monotonic()
        self._down_since = None
        self._set_state("draining" if self._stopping else "running", quiet=True)
        log.info(
            "worker %s: database reachable again after %.1fs; checking %d held job(s)",
            self.id,
            time.monotonic() - since,
            len(self._held),
        )
        self._maybe_more = True
        if self._beat_now is not None:
            self._beat_now.set()
        self._wakeup()

    @property
    def _capacity(self) -> int:
        return self.concurrency - len(self._held) - len(self._zombies)

    # -- the main loop: settle, claim, wait ---------------------------------------------------

    async def _pump(self) -> None:
        """One step per round trip: settle what finished and claim for the free slots."""
        assert self._wake is not None and self._link is not None
        while True:
            now = time.monotonic()
            can_talk = self._link.up and now >= self._retry_at
            flush = bool(self._pending) and self._flush_due(now)
            claim = not self._stopping and self._claim_due(now)
            if can_talk and (flush or (claim and self._capacity > 0)):
                claimed = await self._step(claim)
                if (
                    self.burst
                    and claimed == 0
                    and not self._round
                    and not self._round_got
                    and not self._held
                    and not self._zombies
                ):
                    log.info("worker %s: queues drained (burst)", self.id)
                    return
                continue
            if self._stopping and (not self._held or now >= self._grace_deadline):
                return
            await self._sleep(self._next_timeout(now))

    def _flush_due(self, now: float) -> bool:
        return (
            self._stopping
            or len(self._pending) >= self.flush_max
            or len(self._pending) >= len(self._held)
            or now >= self._first_pending_at + self.flush_delay
        )

    def _claim_due(self, now: float) -> bool:
        if self._maybe_more or now >= self._next_poll:
            return True
        return self.burst and not self._held and not self._zombies

    def _next_timeout(self, now: float) -> float:
        assert self._link is not None
        deadlines = [now + 1.0]
        if self._stopping:
            deadlines.append(self._grace_deadline)
        if not self._link.up:
            pass  # woken when the link is back
        elif self._retry_at > now:
            deadlines.append(self._retry_at)
        else:
            if self._pending:
                deadlines.append(self._first_pending_at + self.flush_delay)
            if not self._stopping and self._capacity > 0:
                deadlines.append(self._next_poll)
        return max(0.0, min(deadlines) - now)

    async def _sleep(self, timeout: float) -> None:
        assert self._wake is not None
        if timeout <= 0 or self._wake.is_set():
            await asyncio.sleep(0)
        else:
            began = time.monotonic()
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self.idle_seconds += time.monotonic() - began
        self._wake.clear()

    async def _call(self, *step: Op[Any]) -> list[Any]:
        """Run `step` on the link (several ops: one transaction, one round trip).

        A transient failure holds off further statements briefly.
        """
        assert self._link is not None
        try:
            return await self._link.call(*step)
        except _Transient as exc:
            self._retry_at = time.monotonic() + 0.5
            log.warning(
                "worker %s: %s failed, retrying: %s",
                self.id,
                "+".join(op.name for op in step),
                exc,
            )
            raise

    # -- one step: settle and claim -----------------------------------------------------------

    async def _step(self, claim: bool) -> int | None:
        """Settle every pending job and, if `claim`, claim for the slots that frees, in one
        transaction. Returns how many jobs were claimed (None: the database did not answer)."""
        batch = self._pending[: self.flush_max]
        del self._pending[: len(batch)]
        completes = [h for h in batch if h.error is None]
        fails = [h for h in batch if h.error is not None]
        step: list[Op[Any]] = []
        if fails:
            triples = [(h.job.id, h.job.fence, h.error or "") for h in fails]
            step.append(ops.fail(triples, self.id, base=self.retry_base))
        free = self._capacity + len(batch)
        queue = self._next_queue() if claim and free > 0 else None
        pairs = [(h.job.id, h.job.fence) for h in completes]
        if completes and queue is not None:
            step.append(ops.complete_and_claim(pairs, queue, free, self.lease, self.id))
        elif completes:
            step.append(ops.complete(pairs, self.id))
        elif queue is not None:
            step.append(ops.claim(queue, free, self.lease, self.id))
        try:
            results = await self._call(*step)
        except (_Disconnected, _Transient) as exc:
            unsettled = [h for h in batch if self._held.get(h.job.id) is h]
            for h in unsettled:
                h.uncertain = h.uncertain or (isinstance(exc, _Disconnected) and h in completes)
            if unsettled:
                self._pending[:0] = unsettled
                self._first_pending_at = time.monotonic()
            return None
        self.statements += len(step)
        fails_lost: list[int] = results.pop(0).lost if fails else []
        jobs: list[Job] = []
        completes_lost: list[int] = []
        if completes and queue is not None:
            settled, jobs = results.pop(0)
            completes_lost = settled.lost
        elif completes:
            completes_lost = results.pop(0).lost
        elif queue is not None:
            jobs = results.pop(0)
        claimed = 0
        if queue is not None:
            for job in jobs:
                self._start(job)
            claimed = len(jobs)
            self._claimed(queue, claimed)
        lost = self._settle(fails, fails_lost, "fail")
        if completes_lost:
            completes_lost = await self._unless_done_unseen(completes, completes_lost)
        lost += self._settle(completes, completes_lost, "complete")
        if self._pending:
            self._first_pending_at = time.monotonic()
        for action in ("complete", "fail"):
            await self._record_stale([h for h, a in lost if a == action], action)
        return claimed

    async def _unless_done_unseen(self, batch: list[_Held], lost_ids: list[int]) -> list[int]:
        """Of `lost_ids`, those really lost (see `_done_unseen`)."""
        lost = set(lost_ids)
        return [h.job.id for h in batch if h.job.id in lost and not await self._done_unseen(h)]

    async def _done_unseen(self, held: _Held) -> bool:
        """A completion sent just before the connection broke may have committed unseen: its
        job is then done with our fence. Such a job is counted done, not lost."""
        if not held.uncertain:
            return False
        try:
            (detail,) = await self._call(ops.job(held.job.id))
        except (_Disconnected, _Transient):
            return False
        if detail is None or (detail.status, detail.fence) != ("done", held.job.fence):
            return False
        if self._held.get(held.job.id) is held:
            del self._held[held.job.id]
            if held in self._pending:
                self._pending.remove(held)
            self._done += 1
            self._wakeup()
        return True

    def _next_queue(self) -> str:
        if not self._round:
            self._round = list(self.queues)
            self._round_got = 0
            self._queue_turn = (self._queue_turn + 1) % len(self.queues)
            self._round = self._round[self._queue_turn :] + self._round[: self._queue_turn]
        return self._round[0]

    def _claimed(self, queue: str, got: int) -> None:
        """Track the claim round: a queue that gave no job is empty for now (fewer than asked
        may just be SKIP LOCKED passing rows other workers hold); once every queue of the
        round is empty, the worker idles until notified or polled."""
        now = time.monotonic()
        self._round_got += got
        if got:
            self._round.append(self._round.pop(0))
            self._maybe_more = True
            self._idle_delay = self.poll_interval
            return
        self._round.remove(queue)
        if self._round:
            self._maybe_more = True
            return
        self._maybe_more = False
        if self._round_got:
            self._idle_delay = self.poll_interval
            self._next_poll = now + self.poll_interval
        else:
            self._next_poll = now + self._idle_delay * random.uniform(0.8, 1.0)
            self._idle_delay = min(self._idle_delay * 2, self.max_poll_interval)

    def _start(self, job: Job) -> None:
        held = _Held(job, JobContext(job, self.id, self.schema), time.time())
        self._held[job.id] = held
        held.task = asyncio.create_task(self._run_job(held), name=f"pgq-job-{job.id}")

    async def _run_job(self, held: _Held) -> None:
        try:
            if self._async_handler:
                await self.handler(held.ctx)
            else:
                assert self._loop is not None
                await self._loop.run_in_executor(self._executor, self._call_sync, held.ctx)
        except asyncio.CancelledError:
            if self._held.get(held.job.id) is held:
                raise
        except LeaseLost as exc:
            if self._lose(held, exc.action):
                await self._record_stale([held], exc.action)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failing handler fails its job
            self._finished(held, _error_text(exc))
        else:
            self._finished(held, None)
        finally:
            if held in self._zombies:
                self._zombies.discard(held)
                self._wakeup()

    def _finished(self, held: _Held, error: str | None) -> None:
        if self._held.get(held.job.id) is not held:
            return
        if held.ctx._completed and error is None:
            del self._held[held.job.id]
            self._done += 1
            self._wakeup()
            return
        held.error = error
        if not self._pending:
            self._first_pending_at = time.monotonic()
        self._pending.append(held)
        self._wakeup()

    # -- settling ---------------------------------------------------------------------------

    def _settle(
        self, batch: list[_Held], lost_ids: list[int], action: str
    ) -> list[tuple[_Held, str]]:
        lost_set = set(lost_ids)
        lost: list[tuple[_Held, str]] = []
        for h in batch:
            if self._held.get(h.job.id) is not h:
                continue
            if h.job.id in lost_set:
                if h.ctx._completed:
                    del self._held[h.job.id]
                    log.info("job %d: failed after completing itself; kept done", h.job.id)
                    continue
                self._lose(h, action)
                lost.append((h, action))
                continue
            del self._held[h.job.id]
            if h.error is None:
                self._done += 1
            else:
                self._failed += 1
                final = h.job.attempts >= h.job.max_attempts
                log.info(
                    "job %d failed (attempt %d of %d)%s: %s",
                    h.job.id,
                    h.job.attempts,
                    h.job.max_attempts,
                    ", dead" if final else ", will retry",
                    h.error,
                )
        self._wakeup()
        return lost

    def _lose(self, held: _Held, action: str) -> bool:
        """The job is no longer ours: stop its handler, drop its result, free its slot.

        False if it was already given up."""
        if self._held.get(held.job.id) is not held:
            return False
        del self._held[held.job.id]
        if held in self._pending:
            self._pending.remove(held)
        self._lost += 1
        self._abandon(held)
        log.warning(
            "job %d: lease lost (fence %d, %s matched no row); handler stopped, result discarded",
            held.job.id,
            held.job.fence,
            action,
        )
        self._wakeup()
        return True

    def _abandon(self, held: _Held) -> None:
        held.ctx._lost = True
        task = held.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            self._zombies.add(held)
            if self._async_handler:
                task.cancel()

    async def _record_stale(self, lost: list[_Held], action: str) -> None:
        if not lost:
            return
        pairs = [(h.job.id, h.job.fence) for h in lost]
        try:
            await self._call(ops.record_stale(pairs, self.id, action))
        except (_Disconnected, _Transient):
            log.info("worker %s: could not record %d stale write(s)", self.id, len(pairs))

    # -- shutdown ---------------------------------------------------------------------------

    async def _hand_back(self) -> None:
        """After the grace period: tell running handlers to stop and release their jobs."""
        if not self._held:
            return
        remaining = list(self._held.values())
        for h in remaining:
            del self._held[h.job.id]
            self._abandon(h)
        self._pending.clear()
        tasks = [h.task for h in remaining if h.task is not None and not h.task.done()]
        if tasks and self._async_handler:
            await asyncio.wait(tasks, timeout=1.0)
        pairs = [(h.job.id, h.job.fence) for h in remaining]
        try:
            async with asyncio.timeout(HAND_BACK_TIMEOUT):
                (settled,) = await self._call(ops.release(pairs, self.id, "worker shutdown"))
        except (_Disconnected, _Transient, TimeoutError):
            log.warning(
                "worker %s: could not hand back %d job(s) (database unavailable); "
                "they return when their leases expire",
                self.id,
                len(pairs),
            )
            return
        log.info(
            "worker %s: handed back %d job(s)%s",
            self.id,
            len(settled.applied),
            f", {len(settled.lost)} already taken" if settled.lost else "",
        )

    # -- background tasks -------------------------------------------------------------------

    async def _keep_running(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run a background loop; an unexpected error is logged and the loop restarted."""
        while True:
            try:
                await loop()
            except (_Disconnected, _Transient):
                pass
            except Exception:
                log.exception("worker %s: %s failed; restarting it", self.id, loop.__name__)
            await asyncio.sleep(1.0)

    async def _heartbeats(self) -> None:
        assert self._beat_now is not None
        while True:
            try:
                async with asyncio.timeout(self.heartbeat_interval):
                    await self._beat_now.wait()
            except TimeoutError:
                pass
            self._beat_now.clear()
            held = list(self._held.values())
            if not held:
                continue
            try:
                (settled,) = await self._call(
                    ops.heartbeat([(h.job.id, h.job.fence) for h in held])
                )
            except (_Disconnected, _Transient):
                continue
            lost_ids = set(settled.lost)
            lost: list[_Held] = []
            for h in held:
                if h.job.id not in lost_ids or await self._done_unseen(h):
                    continue
                if self._lose(h, "heartbeat"):
                    lost.append(h)
            await self._record_stale(lost, "heartbeat")

    async def _reaper(self) -> None:
        while True:
            try:
                (reaped,) = await self._call(ops.reap())
            except (_Disconnected, _Transient):
                reaped = []
            if reaped:
                dead = sum(1 for _, status in reaped if status == "dead")
                log.info(
                    "worker %s: reaped %d expired lease(s)%s",
                    self.id,
                    len(reaped),
                    f", {dead} dead" if dead else "",
                )
            await asyncio.sleep(self.reap_interval * random.uniform(0.8, 1.2))

    async def _listen(self) -> None:
        """LISTEN for ready jobs; a notification is a hint to claim now, never the only one."""
        delay = RECONNECT_FIRST
        wanted = set(self.queues)
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, **CONNECT_OPTIONS
                )
            except psycopg.Error:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)
                continue
            try:
                await conn.execute(listen_statement(self.schema))
                delay = RECONNECT_FIRST
                self._maybe_more = True
                self._wakeup()
                async for note in conn.notifies():
                    if note.payload in wanted:
                        self._maybe_more = True
                        self._wakeup()
            except psycopg.Error:
                await asyncio.sleep(delay)
            finally:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()


async def run_until_stopped(
    worker: Worker, on_signal: Callable[[str, int], None] | None = None
) -> None:
    """Run `worker` with SIGTERM/SIGINT handled: the first stops gracefully, the second at once."""
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
    try:
        await worker.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)

