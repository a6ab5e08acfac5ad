"""The heartbeater: keeps the leases of held jobs alive from its own thread and connection.

Invariants:
- Nothing the event loop does can starve a lease: neither a settlement waiting on the main
  connection nor an async handler that blocks the loop delays a heartbeat, because heartbeats
  run on a thread of their own over a connection of their own.
- A heartbeat never waits on a row lock (`extend_leases` skips rows another session holds and
  reports them busy); after a failed heartbeat the next try comes within `RETRY` seconds, on a
  new connection if the session could not write (a failover's read-only server).
- Only a job the statement reports lost (its fence is stale) is reported to the worker, on the
  worker's event loop; busy jobs are simply tried again at the next beat.
- It keeps its connection whether or not jobs are held (a round trip every `interval`, an
  empty one when nothing is held), and its `gate` (renewal.py) says whether the worker may
  claim: only while that connection renews. It connects at once on `start()`.
- It carries the progress handlers reported (`JobContext.progress`) in the same statement,
  no extra round trip: per held job, the latest value not yet written, if its last write is at
  least `PROGRESS_EVERY` (1 s) old. With an interval over a second, progress waits for the next
  beat. A beat that did not land it (busy row, failed statement) leaves it for the next one.
- It also watches the event loop: a loop that does not answer for `BLOCKED_AFTER` seconds is
  logged once with the job whose async handler holds it, and once more when it is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg

from .. import ops, session
from ..config import first_line, pooled, scrub
from ..models import JobProgress
from ..queue import channel
from ..session import Failure
from ..text import printable
from .context import ProgressCell
from .link import Timeouts, application_name, open_sync_connection, run_sync
from .renewal import RenewalGate
from .runner import call_async

log = logging.getLogger("pgq.worker")

RETRY = 1.0
#: How often the thread wakes to ping the event loop and check whether a beat is due.
TICK = 0.25
BLOCKED_AFTER = 1.0


def blocking_job(thread_id: int | None) -> int | None:
    """The id of the job whose async handler the thread `thread_id` is running, if any."""
    if thread_id is None:
        return None
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code is call_async.__code__:
            ctx = frame.f_locals.get("ctx")
            return getattr(ctx, "id", None)
        frame = frame.f_back
    return None


class Heartbeater:
    """Extends the leases of the jobs it tracks every `interval` seconds, from its own thread."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        timeouts: Timeouts,
        interval: float,
        worker_id: str,
        loop: asyncio.AbstractEventLoop,
        on_lost: Callable[[list[tuple[int, int]]], None],
        on_renewing: Callable[[], None] | None = None,
        grace: float | None = None,
    ) -> None:
        """`on_renewing` is called on the loop when the gate opens; `grace` (default:
        `interval`) is how late a renewal may be before claims stop."""
        self._dsn = dsn
        self._schema = schema
        self._timeouts = timeouts
        self.interval = interval
        self._worker_id = worker_id
        self._loop = loop
        self._on_lost = on_lost
        self._held: dict[int, int] = {}
        self._progress: dict[int, ProgressCell] = {}
        #: progress values written so far (one per job per beat that carried one)
        self.progress_writes = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._loop_thread = threading.get_ident()
        self._ping_sent: float | None = None
        self._blocked_reported: tuple[float, int | None] | None = None
        self._on_renewing = on_renewing
        self._gate = RenewalGate(interval, interval if grace is None else grace)
        self._connected = asyncio.Event()

    # -- called from the event loop ------------------------------------------------------------

    def track(self, job_id: int, fence: int, progress: ProgressCell | None = None) -> None:
        """Keep the lease of `job_id` at `fence`, and write the progress `progress` holds."""
        with self._lock:
            self._held[job_id] = fence
            if progress is not None:
                self._progress[job_id] = progress

    def untrack(self, job_id: int) -> None:
        with self._lock:
            self._held.pop(job_id, None)
            self._progress.pop(job_id, None)

    def beat_now(self) -> None:
        self._wake.set()

    def claim_blocked(self, now: float) -> str | None:
        """None while the worker may claim (its leases can be renewed), else why not."""
        with self._lock:
            return self._gate.why_not(now)

    def renewed_at(self) -> float | None:
        """When the latest successful round trip was sent (time.monotonic()), if any."""
        with self._lock:
            return self._gate.renewed_at

    def refusal(self, now: float) -> str | None:
        """Why renewals are refused for good (permission denied), while claims are stopped."""
        with self._lock:
            return self._gate.refusal(now)

    def may_claim(self, now: float) -> bool:
        """Whether the worker may claim now (its leases can be renewed); says once when that
        changes (a warning when claiming stops, a note when it resumes)."""
        note = self.gate_note(now)
        blocked = self.claim_blocked(now) is not None
        if note is not None:
            level = logging.WARNING if blocked else logging.INFO
            log.log(level, "worker %s: %s", self._worker_id, printable(note))
        return not blocked

    def gate_note(self, now: float) -> str | None:
        """The line to log once when claiming stops or resumes, else None."""
        with self._lock:
            return self._gate.note(now)

    async def after_first_beat(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` once the first round trip succeeded: a listener must not take the last
        connection a server allows before the heartbeat has one."""
        try:
            await self._connected.wait()
        except BaseException:
            work.close()
            raise
        await work

    def start(self) -> None:
        self._wake.set()  # the first round trip at once: claims wait for it
        self._thread = threading.Thread(
            target=self._run, name=f"pgq-heartbeat-{self._worker_id}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        next_beat = time.monotonic()
        try:
            while not self._stopping.is_set():
                self._wake.wait(TICK)
                now = time.monotonic()
                self._watch_loop(now)
                if self._wake.is_set():
                    self._wake.clear()
                    next_beat = now
                if self._stopping.is_set() or now < next_beat:
                    continue
                ok = self._beat()
                next_beat = time.monotonic() + (self.interval if ok else min(RETRY, self.interval))
        finally:
            if self._conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()

    def _beat(self) -> bool:
        with self._lock:
            held = sorted(self._held.items())
            cells = [(i, self._progress.get(i)) for i, _ in held]
        sent = time.monotonic()
        due: dict[int, tuple[ProgressCell, int]] = {}
        progress: dict[int, JobProgress] = {}
        for job_id, cell in cells:
            found = cell.due(sent) if cell is not None else None
            if cell is not None and found is not None:
                due[job_id] = (cell, found[0])
                progress[job_id] = found[1]
        op = ops.extend_leases(held, channel(self._schema) if held else None, progress)
        if self._conn is not None and pooled() and self._conn.prepare_threshold is not None:
            with contextlib.suppress(psycopg.Error):  # pooled mode began: a session of its own
                self._conn.close()
        try:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = open_sync_connection(
                    self._dsn, self._timeouts, application_name("heartbeat", self._worker_id)
                )
            settled = run_sync(self._conn, self._schema, self._timeouts, op)
        except psycopg.Error as exc:
            failure = session.classify(exc, self._schema, self._conn)
            if self._conn is not None and failure in (Failure.READ_ONLY, Failure.POOLER):
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()
            reason = scrub(first_line(str(exc)) or type(exc).__name__, self._dsn)
            usable = self._conn is not None and not (self._conn.closed or self._conn.broken)
            with self._lock:
                self._gate.failed(
                    reason, connected=usable, refused=failure is Failure.REFUSED
                )
            if held:
                log.info(
                    "worker %s: heartbeat failed, retrying within %gs: %s",
                    self._worker_id,
                    min(RETRY, self.interval),
                    reason,
                )
            return False
        for job_id in settled.applied:
            if job_id in due:
                cell, version = due[job_id]
                cell.written(version, sent)
                self.progress_writes += 1
        with self._lock:
            was_open = self._gate.may_claim(time.monotonic())
            self._gate.renewed(sent)
        if not was_open:
            with contextlib.suppress(RuntimeError):  # the loop closed: the worker is gone
                self._loop.call_soon_threadsafe(self._opened)
        if settled.lost:
            lost_ids = set(settled.lost)
            lost = [(i, f) for i, f in held if i in lost_ids]
            with contextlib.suppress(RuntimeError):  # the loop closed: the worker is gone
                self._loop.call_soon_threadsafe(self._on_lost, lost)
        return True

    def _opened(self) -> None:
        self._connected.set()
        if self._on_renewing is not None:
            self._on_renewing()

    def _watch_loop(self, now: float) -> None:
        """Ping the event loop; report once when it has not answered for BLOCKED_AFTER."""
        if self._ping_sent is None:
            self._ping_sent = now
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._pong, now)
            return
        waited = now - self._ping_sent
        if waited >= BLOCKED_AFTER and self._blocked_reported is None:
            job = blocking_job(self._loop_thread)
            self._blocked_reported = (self._ping_sent, job)
            log.warning(
                "worker %s: the event loop has been blocked for %.1fs%s; heartbeats go on "
                "from their own thread (an async handler must not block: await, or run "
                "blocking code in a thread)",
                self._worker_id,
                waited,
                f" by job {job}" if job is not None else "",
            )

    def _pong(self, sent: float) -> None:
        now = time.monotonic()
        reported = self._blocked_reported
        if reported is not None and reported[0] == sent:
            job = reported[1]
            log.warning(
                "worker %s: the event loop was blocked for %.1fs%s",
                self._worker_id,
                now - sent,
                f" by job {job}" if job is not None else "",
            )
        self._blocked_reported = None
        self._ping_sent = None
