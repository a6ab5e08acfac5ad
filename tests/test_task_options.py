"""The task options on a real server: each enqueued through the task API, run by an in-process
burst worker, and checked in the job's row and its history. Backoff is the job's own columns,
read by the fail statement; `dont_retry_on` / `retry_on` make a job dead at once; a task's
timeout is enforced by the worker for plain and async tasks alike."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg import sql
from support import TIMEOUT, events, make_worker, retry_wait

from pgq_core import (
    AsyncQueue,
    DontRetry,
    Job,
    LeaseLost,
    PgqError,
    Queue,
    TaskArgumentError,
    Tasks,
    current_job,
)
from pgq_core.worker import JobContext


def row(queue: Queue, job_id: int, *columns: str) -> tuple[Any, ...]:
    """Columns of one job's row, read by plain SQL."""
    found = queue.conn.execute(
        sql.SQL("SELECT {} FROM {}.jobs WHERE id = %s").format(
            sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(queue.schema)
        ),
        [job_id],
    ).fetchone()
    assert found is not None
    return tuple(found)


async def burst(dsn: str, schema: str, tasks: Tasks, **kw: Any) -> None:
    kw.setdefault("queues", tasks.queues)
    worker = make_worker(dsn, schema, tasks, burst=True, **kw)
    await asyncio.wait_for(worker.run(), TIMEOUT)


def kinds(queue: Queue, job_id: int) -> list[str]:
    return [e[0] for e in events(queue, job_id)]


# -- max_attempts and backoff -----------------------------------------------------------------


async def test_max_attempts_is_the_tasks_unless_an_enqueue_changes_it(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="q")

    @tasks.task(max_attempts=3, backoff_base=0)
    def flaky() -> None:
        raise OSError("down")

    three = flaky.enqueue(conn=queue)
    one = flaky.options(max_attempts=1).enqueue(conn=queue)
    await burst(dsn, schema, tasks)
    assert row(queue, three, "status", "attempts", "max_attempts") == ("dead", 3, 3)
    assert kinds(queue, three) == ["enqueued"] + ["claimed", "failed"] * 2 + ["claimed", "dead"]
    assert row(queue, one, "status", "attempts", "max_attempts") == ("dead", 1, 1)
    assert kinds(queue, one) == ["enqueued", "claimed", "dead"]
    assert flaky.max_attempts == 3  # .options() left the registered task alone


async def test_backoff_is_the_jobs_own_columns_read_by_the_fail_statement(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="q")

    @tasks.task(backoff_base=100, backoff_cap=timedelta(seconds=150))
    async def capped() -> None:
        raise OSError("down")

    @tasks.task
    def plain() -> None:
        raise OSError("down")

    by_cap = capped.enqueue(conn=queue)
    by_base = capped.options(backoff_base=10, backoff_cap=None).enqueue(conn=queue)
    by_worker = plain.enqueue(conn=queue)
    await burst(dsn, schema, tasks, retry_base=40.0)

    assert row(queue, by_cap, "backoff_base", "backoff_cap") == (100.0, 150.0)
    assert row(queue, by_base, "backoff_base", "backoff_cap") == (10.0, None)
    assert row(queue, by_worker, "backoff_base", "backoff_cap") == (None, None)
    # attempt 1 failed: min(cap, base * 2**1), less up to a quarter at random
    assert 150 * 0.75 - 1 <= retry_wait(queue, by_cap) <= 150
    assert 20 * 0.75 - 1 <= retry_wait(queue, by_base) <= 20
    assert 80 * 0.75 - 1 <= retry_wait(queue, by_worker) <= 80  # the worker's retry_base
    for job_id in (by_cap, by_base, by_worker):
        assert row(queue, job_id, "status", "attempts") == ("ready", 1)
        assert kinds(queue, job_id) == ["enqueued", "claimed", "failed"]


def test_a_bad_backoff_is_refused_at_registration_and_per_enqueue() -> None:
    tasks = Tasks(queue="q")
    with pytest.raises(PgqError, match="backoff_base must be from 0 to"):
        tasks.task(backoff_base=float("nan"))(lambda: None)
    task = tasks.task(name="t")(lambda: None)
    with pytest.raises(PgqError, match="backoff_cap must be from 0 to"):
        task.options(backoff_cap=-1)
    with pytest.raises(PgqError, match="backoff_cap must be from 0 to"):
        task.options(backoff_cap=timedelta(days=400))


# -- which failures are retried ---------------------------------------------------------------


class Invalid(ValueError):
    pass


async def test_dont_retry_on_makes_the_job_dead_at_once(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="q")

    @tasks.task(dont_retry_on=ValueError, backoff_base=0)
    def parse(text: str) -> None:
        if text == "bad":
            raise Invalid("not a number: 'bad'")
        raise OSError("disk full")

    bad = parse.enqueue("bad", conn=queue)
    other = parse.options(max_attempts=2).enqueue("io", conn=queue)
    await burst(dsn, schema, tasks)

    assert row(queue, bad, "status", "attempts", "max_attempts", "last_error") == (
        "dead",
        1,
        5,
        "Invalid: not a number: 'bad' (not retried: Invalid is in the task's dont_retry_on)",
    )
    assert kinds(queue, bad) == ["enqueued", "claimed", "dead"]
    assert row(queue, other, "status", "attempts") == ("dead", 2)  # retried until used up
    assert kinds(queue, other) == ["enqueued", "claimed", "failed", "claimed", "dead"]


async def test_retry_on_given_other_exceptions_are_not_retried(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="q")

    @tasks.task(
        retry_on=(ConnectionError, TimeoutError),
        dont_retry_on=ConnectionResetError,
        max_attempts=2,
        backoff_base=0,
    )
    async def fetch(kind: str) -> None:
        await asyncio.sleep(0)
        raise {"refused": ConnectionRefusedError, "reset": ConnectionResetError, "key": KeyError}[
            kind
        ](kind)

    retried = fetch.enqueue("refused", conn=queue)
    reset = fetch.enqueue("reset", conn=queue)
    key = fetch.enqueue("key", conn=queue)
    await burst(dsn, schema, tasks)

    assert row(queue, retried, "status", "attempts") == ("dead", 2)
    assert kinds(queue, retried) == ["enqueued", "claimed", "failed", "claimed", "dead"]
    assert row(queue, reset, "status", "attempts", "last_error") == (
        "dead",
        1,
        "ConnectionResetError: reset (not retried: ConnectionResetError is in the task's "
        "dont_retry_on)",
    )
    assert row(queue, key, "status", "attempts", "last_error") == (
        "dead",
        1,
        "KeyError: 'key' (not retried: KeyError is not in the task's retry_on "
        "(ConnectionError, TimeoutError))",
    )


async def test_a_lost_lease_stays_lost_whatever_the_task_retries(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A task with `retry_on` whose own write found its lease gone: the worker took it for a
    failure not to retry and tried to settle it as dead (stale, so refused: 'fail rejected'),
    instead of recording the task's lost write (the test failed before)."""
    tasks = Tasks(queue="q")

    @tasks.task(retry_on=OSError)
    def write() -> None:
        ctx = current_job()
        queue.kill([ctx.id], reason="taken over")  # the fence moves on, as another claim would
        raise LeaseLost(ctx.id, ctx.fence, "complete")

    job_id = write.enqueue(conn=queue)
    await burst(dsn, schema, tasks)
    assert row(queue, job_id, "status", "last_error") == ("dead", "taken over")
    stale = [e.detail for e in queue.history(job_id) if e.event == "stale"]
    assert stale == ["complete rejected: stale fence"]  # the task's own write, not a failure


async def test_options_apply_to_enqueue_async(aqueue: AsyncQueue, queue: Queue) -> None:
    tasks = Tasks(queue="q")

    @tasks.task(unique_key="k-{n}", backoff_cap=60)
    async def job(n: int) -> None:
        await asyncio.sleep(0)

    first = await job.options(priority=3, queue="fast", backoff_base=0.5).enqueue_async(
        1, conn=aqueue
    )
    assert await job.enqueue_async(1, conn=aqueue) == first  # the key is held
    assert await job.enqueue_async(2, conn=aqueue) != first
    assert row(queue, first, "queue", "priority", "unique_key", "backoff_base", "backoff_cap") == (
        "fast", 3, "k-1", 0.5, 60.0
    )


def test_the_retry_rule() -> None:
    tasks = Tasks()
    only_io = tasks.task(name="a", retry_on=OSError, dont_retry_on=FileNotFoundError)(lambda: 0)
    assert only_io.retries(ConnectionError()) and only_io.retries(OSError())
    assert not only_io.retries(FileNotFoundError()) and not only_io.retries(ValueError())
    anything = tasks.task(name="b")(lambda: 0)
    assert anything.retries(ValueError()) and not anything.retries(DontRetry("x"))
    with pytest.raises(PgqError, match="retry_on takes exception classes"):
        tasks.task(name="c", retry_on=[OSError])(lambda: 0)  # type: ignore[arg-type]


# -- timeout ----------------------------------------------------------------------------------


async def test_a_tasks_timeout_fails_its_attempt_plain_or_async(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="q")

    @tasks.task(timeout=0.3, max_attempts=1)
    async def slow_async(seconds: float) -> None:
        await asyncio.sleep(seconds)

    @tasks.task(max_attempts=1)
    def slow_plain(seconds: float) -> None:
        time.sleep(seconds)

    cut = slow_async.enqueue(30, conn=queue)
    quick = slow_async.enqueue(0.01, conn=queue)
    cut_plain = slow_plain.options(timeout=0.3).enqueue(1.5, conn=queue)
    untimed = slow_plain.enqueue(0.6, conn=queue)  # no timeout: runs to its end
    by_hand = queue.enqueue("q", {"task": "slow_async", "args": {"seconds": 30}}, max_attempts=1)
    started = time.monotonic()
    await burst(dsn, schema, tasks, concurrency=4)

    assert time.monotonic() - started < 20
    assert row(queue, cut, "status", "last_error") == ("dead", "timed out after 0.3 s")
    assert row(queue, cut_plain, "status", "last_error") == ("dead", "timed out after 0.3 s")
    assert row(queue, cut_plain, "payload")[0]["timeout"] == 0.3
    assert row(queue, cut, "payload")[0]["timeout"] == 0.3  # fixed at enqueue
    assert "timeout" not in row(queue, untimed, "payload")[0]
    # a job naming the task without a timeout runs under the task's, as the worker knows it
    assert row(queue, by_hand, "status", "last_error") == ("dead", "timed out after 0.3 s")
    assert row(queue, quick, "status")[0] == "done"
    assert row(queue, untimed, "status")[0] == "done"
    assert kinds(queue, cut) == ["enqueued", "claimed", "dead"]


def test_the_job_timeout_a_worker_reads_never_raises() -> None:
    tasks = Tasks()
    tasks.task(name="t", timeout=5)(lambda: None)
    tasks.task(name="u")(lambda: None)
    lease = datetime.now(UTC)

    def timeout(payload: Any) -> float | None:
        return tasks.timeout_for(JobContext(Job(1, "q", payload, 1, 1, 1, lease), "w", "pgq"))

    assert timeout({"task": "t", "args": {}}) == 5.0
    assert timeout({"task": "t", "args": {}, "timeout": 0.5}) == 0.5
    assert timeout({"task": "u", "args": {}}) is None
    for hostile in (
        ["t"],
        "t",
        {"task": 3},
        {"task": "x"},
        {"task": "u", "timeout": 10**400},
        {"task": "u", "timeout": -1},
        {"task": "u", "timeout": True},
    ):
        assert timeout(hostile) in (None, 5.0)


# -- priority, queue, delay -------------------------------------------------------------------


async def test_priority_is_the_tasks_unless_an_enqueue_changes_it(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="q")
    order: list[str] = []

    @tasks.task(priority=5)
    def urgent(tag: str) -> None:
        order.append(tag)

    @tasks.task
    def routine(tag: str) -> None:
        order.append(tag)

    low = routine.enqueue("routine", conn=queue)
    demoted = urgent.options(priority=-1).enqueue("demoted", conn=queue)
    high = urgent.enqueue("urgent", conn=queue)
    top = routine.options(priority=9).enqueue("promoted", conn=queue)
    await burst(dsn, schema, tasks, concurrency=1)
    assert order == ["promoted", "urgent", "routine", "demoted"]
    priorities = [row(queue, i, "priority")[0] for i in (low, demoted, high, top)]
    assert priorities == [0, -1, 5, 9]


async def test_queue_is_the_tasks_unless_an_enqueue_changes_it(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="default")
    ran: list[str] = []

    @tasks.task(queue="mail")
    def send(to: str) -> None:
        ran.append(to)

    normal = send.enqueue("a", conn=queue)
    moved = send.options(queue="bulk-mail").enqueue("b", conn=queue)
    await burst(dsn, schema, tasks, queues=["bulk-mail"])
    assert ran == ["b"]
    assert row(queue, moved, "queue", "status") == ("bulk-mail", "done")
    assert row(queue, normal, "queue", "status") == ("mail", "ready")
    with pytest.raises(PgqError, match="queue name must not be empty"):
        send.options(queue="")


async def test_delay_is_the_tasks_unless_an_enqueue_changes_it(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="q")
    ran: list[int] = []

    @tasks.task(delay=3600)
    def later(n: int) -> None:
        ran.append(n)

    before = datetime.now(UTC)
    hour = later.enqueue(1, conn=queue)
    now = later.options(delay=None).enqueue(2, conn=queue)
    minute = later.enqueue(3, conn=queue, delay=timedelta(minutes=1))
    await burst(dsn, schema, tasks)
    assert ran == [2]
    hour_at, minute_at = row(queue, hour, "run_at")[0], row(queue, minute, "run_at")[0]
    assert timedelta(minutes=59) < hour_at - before < timedelta(minutes=61)
    assert timedelta(seconds=50) < minute_at - before < timedelta(seconds=70)
    assert row(queue, now, "status")[0] == "done"


# -- unique key -------------------------------------------------------------------------------


async def test_unique_key_is_a_template_over_the_arguments(
    dsn: str, schema: str, queue: Queue
) -> None:
    tasks = Tasks(queue="q")
    ran: list[tuple[int, str]] = []

    @tasks.task(unique_key="welcome-{user_id}-{lang}")
    def welcome(user_id: int, lang: str = "en") -> None:
        ran.append((user_id, lang))

    first = welcome.enqueue(7, conn=queue)
    assert welcome.enqueue(user_id=7, conn=queue) == first  # held: the holder's id
    assert welcome.enqueue(7, lang="fr", conn=queue) != first
    assert row(queue, first, "unique_key")[0] == "welcome-7-en"
    unkeyed = welcome.options(unique_key=None).enqueue(7, conn=queue)
    literal = welcome.enqueue(7, conn=queue, unique_key="by-hand")
    assert len({first, unkeyed, literal}) == 3
    assert row(queue, literal, "unique_key")[0] == "by-hand"
    await burst(dsn, schema, tasks)
    assert sorted(ran) == [(7, "en"), (7, "en"), (7, "en"), (7, "fr")]
    again = welcome.enqueue(7, conn=queue)  # the holder is done: the key is free again
    assert again not in (first, unkeyed, literal)


def test_a_unique_key_template_is_checked_against_the_signature(queue: Queue) -> None:
    tasks = Tasks(queue="q")
    with pytest.raises(PgqError, match="names 'user', which is not a parameter"):
        tasks.task(unique_key="u-{user}")(lambda user_id: None)
    with pytest.raises(PgqError, match="positional field"):
        tasks.task(name="p", unique_key="u-{}")(lambda user_id: None)
    with pytest.raises(PgqError, match="Single '}'"):
        tasks.task(name="b", unique_key="u-}")(lambda user_id: None)
    keyed = tasks.task(name="k", unique_key="k-{text}")(lambda text: None)
    with pytest.raises(TaskArgumentError, match="at most"):
        keyed.enqueue("x" * 10_000, conn=queue)
    count = queue.conn.execute(
        sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(queue.schema))
    ).fetchone()
    assert count == (0,)


def test_bad_options_are_refused_at_registration_and_per_enqueue() -> None:
    tasks = Tasks()
    task = tasks.task(name="ok")(lambda: None)
    for bad, fragment in [
        ({"max_attempts": 0}, "max_attempts must be an integer of at least 1"),
        ({"priority": 2**31}, "priority must be an integer of 32 bits"),
        ({"priority": 1.5}, "priority must be an integer"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": float("inf")}, "timeout must be a positive number"),
        ({"delay": -1}, "delay must be seconds or a timedelta, not negative"),
        ({"delay": 1e20}, "delay must be seconds or a timedelta"),
        ({"delay": float("nan")}, "delay must be seconds or a timedelta"),
        ({"bogus": 1}, "unknown task option"),
    ]:
        with pytest.raises(PgqError, match=fragment):
            task.options(**bad)
        with pytest.raises(PgqError, match=fragment):
            tasks.task(name=f"x{len(tasks.names)}", **bad)(lambda: None)
