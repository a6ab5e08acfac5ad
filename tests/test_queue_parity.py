"""`Queue` and `AsyncQueue` are one API: every operation of one is an operation of the other,
with the same parameters, and answers the same."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta
from typing import Any

from psycopg import sql

from pgq_core import AsyncQueue, JobSpec, Queue

#: Python's own protocol on each side: `with` on one, `async with` on the other.
OWN = {"__enter__", "__exit__", "__aenter__", "__aexit__"}


def operations(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member)
    }


def test_both_queues_offer_the_same_operations_with_the_same_parameters() -> None:
    sync, async_ = operations(Queue), operations(AsyncQueue)
    assert set(sync) == set(async_)
    for name, method in sync.items():
        twin = async_[name]
        assert list(inspect.signature(method).parameters) == list(
            inspect.signature(twin).parameters
        ), name
        if inspect.isgeneratorfunction(inspect.unwrap(method)):  # a context manager's too
            assert inspect.isasyncgenfunction(inspect.unwrap(twin)), name
        elif name != "connect" or not inspect.ismethod(method):
            assert inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin), name


async def test_the_async_operations_answer_as_the_sync_ones(
    queue: Queue, aqueue: AsyncQueue
) -> None:
    queue.enqueue_many([JobSpec("q", {"n": n}) for n in range(3)])
    [job] = queue.claim("q", 1, timedelta(seconds=30), "w")
    queue.complete(job.id, job.fence)
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET finished_at = now() - interval '2 days' WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        [job.id],
    )
    assert await aqueue.settings() == queue.settings()
    assert await aqueue.has_jobs("q") is queue.has_jobs("q") is True
    assert await aqueue.has_jobs("none") is queue.has_jobs("none") is False
    assert await aqueue.retries_waiting(["q"]) == queue.retries_waiting(["q"])
    assert await aqueue.lease_summary() == queue.lease_summary()
    assert [t.table for t in await aqueue.table_sizes()] == [t.table for t in queue.table_sizes()]
    # workers connected to the whole database: on a server the suite shares, other tests'
    # workers come and go, so both must agree at some moment, whatever the count
    for _ in range(100):
        connected = (await aqueue.activity()).workers_connected
        if connected == queue.activity().workers_connected:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("activity(): the async and sync answers never agreed")
    assert await aqueue.requeue_report([job.id]) == ([], [], {})
    assert [n async for n in aqueue.prune_batches(timedelta(days=1))] == [1]
    assert list(queue.prune_batches(timedelta(days=1))) == []
    assert await aqueue.set_notify("edge") == "edge"
    assert queue.settings()["notify"] == "edge"


def test_each_operation_has_one_docstring_and_both_queues_one_order() -> None:
    """`Queue` is generated from `AsyncQueue`: every operation says what it does, in the same
    words and the same place on both."""
    sync, async_ = operations(Queue), operations(AsyncQueue)
    undocumented = [name for name, method in sync.items() if not inspect.getdoc(method)]
    assert undocumented == []
    assert {n: inspect.getdoc(m) for n, m in sync.items()} == {
        n: inspect.getdoc(m) for n, m in async_.items()
    }
    assert [n for n in vars(Queue) if n in sync] == [n for n in vars(AsyncQueue) if n in async_]
