"""One queue shared by many callers at once (tasks on an `AsyncQueue`, as the FastAPI recipe
does, or threads on a `Queue`), against a real PostgreSQL: a caller's statement never runs
inside the transaction another caller has open on the queue's connection, so a batch that
fails never takes another caller's job down with it."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest
from psycopg import sql
from support import lock_jobs, until

from pgq_core import AsyncQueue, JobSpec, PgqError, Queue, Tasks, achain, chain
from pgq_core.defaults import ENQUEUE_CHUNK

TIMEOUT = 30.0

#: A batch of two statements in one transaction whose second fails: a keyed job (its own
#: statement, first), then a job waiting on a parent that does not exist.
FAILING = [JobSpec("batch", {}, unique_key="k"), JobSpec("batch", {}, depends_on=[10**15])]


def _waiting_on_jobs(dsn: str, schema: str) -> int:
    """Lock requests on `schema`.jobs not granted yet."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
            [sql.SQL("{}.jobs").format(sql.Identifier(schema)).as_string(conn)],
        ).fetchone()
    assert row is not None
    return int(row[0])


def _statuses(dsn: str, schema: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT queue, status FROM {}.jobs ORDER BY id").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    return [(str(q), str(s)) for q, s in rows]


async def test_a_task_s_enqueue_outlives_another_task_s_failed_batch(
    dsn: str, schema: str, aqueue: AsyncQueue
) -> None:
    with psycopg.connect(dsn) as holder:
        lock_jobs(holder, schema)
        batch = asyncio.ensure_future(aqueue.enqueue_many(FAILING))
        await until(lambda: _waiting_on_jobs(dsn, schema) == 1, TIMEOUT, "the batch to wait")
        one = asyncio.ensure_future(aqueue.enqueue("one", {}))
        await asyncio.sleep(0.2)  # the enqueue is queued behind the batch's statement
        holder.rollback()
    with pytest.raises(PgqError):
        await asyncio.wait_for(batch, TIMEOUT)
    job_id = await asyncio.wait_for(one, TIMEOUT)
    assert (await aqueue.job(job_id)).status == "ready"
    assert _statuses(dsn, schema) == [("one", "ready")]


def test_a_thread_s_enqueue_outlives_another_thread_s_failed_batch(
    dsn: str, schema: str, queue: Queue
) -> None:
    failed: list[BaseException] = []
    ids: list[int] = []

    def run_batch() -> None:
        try:
            queue.enqueue_many(FAILING)
        except PgqError as exc:
            failed.append(exc)

    with psycopg.connect(dsn) as holder:
        lock_jobs(holder, schema)
        batch = threading.Thread(target=run_batch)
        batch.start()
        asyncio.run(until(lambda: _waiting_on_jobs(dsn, schema) == 1, TIMEOUT, "the wait"))
        one = threading.Thread(target=lambda: ids.append(queue.enqueue("one", {})))
        one.start()
        one.join(0.2)  # the enqueue is queued behind the batch's statement
        holder.rollback()
    batch.join(TIMEOUT)
    one.join(TIMEOUT)
    assert len(failed) == 1 and len(ids) == 1
    assert queue.job(ids[0]).status == "ready"
    assert _statuses(dsn, schema) == [("one", "ready")]


async def test_a_task_s_enqueue_outlives_another_task_s_failed_chain(
    dsn: str, schema: str, aqueue: AsyncQueue
) -> None:
    """`achain` on the shared queue is one transaction on its connection: another task's
    enqueue waits for it to end, never runs inside it and goes down with its failure (the
    second link, a keyed job after the first, is refused once the first is in)."""
    tasks = Tasks("chain", schema=schema, async_client=aqueue)

    @tasks.task()
    async def first() -> None: ...

    @tasks.task(unique_key="k")
    async def keyed() -> None: ...

    with psycopg.connect(dsn) as holder:
        lock_jobs(holder, schema)
        chained = asyncio.ensure_future(achain(first.s(), keyed.s()))
        await until(lambda: _waiting_on_jobs(dsn, schema) == 1, TIMEOUT, "the chain to wait")
        one = asyncio.ensure_future(aqueue.enqueue("one", {}))
        await asyncio.sleep(0.2)  # the enqueue is queued behind the chain's first link
        holder.rollback()
    with pytest.raises(PgqError, match="unique_key"):
        await asyncio.wait_for(chained, TIMEOUT)
    job_id = await asyncio.wait_for(one, TIMEOUT)
    assert _statuses(dsn, schema) == [("one", "ready")]
    assert (await aqueue.job(job_id)).status == "ready"


def test_a_batch_or_chain_on_a_callers_connection_is_in_the_callers_transaction(
    dsn: str, schema: str, queue: Queue
) -> None:
    """On a caller's connection not in autocommit, a batch of many statements (over
    ENQUEUE_CHUNK jobs) and a chain run in the caller's transaction, as one statement does:
    its rollback leaves nothing, its commit keeps all (never a commit of their own)."""
    tasks = Tasks("c", schema=schema, client=queue)

    @tasks.task()
    def step() -> None: ...

    many = [JobSpec("c", {"n": n}) for n in range(ENQUEUE_CHUNK + 1)]
    for commit in (False, True):
        with psycopg.connect(dsn) as own:
            queue.enqueue_many(many, own)
            chain(step.s(), step.s(), conn=own)
            assert _statuses(dsn, schema) == [], "nothing is visible before the caller commits"
            if commit:
                own.commit()
            else:
                own.rollback()
        statuses = _statuses(dsn, schema)
        assert len(statuses) == (len(many) + 2 if commit else 0), commit
    with pytest.raises(RuntimeError), queue.transaction():  # the queue's own: all or nothing
        queue.enqueue("t", {})
        raise RuntimeError
    assert not queue.has_jobs("t")


def test_a_failed_batch_or_chain_leaves_the_callers_open_transaction_usable(
    dsn: str, schema: str, queue: Queue
) -> None:
    """In a caller's transaction already open, a batch of many statements or a chain that
    fails part-way is undone alone (a savepoint), as before: the caller's own writes stay and
    its transaction goes on."""
    tasks = Tasks("c", schema=schema, client=queue)

    @tasks.task()
    def first() -> None: ...

    @tasks.task(unique_key="k")
    def keyed() -> None: ...

    failing = [JobSpec("c", {})] * ENQUEUE_CHUNK + FAILING
    with psycopg.connect(dsn) as own:
        mine = queue.enqueue("mine", {}, conn=own)
        with pytest.raises(PgqError):
            queue.enqueue_many(failing, own)
        with pytest.raises(PgqError, match="unique_key"):
            chain(first.s(), keyed.s(), conn=own)
        own.commit()
    assert _statuses(dsn, schema) == [("mine", "ready")]
    assert queue.job(mine).status == "ready"


def test_a_call_after_the_connection_broke_in_a_block_is_refused_not_run_alone(
    dsn: str, schema: str
) -> None:
    """In `Queue.transaction()` on the queue's own connection, a call after that connection
    broke fails: the queue does not replace it there (as `connect`'s queue does between
    calls), since the call would run and commit alone, outside the block it was written in."""
    with Queue.connect(dsn, schema) as q:
        with pytest.raises(psycopg.OperationalError), q.transaction():
            q.enqueue("a", {})
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", [q.conn.info.backend_pid])
            with pytest.raises(psycopg.OperationalError):
                q.enqueue("b", {})
            q.enqueue("c", {})  # the caller went on: refused, never committed by itself
        assert not q.has_jobs("c"), "the block's call committed alone"
        assert _statuses(dsn, schema) == []
