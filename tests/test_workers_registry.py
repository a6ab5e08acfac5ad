"""Every live worker in view: a worker writes its row in `workers` as it starts, beats it with
its counts, deletes it when it stops; a row whose beats stopped drops out by itself."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import socket
import time
from typing import Any

import pytest
from psycopg import sql
from support import TIMEOUT, make_worker, running, until

from pgq_core import Queue, ops
from pgq_core.worker import JobContext


async def test_a_running_worker_is_listed_with_its_counts_and_gone_when_it_stops(
    dsn: str, schema: str, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgq_core.worker import registry, runtime

    # a beat a second, not every BEAT_EVERY (5 s): the counts show within a second of changing
    beat = functools.partial(registry.beat_forever, every=1.0)
    monkeypatch.setattr(runtime, "beat_forever", beat)
    for n in range(3):
        queue.enqueue("q", {"n": n}, max_attempts=1)
    gate = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        if ctx.payload["n"] == 0:
            raise ValueError("boom")
        if ctx.payload["n"] == 2:
            await gate.wait()

    worker = make_worker(dsn, schema, handler, queues=["q", "other"], concurrency=4)
    async with running(worker):
        await until(
            lambda: [(w.running, w.done, w.failed) for w in queue.workers()] == [(1, 1, 1)],
            what="the beat with its counts",
            timeout=TIMEOUT,
        )
        [info] = queue.workers()
        assert info.id == worker.id
        assert (info.host, info.pid) == (socket.gethostname(), os.getpid())
        assert (info.queues, info.concurrency) == (["q", "other"], 4)
        assert info.version and 0 <= info.beat_seconds < 30 and info.up_seconds >= 0
        gate.set()
        worker.stop()
    assert queue.workers() == []


async def test_beats_update_the_row(dsn: str, schema: str, queue: Queue) -> None:
    from pgq_core.worker import registry

    calls: list[Any] = []

    async def call(*op: ops.Op[Any]) -> list[Any]:
        calls.append(op)
        return [queue.run(o) for o in op]

    task = asyncio.create_task(
        registry.beat_forever(call, "w-beats", ["q"], 2, lambda: (len(calls), 0, 0), every=0.05)
    )
    try:
        await until(lambda: len(calls) >= 3, what="three beats")
    finally:
        task.cancel()
    [info] = queue.workers()
    assert info.id == "w-beats" and info.running >= 2  # the count it gave on a later beat
    await registry.say_gone(call, "w-beats")
    assert queue.workers() == []


def test_a_row_whose_beats_stopped_expires_and_the_next_beat_deletes_it(queue: Queue) -> None:
    queue.run(ops.worker_beat("killed", "h", 1, ["q"], 1, "0", 0.2, (1, 0, 0)))
    queue.run(ops.worker_beat("alive", "h", 2, ["q"], 1, "0", 60, (0, 0, 0)))
    assert {w.id for w in queue.workers()} == {"killed", "alive"}
    time.sleep(0.4)
    assert [w.id for w in queue.workers()] == ["alive"]  # not shown once expired
    queue.run(ops.worker_beat("alive", "h", 2, ["q"], 1, "0", 60, (0, 5, 0)))
    rows = queue.conn.execute(
        sql.SQL("SELECT id FROM {}.workers ORDER BY id").format(sql.Identifier(queue.schema))
    ).fetchall()
    assert rows == [("alive",)]  # the beat deleted the expired row
    assert queue.workers()[0].done == 5


def test_pgq_workers_lists_them_and_json_is_exact(pgq: Any, queue: Queue) -> None:
    queue.run(ops.worker_beat("host-a:12:abc", "host-a", 12, ["emails", "q"], 8, "0.1.0", 60,
                              (3, 1200, 7)))
    shown = pgq("workers")
    assert shown.exit_code == 0, shown.output
    assert "host-a:12:abc" in shown.output and "emails,q" in shown.output
    assert "1,200" in shown.output
    [row] = json.loads(pgq("workers", "--json").output)
    assert row["id"] == "host-a:12:abc" and row["queues"] == ["emails", "q"]
    assert (row["pid"], row["concurrency"], row["running"], row["done"], row["failed"]) == (
        12, 8, 3, 1200, 7
    )
    queue.run(ops.worker_gone("host-a:12:abc"))
    assert "no live workers" in pgq("workers").output
    assert json.loads(pgq("workers", "--json").output) == []
