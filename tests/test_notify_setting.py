"""The `notify` setting (migration 5): always | edge | off, counted on a LISTENing connection."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgq_core import JobSpec, Queue, channel, listen_statement
from pgq_core.notifier import notifier_for
from pgq_core.worker import Worker


def listener(dsn: str, schema: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(listen_statement(schema))
    return conn


def drain(conn: psycopg.Connection[Any], wait: float = 0.4) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=wait)]


def test_default_is_always_and_each_enqueue_notifies(queue: Queue, dsn: str) -> None:
    assert queue.settings() == {"notify": "always"}
    with listener(dsn, queue.schema) as ears:
        for _ in range(5):
            queue.enqueue("a", {})
            # sent by the process's notifier after the commit, not before enqueue returns
            assert [n.payload for n in ears.notifies(timeout=10, stop_after=1)] == ["a"]
            assert drain(ears, 0.1) == []
        for _ in range(20):
            queue.enqueue("a", {})
        burst = drain(ears, 1.0)
        assert 1 <= len(burst) <= 20 and set(burst) == {"a"}, "coalesced, never dropped"


def test_edge_burst_onto_a_queue_with_due_jobs_is_silent(queue: Queue, dsn: str) -> None:
    assert queue.set_notify("edge") == "edge"
    with listener(dsn, queue.schema) as ears:
        queue.enqueue("e", {})
        assert drain(ears) == ["e"], "the first job on an empty queue notifies"
        for _ in range(20):
            queue.enqueue("e", {})
        assert drain(ears) == [], "a burst onto a queue with due jobs sends nothing"
        queue.enqueue("other", {})
        assert drain(ears) == ["other"], "another queue's edge is its own"


def test_edge_counts_only_due_jobs_and_rearms_when_drained(queue: Queue, dsn: str) -> None:
    queue.set_notify("edge")
    queue.enqueue("s", {}, delay=timedelta(hours=1))
    with listener(dsn, queue.schema) as ears:
        queue.enqueue("s", {})
        assert drain(ears) == ["s"], "a scheduled job is not due: the queue had nothing due"
        [job] = queue.claim("s", 10, timedelta(seconds=30), "w")
        queue.complete(job.id, job.fence)
        assert drain(ears) == []
        queue.enqueue("s", {})
        assert drain(ears) == ["s"], "drained, then a job: an edge again"


def _enqueue_ways(queue: Queue) -> dict[str, Callable[[str, psycopg.Connection[Any] | None], Any]]:
    """Every way a producer enqueues onto queue `name`, on `conn` (None: the queue's own)."""
    return {
        "enqueue": lambda name, conn: queue.enqueue(name, {}, conn=conn),
        "enqueue_many": lambda name, conn: queue.enqueue_many(
            [JobSpec(name, {}), JobSpec(name, {})], conn
        ),
        "enqueue_copy": lambda name, conn: queue.enqueue_copy([JobSpec(name, {})], conn),
        "enqueue_payloads": lambda name, conn: queue.enqueue_payloads(name, [{}, {}], conn=conn),
    }


def test_edge_producers_racing_onto_an_idle_queue_wake_a_listener(
    queue: Queue, dsn: str
) -> None:
    """Two producers enqueue onto an idle queue at once: the first's jobs are not committed
    when the second looks for due jobs, so neither sees the other's. Whatever the paths (one
    alone, in a transaction, a batch, COPY), at least one notification goes out: under `edge`
    an idle queue that gets work always wakes a listener."""
    queue.set_notify("edge")
    ways = _enqueue_ways(queue)
    with listener(dsn, queue.schema) as ears:
        for n, ((first, held_way), (second, alone_way)) in enumerate(
            itertools.product(ways.items(), repeat=2)
        ):
            name = f"race{n}"
            with psycopg.connect(dsn) as held:  # the first, still uncommitted
                held_way(name, held)
                alone_way(name, None)  # the second, its own transaction
            woken: list[str] = []
            deadline = time.monotonic() + 10
            while name not in woken and time.monotonic() < deadline:
                woken += [m.payload for m in ears.notifies(timeout=1, stop_after=1)]
            assert name in woken, f"{first} (in a transaction), then {second}: {woken}"


def test_edge_batch_onto_an_empty_queue_is_one_notification(queue: Queue, dsn: str) -> None:
    queue.set_notify("edge")
    with listener(dsn, queue.schema) as ears:
        queue.enqueue_many(JobSpec("b", {"n": i}) for i in range(1000))
        assert drain(ears) == ["b"]


def test_edge_requeue_onto_an_empty_queue_notifies(queue: Queue, dsn: str) -> None:
    queue.set_notify("edge")
    dead = queue.enqueue("r", {})
    assert notifier_for(queue.conn, queue.schema).flush(10)  # its own NOTIFY is out
    queue.kill([dead])
    with listener(dsn, queue.schema) as ears:
        queue.requeue([dead])
        assert drain(ears) == ["r"]


def test_off_sends_nothing(queue: Queue, dsn: str) -> None:
    queue.set_notify("off")
    with listener(dsn, queue.schema) as ears:
        queue.enqueue("o", {})
        queue.enqueue_many(JobSpec("o", {}) for _ in range(10))
        assert drain(ears) == []
    queue.set_notify("always")
    with listener(dsn, queue.schema) as ears:
        queue.enqueue("o", {})
        assert drain(ears) == ["o"]


def test_bad_mode_is_refused_in_python_and_in_the_database(queue: Queue, conn: Any) -> None:
    with pytest.raises(ValueError, match="always, edge, off"):
        queue.set_notify("sometimes")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            psycopg.sql.SQL("UPDATE {}.settings SET value = 'loud' WHERE name = 'notify'").format(
                psycopg.sql.Identifier(queue.schema)
            )
        )


async def test_with_notify_off_a_worker_still_drains_by_polling(
    queue: Queue, dsn: str, schema: str
) -> None:
    queue.set_notify("off")
    done: list[int] = []

    async def handler(ctx: Any) -> None:
        done.append(ctx.id)

    worker = Worker(dsn, ["p"], handler, schema=schema, poll_interval=0.05, max_poll_interval=0.2)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.5)  # idle: polling has backed off
        queue.enqueue_many(JobSpec("p", {"n": i}) for i in range(25))
        async with asyncio.timeout(20):
            while len(done) < 25:
                await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await task
    assert worker.snapshot().done == 25


def test_pgq_config_notify_command(queue: Queue, dsn: str, schema: str) -> None:
    env = dict(os.environ, PGQ_DSN=dsn, PGQ_SCHEMA=schema)

    def pgq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgq_cli", *args], env=env, capture_output=True, text=True
        )

    assert pgq("config", "notify").stdout == "notify = always\n"
    assert pgq("config", "notify", "edge").stdout == "notify = edge\n"
    assert queue.settings()["notify"] == "edge"
    assert '"notify": "edge"' in pgq("config", "--json").stdout
    bad = pgq("config", "notify", "loud")
    assert bad.returncode == 2 and bad.stderr.startswith("pgq: error:")
    assert channel(schema) == f"{schema}_jobs"
