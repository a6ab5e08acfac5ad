"""Running handlers: plain functions in threads, `async def` as tasks, and the ones given up.

Invariants:
- `Runner.run` returns exactly one `Outcome` for every way a handler can end: returning,
  raising anything (any `BaseException`, either `CancelledError`, an exception whose `__str__`
  raises), running past its timeout, or being cancelled. It never raises itself, except when
  the task running it is cancelled.
- A handler given up (lease lost, timed out, handed back) keeps its slot until it really ends:
  `abandoned` counts them, and the worker claims only for slots nobody occupies.
- Only a cancel the runner made (`abandon`) reads as cancelled; a handler that cancels itself,
  or awaits something cancelled, has failed.
- A process a handler forks never runs on as a worker: when the handler's call ends in the
  child (it returned, raised or called `sys.exit()`), the child exits with that status; in the
  child, SIGTERM and SIGINT are the defaults again (the parent's event loop would otherwise get
  them). Fds 0-2 are open again (`stdio`) in the event loop's turn after a handler ends, one
  check for all that ended in that turn: a check is three system calls, and made in a handler's
  thread it gave up the GIL three times per job, each taken back only when the loop let go.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import importlib
import inspect
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from ..config import first_line
from ..errors import DontRetry, LeaseLost, PgqError, Snooze
from ..queue import result_json
from ..session import database_fault
from ..text import describe_exception, format_traceback, storable
from ..tracing import handler_span
from .context import JobContext
from .stdio import hold_standard_fds, restore_standard_fds

Handler = Callable[[JobContext], Any]


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


def is_async(handler: Handler) -> bool:
    call = getattr(handler, "__call__", None)  # noqa: B004 - async __call__ of an object
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


@dataclass(frozen=True)
class Outcome:
    """How a handler ended. `error` is storable text for failures, None for success."""

    kind: str  # returned | raised | faulted | snoozed | timed_out | cancelled | lost
    error: str | None = None
    action: str = ""  # for `lost`: the fenced write that matched no row
    result: str | None = None  # for `returned`: what the handler returned, as JSON text
    final: bool = False  # for `raised`: the handler said not to retry (DontRetry)
    traceback: str | None = None  # for `raised`: the stack it raised with, bounded
    delay: float = 0.0  # for `snoozed`: seconds until it runs again (Snooze)

    @property
    def succeeded(self) -> bool:
        return self.kind == "returned"

    @property
    def faulted(self) -> bool:
        """The handler's transaction failed for the database (`session.database_fault`): the
        job goes back, its attempt not counted (`error` says why)."""
        return self.kind == "faulted"


RETURNED = Outcome("returned")
CANCELLED = Outcome("cancelled")


def outcome_of(ok: bool, value: Any) -> Outcome:
    """The outcome of a handler that returned `value` (ok) or raised it; a Snooze returned
    or raised snoozes the job."""
    if isinstance(value, Snooze):
        return Outcome("snoozed", delay=value.seconds)
    if ok:
        if value is None:
            return RETURNED
        try:
            return Outcome("returned", result=result_json(value))
        except ValueError as exc:
            return Outcome("raised", storable(str(exc)))
    if isinstance(value, LeaseLost):
        return Outcome("lost", action=value.action)
    stack = format_traceback(value, skip=__file__) if isinstance(value, BaseException) else None
    if isinstance(value, DontRetry):
        cause = value.__cause__
        if cause is None:
            return Outcome("raised", describe_exception(value), final=True, traceback=stack)
        why = f" (not retried: {describe_exception(value).removeprefix('DontRetry: ')})"
        return Outcome(
            "raised", storable(describe_exception(cause) + why), final=True, traceback=stack
        )
    if isinstance(value, BaseException) and (fault := database_fault(value)) is not None:
        return Outcome("faulted", storable(fault), traceback=stack)
    if isinstance(value, asyncio.CancelledError | concurrent.futures.CancelledError):
        return Outcome(
            "raised",
            f"{describe_exception(value)} (raised by the handler, not a worker cancel)",
            traceback=stack,
        )
    return Outcome("raised", describe_exception(value), traceback=stack)


#: Set while a handler runs (in its thread's or task's context): a fork made then is a
#: handler's child.
_IN_HANDLER: contextvars.ContextVar[bool] = contextvars.ContextVar("pgq_in_handler", default=False)


def _forked_from_a_handler() -> None:
    """In a child forked by a handler: SIGTERM and SIGINT as in a fresh Python process, and
    no signal written to the parent's event loop (its wake-up socket is shared)."""
    if not _IN_HANDLER.get():
        return
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)


os.register_at_fork(after_in_child=_forked_from_a_handler)


def exit_status(ok: bool, value: Any) -> int:
    """The status a process ends with when its code returned (`ok`) or raised `value`, as
    Python's own exit: SystemExit's code (None 0, an int itself, anything else 1), else 1."""
    if ok:
        return 0
    if isinstance(value, SystemExit):
        if value.code is None:
            return 0
        return value.code if isinstance(value.code, int) else 1
    return 1


def _end_forked_child(ok: bool, value: Any) -> NoReturn:
    """A handler's forked child came back into the worker's code: it ends here, as it asked."""
    if isinstance(value, SystemExit) and value.code is not None and not isinstance(value.code, int):
        with contextlib.suppress(Exception):
            print(value.code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(exit_status(ok, value))


def call_sync(handler: Handler, ctx: JobContext) -> tuple[bool, Any]:
    """Run a plain handler; whatever it raises comes back as a value."""
    pid = os.getpid()
    marked = _IN_HANDLER.set(True)
    try:
        with handler_span(ctx):
            ended: tuple[bool, Any] = True, handler(ctx)
    except BaseException as exc:  # noqa: BLE001 - every ending of a handler is its job's outcome
        ended = False, exc
    finally:
        _IN_HANDLER.reset(marked)
    if os.getpid() != pid:
        _end_forked_child(*ended)
    return ended


async def call_async(handler: Handler, ctx: JobContext) -> tuple[bool, Any]:
    """Run an async handler; whatever it raises but a cancel comes back as a value (so neither
    KeyboardInterrupt nor SystemExit escapes into the event loop)."""
    pid = os.getpid()
    _IN_HANDLER.set(True)  # this task's own context
    try:
        with handler_span(ctx):
            ended: tuple[bool, Any] = True, await handler(ctx)
    except asyncio.CancelledError:
        if os.getpid() != pid:
            _end_forked_child(False, None)
        raise
    except BaseException as exc:  # noqa: BLE001 - every ending of a handler is its job's outcome
        ended = False, exc
    if os.getpid() != pid:
        _end_forked_child(*ended)
    return ended


@dataclass(eq=False)
class _Running:
    ctx: JobContext
    on_outcome: Callable[[Outcome], None]
    #: the handler's task (async handlers); a thread's handler has none
    task: asyncio.Task[Any] | None = None
    timer: asyncio.TimerHandle | None = None
    reported: bool = False
    cancelled_by_us: bool = False
    ended: bool = False


_STOP = object()


class _Threads:
    """Threads for plain-function handlers, at most `size`, started as work needs them.

    Handlers that end are handed back to the event loop in batches: a thread queues its result
    and wakes the loop only if nothing is queued already, so fifty handlers that end together
    cost one wake-up, not fifty futures chained across threads. Threads are daemons: one stuck
    in a handler given up never holds the process open.
    """

    def __init__(
        self,
        size: int,
        name: str,
        run: Callable[[JobContext], Outcome],
        deliver: Callable[[_Running, Outcome], None],
    ) -> None:
        self._size = size
        self._name = name
        self._run = run
        self._deliver = deliver
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._given = 0  # submitted and not yet handed back (event loop only)
        self._lock = threading.Lock()
        self._ended: list[tuple[_Running, Outcome]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        #: when a thread last began a handler (time.monotonic())
        self.last_began = 0.0

    def submit(self, loop: asyncio.AbstractEventLoop, run: _Running) -> None:
        """Run `run`'s handler on a thread; `deliver(run, outcome)` is called on `loop`."""
        self._loop = loop
        self._given += 1
        if self._given > len(self._threads) and len(self._threads) < self._size:
            thread = threading.Thread(
                target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        self._work.put(run)

    def _serve(self) -> None:
        while (run := self._work.get()) is not _STOP:
            ctx = run.ctx
            if ctx._lost:  # given up before any thread began it: it never runs
                outcome = CANCELLED
            else:
                ctx._began = self.last_began = time.monotonic()
                try:
                    outcome = self._run(ctx)
                except BaseException as exc:  # noqa: BLE001 - a thread that dies wedges its job
                    outcome = Outcome("raised", describe_exception(exc))
            with self._lock:
                self._ended.append((run, outcome))
                wake = len(self._ended) == 1
            if wake:
                assert self._loop is not None
                try:
                    self._loop.call_soon_threadsafe(self._hand_back)
                except RuntimeError:  # the loop is closed: nobody is waiting any more
                    return

    def _hand_back(self) -> None:
        with self._lock:
            ended, self._ended = self._ended, []
        self._given -= len(ended)
        for run, outcome in ended:
            self._deliver(run, outcome)

    def queued(self) -> int:
        return self._work.qsize()

    def take_queued(self, keep: int) -> list[_Running]:
        """The runs no thread has begun but the first `keep`, taken out of the queue: no thread
        will run them."""
        taken, stops = [], 0
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                stops += 1
            else:
                taken.append(item)
        for run in taken[:keep]:
            self._work.put(run)
        for _ in range(stops):
            self._work.put(_STOP)
        taken = taken[keep:]
        self._given -= len(taken)
        return taken

    def shutdown(self) -> None:
        """Threads exit once their current handler (if any) returns; queued work is dropped."""
        while True:
            try:
                self._work.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._work.put(_STOP)


class Runner:
    """Starts handlers, reports each one's outcome once, and keeps count of those still
    running after they were given up. No task is made per job beyond the handler itself."""

    def __init__(
        self,
        handler: Handler,
        concurrency: int,
        thread_name: str,
        on_slot_freed: Callable[[], None],
    ) -> None:
        hold_standard_fds()
        self.handler = handler
        self.is_async = is_async(handler)
        self._on_slot_freed = on_slot_freed
        self._threads: _Threads | None = None
        if not self.is_async:
            self._threads = _Threads(concurrency, thread_name, self._counted, self._ended)
        self._running: dict[int, _Running] = {}
        self._abandoned: set[_Running] = set()
        self._threads_lock = threading.Lock()
        self._in_threads = 0
        self._occupied = 0
        self._last_began = 0.0
        self._fds_check_due = False

    @property
    def abandoned(self) -> int:
        """Handlers given up that have not ended yet: each still occupies a slot."""
        return len(self._abandoned)

    @property
    def last_began(self) -> float | None:
        """When the most recent handler began (time.monotonic()), None before the first: while
        every slot is occupied, the youngest running handler's start."""
        began = max(self._last_began, self._threads.last_began if self._threads else 0.0)
        return began or None

    @property
    def occupied(self) -> int:
        """Slots occupied: handlers started that have not ended, given up or not."""
        return self._occupied

    def still_running(self) -> int:
        """Handlers executing now (threads and tasks), given up or not."""
        with self._threads_lock:
            in_threads = self._in_threads
        runs = {*self._running.values(), *self._abandoned}
        tasks = sum(1 for r in runs if r.task is not None and not r.task.done())
        return in_threads + tasks

    def _counted(self, ctx: JobContext) -> Outcome:
        """Runs in a pool thread: the handler, then its result's JSON, off the event loop."""
        with self._threads_lock:
            self._in_threads += 1
        try:
            return outcome_of(*call_sync(self.handler, ctx))
        finally:
            with self._threads_lock:
                self._in_threads -= 1

    def take_back(self, slots: int = 0) -> list[JobContext]:
        """Jobs started on the threads' queue that no thread has begun, beyond what `slots`
        threads run next: taken back, never run, their slots free."""
        if self._threads is None:
            return []
        begun = self._occupied - self._threads.queued()
        runs = self._threads.take_queued(keep=max(0, slots - begun))
        for run in runs:
            run.ended = True
            self._occupied -= 1
            if run.timer is not None:
                run.timer.cancel()
            if self._running.get(run.ctx.id) is run:
                del self._running[run.ctx.id]
        return [run.ctx for run in runs]

    def start(
        self, ctx: JobContext, timeout: float | None, on_outcome: Callable[[Outcome], None]
    ) -> None:
        """Run the handler on `ctx`; `on_outcome` is called once, on the event loop, with how
        it ended (see the module's invariants). Must be called on the event loop. A plain
        function waits on the threads' queue while every thread is busy (see `take_back`)."""
        loop = asyncio.get_running_loop()
        run = _Running(ctx, on_outcome)
        timeout = ctx.timeout = self._timeout_for(ctx, timeout)
        self._occupied += 1
        if timeout is not None:
            run.timer = loop.call_later(timeout, self._expire, run, timeout)
        self._running[ctx.id] = run
        if self._threads is not None:
            self._threads.submit(loop, run)
            return
        ctx._began = self._last_began = time.monotonic()
        task = loop.create_task(call_async(self.handler, ctx), name=f"pgq-handler-{ctx.id}")
        run.task = task
        task.add_done_callback(lambda _: self._ended(run, self._task_outcome(run, task)))

    def _timeout_for(self, ctx: JobContext, default: float | None) -> float | None:
        """The job's own timeout where the handler knows one (its `timeout_for(ctx)`, as
        `Tasks` has: a task's timeout), else `default` (the worker's)."""
        own = getattr(self.handler, "timeout_for", None)
        if own is None:
            return default
        try:
            seconds = own(ctx)
        except Exception:  # noqa: BLE001 - a handler's hook never stops its job from running
            return default
        if isinstance(seconds, int | float) and 0 < seconds < float("inf"):
            return float(seconds)
        return default

    @staticmethod
    def _task_outcome(run: _Running, task: asyncio.Task[Any]) -> Outcome:
        if task.cancelled():
            if run.cancelled_by_us:
                return CANCELLED
            return Outcome("raised", "CancelledError (raised by the handler, not a worker cancel)")
        return outcome_of(*task.result())

    async def run(self, ctx: JobContext, timeout: float | None) -> Outcome:
        """`start`, awaiting the outcome."""
        outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.start(ctx, timeout, outcome.set_result)
        return await outcome

    def _report(self, run: _Running, outcome: Outcome) -> None:
        if not run.reported:
            run.reported = True
            run.on_outcome(outcome)

    def _expire(self, run: _Running, timeout: float) -> None:
        self._report(run, Outcome("timed_out", f"timed out after {timeout:g} s"))
        self.abandon(run.ctx)

    def _ended(self, run: _Running, outcome: Outcome) -> None:
        if not self._fds_check_due:
            self._fds_check_due = True
            asyncio.get_running_loop().call_soon(self._check_fds)
        if not run.ended:
            self._occupied -= 1
        run.ended = True
        if run.timer is not None:
            run.timer.cancel()
        if self._running.get(run.ctx.id) is run:
            del self._running[run.ctx.id]
        self._report(run, outcome)
        if run in self._abandoned:
            self._abandoned.discard(run)
            self._on_slot_freed()

    def _check_fds(self) -> None:
        self._fds_check_due = False
        restore_standard_fds()

    def abandon(self, ctx: JobContext) -> None:
        """Give up a running handler: tell it (`ctx.lost`), cancel it if it is async, and keep
        its slot occupied until it really ends."""
        ctx._lost = True
        run = self._running.get(ctx.id)
        if run is None or run.ctx is not ctx or run.ended or run in self._abandoned:
            return
        self._abandoned.add(run)
        if run.task is not None:
            run.cancelled_by_us = True
            run.task.cancel()

    async def wait_abandoned(self, timeout: float) -> None:
        """Give cancelled async handlers up to `timeout` seconds to finish unwinding."""
        pending = [r.task for r in self._abandoned if r.task is not None and not r.task.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def shutdown(self) -> None:
        for run in self._running.values():
            if run.timer is not None:
                run.timer.cancel()
        if self._threads is not None:
            self._threads.shutdown()
