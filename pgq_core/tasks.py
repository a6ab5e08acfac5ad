"""A task API over the queue: named functions, enqueued by calling them, run by a worker.

```python
tasks = Tasks(queue="emails")

@tasks.task(max_attempts=8)
def send_email(to: str, subject: str) -> None: ...

send_email.enqueue(to="ada@example.com", subject="hi", conn=conn)   # in conn's transaction
```

`pgq worker --tasks myapp.jobs:tasks` runs them. Invariants:
- A task job's payload is `{"task": NAME, "args": {PARAM: VALUE, ...}}`.
- Arguments are bound to the task's signature and made JSON (and back) before anything is
  sent: a wrong argument or a value JSON cannot hold raises `TaskArgumentError` and inserts
  nothing. The task runs with the arguments as JSON gives them back (a tuple becomes a list).
- `Tasks` is an async handler. Async tasks run on the worker's loop; plain ones run in the
  Tasks' own thread pool. A plain task given up (lease lost, timeout) cannot be stopped: its
  job's slot stays occupied until its thread returns, as for a plain `--handler`.
  `current_job()` gives either kind its `JobContext` (e.g. to check `lost`).
- A job naming an unknown task, or with arguments its task no longer accepts, fails with a
  clear error (and retries as any failure: a newer worker may know the task); the worker goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

import psycopg

from .errors import PgqError
from .integrations import driver_connection
from .ops import DEFAULT_MAX_ATTEMPTS
from .queue import AsyncQueue, Queue

if TYPE_CHECKING:
    from .worker.context import JobContext

P = ParamSpec("P")
R = TypeVar("R")

#: Keywords `Task.enqueue` takes for itself; a task may not name a parameter so.
ENQUEUE_OPTIONS = ("conn", "delay", "run_at", "unique_key")
#: Threads for plain tasks (made on demand; a worker runs at most `concurrency` at once).
DEFAULT_THREADS = 100

_current: contextvars.ContextVar[JobContext] = contextvars.ContextVar("pgq_current_job")


class TaskError(PgqError):
    """A task job that cannot run: unknown task, or a payload that is not a task's."""


class TaskArgumentError(PgqError, TypeError):
    """Arguments that do not fit the task's signature, or cannot be stored as JSON."""


def current_job() -> JobContext:
    """The job the calling task runs for (inside a task only)."""
    try:
        return _current.get()
    except LookupError:
        raise PgqError("current_job() is only available inside a running task") from None


class Task(Generic[P, R]):
    """A registered function: call it to run it here, `.enqueue(...)` to run it in a worker."""

    def __init__(
        self, tasks: Tasks, fn: Callable[P, R], name: str, queue: str, max_attempts: int
    ) -> None:
        self.tasks = tasks
        self.fn = fn
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        self.signature = inspect.signature(fn)
        self.is_async = inspect.iscoroutinefunction(fn)
        for param in self.signature.parameters.values():
            if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
                raise PgqError(
                    f"task {name}: parameter {param.name!r} is positional-only or *args; "
                    "task arguments are stored by name"
                )
            if param.name in ENQUEUE_OPTIONS:
                raise PgqError(
                    f"task {name}: parameter {param.name!r} clashes with an option of "
                    f"enqueue ({', '.join(ENQUEUE_OPTIONS)}); rename it"
                )

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Task({self.name!r}, queue={self.queue!r})"

    def payload(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The job payload for these arguments; TaskArgumentError if they do not fit."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TaskArgumentError(f"task {self.name}: {exc}") from None
        stored: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if self.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                stored.update(value)
            else:
                stored[name] = value
        for name, value in stored.items():
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError, RecursionError) as exc:
                raise TaskArgumentError(
                    f"task {self.name}: argument {name!r} cannot be stored as JSON "
                    f"({type(value).__name__}: {exc})"
                ) from None
        args = json.loads(json.dumps(stored))
        return {"task": self.name, "args": args}

    def enqueue(
        self,
        *args: Any,
        conn: Any = None,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        unique_key: str | None = None,
        **kwargs: Any,
    ) -> int:
        """Enqueue a run with these arguments: the job's id (the holder's, for a duplicate
        `unique_key`). `conn`: a psycopg connection (or SQLAlchemy session or connection on
        the psycopg driver) whose open transaction the job joins, or a `Queue`; default the
        Tasks' own queue client."""
        payload = self.payload(*args, **kwargs)
        queue, target = self.tasks._sync_target(conn)
        return queue.enqueue(
            self.queue,
            payload,
            delay=delay,
            run_at=run_at,
            max_attempts=self.max_attempts,
            unique_key=unique_key,
            conn=target,
        )

    async def enqueue_async(
        self,
        *args: Any,
        conn: AsyncQueue | psycopg.AsyncConnection[Any] | None = None,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        unique_key: str | None = None,
        **kwargs: Any,
    ) -> int:
        """`enqueue` for asyncio: `conn` is an `AsyncQueue` or an async psycopg connection."""
        payload = self.payload(*args, **kwargs)
        if isinstance(conn, AsyncQueue):
            queue, target = conn, None
        elif isinstance(conn, psycopg.AsyncConnection):
            queue, target = AsyncQueue(conn, self.tasks.schema), conn
        elif self.tasks.async_client is not None:
            queue, target = self.tasks.async_client, None
        else:
            raise PgqError(f"task {self.name}: no connection (pass conn=, or set async_client)")
        return await queue.enqueue(
            self.queue,
            payload,
            delay=delay,
            run_at=run_at,
            max_attempts=self.max_attempts,
            unique_key=unique_key,
            conn=target,
        )


class Tasks:
    """A registry of tasks, and the worker handler that runs them by name.

    `queue` is the default queue of its tasks; `schema` is used with a bare connection;
    `client` / `async_client` enqueue when no `conn` is given.
    """

    def __init__(
        self,
        queue: str = "default",
        *,
        schema: str = "pgq",
        client: Queue | None = None,
        async_client: AsyncQueue | None = None,
        threads: int = DEFAULT_THREADS,
    ) -> None:
        self.queue = queue
        self.schema = schema
        self.client = client
        self.async_client = async_client
        self.threads = threads
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def task(
        self,
        fn: Callable[P, R] | None = None,
        *,
        name: str | None = None,
        queue: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> Any:
        """Register `fn` (as `@tasks.task` or `@tasks.task(...)`) under `name` (default: the
        function's name); PgqError if the name is taken or the signature cannot be stored."""
        if max_attempts < 1:
            raise PgqError(f"max_attempts must be at least 1, got {max_attempts}")

        def register(f: Callable[P, R]) -> Task[P, R]:
            task_name = name or f.__name__
            if task_name in self._tasks:
                raise PgqError(f"task {task_name!r} is already registered")
            registered = Task(self, f, task_name, queue or self.queue, max_attempts)
            self._tasks[task_name] = registered
            return registered

        return register(fn) if fn is not None else register

    @property
    def names(self) -> list[str]:
        return sorted(self._tasks)

    @property
    def queues(self) -> list[str]:
        """Every queue a registered task enqueues on (what `pgq worker --tasks` works)."""
        return sorted({t.queue for t in self._tasks.values()} or {self.queue})

    def __getitem__(self, name: str) -> Task[Any, Any]:
        return self._tasks[name]

    def _sync_target(self, conn: Any) -> tuple[Queue, psycopg.Connection[Any] | None]:
        if isinstance(conn, Queue):
            return conn, None
        if conn is not None:
            raw = driver_connection(conn)
            return Queue(raw, self.schema), raw
        if self.client is None:
            raise PgqError("no connection: pass conn= (or give Tasks a client Queue)")
        return self.client, None

    # -- the handler --------------------------------------------------------------------

    async def __call__(self, ctx: JobContext) -> Any:
        return await self.handle(ctx)

    async def handle(self, ctx: JobContext) -> Any:
        """Run the task the job names with its stored arguments (see the module's invariants)."""
        task, bound = self._resolve(ctx.payload)
        token = _current.set(ctx)
        try:
            if task.is_async:
                return await task.fn(*bound.args, **bound.kwargs)
            return await self._in_thread(task, bound)
        finally:
            _current.reset(token)

    def _resolve(self, payload: Any) -> tuple[Task[Any, Any], inspect.BoundArguments]:
        if not isinstance(payload, dict) or not isinstance(payload.get("task"), str):
            raise TaskError('not a task job: the payload needs {"task": NAME, "args": {...}}')
        name = payload["task"]
        task = self._tasks.get(name)
        if task is None:
            known = ", ".join(self.names) or "none"
            raise TaskError(f"unknown task {name!r} (known: {known})")
        args = payload.get("args", {})
        if not isinstance(args, dict):
            raise TaskError(f"task {name}: args must be a JSON object, got {type(args).__name__}")
        try:
            return task, task.signature.bind(**args)
        except TypeError as exc:
            raise TaskArgumentError(f"task {name}: stored arguments do not fit: {exc}") from None

    async def _in_thread(self, task: Task[Any, Any], bound: inspect.BoundArguments) -> Any:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.threads, thread_name_prefix="pgq-task"
            )
        context = contextvars.copy_context()
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, lambda: context.run(task.fn, *bound.args, **bound.kwargs)
        )
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The thread cannot be stopped (ctx.lost tells it to): end only when it does, so
            # the worker keeps the job's slot occupied until then.
            await asyncio.wait([future])
            raise
