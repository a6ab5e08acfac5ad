"""A task API over the queue: named functions, enqueued by calling them, run by a worker.

```python
tasks = Tasks(queue="emails")

@tasks.task(max_attempts=8, backoff_base=2, timeout=30, unique_key="welcome-{to}")
def send_email(to: str, subject: str) -> None: ...

send_email.enqueue(to="ada@example.com", subject="hi", conn=conn)   # in conn's transaction
send_email.options(priority=9, delay=60).enqueue(to="bob@example.com", subject="hi", conn=conn)

# workflows: b after a; report after all of b1..b3 (ids of the jobs, in order)
ids = chain(fetch.s(url=u), parse.s(), conn=conn)
ids = chain(split.s(), [work.s(part=n) for n in range(3)], report.s(), conn=conn)
ids = group(work.s(part=1), work.s(part=2), depends_on=[ids[0]], conn=conn)
send_email.enqueue(to="ada@example.com", subject="done", depends_on=ids, conn=conn)
```

`pgq worker --tasks myapp.jobs:tasks` runs them. Invariants:
- A task job's payload is `{"task": NAME, "args": {PARAM: VALUE, ...}}`, with `"timeout":
  SECONDS` when the task (or `.options`) set one at enqueue; a job without it runs under its
  task's timeout as the worker knows it, else the worker's `--timeout`.
- Everything else a task sets is the job's row, fixed at enqueue: queue, max_attempts,
  priority, run_at (its delay), unique_key (its template filled with the arguments, defaults
  included) and backoff_base / backoff_cap, which the fail statement reads to compute the next
  run_at. `Task.options(...)` is the same task with some of them changed, for one enqueue or
  many.
- `retry_on` / `dont_retry_on` are the registered task's, read by the worker when the task
  raises: an exception in `dont_retry_on`, or outside a given `retry_on`, makes the job dead at
  once (the handler raises `DontRetry` from it); any other failure is retried while attempts
  remain. A timeout is a failure like any other.
- Arguments are bound to the task's signature and made JSON (and back) before anything is
  sent: a wrong argument or a value JSON cannot hold raises `TaskArgumentError` and inserts
  nothing. The task runs with the arguments as JSON gives them back (a tuple becomes a list).
- `Tasks` is an async handler. Async tasks run on the worker's loop; plain ones run in the
  Tasks' own thread pool. A plain task given up (lease lost, timeout) cannot be stopped: its
  job's slot stays occupied until its thread returns, as for a plain `--handler`.
  `current_job()` gives either kind its `JobContext` (e.g. to check `lost`).
- `depends_on=[ids]` (on `enqueue`, `chain`, `group`): the job waits until those jobs are all
  done and dies if one dies (`Queue.enqueue`'s `depends_on`). `Task.s(...)` is a step: the
  task with its arguments, checked at once, enqueued by `chain` (each link after the one
  before; a list in a chain is a group: the next link waits for all of it) or `group` (side by
  side), in one transaction. A step's job carries no result to the next: a step that needs
  one reads it (`Queue.job(parent).result`).
- A job naming an unknown task, or with arguments its task no longer accepts, fails with a
  clear error (and retries as any failure: a newer worker may know the task); the worker goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
import dataclasses
import inspect
import json
import math
import re
import string
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypedDict, TypeVar, Unpack

import psycopg

from .config import check_queue_name, schema_name
from .defaults import DEFAULT_MAX_ATTEMPTS
from .errors import DontRetry, LeaseLost, PgqError, Snooze
from .integrations import driver_connection
from .ops import JobSpec, check_backoff, check_unique_key
from .queue import AsyncQueue, Queue

if TYPE_CHECKING:
    from .worker.context import JobContext

P = ParamSpec("P")
R = TypeVar("R")

#: Keywords `Task.enqueue` takes for itself; a task may not name a parameter so.
ENQUEUE_OPTIONS = ("conn", "delay", "run_at", "unique_key", "depends_on")
#: Threads for plain tasks (made on demand; a worker runs at most `concurrency` at once).
DEFAULT_THREADS = 100

_current: contextvars.ContextVar[JobContext] = contextvars.ContextVar("pgq_current_job")

#: A duration: seconds, or a timedelta.
Seconds = float | timedelta
#: The exception classes a task names for `retry_on` / `dont_retry_on`.
ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]

_PRIORITY_RANGE = range(-(2**31), 2**31)


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """How a task's jobs are enqueued; each becomes a column of the job's row (timeout: the
    payload). `None` leaves it to the queue's defaults (no delay, no key, the worker's backoff
    and timeout)."""

    queue: str
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: higher is claimed first among due jobs of the queue
    priority: int = 0
    delay: timedelta | None = None
    #: seconds the worker lets one attempt run
    timeout: float | None = None
    #: seconds: attempt n failed waits min(backoff_cap, backoff_base * 2**n), less jitter
    backoff_base: float | None = None
    backoff_cap: float | None = None
    #: a template over the arguments, e.g. "user-{user_id}": one ready or running job per key
    unique_key: str | None = None


class OptionChanges(TypedDict, total=False):
    """What `Tasks.task(...)` and `Task.options(...)` take (durations in seconds or as a
    timedelta)."""

    queue: str
    max_attempts: int
    priority: int
    delay: Seconds | None
    timeout: Seconds | None
    backoff_base: Seconds | None
    backoff_cap: Seconds | None
    unique_key: str | None


def _seconds(value: Seconds | None) -> float | None:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def task_options(base: TaskOptions, changes: OptionChanges) -> TaskOptions:
    """`base` with `changes` applied and checked; PgqError naming the first bad one."""
    unknown = set(changes) - {f.name for f in dataclasses.fields(TaskOptions)}
    if unknown:
        raise PgqError(f"unknown task option(s): {', '.join(sorted(unknown))}")
    values: dict[str, Any] = dict(changes)
    for name in ("timeout", "backoff_base", "backoff_cap"):
        if name in values:
            values[name] = _seconds(values[name])
    if isinstance(values.get("delay"), int | float) and not isinstance(values["delay"], bool):
        try:
            values["delay"] = timedelta(seconds=values["delay"])
        except (OverflowError, ValueError):  # beyond a timedelta (about 2.7 million years), nan
            bad = values["delay"]
            raise PgqError(f"delay must be seconds or a timedelta, got {bad!r}") from None
    opts = dataclasses.replace(base, **values)
    try:
        check_queue_name(opts.queue)
        check_backoff(opts.backoff_base, "backoff_base")
        check_backoff(opts.backoff_cap, "backoff_cap")
    except ValueError as exc:
        raise PgqError(str(exc)) from None
    if not _is_int(opts.max_attempts) or opts.max_attempts < 1:
        raise PgqError(f"max_attempts must be an integer of at least 1, got {opts.max_attempts!r}")
    if not _is_int(opts.priority) or opts.priority not in _PRIORITY_RANGE:
        raise PgqError(f"priority must be an integer of 32 bits, got {opts.priority!r}")
    if opts.delay is not None and (
        not isinstance(opts.delay, timedelta) or opts.delay < timedelta(0)
    ):
        raise PgqError(f"delay must be seconds or a timedelta, not negative, got {opts.delay!r}")
    timeout = opts.timeout
    if timeout is not None and (
        not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout <= 0
    ):
        raise PgqError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if opts.unique_key is not None and not isinstance(opts.unique_key, str):
        raise PgqError(f"unique_key must be a template string, got {opts.unique_key!r}")
    return opts


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _exception_types(value: ExceptionTypes, what: str) -> tuple[type[BaseException], ...]:
    types = value if isinstance(value, tuple) else (value,)
    for t in types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise PgqError(f"{what} takes exception classes, got {t!r}")
    return types


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
    """A registered function: call it to run it here, `.enqueue(...)` to run it in a worker,
    `.options(...)` for the same task with other enqueue options."""

    def __init__(
        self,
        tasks: Tasks,
        fn: Callable[P, R],
        name: str,
        options: TaskOptions,
        *,
        retry_on: ExceptionTypes = (),
        dont_retry_on: ExceptionTypes = (),
    ) -> None:
        self.tasks = tasks
        self.fn = fn
        self.name = name
        self.signature = inspect.signature(fn)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.retry_on = _exception_types(retry_on, "retry_on")
        self.dont_retry_on = _exception_types(dont_retry_on, "dont_retry_on")
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
        self._options = self._checked_key(options)

    @property
    def queue(self) -> str:
        return self._options.queue

    @property
    def max_attempts(self) -> int:
        return self._options.max_attempts

    @property
    def defaults(self) -> TaskOptions:
        """The options this task's `enqueue` uses."""
        return self._options

    def options(self, **changes: Unpack[OptionChanges]) -> Task[P, R]:
        """This task with some enqueue options changed (the registered task is untouched):
        `send.options(priority=9, delay=60).enqueue(...)`. PgqError for a bad value."""
        changed = copy.copy(self)
        changed._options = self._checked_key(task_options(self._options, changes))
        return changed

    def retries(self, exc: BaseException) -> bool:
        """Whether a failure raising `exc` may be retried: not if it is in `dont_retry_on`, nor
        if `retry_on` is given and it is not in it."""
        if isinstance(exc, (DontRetry, *self.dont_retry_on)):
            return False
        return not self.retry_on or isinstance(exc, self.retry_on)

    def _why_not_retried(self, exc: BaseException) -> str:
        kind = type(exc).__name__
        if isinstance(exc, self.dont_retry_on):
            return f"{kind} is in the task's dont_retry_on"
        names = ", ".join(t.__name__ for t in self.retry_on)
        return f"{kind} is not in the task's retry_on ({names})"

    def _checked_key(self, options: TaskOptions) -> TaskOptions:
        """`options`, once its unique key template names only parameters of the task."""
        template = options.unique_key
        if template is None:
            return options
        takes_any = any(
            p.kind is p.VAR_KEYWORD for p in self.signature.parameters.values()
        )
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:
            raise PgqError(f"task {self.name}: unique_key {template!r}: {exc}") from None
        for field in fields:
            root = re.split(r"[.\[]", field, maxsplit=1)[0]
            if not root or root.isdigit():
                raise PgqError(
                    f"task {self.name}: unique_key {template!r} has a positional field; name "
                    "a parameter, e.g. {user_id}"
                )
            if root not in self.signature.parameters and not takes_any:
                raise PgqError(
                    f"task {self.name}: unique_key {template!r} names {root!r}, which is not "
                    "a parameter of the task"
                )
        return options

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Task({self.name!r}, queue={self.queue!r})"

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The arguments as stored (JSON's round trip); TaskArgumentError if they do not fit."""
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
        loaded: dict[str, Any] = json.loads(json.dumps(stored))
        return loaded

    def _payload(self, args: dict[str, Any]) -> dict[str, Any]:
        payload: dict[str, Any] = {"task": self.name, "args": args}
        if self._options.timeout is not None:
            payload["timeout"] = self._options.timeout
        return payload

    def payload(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The job payload for these arguments; TaskArgumentError if they do not fit."""
        return self._payload(self._bind(args, kwargs))

    def unique_key_for(self, args: dict[str, Any]) -> str | None:
        """The unique key template filled with stored `args` (and the defaults of the others);
        TaskArgumentError if it cannot be."""
        template = self._options.unique_key
        if template is None:
            return None
        values = {
            name: p.default
            for name, p in self.signature.parameters.items()
            if p.default is not p.empty
        }
        values.update(args)
        try:
            return check_unique_key(string.Formatter().vformat(template, (), values))
        except (KeyError, IndexError, AttributeError, TypeError, ValueError) as exc:
            raise TaskArgumentError(
                f"task {self.name}: unique_key {template!r} cannot be filled: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def s(self, *args: P.args, **kwargs: P.kwargs) -> Step:
        """This task with these arguments, to enqueue later in a `chain` or a `group` (the
        arguments are checked now: TaskArgumentError)."""
        return Step(self, self._spec(args, kwargs, None, None, None, ()))

    def _spec(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        delay: timedelta | None,
        run_at: datetime | None,
        unique_key: str | None,
        depends_on: Sequence[int],
    ) -> JobSpec:
        stored = self._bind(args, kwargs)
        opts = self._options
        return JobSpec(
            opts.queue,
            self._payload(stored),
            run_at=run_at,
            delay=delay if delay is not None else opts.delay,
            max_attempts=opts.max_attempts,
            priority=opts.priority,
            unique_key=unique_key if unique_key is not None else self.unique_key_for(stored),
            backoff_base=opts.backoff_base,
            backoff_cap=opts.backoff_cap,
            depends_on=tuple(depends_on),
        )

    def enqueue(
        self,
        *args: Any,
        conn: Any = None,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        unique_key: str | None = None,
        depends_on: Sequence[int] = (),
        **kwargs: Any,
    ) -> int:
        """Enqueue a run with these arguments: the job's id (the holder's, for a duplicate
        unique key). `conn`: a psycopg connection (or SQLAlchemy session or connection on
        the psycopg driver) whose open transaction the job joins, or a `Queue`; default the
        Tasks' own queue client. `delay`, `run_at` and `unique_key` (the key itself, not a
        template) win over the task's options. `depends_on`: ids of jobs this run waits for
        (PgqError if one does not exist)."""
        spec = self._spec(args, kwargs, delay, run_at, unique_key, depends_on)
        queue, target = self.tasks._sync_target(conn)
        return _enqueue(queue, [spec], target)[0]

    async def enqueue_async(
        self,
        *args: Any,
        conn: AsyncQueue | psycopg.AsyncConnection[Any] | None = None,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        unique_key: str | None = None,
        depends_on: Sequence[int] = (),
        **kwargs: Any,
    ) -> int:
        """`enqueue` for asyncio: `conn` is an `AsyncQueue` or an async psycopg connection."""
        spec = self._spec(args, kwargs, delay, run_at, unique_key, depends_on)
        queue, target = await self.tasks._async_target(conn)
        return (await _aenqueue(queue, [spec], target))[0]


@dataclasses.dataclass(frozen=True)
class Step:
    """A task with its arguments (`Task.s(...)`), checked, not yet enqueued: a link of a
    `chain` or a member of a `group`."""

    task: Task[Any, Any]
    spec: JobSpec


#: A link of a chain: one step, or a group of steps (side by side).
Link = Step | Sequence[Step]


def _links(links: tuple[Link, ...], what: str) -> list[list[Step]]:
    groups = [[link] if isinstance(link, Step) else list(link) for link in links]
    if not groups or any(not g for g in groups):
        raise PgqError(f"{what}: nothing to enqueue (an empty chain or group)")
    for g in groups:
        for step in g:
            if not isinstance(step, Step):
                raise PgqError(f"{what}: {step!r} is not a step (make one with task.s(...))")
    return groups


def _after(steps: list[Step], parents: Sequence[int]) -> list[JobSpec]:
    return [dataclasses.replace(step.spec, depends_on=tuple(parents)) for step in steps]


def _alone(specs: list[JobSpec]) -> dict[str, Any] | None:
    """The arguments of `enqueue` for a batch of one job without a unique key or dependencies
    (its one INSERT, shared with concurrent callers of the queue: pgq_core/rounds.py)."""
    if len(specs) != 1 or specs[0].unique_key is not None or specs[0].depends_on:
        return None
    s = specs[0]
    return {
        "queue": s.queue, "payload": s.payload, "delay": s.delay, "run_at": s.run_at,
        "max_attempts": s.max_attempts, "priority": s.priority,
        "backoff_base": s.backoff_base, "backoff_cap": s.backoff_cap,
    }  # fmt: skip


def _enqueue(
    queue: Queue, specs: list[JobSpec], target: psycopg.Connection[Any] | None
) -> list[int]:
    try:
        if (one := _alone(specs)) is not None:  # the one-job path: it shares rounds
            return [queue.enqueue(**one, conn=target)]
        return queue.enqueue_many(specs, conn=target)
    except ValueError as exc:  # a spec refused before anything is sent
        raise PgqError(str(exc)) from None


async def _aenqueue(
    queue: AsyncQueue, specs: list[JobSpec], target: psycopg.AsyncConnection[Any] | None
) -> list[int]:
    try:
        if (one := _alone(specs)) is not None:
            return [await queue.enqueue(**one, conn=target)]
        return await queue.enqueue_many(specs, conn=target)
    except ValueError as exc:
        raise PgqError(str(exc)) from None


def chain(*links: Link, depends_on: Sequence[int] = (), conn: Any = None) -> list[int]:
    """Enqueue `links` to run one after the other, in one transaction: each link waits for
    the one before (the first for `depends_on`); a link that is a list of steps is a group,
    and the next link waits for all of it. The ids of every job, in order. `conn` as in
    `Task.enqueue` (default: the first step's Tasks' own client)."""
    groups = _links(links, "chain")
    queue, target = groups[0][0].task.tasks._sync_target(conn)
    ids: list[int] = []
    parents = list(depends_on)
    with queue.transaction(target):  # the queue's own connection is this chain's until then
        for steps in groups:
            parents = _enqueue(queue, _after(steps, parents), target)
            ids.extend(parents)
    return ids


def group(*steps: Step, depends_on: Sequence[int] = (), conn: Any = None) -> list[int]:
    """Enqueue `steps` side by side (each after `depends_on`) in one statement: their ids, in
    order. Wait for all of them with `depends_on=` the ids (or put the group in a `chain`)."""
    (members,) = _links((list(steps),), "group")
    queue, target = members[0].task.tasks._sync_target(conn)
    return _enqueue(queue, _after(members, depends_on), target)


async def achain(
    *links: Link,
    depends_on: Sequence[int] = (),
    conn: AsyncQueue | psycopg.AsyncConnection[Any] | None = None,
) -> list[int]:
    """`chain` for asyncio: `conn` is an `AsyncQueue` or an async psycopg connection."""
    groups = _links(links, "chain")
    queue, target = await groups[0][0].task.tasks._async_target(conn)
    ids: list[int] = []
    parents = list(depends_on)
    async with queue.transaction(target):  # the queue's own connection is this chain's
        for steps in groups:
            parents = await _aenqueue(queue, _after(steps, parents), target)
            ids.extend(parents)
    return ids


async def agroup(
    *steps: Step,
    depends_on: Sequence[int] = (),
    conn: AsyncQueue | psycopg.AsyncConnection[Any] | None = None,
) -> list[int]:
    """`group` for asyncio."""
    (members,) = _links((list(steps),), "group")
    queue, target = await members[0].task.tasks._async_target(conn)
    return await _aenqueue(queue, _after(members, depends_on), target)


class Tasks:
    """A registry of tasks, and the worker handler that runs them by name.

    `queue` is the default queue of its tasks; `schema` (else PGQ_SCHEMA, else pgq) is used
    with a bare connection; `client` / `async_client` enqueue when no `conn` is given, and when
    none was given one is connected on first use as `Queue.connect()` finds the database
    (PGQ_DSN, else the embedded server).
    """

    def __init__(
        self,
        queue: str = "default",
        *,
        schema: str | None = None,
        client: Queue | None = None,
        async_client: AsyncQueue | None = None,
        threads: int = DEFAULT_THREADS,
    ) -> None:
        self.queue = queue
        self._schema = schema
        self._dsn: str | None = None
        self.client = client
        self._connecting = threading.Lock()
        self.async_client = async_client
        self.threads = threads
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def task(
        self,
        fn: Callable[P, R] | None = None,
        *,
        name: str | None = None,
        retry_on: ExceptionTypes = (),
        dont_retry_on: ExceptionTypes = (),
        **options: Unpack[OptionChanges],
    ) -> Any:
        """Register `fn` (as `@tasks.task` or `@tasks.task(...)`) under `name` (default: the
        function's name), with its enqueue options (`TaskOptions`: queue, max_attempts,
        priority, delay, timeout, backoff_base, backoff_cap, unique_key) and which failures are
        retried (`retry_on`: only these; `dont_retry_on`: never these, which wins). PgqError if
        the name is taken, an option is bad or the signature cannot be stored."""
        if options.get("queue") is None:
            options.pop("queue", None)
        opts = task_options(TaskOptions(self.queue), options)

        def register(f: Callable[P, R]) -> Task[P, R]:
            task_name = name or f.__name__
            if task_name in self._tasks:
                raise PgqError(f"task {task_name!r} is already registered")
            registered = Task(
                self, f, task_name, opts, retry_on=retry_on, dont_retry_on=dont_retry_on
            )
            self._tasks[task_name] = registered
            return registered

        return register(fn) if fn is not None else register

    @property
    def schema(self) -> str:
        """The schema given, else PGQ_SCHEMA, else pgq (read when used, as the CLI reads it)."""
        return schema_name(self._schema)

    @schema.setter
    def schema(self, schema: str | None) -> None:
        self._schema = schema

    def use_database(self, dsn: str, schema: str) -> None:
        """Connect there, not where `Queue.connect()` would look, on the first enqueue without
        a client: `pgq --dsn X worker --tasks ...` sets its own database, so a task that
        enqueues another reaches the database its worker runs on."""
        self._dsn = dsn
        self._schema = schema

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
        with self._connecting:
            if self.client is None:
                self.client = Queue.connect(self._dsn, self._schema)
        return self.client, None

    async def _async_target(
        self, conn: AsyncQueue | psycopg.AsyncConnection[Any] | None
    ) -> tuple[AsyncQueue, psycopg.AsyncConnection[Any] | None]:
        if isinstance(conn, AsyncQueue):
            return conn, None
        if isinstance(conn, psycopg.AsyncConnection):
            return AsyncQueue(conn, self.schema), conn
        if self.async_client is None:
            client = await AsyncQueue.connect(self._dsn, self._schema)
            if self.async_client is None:  # no other enqueue connected meanwhile
                self.async_client = client
            else:
                await client.close()
        return self.async_client, None

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
        except Exception as exc:
            if isinstance(exc, DontRetry | LeaseLost | Snooze) or task.retries(exc):
                raise  # a lost lease or a snooze is the worker's, whatever the task retries
            raise DontRetry(task._why_not_retried(exc)) from exc
        finally:
            _current.reset(token)

    def timeout_for(self, ctx: JobContext) -> float | None:
        """Seconds the job's attempt may run: the payload's `timeout`, else its task's; None
        (the worker's own timeout) for a job that names neither. Never raises."""
        payload = ctx.payload
        if not isinstance(payload, dict):
            return None
        timeout = payload.get("timeout")
        if isinstance(timeout, int | float) and not isinstance(timeout, bool):
            try:
                seconds = float(timeout)
            except OverflowError:  # an integer of hundreds of digits, written by plain SQL
                return None
            return seconds if math.isfinite(seconds) and seconds > 0 else None
        name = payload.get("task")
        task = self._tasks.get(name) if isinstance(name, str) else None
        return task.defaults.timeout if task is not None else None

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
