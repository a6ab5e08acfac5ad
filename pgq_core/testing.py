"""Testing your own tasks: a private schema per test, and its queues drained in this process,
so a user's tests need no worker process (`pgq_core.pytest_plugin` makes them fixtures).

Invariants: `private_schema` migrates a schema no other test uses and drops it afterwards,
whatever the test did; `drain` and `eager` run jobs through a real burst worker (the same
claim, fence, retry, DontRetry and Snooze as in production), in this process, until nothing
in its queues is due: a retry waiting for its backoff, or a snoozed job, is left for later.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from . import ops
from .config import resolve
from .migrate import migrate
from .queue import Queue
from .session import run as run_op
from .tasks import Task, Tasks
from .worker import Handler, Worker, WorkerSnapshot

#: Seconds a drain may take before it is given up (TimeoutError).
DRAIN_TIMEOUT = 60.0


@dataclass(frozen=True)
class PrivateSchema:
    """Where a test's jobs go: `dsn` and a schema of its own."""

    dsn: str
    schema: str

    def queue(self) -> Queue:
        """A `Queue` on the schema (close it, or use it as a context manager)."""
        return Queue.connect(self.dsn, self.schema)


@contextlib.contextmanager
def private_schema(dsn: str | None = None) -> Iterator[PrivateSchema]:
    """A freshly migrated schema `pgq_test_<random>` on `dsn` (default: PGQ_DSN, else the
    embedded server), dropped with everything in it afterwards."""
    target = resolve(dsn, None)
    schema = f"pgq_test_{secrets.token_hex(6)}"
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        migrate(conn, schema)
    try:
        yield PrivateSchema(target.dsn, schema)
    finally:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            run_op(conn, schema, ops.drop_schema())


def _queues(handler: Handler, queues: Sequence[str] | None) -> list[str]:
    if queues is not None:
        return list(queues)
    if isinstance(handler, Tasks):
        return handler.queues
    raise ValueError("drain needs the queues to work (or a Tasks registry, which knows them)")


async def adrain(
    handler: Handler,
    where: PrivateSchema,
    queues: Sequence[str] | None = None,
    *,
    concurrency: int = 1,
    timeout: float = DRAIN_TIMEOUT,
) -> WorkerSnapshot:
    """Run `handler` (a function or a `Tasks` registry) on `queues` of `where` with a burst
    worker until nothing there is due; its last snapshot (done, failed, lost)."""
    if isinstance(handler, Tasks):
        handler.use_database(where.dsn, where.schema)
    worker = Worker(
        where.dsn,
        _queues(handler, queues),
        handler,
        schema=where.schema,
        concurrency=concurrency,
        burst=True,
        poll_interval=0.05,
        lease=timedelta(seconds=30),
    )
    await asyncio.wait_for(worker.run(), timeout)
    return worker.snapshot()


def drain(
    handler: Handler,
    where: PrivateSchema,
    queues: Sequence[str] | None = None,
    *,
    concurrency: int = 1,
    timeout: float = DRAIN_TIMEOUT,
) -> WorkerSnapshot:
    """`adrain` from synchronous code (not from inside a running event loop: await `adrain`)."""
    return asyncio.run(
        adrain(handler, where, queues, concurrency=concurrency, timeout=timeout)
    )


@contextlib.contextmanager
def bound(tasks: Tasks, where: PrivateSchema) -> Iterator[Tasks]:
    """Inside it, `tasks` enqueues on `where` (through a client of its own); afterwards, where
    it enqueued before."""
    saved = tasks.client, tasks.async_client, tasks._dsn, tasks._schema
    tasks.client, tasks.async_client = where.queue(), None
    tasks.use_database(where.dsn, where.schema)
    try:
        yield tasks
    finally:
        assert tasks.client is not None
        tasks.client.close()
        tasks.client, tasks.async_client, tasks._dsn, tasks._schema = saved


@contextlib.contextmanager
def eager(tasks: Tasks, where: PrivateSchema) -> Iterator[Tasks]:
    """Eager mode: inside it, each `Task.enqueue` of `tasks`' tasks enqueues on `where` and
    then drains the registry's queues, so the job has run (done, failed or dead) when
    `enqueue` returns its id. Enqueues of other registries are left alone."""
    original = Task.enqueue
    draining = threading.Event()  # a task enqueued by a task runs in the drain under way

    @functools.wraps(original)
    def enqueue_and_run(self: Task[Any, Any], *args: Any, **kwargs: Any) -> int:
        job_id = original(self, *args, **kwargs)
        if self.tasks is tasks and not draining.is_set():
            draining.set()
            try:
                drain(tasks, where)
            finally:
                draining.clear()
        return job_id

    with bound(tasks, where):
        Task.enqueue = enqueue_and_run  # type: ignore[method-assign]
        try:
            yield tasks
        finally:
            Task.enqueue = original  # type: ignore[method-assign]
