"""What `Queue` and `AsyncQueue` share beside their ops: the channel of a schema, ids of
workers and operators, a handler's result as JSON, and the small checks around a call. Neither
queue holds any of it twice (`queue_async` is written once; `queue_sync` is generated from it).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import getpass
import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Awaitable, Generator, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from .defaults import ENQUEUE_CHUNK, RESULT_MAX_BYTES
from .errors import LeaseLost, PgqError
from .health import assess
from .models import Health, Settled
from .ops import JobSpec, Op
from .text import first_surrogate

T = TypeVar("T")
#: A flow of ops (`ops.enqueue_flow`, `ops.prune_flow`): each op's result is sent back in.
Flow = Generator[Op[Any], Any, T]

log = logging.getLogger("pgq")
log.addHandler(logging.NullHandler())  # silent unless the application configures logging


def channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema: `<schema>_jobs`; the payload is the queue name."""
    return f"{schema}_jobs"


def listen_statement(schema: str) -> sql.Composed:
    """`LISTEN` on the schema's `channel`: each notification names a queue with new due jobs."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel(schema)))


def make_worker_id() -> str:
    """Unique per process: host, pid and a random suffix (pids are reused across restarts)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def operator_id() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is not worth failing an operator action
        user = "unknown"
    return f"operator:{user}@{socket.gethostname()}"


def json_size_floor(value: Any, limit: int) -> int:
    """At most the UTF-8 bytes of `json.dumps(value, ensure_ascii=False)`: strings, keys and
    brackets exactly (but for escapes and multi-byte characters), any other value as 1 byte.
    Walked in Python, so other threads (the heartbeater's) keep taking the GIL, and stopped
    once over `limit`: a result of any size costs about `limit` of work. A cycle stops the
    walk, and anything json cannot encode counts 1: `json.dumps` then says what is wrong."""
    if isinstance(value, str):
        return len(value) + 2
    if not isinstance(value, list | tuple | dict):
        return 1
    size = 0
    on_path: set[int] = set()
    stack: list[Any] = [value]  # containers to walk; an int: leave the container of that id
    while stack:
        item = stack.pop()
        if isinstance(item, int):
            on_path.discard(item)
            continue
        if id(item) in on_path:
            return size
        on_path.add(id(item))
        stack.append(id(item))
        if isinstance(item, dict):
            size += 7 * len(item) or 2  # brackets, ", ", ": ", `""` and a value of 1 byte
            if size > limit:
                return size
            size += sum(len(k) for k in item if isinstance(k, str))
            values: Any = item.values()
        else:
            size += 3 * len(item) or 2  # brackets, ", " and each item at least 1 byte
            values = item
        if size > limit:
            return size
        for v in values:
            if isinstance(v, str):
                size += len(v) + 1
            elif isinstance(v, list | tuple | dict):
                size -= 1
                stack.append(v)
        if size > limit:
            return size
    return size


def result_json(result: Any) -> str | None:
    """A handler's result as JSON text (None stays None); ValueError if it is not JSON, its
    text cannot be sent as UTF-8 (a lone surrogate in a string or a key), or it is over
    RESULT_MAX_BYTES: the job's own failure, never a settlement its lease cannot outlast. A
    result far over the bound is refused before it is serialised (`json_size_floor`):
    `json.dumps` holds the GIL throughout, and 40 MB of it kept a 1 s lease from renewal."""
    if result is None:
        return None
    floor = json_size_floor(result, RESULT_MAX_BYTES)
    if floor > RESULT_MAX_BYTES:
        raise ValueError(_too_big(f"at least {floor:,}"))
    try:
        text = json.dumps(result, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"result is not JSON-serialisable: {type(exc).__name__}: {exc}") from None
    size = len(text) if len(text) > RESULT_MAX_BYTES else len(text.encode("utf-8", "replace"))
    if size > RESULT_MAX_BYTES:
        raise ValueError(_too_big(f"{size:,}"))
    if first_surrogate(text) is not None:
        raise ValueError(
            "result is not storable: it holds a lone surrogate, which UTF-8 cannot carry"
        )
    return text


def _too_big(size: str) -> str:
    return (
        f"result is too big to store: {size} bytes of JSON, over pgq's bound of "
        f"{RESULT_MAX_BYTES:,} (store it elsewhere and return a reference)"
    )


def expect_applied(settled: Settled, job_id: int, fence: int, action: str) -> None:
    """LeaseLost unless the one job's write applied (its fence is still the job's)."""
    if settled.lost:
        raise LeaseLost(job_id, fence, action)


def health_of(
    tables: Any, xmin: Any, notify: float, waits: Any, stuck: Any = None, stranded: Any = None
) -> Health:
    """The `Health` of what `health` read, with its warnings assessed."""
    health = Health(tables, xmin, notify, waits, stuck_jobs=stuck, stranded=stranded)
    health.warnings.extend(assess(health))
    return health


class TaskTurn:
    """The queue's own connection for one caller at a time while one holds it: a transaction
    the queue opens there is held from BEGIN to its end, so no other task's statement runs
    inside it (and commits or rolls back with it). Re-entered by the task holding it. Tasks
    on several event loops (each in a thread of its own) take turns too: the turn is handed,
    first come first served, to the next waiting task and woken on its own loop (an
    asyncio.Lock released from another loop's thread wakes nobody)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards what follows; never held across an await
        self._holder: asyncio.Task[Any] | None = None
        self._depth = 0
        self._waiting: collections.deque[tuple[asyncio.Task[Any] | None, TaskWake]] = (
            collections.deque()
        )

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        with self._lock:
            if self._depth and task is not None and self._holder is task:
                self._depth += 1
                return
            if not self._depth and not self._waiting:
                self._holder, self._depth = task, 1
                return
            entry = (task, TaskWake())
            self._waiting.append(entry)
        try:
            await entry[1].wait()  # handed the turn: holder and depth set by the releaser
        except BaseException:
            with self._lock:
                handed = entry not in self._waiting
                if not handed:
                    self._waiting.remove(entry)
                nxt = self._handed_on() if handed else None
            if nxt is not None:
                nxt.set()
            raise

    async def __aexit__(self, *exc: object) -> None:
        with self._lock:
            self._depth -= 1
            nxt = None if self._depth else self._handed_on()
        if nxt is not None:
            nxt.set()

    def _handed_on(self) -> TaskWake | None:
        """The turn given to the first waiting task (its wake-up, to set once unlocked), or
        freed; under `_lock`."""
        if self._waiting:
            task, wake = self._waiting.popleft()
            self._holder, self._depth = task, 1
            return wake
        self._holder, self._depth = None, 0
        return None


class TaskWake:
    """How a shared round (pgq_core/rounds.py) wakes a task waiting on it, made by that task:
    `set` from any thread wakes it on its own event loop (an `AsyncQueue`'s callers may run
    on several loops, each in a thread of its own: an `asyncio.Event` set from another
    loop's thread wakes nobody)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    def set(self) -> None:
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a thread running no loop
            here = None
        if here is self._loop:
            self._event.set()
        else:
            with contextlib.suppress(RuntimeError):  # its loop is closed: its task is gone
                self._loop.call_soon_threadsafe(self._event.set)


#: `TaskWake` for a thread.
ThreadWake = threading.Event


async def carry(aw: Awaitable[T]) -> T:
    """`aw` run to its end though the caller is cancelled meanwhile, the cancellation raised
    once it has ended: a shared round carries other callers' jobs."""
    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task})
        raise


def interrupted_round(cause: BaseException) -> psycopg.OperationalError:
    """What a caller raises whose job was in a shared round that the call leading it met
    `cause` in (KeyboardInterrupt, SystemExit, its task cancelled): that interrupt is the
    leading call's own, and whether the round committed is unknown, as after a lost
    connection."""
    return psycopg.OperationalError(
        f"the shared enqueue round carrying this job was stopped by {type(cause).__name__} in"
        " the call leading it: whether it committed is unknown"
    )


def carried(result: T) -> T:
    """`carry` for a call without asyncio: it has run to its end already."""
    return result


class ThreadTurn:
    """`TaskTurn` for threads sharing a `Queue` (re-entered by the thread holding it)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


_IDLE = psycopg.pq.TransactionStatus.IDLE


def alone(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a statement on `conn` is a transaction of its own (autocommit, none open)."""
    return conn.autocommit and conn.pgconn.transaction_status == _IDLE


_PIPELINE_OFF = psycopg.pq.PipelineStatus.OFF


def outside_pipeline(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """PgqError unless `conn` is out of pipeline mode: there a statement's rows come only at
    the pipeline's sync, so an operation would read none after its writes were sent (and an
    autocommit one's transaction would run on into the caller's next statements)."""
    if conn.pgconn.pipeline_status != _PIPELINE_OFF:
        raise PgqError(
            "pgq cannot run on a connection in pipeline mode (its statements read their rows"
            " at once): call it outside conn.pipeline()"
        )


def chunks(specs: Sequence[JobSpec]) -> Iterator[Sequence[JobSpec]]:
    """`specs` in slices of at most ENQUEUE_CHUNK, one statement each."""
    for start in range(0, len(specs), ENQUEUE_CHUNK):
        yield specs[start : start + ENQUEUE_CHUNK]


def unknown_schedule(name: str) -> PgqError:
    return PgqError(f"no schedule named {name!r}")


def checked(check: Any, *args: Any, **kwargs: Any) -> Any:
    """Run an ops constructor, turning its ValueError (bad input) into a PgqError."""
    try:
        return check(*args, **kwargs)
    except ValueError as exc:
        raise PgqError(str(exc)) from None
