"""Priorities (higher first among due jobs, then oldest run_at, through an index) and results
(a handler's return value, stored by the fence-checked statement that completes the job)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from support import TIMEOUT, make_worker

from pgq_cli.cli import main
from pgq_core import JobSpec, LeaseLost, Queue, ops
from pgq_core.queries import query
from pgq_core.worker import JobContext


def test_claims_take_the_highest_priority_then_the_oldest(queue: Queue) -> None:
    base = datetime.now(UTC) - timedelta(minutes=10)
    ids = queue.enqueue_many(
        [
            JobSpec("q", {"n": 0}, run_at=base, priority=0),
            JobSpec("q", {"n": 1}, run_at=base + timedelta(seconds=2), priority=5),
            JobSpec("q", {"n": 2}, run_at=base + timedelta(seconds=1), priority=5),
            JobSpec("q", {"n": 3}, run_at=base, priority=-1),
            JobSpec("q", {"n": 4}, run_at=base + timedelta(seconds=3), priority=10),
            JobSpec("q", {"n": 5}, delay=timedelta(hours=1), priority=100),  # not due
        ]
    )
    order = [queue.claim("q", 1, worker="w")[0].payload["n"] for _ in range(5)]
    assert order == [4, 2, 1, 0, 3]
    assert queue.claim("q", 1, worker="w") == []
    assert queue.job(ids[5]).priority == 100


def test_the_claim_walks_an_index_and_never_sorts_the_ready_set(queue: Queue) -> None:
    queue.enqueue_many(
        [JobSpec("q", {}, priority=i % 7) for i in range(3000)]
        + [JobSpec("other", {}, priority=1) for _ in range(3000)]
    )
    queue.conn.execute(sql.SQL("ANALYZE {}.jobs").format(sql.Identifier(queue.schema)))
    op = ops.claim("q", 10, timedelta(seconds=30), "w")
    plan = "\n".join(
        str(r[0])
        for r in queue.conn.execute(
            sql.SQL("EXPLAIN ") + query(op.name, queue.schema), op.params
        ).fetchall()
    )
    assert "jobs_ready_priority_idx" in plan, plan
    sorts = [line.strip() for line in plan.splitlines() if "Sort Key" in line]
    assert sorts == ["Sort Key: claimed.id"], plan  # only the ten claimed rows, for output


async def test_the_worker_runs_higher_priorities_first(dsn: str, schema: str, queue: Queue) -> None:
    queue.enqueue_many([JobSpec("q", {"p": p}, priority=p) for p in (1, 3, 2, 0, 3, 9)])
    seen: list[int] = []

    def handler(ctx: JobContext) -> None:
        seen.append(ctx.payload["p"])

    worker = make_worker(dsn, schema, handler, concurrency=1, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert seen == [9, 3, 3, 2, 1, 0]


async def test_a_handlers_result_is_stored_with_its_completion(
    dsn: str, schema: str, queue: Queue
) -> None:
    ids = queue.enqueue_many([JobSpec("q", {"n": n}) for n in range(4)])

    async def handler(ctx: JobContext) -> object:
        n = ctx.payload["n"]
        return None if n == 0 else {"n": n, "squares": [n * n], "text": "é\u2603"}

    worker = make_worker(dsn, schema, handler, concurrency=4, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert queue.job(ids[0]).result is None
    for n, job_id in enumerate(ids[1:], start=1):
        job = queue.job(job_id)
        assert (job.status, job.result) == ("done", {"n": n, "squares": [n * n], "text": "é\u2603"})


@pytest.mark.parametrize(
    "value", [object(), float("nan"), {1: {2, 3}}], ids=["object", "nan", "set"]
)
async def test_a_result_that_is_not_json_fails_the_job_clearly(
    dsn: str, schema: str, queue: Queue, value: object
) -> None:
    job_id = queue.enqueue("q", {}, max_attempts=1)

    def handler(ctx: JobContext) -> object:
        return value

    worker = make_worker(dsn, schema, handler, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    job = queue.job(job_id)
    assert job.status == "dead" and job.result is None
    assert job.last_error is not None
    assert job.last_error.startswith("result is not JSON-serialisable: "), job.last_error


def test_a_result_lands_only_with_a_matching_fence(queue: Queue) -> None:
    job_id = queue.enqueue("q", {})
    [old] = queue.claim("q", 1, lease=timedelta(seconds=1), worker="a")
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET lease_until = now() - interval '1 s' WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        (job_id,),
    )
    assert queue.reap() == [(job_id, "ready")]
    [new] = queue.claim("q", 1, worker="b")
    with pytest.raises(LeaseLost):
        queue.complete(job_id, old.fence, result={"from": "a"})
    assert queue.job(job_id).result is None
    queue.complete(job_id, new.fence, result={"from": "b"})
    assert queue.job(job_id).result == {"from": "b"}


def test_complete_in_the_handlers_transaction_stores_the_result(dsn: str, queue: Queue) -> None:
    job_id = queue.enqueue("q", {})
    [job] = queue.claim("q", 1, worker="w")
    with psycopg.connect(dsn) as conn, conn.transaction():
        queue.complete(job.id, job.fence, conn=conn, result=[1, 2])
    assert queue.job(job_id).result == [1, 2]


def test_cli_priority_and_result(dsn: str, schema: str, queue: Queue) -> None:
    runner = CliRunner()
    base = ["--dsn", dsn, "--schema", schema]
    out = runner.invoke(main, [*base, "enqueue", "q", "{}", "--priority", "7", "--json"])
    assert out.exit_code == 0, out.output
    job_id = int(out.output.strip().strip("[]"))
    assert queue.job(job_id).priority == 7
    [job] = queue.claim("q", 1, worker="w")
    queue.complete(job.id, job.fence, result={"answer": 42})
    shown = runner.invoke(main, [*base, "show", str(job_id)])
    assert shown.exit_code == 0, shown.output
    assert "priority" in shown.output and '{"answer": 42}' in shown.output
    as_json = runner.invoke(main, [*base, "show", str(job_id), "--json"])
    assert '"result": {' in as_json.output and '"priority": 7' in as_json.output
    bad = runner.invoke(main, [*base, "enqueue", "q", "{}", "--priority", "high"])
    assert bad.exit_code == 2


def test_the_demo_fills_a_priority_queue() -> None:
    import random

    from pgq_cli.demo_jobs import EMAIL_PRIORITY, initial_jobs

    emails = [s for s in initial_jobs(random.Random(1)) if s.queue == "emails"]
    assert emails and {s.priority for s in emails} > {0}
    assert all(s.priority == EMAIL_PRIORITY[s.payload["template"]] for s in emails)
