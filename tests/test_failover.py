"""Fences across a failover, on a real primary and a real streaming standby (`pg_basebackup -R`)
that is promoted: a promotion rolls back whatever had not replicated, and no fence handed out
before it may write after it, nor be handed out again.

The standby is stopped before the step that must be lost, and the primary killed (`-m
immediate`) after it: the step committed on the old primary only, as an asynchronous standby
lags a primary that dies."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from replication import SCHEMA, Pair, running_pair, wait
from support import ENV

from pgq_core import JobSpec, LeaseLost, Queue, fenced_write, ops

TESTS = Path(__file__).resolve().parent
EPOCH = 1 << 32  # a fence claimed on timeline T is above (T - 1) << 32


@pytest.fixture
def pair() -> Iterator[Pair]:
    with running_pair() as found:
        yield found


def effect(conn: psycopg.Connection[tuple[object, ...]], job_id: int) -> tuple[object, ...]:
    row = conn.execute(
        sql.SQL("SELECT worker, fence FROM {}.effects WHERE job_id = %s").format(
            sql.Identifier(SCHEMA)
        ),
        [job_id],
    ).fetchone()
    assert row is not None
    return row


def test_a_claim_the_failover_lost_is_never_handed_out_again(pair: Pair) -> None:
    """The issue's case: A's claim never reached the standby; after the promotion B claims the
    job with a fence above A's, and nothing of A's lands: heartbeat, fenced write, completion."""
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        job_id = queue.enqueue("q", {"n": 1})
    pair.caught_up()
    pair.standby.stop("fast")  # from here on, nothing reaches it
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        (a,) = queue.claim("q", worker="A")
    assert a.id == job_id and a.fence == 1  # timeline 1: fences count as they always did
    pair.fail_over()

    with Queue.connect(pair.dsn, SCHEMA) as queue:
        (b,) = queue.claim("q", worker="B")
        assert b.id == job_id
        assert b.fence > a.fence and b.fence > EPOCH  # claimed on timeline 2
        with pytest.raises(LeaseLost):
            queue.heartbeat(a.id, a.fence)  # not B's lease to extend
        with psycopg.connect(pair.dsn) as conn:
            with pytest.raises(LeaseLost), conn.transaction():
                assert fenced_write(
                    conn, "effects", {"job_id": a.id}, {"worker": "A"}, a.fence, schema=SCHEMA
                )
                queue.complete(a.id, a.fence, worker="A", conn=conn)
            with conn.transaction():
                assert fenced_write(
                    conn, "effects", {"job_id": b.id}, {"worker": "B"}, b.fence, schema=SCHEMA
                )
                queue.complete(b.id, b.fence, worker="B", conn=conn)
            # A, late, outside any completion: the side table takes only newer fences
            assert not fenced_write(
                conn, "effects", {"job_id": a.id}, {"worker": "A"}, a.fence, schema=SCHEMA
            )
            conn.commit()
            assert effect(conn, job_id) == ("B", b.fence)
        detail = queue.job(job_id)
        assert detail.status == "done" and detail.worker == "B" and detail.attempts == 1
        claimed = [e for e in queue.history(job_id) if e.event == "claimed"]
        assert [(e.fence, e.worker) for e in claimed] == [(b.fence, "B")]


def test_a_fence_from_before_the_promotion_writes_nothing_after_it(pair: Pair) -> None:
    """A's claim replicated but its completion did not: the job runs under A's fence on the new
    primary too. A's writes are refused all the same (whatever else of its work the old primary
    took with it), and the job goes back without the failover costing it an attempt."""
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        job_id = queue.enqueue("q", {"n": 1}, max_attempts=1)
        (a,) = queue.claim("q", worker="A")
    pair.caught_up()
    pair.standby.stop("fast")
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        queue.complete(a.id, a.fence, worker="A")  # committed on the old primary only
    pair.fail_over()

    with Queue.connect(pair.dsn, SCHEMA) as queue:
        assert queue.job(job_id).status == "running"  # what the new primary has
        with pytest.raises(LeaseLost):
            queue.heartbeat(a.id, a.fence)
        with pytest.raises(LeaseLost):
            queue.complete(a.id, a.fence, worker="A")
        settled = queue.complete_many([(a.id, a.fence)], worker="A")
        assert not settled.applied

        found = queue.run(ops.hand_back_failed_over())
        assert found.timeline == 2 and found.released == [job_id]
        detail = queue.job(job_id)
        # ready again, its one attempt not spent: the failover was not the job's fault
        assert (detail.status, detail.attempts) == ("ready", 0)
        released = [e for e in queue.history(job_id) if e.event == "released"]
        assert len(released) == 1
        assert released[0].detail is not None
        assert "failover: claimed on timeline 1" in released[0].detail
        assert "now on timeline 2" in released[0].detail
        assert queue.run(ops.hand_back_failed_over()).released == []  # nothing twice

        (b,) = queue.claim("q", worker="B")
        assert (b.id, b.attempts) == (job_id, 1) and b.fence > EPOCH
        queue.complete(b.id, b.fence, worker="B")
        assert queue.job(job_id).status == "done"


def test_a_kill_after_the_promotion_moves_the_fence_past_the_floor(pair: Pair) -> None:
    """An operator's kill bumps the fence as a claim does: above every fence of the old
    timeline, so the holder from before the promotion cannot write either way."""
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        job_id = queue.enqueue("q", {"n": 1})
        (a,) = queue.claim("q", worker="A")
    pair.caught_up()
    pair.fail_over()
    with Queue.connect(pair.dsn, SCHEMA) as queue:
        assert queue.kill([job_id], "stop it") == [job_id]
        detail = queue.job(job_id)
        assert detail.status == "dead" and detail.fence > EPOCH > a.fence


@pytest.mark.slow
def test_worker_processes_follow_the_promotion_and_no_stale_write_lands(
    pair: Pair, tmp_path: Path
) -> None:
    """Two `pgq worker` processes on the cluster's DSN run jobs that write their effect and
    complete in one transaction; the primary dies mid-run and the standby is promoted. The
    workers find the new primary by themselves, every job ends done exactly once with the
    effect of the attempt that completed it, the jobs held across the promotion go back without
    spending an attempt (nor does a handler whose own connection died with the old primary),
    and a job enqueued afterwards wakes a worker through LISTEN."""
    total = 400
    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        queue.enqueue_many([JobSpec("f", {"sleep": 0.03}) for _ in range(total)])
    env = dict(os.environ, PGQ_DSN=pair.dsn, PGQ_SCHEMA=SCHEMA)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    argv = [sys.executable, "-m", "pgq_cli", "worker", "f", "--handler",
            "handlers_for_tests:fenced", "--concurrency", "8", "--lease", "5s",
            "--poll-interval", "10s"]
    procs = [
        subprocess.Popen(argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                         cwd=TESTS)
        for log in logs
    ]

    def count(dsn: str, where: str) -> int:
        try:
            with psycopg.connect(dsn, connect_timeout=2) as conn:
                row = conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.jobs WHERE " + where).format(
                        sql.Identifier(SCHEMA)
                    )
                ).fetchone()
                return int(row[0]) if row else 0
        except psycopg.OperationalError:
            return -1

    try:
        wait(lambda: count(pair.primary.dsn, "status = 'done'") >= total // 4, "a quarter done")
        pair.fail_over()
        promoted = time.monotonic()
        wait(lambda: count(pair.dsn, f"status = 'running' AND fence > {EPOCH}") > 0,
             "a claim on the new primary", timeout=10)
        back_after = time.monotonic() - promoted
        wait(lambda: count(pair.dsn, "status = 'done'") == total, "every job done", timeout=90)
        with Queue.connect(pair.dsn, SCHEMA) as queue:
            late = queue.enqueue("f", {"sleep": 0})
            started = time.monotonic()
            wait(lambda: queue.job(late).status == "done", "the late job", timeout=8)
            # woken by LISTEN on the new primary, not by the 10 s poll
            assert time.monotonic() - started < 5
            with psycopg.connect(pair.dsn) as conn:
                effects = conn.execute(sql.SQL(
                    "SELECT count(*), count(*) FILTER (WHERE e.fence = j.fence),"
                    " count(*) FILTER (WHERE j.attempts <> 1),"
                    " count(*) FILTER (WHERE j.status <> 'done')"
                    " FROM {s}.jobs j LEFT JOIN {s}.effects e ON e.job_id = j.id"
                ).format(s=sql.Identifier(SCHEMA))).fetchone()
                handed = conn.execute(sql.SQL(
                    "SELECT count(*) FROM {s}.job_events WHERE event = 'released'"
                    " AND detail LIKE 'failover:%%'"
                ).format(s=sql.Identifier(SCHEMA))).fetchone()
        # every job: one effect, written under the fence that completed it; one attempt
        # counted (no handler failed but for the failover, which spends none); none undone
        assert effects == (total + 1, total + 1, 0, 0), effects
        assert back_after < 10
        for proc in procs:
            proc.terminate()
            assert proc.wait(30) == 0
        text = "\n".join(log.read_text() for log in logs)
        assert "database reachable again" in text, text
        assert "Traceback" not in text, text
        print(f"claiming again {back_after:.2f}s after the promotion; "
              f"{handed[0] if handed else 0} job(s) handed back by the failover")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_commands_say_plainly_while_no_host_takes_writes(pair: Pair) -> None:
    """Between the primary's death and the promotion, a command names each host's state in one
    line, no libpq report; after the promotion the same DSN works."""
    from click.testing import CliRunner

    from pgq_cli.cli import main

    def pgq(*args: str) -> tuple[int, str]:
        result = CliRunner(env=ENV).invoke(
            main, ["--dsn", pair.dsn, "--schema", SCHEMA, *args], prog_name="pgq"
        )
        return result.exit_code, result.output

    pair.caught_up()  # the schema is on the standby
    pair.primary.stop("immediate")
    code, out = pgq("stats")
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1, out
    primary, standby = (f"127.0.0.1:{s.port}" for s in (pair.primary, pair.standby))
    assert lines[0] == (
        f"pgq: error: no writable primary among 2 hosts ({primary} refused; {standby} read-only "
        "standby): waiting for a failover"
    ), out

    # a DSN naming the standby alone reaches it: writes get the standby named for what it is
    only = pair.standby.dsn
    result = CliRunner(env=ENV).invoke(
        main, ["--dsn", only, "--schema", SCHEMA, "enqueue", "q", "{}"], prog_name="pgq"
    )
    assert result.exit_code == 1, result.output
    assert "is a read-only standby" in result.output or "takes no writes" in result.output
    assert "Traceback" not in result.output

    pair.standby.promote()
    code, out = pgq("enqueue", "q", "{}")
    assert code == 0, out
    code, out = pgq("stats")
    assert code == 0 and "q" in out, out


def test_a_queue_follows_the_promotion(pair: Pair) -> None:
    """A producer's `Queue` and `AsyncQueue` on the cluster's DSN: the call that meets the dead
    primary raises (its outcome is unknown), the next one runs on the new primary."""
    import asyncio

    from pgq_core import AsyncQueue

    async def produce() -> None:
        async with await AsyncQueue.connect(pair.dsn, SCHEMA) as aqueue:
            await aqueue.enqueue("q", {"n": "async before"})
            await asyncio.to_thread(pair.caught_up)
            await asyncio.to_thread(pair.fail_over)
            with pytest.raises(psycopg.OperationalError):
                await aqueue.enqueue("q", {"n": "async lost"})
            await aqueue.enqueue("q", {"n": "async after"})

    with Queue.connect(pair.dsn, SCHEMA) as queue:
        queue.enqueue("q", {"n": "before"})
        pair.caught_up()
        asyncio.run(produce())
        with pytest.raises(psycopg.OperationalError):
            queue.enqueue("q", {"n": "lost"})
        after = queue.enqueue("q", {"n": "after"})
        assert queue.job(after).status == "ready"
        names = [row[0] for row in queue.conn.execute(sql.SQL(
            "SELECT payload->>'n' FROM {}.jobs ORDER BY id").format(sql.Identifier(SCHEMA)))]
    assert names == ["before", "async before", "async after", "after"]


def test_the_reaper_charges_no_attempt_for_a_lease_from_before_the_promotion(pair: Pair) -> None:
    """A lease taken before the promotion that expires before any worker hands it back: the
    reaper returns it to ready without counting the attempt (on its last attempt it would
    otherwise die), and says why in the history."""
    from datetime import timedelta

    with Queue.connect(pair.primary.dsn, SCHEMA) as queue:
        job_id = queue.enqueue("q", {"n": 1}, max_attempts=1)
        queue.claim("q", worker="A", lease=timedelta(seconds=1))
    pair.caught_up()
    pair.fail_over()
    with Queue.connect(pair.dsn, SCHEMA) as queue:
        wait(lambda: queue.reap() == [(job_id, "ready")], "the expired lease reaped", timeout=10)
        detail = queue.job(job_id)
        assert (detail.status, detail.attempts) == ("ready", 0)
        (event,) = [e for e in queue.history(job_id) if e.event in ("released", "reaped", "dead")]
        assert event.event == "released" and event.detail is not None
        assert event.detail.startswith("failover: claimed on timeline 1")
