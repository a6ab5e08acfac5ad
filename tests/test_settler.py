"""The settler alone, on a real PostgreSQL: one step settles each held job exactly once
(done, failed, busy, lost or refused) and claims the next, and a statement refused for one
job's data is split so that the others still settle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from pgq_core import JobSpec, Queue, ops
from pgq_core.worker import JobContext
from pgq_core.worker.link import Link, Timeouts
from pgq_core.worker.runner import RETURNED, Outcome
from pgq_core.worker.settler import Held, Settler

WORKER = "settler-test"
LEASE = timedelta(seconds=30)


@pytest.fixture
async def link(dsn: str, schema: str) -> AsyncIterator[Link]:
    link = Link(dsn, schema, Timeouts(), lambda reason: None, lambda: None, "pgq settler test")
    await link.open()
    try:
        yield link
    finally:
        await link.close()


async def claim(link: Link, schema: str, n: int) -> list[Held]:
    (jobs,) = await link.call(ops.claim("q", n, LEASE, WORKER))
    return [Held(job, JobContext(job, WORKER, schema)) for job in jobs]


def ended(held: Held, outcome: Outcome) -> Held:
    held.outcome = outcome
    return held


def refuse_failures_of(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """A rule of the user's: a failure whose text says 'poison' is refused (SQLSTATE 22023)."""
    conn.execute(
        sql.SQL(
            """
            CREATE FUNCTION {s}.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NEW.last_error LIKE '%poison%' THEN
                RAISE EXCEPTION 'refused' USING ERRCODE = '22023';
              END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER refuse_poison BEFORE UPDATE ON {s}.jobs FOR EACH ROW
              EXECUTE FUNCTION {s}.refuse_poison();
            """
        ).format(s=sql.Identifier(schema))
    )


async def test_one_step_completes_fails_and_claims_in_one_transaction(
    link: Link, schema: str, queue: Queue
) -> None:
    queue.enqueue_many([JobSpec("q", {"n": n}) for n in range(5)])
    first, second = await claim(link, schema, 2)
    settler = Settler(link.call, WORKER, LEASE, retry_base=1.0)
    result = await settler.step(
        [ended(first, RETURNED), ended(second, Outcome("raised", "ValueError: no"))], "q", 3
    )
    assert (result.done, result.failed) == ([first], [second])
    assert (result.busy, result.lost, result.retry, result.refused) == ([], [], [], [])
    assert len(result.claimed) == 3
    assert queue.job(first.job.id).status == "done"
    failed = queue.job(second.job.id)
    assert (failed.status, failed.last_error) == ("ready", "ValueError: no")
    assert {queue.job(j.id).status for j in result.claimed} == {"running"}


async def test_a_row_locked_elsewhere_is_busy_and_a_stale_fence_is_lost(
    link: Link, schema: str, queue: Queue, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    queue.enqueue_many([JobSpec("q", {}) for _ in range(2)])
    locked, stolen = await claim(link, schema, 2)
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET fence = fence + 1 WHERE id = %s").format(
            sql.Identifier(schema)
        ),
        (stolen.job.id,),
    )
    settler = Settler(link.call, WORKER, LEASE, retry_base=1.0)
    with conn.transaction():
        conn.execute(
            sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE").format(
                sql.Identifier(schema)
            ),
            (locked.job.id,),
        )
        result = await settler.step([ended(locked, RETURNED), ended(stolen, RETURNED)], None, 0)
    assert result.busy == [locked]
    assert result.lost == [(stolen, "complete")]
    assert result.done == []
    assert queue.job(locked.job.id).status == "running"


async def test_a_failure_refused_for_its_text_is_split_off_and_the_rest_settle(
    link: Link, schema: str, queue: Queue, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
    good, bad, other = await claim(link, schema, 3)
    refuse_failures_of(conn, schema)
    settler = Settler(link.call, WORKER, LEASE, retry_base=1.0)
    result = await settler.step(
        [
            ended(good, RETURNED),
            ended(bad, Outcome("raised", "ValueError: poison")),
            ended(other, Outcome("raised", "ValueError: fine")),
        ],
        "q",
        3,
    )
    assert result.done == [good]
    assert result.failed == [bad, other]
    assert result.claimed == []  # nothing else is ready: the claim ran alone and found none
    assert queue.job(good.job.id).status == "done"
    assert queue.job(bad.job.id).last_error == "raised: the error text was refused by the database"
    assert queue.job(other.job.id).last_error == "ValueError: fine"


async def test_a_job_every_settlement_of_which_is_refused_is_reported_refused(
    link: Link, schema: str, queue: Queue, conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    queue.enqueue_many([JobSpec("q", {}) for _ in range(2)])
    poison, good = await claim(link, schema, 2)
    conn.execute(
        sql.SQL(
            """
            CREATE FUNCTION {s}.refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              RAISE EXCEPTION 'job % is not to be settled', OLD.id USING ERRCODE = '22023';
            END $$;
            CREATE TRIGGER refuse_job BEFORE UPDATE ON {s}.jobs FOR EACH ROW
              WHEN (OLD.id = {poison}) EXECUTE FUNCTION {s}.refuse_job();
            """
        ).format(s=sql.Identifier(schema), poison=sql.Literal(poison.job.id))
    )
    settler = Settler(link.call, WORKER, LEASE, retry_base=1.0)
    result = await settler.step([ended(poison, RETURNED), ended(good, RETURNED)], None, 0)
    assert result.refused == [poison]
    assert result.done == [good]
    assert poison.outcome is not None
    assert poison.outcome.error is not None
    assert poison.outcome.error.startswith("completion refused by the database")
    assert queue.job(poison.job.id).status == "running"
