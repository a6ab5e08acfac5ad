"""Unique jobs on a real server: one job per key while it is ready, scheduled or running,
whatever the number of racing producers; done and dead jobs do not hold their key."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgq_core import AsyncQueue, Enqueued, JobSpec, PgqError, Queue
from pgq_core.filters import JobFilter


def keyed_jobs(queue: Queue, key: str) -> list[tuple[int, str]]:
    rows = queue.conn.execute(
        sql.SQL("SELECT id, status FROM {}.jobs WHERE unique_key = %s ORDER BY id").format(
            sql.Identifier(queue.schema)
        ),
        [key],
    ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def test_ten_concurrent_enqueuers_with_one_key_make_one_job(dsn: str, schema: str) -> None:
    barrier = threading.Barrier(10)
    ids: list[int] = []
    errors: list[BaseException] = []

    def produce(n: int) -> None:
        try:
            with Queue.connect(dsn, schema) as q:
                barrier.wait()
                ids.append(q.enqueue("orders", {"producer": n}, unique_key="order:42"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    with Queue.connect(dsn, schema) as q:
        jobs = keyed_jobs(q, "order:42")
    assert len(jobs) == 1
    assert ids == [jobs[0][0]] * 10


def test_ten_concurrent_transactions_with_one_key_make_one_job(dsn: str, schema: str) -> None:
    """Producers inside their own transactions: the losers wait for the winner's commit, then
    see its id (looked up again in a new statement)."""
    barrier = threading.Barrier(10)
    ids: list[int] = []

    def produce() -> None:
        with psycopg.connect(dsn) as conn:
            barrier.wait()
            with conn.transaction():
                ids.append(Queue(conn, schema).enqueue("o", {}, unique_key="k", conn=conn))

    threads = [threading.Thread(target=produce) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    with Queue.connect(dsn, schema) as q:
        jobs = keyed_jobs(q, "k")
    assert len(jobs) == 1 and ids == [jobs[0][0]] * 10


def test_a_scheduled_or_running_job_blocks_done_and_dead_ones_do_not(queue: Queue) -> None:
    first = queue.enqueue("q", {"n": 1}, unique_key="k", delay=timedelta(hours=1))
    assert queue.enqueue("q", {"n": 2}, unique_key="k") == first  # scheduled: still ready
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET run_at = now() WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        [first],
    )
    (job,) = queue.claim("q", 1)
    assert queue.enqueue("q", {"n": 3}, unique_key="k") == first  # running
    queue.complete(job.id, job.fence)
    second = queue.enqueue("q", {"n": 4}, unique_key="k")  # done does not block
    assert second != first
    queue.kill([second])
    third = queue.enqueue("q", {"n": 5}, unique_key="k")  # dead does not block
    assert third not in (first, second)
    assert [s for _, s in keyed_jobs(queue, "k")] == ["done", "dead", "ready"]
    assert queue.job(third).payload == {"n": 5}


def test_a_batch_with_duplicates_inside_it_and_against_the_table(queue: Queue) -> None:
    held = queue.enqueue("q", {"old": True}, unique_key="a")
    specs = [
        JobSpec("q", 1),
        JobSpec("q", 2, unique_key="b"),
        JobSpec("q", 3, unique_key="a"),
        JobSpec("q", 4, unique_key="b"),
        JobSpec("q", 5),
        JobSpec("q", 6, unique_key="c"),
        JobSpec("q", 7, unique_key="c"),
    ]
    out = queue.enqueue_many_detailed(specs)
    assert [e.inserted for e in out] == [True, True, False, False, True, True, False]
    assert out[2] == Enqueued(held, False) and out[2].duplicate
    assert out[3].id == out[1].id and out[6].id == out[5].id
    assert queue.job(out[1].id).payload == 2 and queue.job(out[5].id).payload == 6
    assert queue.job(out[0].id).payload == 1 and queue.job(out[4].id).payload == 5
    assert len(keyed_jobs(queue, "b")) == 1 and len(keyed_jobs(queue, "c")) == 1
    assert queue.enqueue_many(specs)[2] == held  # ids, for compatibility


def test_enqueue_many_over_a_chunk_keeps_order_and_duplicates(queue: Queue) -> None:
    specs = [JobSpec("q", i, unique_key=f"k{i % 6000}") for i in range(7000)]
    out = queue.enqueue_many_detailed(specs)
    assert sum(e.inserted for e in out) == 6000
    assert all(queue.job(out[i].id).payload == i for i in (0, 5999, 4000))
    assert out[6500].id == out[500].id and not out[6500].inserted


def test_requeue_of_a_dead_job_whose_key_is_held_is_skipped(queue: Queue) -> None:
    dead = queue.enqueue("q", {"n": 1}, unique_key="k")
    queue.kill([dead])
    live = queue.enqueue("q", {"n": 2}, unique_key="k")
    assert queue.requeue_report([dead]) == ([], [dead], {})
    assert queue.requeue_dead("q") == []
    assert queue.job(dead).status == "dead"
    queue.kill([live])  # now two dead jobs share the key: only the newest comes back
    requeued, held, _ = queue.requeue_dead_report("q")
    assert requeued == [live] and held == [dead]
    assert [s for _, s in keyed_jobs(queue, "k")] == ["dead", "ready"]


def test_bad_keys_are_refused_before_anything_is_sent(queue: Queue) -> None:
    for bad in ("", "a\x00b", "x" * 3000):
        with pytest.raises(ValueError):
            queue.enqueue("q", {}, unique_key=bad)
    assert queue.jobs() == []


def test_the_key_shows_in_job_and_jobs(queue: Queue) -> None:
    job_id = queue.enqueue("q", {}, unique_key="order:7")
    assert queue.job(job_id).unique_key == "order:7"
    assert queue.job(job_id).to_dict()["unique_key"] == "order:7"
    assert queue.jobs()[0].to_dict()["unique_key"] == "order:7"


async def test_async_queue_dedupes_too(aqueue: AsyncQueue) -> None:
    first = await aqueue.enqueue("q", {}, unique_key="k")
    assert await aqueue.enqueue("q", {}, unique_key="k") == first
    out = await aqueue.enqueue_many_detailed([JobSpec("q", 1, unique_key="k"), JobSpec("q", 2)])
    assert out[0] == Enqueued(first, False) and out[1].inserted


def test_a_key_inside_a_rolled_back_transaction_holds_nothing(
    queue: Queue, conn: Any, dsn: str
) -> None:
    with psycopg.connect(dsn) as own, pytest.raises(PgqError), own.transaction():
        queue.enqueue("q", {}, unique_key="k", conn=own)
        raise PgqError("the app's own write failed")
    assert keyed_jobs(queue, "k") == []
    assert queue.enqueue("q", {}, unique_key="k") > 0


def test_a_filtered_requeue_leaves_a_held_key_dead(queue: Queue) -> None:
    """The filter form shares the requeue of `requeue_dead`: it failed on the unique index
    when a live job held a dead one's key."""
    dead = queue.enqueue("q", {"n": 1}, unique_key="k")
    queue.kill([dead])
    live = queue.enqueue("q", {"n": 2}, unique_key="k")
    free = queue.enqueue("q", {"n": 3})
    queue.kill([free])
    assert queue.bulk("requeue", JobFilter(queue="q", statuses=("dead",))) == [free]
    assert (queue.job(dead).status, queue.job(live).status) == ("dead", "ready")


def test_a_keyed_batch_whose_second_round_fails_leaves_none_of_its_jobs(
    queue: Queue, dsn: str
) -> None:
    """A batch with unique keys may need a second statement (a key's holder committed after
    the first one's snapshot). On an autocommit connection the rounds are one transaction:
    a failure in the second leaves none of the first's jobs, as `enqueue_many` promises."""
    jobs = sql.Identifier(queue.schema, "jobs")
    holder = psycopg.connect(dsn)
    locker = psycopg.connect(dsn)
    producer = Queue(psycopg.connect(dsn, autocommit=True), queue.schema, owns=True)
    producer.conn.execute("SET lock_timeout = '500ms'")
    outcome: list[Any] = []

    def produce() -> None:
        try:
            outcome.append(
                producer.enqueue_many(
                    [JobSpec("u", {"n": 1}, unique_key="held"), JobSpec("u", {"n": 2})]
                )
            )
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)

    try:
        holder.execute(
            sql.SQL("INSERT INTO {} (queue, payload, unique_key) VALUES ('u', '{{}}', 'held')")
            .format(jobs)
        )  # uncommitted: the batch's insert waits on its key
        thread = threading.Thread(target=produce)
        thread.start()
        waiting = 0
        for _ in range(200):
            row = queue.conn.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
            ).fetchone()
            if (waiting := int(row[0] if row else 0)) >= 1:
                break
            threading.Event().wait(0.02)
        assert waiting >= 1, "the batch waits on the uncommitted key"
        with locker.transaction():
            locker.execute("SET LOCAL lock_timeout = '5s'")
            # queued behind the batch's first statement: granted once that one commits (if it
            # does), then the batch's holder lookup waits on it past its lock_timeout
            taker = threading.Thread(
                target=lambda: locker.execute(
                    sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(jobs)
                )
            )
            taker.start()
            threading.Event().wait(0.3)
            holder.commit()
            thread.join(15)
            taker.join(15)
            threading.Event().wait(0.6)  # past the producer's lock_timeout, if it waits on us
        assert not thread.is_alive()
        [result] = outcome
        plain = queue.conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE payload = '{{\"n\": 2}}'").format(jobs)
        ).fetchone()
        if isinstance(result, BaseException):
            assert plain == (0,), f"the batch failed ({result!r}) but left its other job in"
        else:
            assert plain == (1,) and len(result) == 2
    finally:
        producer.close()
        holder.close()
        locker.close()
