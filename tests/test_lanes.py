"""The lanes (pgq_core/worker/lanes.py): two steps in flight on two statement connections,
against a real PostgreSQL. Every job still runs once and is settled once, when the second
connection cannot open, and when it is killed again and again mid-drain."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import make_worker, status_counts

from pgq_core import JobSpec, Queue
from pgq_core.worker import JobContext
from pgq_core.worker.lanes import Lanes
from pgq_core.worker.ledger import Ledger
from pgq_core.worker.link import Lane, Link, Timeouts


def _completions(queue: Queue) -> dict[int, int]:
    rows = queue.conn.execute(
        sql.SQL(
            "SELECT job_id, count(*) FROM {}.job_events WHERE event = 'completed' GROUP BY 1"
        ).format(sql.Identifier(queue.schema))
    ).fetchall()
    return {int(i): int(n) for i, n in rows}


class _Watch:
    """Polls pg_stat_activity from a thread of its own for the worker's second connection;
    with `kill`, terminates it each time it is seen while fewer than `kill_until` jobs of
    `schema` are done (a connection killed at the very end of the drain is never used again,
    so nothing would notice) and it is 200 ms old (a kill while it opens is a failed open,
    tried again only seconds later)."""

    def __init__(
        self, dsn: str, schema: str, app: str, kill: bool = False, kill_until: int = 0
    ) -> None:
        self.seen = 0
        self.killed = 0
        self._dsn, self._app, self._kill = dsn, app, kill
        self._done = sql.SQL("SELECT count(*) FROM {}.jobs WHERE status = 'done'").format(
            sql.Identifier(schema)
        )
        self._kill_until = kill_until
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            while not self._stop.wait(0.01 if self._kill else 0.03):
                pids = [
                    int(pid)
                    for (pid,) in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                        " AND backend_start < now() - interval '200 milliseconds'",
                        [self._app],
                    ).fetchall()
                ]
                self.seen += bool(pids)
                if self._kill and pids:
                    row = conn.execute(self._done).fetchone()
                    if row is None or int(row[0]) >= self._kill_until:
                        continue
                    for pid in pids:
                        conn.execute("SELECT pg_terminate_backend(%s)", [pid])
                        self.killed += 1


async def _slow_noop(ctx: JobContext) -> None:
    await asyncio.sleep(0.002)


async def test_steps_overlap_on_a_second_connection_and_every_job_runs_once(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue_many(JobSpec("q", {"n": n}) for n in range(2000))
    worker = make_worker(dsn, schema, _slow_noop, concurrency=10, burst=True)
    with _Watch(dsn, schema, f"pgq step {worker.id}") as watch:
        await asyncio.wait_for(worker.run(), 60)
    assert watch.seen > 0, "the second statement connection was never open"
    assert status_counts(queue) == {"done": 2000}
    completions = _completions(queue)
    assert len(completions) == 2000 and set(completions.values()) == {1}
    assert worker.snapshot().done == 2000


async def test_killing_the_second_connection_again_and_again_loses_no_job(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """A step whose connection broke may have claimed unseen (orphans, handed back with the
    attempt not counted, once no step is in flight) or settled unseen (settled again: found
    done). No job is lost, none completes twice, none is counted twice."""
    caplog.set_level("INFO", logger="pgq.worker")
    queue.enqueue_many(JobSpec("q", {"n": n}) for n in range(3000))
    ran: dict[int, int] = {}

    async def handler(ctx: JobContext) -> None:
        ran[ctx.id] = ran.get(ctx.id, 0) + 1
        await asyncio.sleep(0.002)

    worker = make_worker(dsn, schema, handler, concurrency=10, burst=True)
    with _Watch(dsn, schema, f"pgq step {worker.id}", kill=True, kill_until=2000) as watch:
        await asyncio.wait_for(worker.run(), 120)
    assert watch.killed > 0, "the second connection was never there to kill"
    assert "second statement connection lost" in caplog.text
    assert status_counts(queue) == {"done": 3000}
    completions = _completions(queue)
    assert len(completions) == 3000 and set(completions.values()) == {1}
    snap = worker.snapshot()
    assert (snap.done, snap.failed, snap.lost) == (3000, 0, 0)
    # a job handed back as an orphan never started here: every job ran exactly once
    assert len(ran) == 3000 and set(ran.values()) == {1}


async def test_without_a_second_connection_steps_take_turns_on_the_main_one(
    dsn: str, schema: str
) -> None:
    """The second lane cannot open (nothing listens where it points): the main lane takes
    every step, and `free` says so without waiting for the failed connect."""
    timeouts = Timeouts(statement=5.0, lock=1.0, connect=2.0)

    def nothing(*_: Any) -> None:
        return None

    main = Lane(Link(dsn, schema, timeouts, nothing, nothing), "w")
    dead = "host=127.0.0.1 port=1 dbname=none user=none connect_timeout=2"
    lanes = Lanes(main, lambda: Lane(Link(dead, schema, timeouts, nothing, nothing), "w"))
    woken = asyncio.Event()
    await main.link.open()
    try:
        now = time.monotonic()
        assert lanes.free(now, woken.set) is main
        gate = asyncio.Event()

        async def step() -> None:
            await gate.wait()

        lanes.start(main, step())
        assert not lanes.quiet and lanes.in_flight == 1
        assert not lanes.full  # a second lane may still be opened
        assert lanes.free(time.monotonic(), woken.set) is None  # the second is being opened
        assert lanes.full  # its opening wakes the worker when it ends
        await asyncio.wait_for(woken.wait(), 10)  # ... and failed
        woken.clear()
        assert lanes.free(time.monotonic(), woken.set) is None  # not tried again at once
        assert not lanes.full
        gate.set()
        await asyncio.wait_for(lanes.wait(), 5)
        assert lanes.quiet
        assert lanes.free(time.monotonic(), woken.set) is main
    finally:
        await lanes.close()
        await main.link.close()


async def test_a_step_that_raises_is_raised_in_the_main_loop(dsn: str, schema: str) -> None:
    timeouts = Timeouts(statement=5.0, lock=1.0)
    main = Lane(Link(dsn, schema, timeouts, print, print), "w")
    lanes = Lanes(main, None)

    async def broken() -> None:
        raise RuntimeError("a bug in a step")

    assert not lanes.full
    lanes.start(main, broken())
    assert lanes.full  # one lane only, and its step in flight
    await lanes.wait()
    assert not lanes.full
    with pytest.raises(RuntimeError, match="a bug in a step"):
        lanes.check()
    lanes.check()  # said once


def test_the_room_leaves_out_what_claims_in_flight_may_bring() -> None:
    ledger = Ledger(30.0, lambda n: 0.1, clock=lambda: 0.0)
    assert ledger.room(limit=20, settling=0) == 20
    ledger.claiming = 15
    assert ledger.room(limit=20, settling=3) == 8
    ledger.claiming = 0
    assert ledger.room(limit=20, settling=0) == 20


async def test_a_stopping_worker_hands_back_its_buffer_only_when_no_step_is_in_flight(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Stopped mid-drain with two lanes busy: every job is done or back in `ready` with its
    attempt not counted; none is left running, none was run twice."""
    queue.enqueue_many(JobSpec("q", {"n": n}) for n in range(3000))
    ran: dict[int, int] = {}

    async def handler(ctx: JobContext) -> None:
        ran[ctx.id] = ran.get(ctx.id, 0) + 1
        await asyncio.sleep(0.001)

    worker = make_worker(dsn, schema, handler, concurrency=10, lease=timedelta(seconds=30))
    task = asyncio.create_task(worker.run())
    while worker.snapshot().done < 500:
        await asyncio.sleep(0.01)
    worker.stop()
    await asyncio.wait_for(task, 60)
    statuses = status_counts(queue)
    assert set(statuses) <= {"done", "ready"} and sum(statuses.values()) == 3000
    assert statuses["done"] == len(ran) == worker.snapshot().done
    assert set(ran.values()) == {1}
    attempts = queue.conn.execute(
        sql.SQL("SELECT DISTINCT attempts FROM {}.jobs WHERE status = 'ready'").format(
            sql.Identifier(schema)
        )
    ).fetchall()
    assert attempts in ([], [(0,)])
