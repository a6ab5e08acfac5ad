"""The worker against what a real deployment throws at it, on a real PostgreSQL: error texts
the database refuses, handlers that end in every possible way, another session's row lock, a
blocked event loop, handlers that never end, a statement that fails for one job's data.

Each test states the promise it checks: every job is settled exactly once, nothing wedges a
slot, and no finished job runs again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from support import (
    TIMEOUT,
    ReaperThread,
    claims,
    events,
    make_worker,
    running,
    status_counts,
    until,
)

from pgq_core import JobSpec, Queue
from pgq_core.text import ERROR_TEXT_LIMIT
from pgq_core.worker import JobContext, Worker


def bad_events(queue: Queue, job_ids: list[int]) -> list[tuple[int, str]]:
    return [
        (job_id, e.event)
        for job_id in job_ids
        for e in queue.history(job_id)
        if e.event in ("reaped", "stale", "released", "dead", "failed")
    ]


# -- error texts the database would refuse ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("bad\x00byte", "ValueError: badbyte"),
        ("lone \ud800 surrogate", "ValueError: lone \ufffd surrogate"),
    ],
    ids=["nul", "surrogate"],
)
async def test_an_error_text_the_database_refuses_never_wedges_the_batch(
    dsn: str, schema: str, queue: Queue, text: str, stored: str
) -> None:
    poison = queue.enqueue("q", {"poison": True}, max_attempts=2)
    good = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])

    def handler(ctx: JobContext) -> None:
        if ctx.payload.get("poison"):
            raise ValueError(text)

    worker = make_worker(dsn, schema, handler, concurrency=4, retry_base=0.01, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    while (job := queue.job(poison)).status != "dead":
        worker = make_worker(dsn, schema, handler, concurrency=4, retry_base=0.01, burst=True)
        await asyncio.wait_for(worker.run(), TIMEOUT)
        await asyncio.sleep(0.05)
    assert (job.attempts, job.last_error) == (2, stored)
    for job_id in good:
        assert queue.job(job_id).status == "done"
        assert claims(queue, job_id) == 1


async def test_a_huge_error_text_is_cut_and_marked(dsn: str, schema: str, queue: Queue) -> None:
    job_id = queue.enqueue("q", {}, max_attempts=1)

    def handler(ctx: JobContext) -> None:
        raise RuntimeError("x" * 10_000_000)

    worker = make_worker(dsn, schema, handler, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    job = queue.job(job_id)
    assert job.status == "dead" and job.last_error is not None
    assert len(job.last_error) == ERROR_TEXT_LIMIT
    assert job.last_error.startswith("RuntimeError: xxx")
    assert job.last_error.endswith("characters in all]")


async def test_a_result_holding_a_lone_surrogate_fails_its_job_alone(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A result no UTF-8 can carry fails its job with a clear error; the jobs finishing in the
    same batch are completed once and the worker goes on."""
    bad = queue.enqueue("q", {"poison": True}, max_attempts=1)
    good = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
    together = threading.Barrier(4, timeout=TIMEOUT)

    def handler(ctx: JobContext) -> Any:
        together.wait()
        return {"text": "lone \ud800"} if ctx.payload.get("poison") else {"ok": True}

    worker = make_worker(dsn, schema, handler, concurrency=4, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    job = queue.job(bad)
    assert (job.status, job.result) == ("dead", None)
    assert job.last_error is not None and "surrogate" in job.last_error, job.last_error
    for job_id in good:
        assert (queue.job(job_id).status, claims(queue, job_id)) == ("done", 1)


# -- payloads Python cannot read -------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    ["repeat('[', 5000) || repeat(']', 5000)", "'{\"n\": ' || repeat('9', 5000) || '}'"],
    ids=["deep", "long-number"],
)
async def test_a_payload_python_cannot_read_fails_its_job_without_running_it(
    dsn: str, schema: str, queue: Queue, payload: str
) -> None:
    """PostgreSQL stores JSON that Python's json cannot load (nesting past the recursion
    limit, integers past its digit limit). Claimed with other jobs, it fails with a clear
    error without reaching the handler; the others run once and the worker goes on."""
    good = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
    bad = queue.enqueue("q", {}, max_attempts=1)
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET payload = ({})::jsonb WHERE id = %s").format(
            sql.Identifier(schema), sql.SQL(payload)
        ),
        [bad],
    )
    ran: list[int] = []

    def handler(ctx: JobContext) -> None:
        ran.append(ctx.id)

    worker = make_worker(dsn, schema, handler, concurrency=4, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert sorted(ran) == good
    for job_id in good:
        assert (queue.job(job_id).status, claims(queue, job_id)) == ("done", 1)
    status, error = queue.conn.execute(
        sql.SQL("SELECT status, last_error FROM {}.jobs WHERE id = %s").format(
            sql.Identifier(schema)
        ),
        [bad],
    ).fetchone() or (None, None)
    assert status == "dead"
    assert error is not None and error.startswith("the payload cannot be read"), error


# -- every way a handler can end -------------------------------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def raise_futures_cancelled(ctx: JobContext) -> None:
    raise concurrent.futures.CancelledError


def raise_asyncio_cancelled_sync(ctx: JobContext) -> None:
    raise asyncio.CancelledError


async def raise_asyncio_cancelled(ctx: JobContext) -> None:
    raise asyncio.CancelledError


async def await_a_cancelled_task(ctx: JobContext) -> None:
    inner = asyncio.create_task(asyncio.sleep(10))
    await asyncio.sleep(0)
    inner.cancel()
    await inner


def raise_unprintable(ctx: JobContext) -> None:
    raise Unprintable


def raise_keyboard_interrupt(ctx: JobContext) -> None:
    raise KeyboardInterrupt


async def raise_keyboard_interrupt_async(ctx: JobContext) -> None:
    raise KeyboardInterrupt


def raise_system_exit(ctx: JobContext) -> None:
    raise SystemExit(3)


@pytest.mark.parametrize(
    ("poison", "error"),
    [
        (raise_futures_cancelled, "CancelledError (raised by the handler, not a worker cancel)"),
        (
            raise_asyncio_cancelled_sync,
            "CancelledError (raised by the handler, not a worker cancel)",
        ),
        (raise_asyncio_cancelled, "CancelledError (raised by the handler, not a worker cancel)"),
        (await_a_cancelled_task, "CancelledError (raised by the handler, not a worker cancel)"),
        (raise_unprintable, "Unprintable (unprintable)"),
        (raise_keyboard_interrupt, "KeyboardInterrupt"),
        (raise_keyboard_interrupt_async, "KeyboardInterrupt"),
        (raise_system_exit, "SystemExit: 3"),
    ],
    ids=lambda v: getattr(v, "__name__", "error"),
)
async def test_every_way_a_handler_ends_settles_its_job_and_frees_its_slot(
    dsn: str, schema: str, queue: Queue, poison: Any, error: str
) -> None:
    """Concurrency 1: the five jobs behind the poison job run only if its slot is freed."""
    bad = queue.enqueue("q", {"poison": True}, max_attempts=1)
    behind = queue.enqueue_many([JobSpec("q", {}) for _ in range(5)])
    ran: list[int] = []
    is_async = asyncio.iscoroutinefunction(poison)

    if is_async:

        async def handler(ctx: JobContext) -> None:
            if ctx.payload.get("poison"):
                await poison(ctx)
            ran.append(ctx.id)

    else:

        def handler(ctx: JobContext) -> None:  # type: ignore[misc]
            if ctx.payload.get("poison"):
                poison(ctx)
            ran.append(ctx.id)

    worker = make_worker(dsn, schema, handler, concurrency=1, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    job = queue.job(bad)
    assert (job.status, job.last_error) == ("dead", error)
    assert sorted(ran) == behind
    assert status_counts(queue) == {"dead": 1, "done": 5}
    snap = worker.snapshot()
    assert (snap.done, snap.failed, snap.lost) == (5, 1, 0)


async def test_finished_jobs_are_settled_not_handed_back_on_stop(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Stopping at once settles every job whose handler returned; only unfinished ones go
    back, and never with an attempt taken from a job that already failed."""
    quick = queue.enqueue_many([JobSpec("q", {"quick": True}) for _ in range(2)])
    slow = queue.enqueue("q", {})
    gate = asyncio.Event()
    returned: list[int] = []

    async def handler(ctx: JobContext) -> None:
        if not ctx.payload.get("quick"):
            await gate.wait()
        returned.append(ctx.id)

    # No buffer: a freed slot of a buffering worker claims at once, settling with its claim.
    worker = make_worker(dsn, schema, handler, concurrency=3, flush_delay=3600, prefetch=0)
    async with running(worker):
        await until(lambda: len(returned) == 2, what="quick handlers returned")
        assert worker.snapshot().done == 0  # not settled yet: the flush waits
    assert worker.snapshot().done == 2
    for job_id in quick:
        assert [e[0] for e in events(queue, job_id)] == ["enqueued", "claimed", "completed"]
    job = queue.job(slow)
    assert (job.status, job.attempts) == ("ready", 0)
    assert [e[0] for e in events(queue, slow)] == ["enqueued", "claimed", "released"]


# -- nothing else can starve a lease ---------------------------------------------------------


@pytest.mark.slow
async def test_another_sessions_row_lock_never_starves_the_other_leases(
    dsn: str, schema: str, queue: Queue
) -> None:
    """An operator holds FOR UPDATE on one finished job for longer than the lease. Its
    settlement waits (skipped, retried); the other jobs' heartbeats do not: zero reaped or
    stale events on them, and each ran once."""
    locked = queue.enqueue("q", {"quick": True})
    others = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
    may_finish = threading.Event()

    def handler(ctx: JobContext) -> None:
        if ctx.payload.get("quick"):
            may_finish.wait(TIMEOUT)
        else:
            time.sleep(4.0)

    worker = make_worker(
        dsn, schema, handler, concurrency=4, lease=timedelta(seconds=2), reap_interval=0.3
    )
    async with running(worker):
        await until(lambda: len(worker.snapshot().running) == 4, what="four jobs running")
        with psycopg.connect(dsn) as operator:
            operator.execute(
                sql.SQL("SELECT * FROM {}.jobs WHERE id = %s FOR UPDATE").format(
                    sql.Identifier(schema)
                ),
                (locked,),
            )
            may_finish.set()
            await asyncio.sleep(4.5)
            operator.rollback()
        await until(lambda: worker.snapshot().done == 4, what="every job done")
    assert bad_events(queue, others) == []
    for job_id in others:
        assert claims(queue, job_id) == 1
    assert queue.job(locked).status == "done"


@pytest.mark.slow
async def test_an_async_handler_that_blocks_the_loop_costs_no_other_lease(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """`time.sleep` in an async handler blocks the event loop past the lease; heartbeats go on
    from their own thread, so no job is reaped while a second worker reaps, and the log names
    the job that blocked the loop."""
    blocker = queue.enqueue("q", {"block": True})
    others = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
    caplog.set_level("WARNING", logger="pgq.worker")

    async def handler(ctx: JobContext) -> None:
        if ctx.payload.get("block"):
            await asyncio.sleep(0.3)
            time.sleep(4.0)
        else:
            await asyncio.sleep(3.0)

    worker = make_worker(dsn, schema, handler, concurrency=4, lease=timedelta(seconds=1.5))
    with ReaperThread(dsn, schema) as reaper:
        async with running(worker):
            await until(lambda: worker.snapshot().done == 4, what="every job done")
    assert reaper.reaped == []
    assert bad_events(queue, [blocker, *others]) == []
    assert "blocked for" in caplog.text and f"by job {blocker}" in caplog.text


@pytest.mark.slow
async def test_a_handler_holding_its_row_in_a_transaction_costs_no_other_lease(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A handler completes its job in its own transaction and keeps that transaction open past
    the lease: its row is locked, the other jobs' leases are still extended."""
    holder = queue.enqueue("q", {"hold": True})
    others = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])

    def handler(ctx: JobContext) -> None:
        if ctx.payload.get("hold"):
            with psycopg.connect(dsn) as conn, conn.transaction():
                ctx.complete(conn)
                time.sleep(3.0)
        else:
            time.sleep(3.5)

    worker = make_worker(dsn, schema, handler, concurrency=4, lease=timedelta(seconds=1.5))
    with ReaperThread(dsn, schema) as reaper:
        async with running(worker):
            await until(lambda: worker.snapshot().done == 4, what="every job done")
    assert reaper.reaped == []
    assert bad_events(queue, [holder, *others]) == []
    for job_id in [holder, *others]:
        assert claims(queue, job_id) == 1


async def test_a_handler_whose_own_completion_did_not_commit_is_not_counted_done(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler completes its job in its own transaction, then raises. If that transaction
    committed, the job is done (kept done); if it did not (in the fleet run PgBouncer closed the
    connection of a worker frozen past its lease, so the COMMIT failed) and meanwhile the job
    was reaped and claimed again, the job is lost to this worker: a stale write, not a done."""
    committed = queue.enqueue("q", {"commit": True})
    rolled_back = queue.enqueue("q", {"commit": False})
    caplog.set_level("INFO", logger="pgq.worker")
    jobs = sql.Identifier(schema, "jobs")

    def handler(ctx: JobContext) -> None:
        with psycopg.connect(dsn) as conn:
            try:
                with conn.transaction():
                    ctx.complete(conn)
                    if not ctx.payload["commit"]:
                        raise RuntimeError("the COMMIT never reached the server")
            except RuntimeError:
                pass
        if not ctx.payload["commit"]:  # the lease goes: reaped, and claimed by another worker
            # reaped and claimed in one transaction: the worker never sees the job ready
            with psycopg.connect(dsn, autocommit=True) as other, other.transaction():
                other.execute(
                    sql.SQL("UPDATE {} SET lease_until = now() - interval '1s' WHERE id = %s")
                    .format(jobs),
                    (ctx.id,),
                )
                assert Queue(other, schema).reap() == [(ctx.id, "ready")]
                (taken,) = Queue(other, schema).claim("q", 1, worker="thief")
                assert taken.id == ctx.id
        raise RuntimeError("connection lost at commit")

    worker = make_worker(dsn, schema, handler, concurrency=2)
    async with running(worker):
        await until(lambda: worker.snapshot().done + worker.snapshot().lost == 2, what="settled")
        await until(lambda: any(e[0] == "stale" for e in events(queue, rolled_back)),
                    what="the stale write recorded")  # fmt: skip
    snap = worker.snapshot()
    assert (snap.done, snap.lost, snap.failed) == (1, 1, 0)
    assert queue.job(committed).status == "done"
    assert f"job {committed}: failed after completing itself; kept done" in caplog.text
    assert f"job {rolled_back}: failed after completing itself" not in caplog.text
    assert f"job {rolled_back}: lease lost (fence 1, fail matched no row)" in caplog.text
    assert [e for e in events(queue, rolled_back) if e[0] in ("completed", "stale")] == [
        ("stale", 1, worker.id)
    ]
    job = queue.job(rolled_back)
    assert (job.status, job.fence, job.worker) == ("running", 2, "thief")


# -- handlers that never end -----------------------------------------------------------------


async def test_an_async_handler_past_its_timeout_is_cancelled_and_failed(
    dsn: str, schema: str, queue: Queue
) -> None:
    job_id = queue.enqueue("q", {}, max_attempts=1)
    cancelled = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = make_worker(dsn, schema, handler, timeout=0.5, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    job = queue.job(job_id)
    assert (job.status, job.last_error) == ("dead", "timed out after 0.5 s")
    assert cancelled.is_set()


async def test_abandoned_threads_that_fill_the_pool_stop_claims_and_say_so(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """A sync handler past its timeout is failed and abandoned in its thread; while abandoned
    threads hold every slot the worker claims nothing (and says so), then goes on."""
    stuck = queue.enqueue("q", {"stuck": True}, max_attempts=1)
    caplog.set_level("WARNING", logger="pgq.worker")
    release = threading.Event()
    ran: list[int] = []

    def handler(ctx: JobContext) -> None:
        if ctx.payload.get("stuck"):
            release.wait(TIMEOUT)
        ran.append(ctx.id)

    worker = make_worker(dsn, schema, handler, concurrency=1, timeout=0.3)
    async with running(worker):
        await until(lambda: queue.job(stuck).status == "dead", what="the stuck job failed")
        await until(lambda: "slot(s) are held by handlers" in caplog.text, what="the warning")
        later = queue.enqueue("q", {})
        await asyncio.sleep(0.5)
        assert queue.job(later).status == "ready"
        release.set()
        await until(lambda: queue.job(later).status == "done", what="claims resume")
    assert queue.job(stuck).last_error == "timed out after 0.3 s"
    assert later in ran


# -- a statement that fails for one job's data -----------------------------------------------


async def test_a_statement_refused_for_one_jobs_data_settles_the_rest_alone(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """A rule of the database (here a trigger) refuses one job's failure text: the batch is
    split, the other jobs settle, the refused one is failed with a text the database takes."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                """
                CREATE FUNCTION {schema}.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF NEW.detail LIKE '%poison%' THEN
                    RAISE EXCEPTION 'refused: %', NEW.detail USING ERRCODE = '22023';
                  END IF;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER refuse_poison BEFORE INSERT ON {schema}.job_events
                  FOR EACH ROW EXECUTE FUNCTION {schema}.refuse_poison();
                """
            ).format(schema=sql.Identifier(schema))
        )
    bad = queue.enqueue("q", {"poison": True}, max_attempts=1)
    good = queue.enqueue_many([JobSpec("q", {}) for _ in range(5)])
    caplog.set_level("WARNING", logger="pgq.worker")

    async def handler(ctx: JobContext) -> None:
        await asyncio.sleep(0.05)
        if ctx.payload.get("poison"):
            raise ValueError("poison")

    worker = make_worker(dsn, schema, handler, concurrency=6, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert [queue.job(j).status for j in good] == ["done"] * 5
    job = queue.job(bad)
    assert job.status == "dead"
    assert job.last_error == "raised: the error text was refused by the database"
    assert "settling them one by one" in caplog.text


async def test_a_missing_table_of_the_users_is_a_data_fault_not_a_missing_schema(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A trigger of the user's that writes to a table that does not exist refuses one job's
    failure: that is the job's data, not pgq's schema. The worker settles the others and the
    refused job, and goes on."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                """
                CREATE FUNCTION {schema}.audit_poison() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF NEW.detail LIKE '%poison%' THEN
                    INSERT INTO no_such_audit_table VALUES (NEW.job_id);
                  END IF;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER audit_poison BEFORE INSERT ON {schema}.job_events
                  FOR EACH ROW EXECUTE FUNCTION {schema}.audit_poison();
                """
            ).format(schema=sql.Identifier(schema))
        )
    bad = queue.enqueue("q", {"poison": True}, max_attempts=1)
    good = queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
    together = threading.Barrier(4, timeout=TIMEOUT)

    def handler(ctx: JobContext) -> None:
        together.wait()
        if ctx.payload.get("poison"):
            raise ValueError("poison")

    worker = make_worker(dsn, schema, handler, concurrency=4, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    for job_id in good:
        assert (queue.job(job_id).status, claims(queue, job_id)) == ("done", 1)
    job = queue.job(bad)
    assert (job.status, job.last_error) == (
        "dead",
        "raised: the error text was refused by the database",
    )


async def test_a_read_only_server_is_waited_out_and_the_job_completes_once(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """After a failover the worker may reconnect to a server that refuses writes for a while
    (SQLSTATE 25006: a standby, or default_transaction_read_only). Its connections are opened
    again until one takes writes: heartbeats resume before the lease runs out, and the finished
    job is completed once, not given up to its lease."""
    role, password = f"pgq_ro_{secrets.token_hex(4)}", secrets.token_hex(8)
    names = {"r": sql.Identifier(role), "s": sql.Identifier(schema)}
    lease = timedelta(seconds=6)
    job_id = queue.enqueue("q", {})
    finish = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        await finish.wait()

    def lease_until() -> Any:
        return queue.job(job_id).lease_until

    caplog.set_level("INFO", logger="pgq.worker")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(  # a password: the embedded server takes no login without one
            sql.SQL("CREATE ROLE {r} LOGIN PASSWORD {p}").format(p=sql.Literal(password), **names)
        )
        try:
            admin.execute(
                sql.SQL(
                    "GRANT USAGE ON SCHEMA {s} TO {r};"
                    " GRANT ALL ON ALL TABLES IN SCHEMA {s} TO {r};"
                    " GRANT ALL ON ALL SEQUENCES IN SCHEMA {s} TO {r};"
                    " GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r}"
                ).format(**names)
            )
            worker = make_worker(
                make_conninfo(dsn, user=role, password=password), schema, handler, lease=lease
            )
            async with running(worker):
                await until(lambda: worker.snapshot().running, what="the job running")
                admin.execute(
                    sql.SQL("ALTER ROLE {r} SET default_transaction_read_only = on").format(**names)
                )
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = ANY(%s)",
                    ([f"pgq main {worker.id}", f"pgq heartbeat {worker.id}"],),
                )
                await until(
                    lambda: "heartbeat failed" in caplog.text and "read-only" in caplog.text,
                    what="read-only sessions",
                )
                admin.execute(sql.SQL("ALTER ROLE {r} RESET ALL").format(**names))
                (now,) = admin.execute("SELECT now()").fetchone() or (None,)
                await until(
                    lambda: lease_until() > now + lease,
                    timeout=lease.total_seconds(),
                    what="a heartbeat after the server took writes again",
                )
                finish.set()
                await until(lambda: worker.snapshot().done == 1, what="the completion")
        finally:
            admin.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(**names))
    assert queue.job(job_id).status == "done"
    assert claims(queue, job_id) == 1
    assert "refused every settlement" not in caplog.text


@pytest.mark.slow
async def test_a_job_the_database_refuses_to_settle_is_not_handed_back_as_an_orphan(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """A job whose every settlement (completion or failure: a rule of the user's, here a
    trigger) the database refuses is left to its lease, still `running` under the worker's id.
    A reconnect's orphan check (for claims whose reply was lost) must not hand it back with its
    attempt refunded: it ran, so it runs again only after the reaper has counted the attempt,
    and with one attempt it ends dead, run once."""
    names = {"s": sql.Identifier(schema)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                """
                CREATE TABLE {s}.refuse (job_id bigint PRIMARY KEY);
                CREATE FUNCTION {s}.refuse_settle() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF EXISTS (SELECT 1 FROM {s}.refuse r WHERE r.job_id = OLD.id) THEN
                    RAISE EXCEPTION 'settling job % refused', OLD.id USING ERRCODE = '22023';
                  END IF;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER refuse_settle BEFORE UPDATE ON {s}.jobs FOR EACH ROW
                  WHEN (OLD.status = 'running' AND (NEW.status = 'done'
                        OR NEW.last_error IS DISTINCT FROM OLD.last_error))
                  EXECUTE FUNCTION {s}.refuse_settle();
                """
            ).format(**names)
        )
        poison = queue.enqueue("q", {"poison": True}, max_attempts=1)
        conn.execute(sql.SQL("INSERT INTO {s}.refuse VALUES (%s)").format(**names), (poison,))
    ran: list[int] = []

    async def handler(ctx: JobContext) -> None:
        ran.append(ctx.id)

    caplog.set_level("INFO", logger="pgq.worker")
    worker = make_worker(dsn, schema, handler, lease=timedelta(seconds=4))
    async with running(worker):
        await until(lambda: "refused every settlement" in caplog.text, what="the refusal")
        queue.conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"pgq main {worker.id}",),
        )
        await until(lambda: "reachable again" in caplog.text, what="the reconnect")
        later = queue.enqueue("q", {})
        await until(lambda: later in ran, what="a job claimed after the orphan check")
        job = queue.job(poison)
        assert (job.status, job.attempts) == ("running", 1)
        queue.conn.execute(sql.SQL("DELETE FROM {s}.refuse").format(**names))
        await until(lambda: queue.job(poison).status == "dead", what="the reaper")
    assert [e.event for e in queue.history(poison)] == ["enqueued", "claimed", "dead"]
    assert ran.count(poison) == 1
    assert "lease expired on attempt 1 of 1" in (queue.job(poison).last_error or "")


def test_worker_rejects_values_that_cannot_work(dsn: str) -> None:
    from pgq_core import PgqError

    with pytest.raises(PgqError, match="timeout must be positive"):
        Worker(dsn, ["q"], lambda ctx: None, timeout=0)
    with pytest.raises(PgqError, match="concurrency must be between"):
        Worker(dsn, ["q"], lambda ctx: None, concurrency=10**12)


@pytest.mark.slow
async def test_after_a_failed_heartbeat_the_next_comes_within_a_second(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = queue.enqueue("q", {})
    gate = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        await gate.wait()

    caplog.set_level("INFO", logger="pgq.worker")
    worker = make_worker(dsn, schema, handler, lease=timedelta(seconds=6))
    async with running(worker):
        await until(lambda: len(worker.snapshot().running) == 1, what="the job running")
        app = f"pgq heartbeat {worker.id}"

        def terminated() -> bool:
            row = queue.conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (app,),
            ).fetchone()
            return row is not None and row[0] == 1

        await until(terminated, what="the heartbeat connection, ended from the server")
        await until(lambda: "heartbeat failed" in caplog.text, what="a failed heartbeat")
        failed_at = time.monotonic()
        before = queue.job(job_id).lease_until
        await until(lambda: queue.job(job_id).lease_until != before, what="the next heartbeat")
        assert time.monotonic() - failed_at < 1.5
        gate.set()
        await until(lambda: worker.snapshot().done == 1, what="the job done")
