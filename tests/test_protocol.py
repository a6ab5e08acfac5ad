"""The seed's lifecycle, query by query, on a real server."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgq_core import JobSpec, LeaseLost, Queue, fenced_write, ops

LEASE = timedelta(seconds=30)


def row(conn: psycopg.Connection[Any], schema: str, job_id: int) -> dict[str, Any]:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    found = cur.execute(
        sql.SQL("SELECT * FROM {}.jobs WHERE id = %s").format(sql.Identifier(schema)), [job_id]
    ).fetchone()
    assert found is not None
    return found


def expire(conn: psycopg.Connection[Any], schema: str, job_id: int) -> None:
    """Make a lease lapse now, as if its holder had paused past it."""
    conn.execute(
        sql.SQL(
            "UPDATE {}.jobs SET lease_until = now() - interval '1 second' WHERE id = %s"
        ).format(sql.Identifier(schema)),
        [job_id],
    )


def events(queue: Queue, job_id: int) -> list[tuple[str, int, str | None]]:
    return [(e.event, e.fence, e.worker) for e in queue.history(job_id)]


def test_enqueue_then_claim_takes_a_lease_and_bumps_fence_and_attempts(
    queue: Queue, conn: Any
) -> None:
    job_id = queue.enqueue("mail", {"to": "a@example.com"}, max_attempts=3)
    before = row(conn, queue.schema, job_id)
    assert (before["status"], before["fence"], before["attempts"]) == ("ready", 0, 0)

    [job] = queue.claim("mail", 10, LEASE, "w1")
    after = row(conn, queue.schema, job_id)
    assert (job.id, job.fence, job.attempts, job.payload) == (job_id, 1, 1, {"to": "a@example.com"})
    assert (after["status"], after["fence"], after["attempts"], after["worker"]) == (
        "running",
        1,
        1,
        "w1",
    )
    assert after["lease_until"] > after["claimed_at"]
    assert queue.claim("mail", 10, LEASE, "w2") == []


def test_claim_respects_run_at_limit_and_order(queue: Queue) -> None:
    later = queue.enqueue("q", {"n": "later"}, delay=timedelta(hours=1))
    ids = queue.enqueue_many([JobSpec("q", {"n": i}) for i in range(5)])
    other = queue.enqueue("other", {})
    first = queue.claim("q", 3, LEASE, "w")
    rest = queue.claim("q", 10, LEASE, "w")
    assert [j.id for j in first] == ids[:3]
    assert [j.id for j in rest] == ids[3:]
    assert later not in {j.id for j in first + rest}
    assert other not in {j.id for j in first + rest}


def test_ten_concurrent_claimers_never_claim_one_job_twice(queue: Queue, dsn: str) -> None:
    total = 600
    queue.enqueue_many([JobSpec("race", {"n": i}) for i in range(total)])
    claimed: list[list[int]] = [[] for _ in range(10)]
    start = threading.Barrier(10)

    def claimer(slot: int) -> None:
        with Queue.connect(dsn, queue.schema) as mine:
            start.wait()
            while batch := mine.claim("race", 7, LEASE, f"w{slot}"):
                claimed[slot].extend(j.id for j in batch)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    every = [i for ids in claimed for i in ids]
    assert len(every) == total
    assert len(set(every)) == total
    assert sum(1 for ids in claimed if ids) >= 2, "claims did not overlap at all"


def test_stale_fence_cannot_complete_fail_or_heartbeat(queue: Queue, conn: Any) -> None:
    job_id = queue.enqueue("q", {})
    [old] = queue.claim("q", 1, LEASE, "A")
    expire(conn, queue.schema, job_id)
    assert queue.reap() == [(job_id, "ready")]
    [new] = queue.claim("q", 1, LEASE, "B")
    assert new.fence == old.fence + 1

    for write in (
        lambda: queue.complete(job_id, old.fence),
        lambda: queue.fail(job_id, old.fence, "late"),
        lambda: queue.heartbeat(job_id, old.fence),
    ):
        with pytest.raises(LeaseLost) as lost:
            write()
        assert (lost.value.job_id, lost.value.fence) == (job_id, old.fence)

    current = row(conn, queue.schema, job_id)
    assert (current["status"], current["fence"], current["last_error"]) == ("running", 2, None)
    queue.heartbeat(job_id, new.fence)
    queue.complete(job_id, new.fence, worker="B")
    assert row(conn, queue.schema, job_id)["status"] == "done"


def test_worker_a_pauses_b_takes_over_a_wakes_up_only_b_result_lands(
    queue: Queue, dsn: str, conn: Any
) -> None:
    """The seed's story; its `reports` table is fenced the seed's way and via fenced_write."""
    reports = sql.Identifier(queue.schema, "reports")
    conn.execute(
        sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, body text, fence bigint NOT NULL)").format(
            reports
        )
    )
    job_id = queue.enqueue("reports", {"report": 7})
    conn.execute(sql.SQL("INSERT INTO {} VALUES (7, NULL, 0)").format(reports))
    [a] = queue.claim("reports", 1, timedelta(seconds=1), "worker-A")

    time.sleep(1.2)  # A pauses past its lease
    assert queue.reap() == [(job_id, "ready")]
    [b] = queue.claim("reports", 1, LEASE, "worker-B")

    def finish(job_fence: int, body: str, worker: str) -> None:
        with psycopg.connect(dsn) as own, own.transaction():
            own.execute(
                sql.SQL("UPDATE {} SET body = %s, fence = %s WHERE id = %s AND fence < %s").format(
                    reports
                ),
                [body, job_fence, 7, job_fence],
            )
            queue.complete(job_id, job_fence, worker=worker, conn=own)

    finish(b.fence, "from B", "worker-B")
    with pytest.raises(LeaseLost):
        finish(a.fence, "from A", "worker-A")  # A wakes up and writes late

    body = conn.execute(
        sql.SQL("SELECT body, fence FROM {} WHERE id = 7").format(reports)
    ).fetchone()
    assert body == ("from B", b.fence)
    done = row(conn, queue.schema, job_id)
    assert (done["status"], done["fence"]) == ("done", b.fence)

    # The same guarantee through the helper: an older fence never overwrites a newer one.
    with psycopg.connect(dsn, autocommit=True) as own:
        assert (
            fenced_write(
                own, "reports", {"id": 7}, {"body": "A again"}, a.fence, schema=queue.schema
            )
            is False
        )
        assert (
            fenced_write(own, "reports", {"id": 8}, {"body": "new"}, a.fence, schema=queue.schema)
            is True
        )
        assert (
            fenced_write(own, "reports", {"id": 8}, {"body": "newer"}, b.fence, schema=queue.schema)
            is True
        )
    rows = conn.execute(
        sql.SQL("SELECT id, body, fence FROM {} ORDER BY id").format(reports)
    ).fetchall()
    assert rows == [(7, "from B", b.fence), (8, "newer", b.fence)]
    assert [e for e, _, _ in events(queue, job_id)] == [
        "enqueued",
        "claimed",
        "reaped",
        "claimed",
        "completed",
    ]


def test_transactional_enqueue_appears_only_if_the_caller_commits(queue: Queue, dsn: str) -> None:
    with psycopg.connect(dsn) as own:
        with own.transaction():
            kept = queue.enqueue("tx", {"kept": True}, conn=own)
        with pytest.raises(RuntimeError), own.transaction():
            queue.enqueue("tx", {"kept": False}, conn=own)
            queue.enqueue_many([JobSpec("tx", {"n": i}) for i in range(3)], conn=own)
            raise RuntimeError("caller fails after enqueueing")
    assert [j.id for j in queue.jobs(queue="tx")] == [kept]


def test_transactional_complete_rolls_back_with_the_caller(
    queue: Queue, dsn: str, conn: Any
) -> None:
    effects = sql.Identifier(queue.schema, "effects")
    conn.execute(sql.SQL("CREATE TABLE {} (job_id bigint PRIMARY KEY)").format(effects))
    job_id = queue.enqueue("tx", {})
    [job] = queue.claim("tx", 1, LEASE, "w")
    with psycopg.connect(dsn) as own, pytest.raises(RuntimeError), own.transaction():
        own.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(effects), [job_id])
        queue.complete(job_id, job.fence, conn=own)
        raise RuntimeError("handler fails after its writes")
    assert row(conn, queue.schema, job_id)["status"] == "running"
    assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(effects)).fetchone() == (0,)

    with psycopg.connect(dsn) as own, own.transaction():
        own.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(effects), [job_id])
        queue.complete(job_id, job.fence, conn=own)
    assert row(conn, queue.schema, job_id)["status"] == "done"
    assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(effects)).fetchone() == (1,)


def test_stale_complete_inside_a_transaction_rejects_the_callers_writes(
    queue: Queue, dsn: str, conn: Any
) -> None:
    effects = sql.Identifier(queue.schema, "effects")
    conn.execute(sql.SQL("CREATE TABLE {} (job_id bigint PRIMARY KEY)").format(effects))
    job_id = queue.enqueue("tx", {})
    [job] = queue.claim("tx", 1, LEASE, "w")
    assert queue.kill([job_id]) == [job_id]
    with psycopg.connect(dsn) as own, pytest.raises(LeaseLost), own.transaction():
        own.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(effects), [job_id])
        queue.complete(job_id, job.fence, conn=own)
    assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(effects)).fetchone() == (0,)
    assert row(conn, queue.schema, job_id)["status"] == "dead"


def test_fail_backs_off_exponentially_with_jitter_and_dies_at_max_attempts(
    queue: Queue, conn: Any
) -> None:
    job_id = queue.enqueue("flaky", {}, max_attempts=3)
    delays = []
    for attempt in (1, 2):
        [job] = queue.claim("flaky", 1, LEASE, "w")
        assert job.attempts == attempt
        queue.fail(job_id, job.fence, f"boom {attempt}")
        state = conn.execute(
            sql.SQL(
                "SELECT status, extract(epoch FROM run_at - now()), last_error FROM {}.jobs"
                " WHERE id = %s"
            ).format(sql.Identifier(queue.schema)),
            [job_id],
        ).fetchone()
        assert state[0] == "ready" and state[2] == f"boom {attempt}"
        delays.append(float(state[1]))
        conn.execute(
            sql.SQL("UPDATE {}.jobs SET run_at = now() WHERE id = %s").format(
                sql.Identifier(queue.schema)
            ),
            [job_id],
        )
    # base 1 s * 2**attempts, minus at most 25% jitter
    assert 2 * 0.75 - 0.1 <= delays[0] <= 2 + 0.1
    assert 4 * 0.75 - 0.1 <= delays[1] <= 4 + 0.1
    [job] = queue.claim("flaky", 1, LEASE, "w")
    queue.fail(job_id, job.fence, "final")
    dead = row(conn, queue.schema, job_id)
    assert (dead["status"], dead["attempts"], dead["last_error"]) == ("dead", 3, "final")
    assert [e for e, _, _ in events(queue, job_id)][-1] == "dead"


def test_backoff_is_capped(queue: Queue, conn: Any) -> None:
    job_id = queue.enqueue("capped", {}, max_attempts=50)
    conn.execute(
        sql.SQL("UPDATE {}.jobs SET attempts = 40 WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        [job_id],
    )
    [job] = queue.claim("capped", 1, LEASE, "w")
    queue.fail(job_id, job.fence, "again")
    wait = conn.execute(
        sql.SQL("SELECT extract(epoch FROM run_at - now()) FROM {}.jobs WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        [job_id],
    ).fetchone()
    assert 3600 * 0.75 - 1 <= float(wait[0]) <= 3600 + 1


def test_reap_returns_expired_to_ready_or_dead_at_max_attempts(queue: Queue, conn: Any) -> None:
    retry = queue.enqueue("r", {}, max_attempts=2)
    last = queue.enqueue("r", {}, max_attempts=1)
    alive = queue.enqueue("r", {})
    queue.claim("r", 3, LEASE, "w")
    expire(conn, queue.schema, retry)
    expire(conn, queue.schema, last)
    assert sorted(queue.reap()) == [(retry, "ready"), (last, "dead")]
    assert row(conn, queue.schema, alive)["status"] == "running"
    assert row(conn, queue.schema, retry)["lease_until"] is None
    assert "lease expired" in (row(conn, queue.schema, last)["last_error"] or "")
    assert queue.reap() == []


def test_concurrent_reapers_reap_each_job_exactly_once(queue: Queue, dsn: str, conn: Any) -> None:
    total = 300
    queue.enqueue_many([JobSpec("reap", {}) for _ in range(total)])
    queue.claim("reap", total, LEASE, "w")
    conn.execute(
        sql.SQL("UPDATE {}.jobs SET lease_until = now() - interval '1 second'").format(
            sql.Identifier(queue.schema)
        )
    )
    results: list[list[tuple[int, str]]] = [[] for _ in range(6)]
    start = threading.Barrier(6)

    def reaper(slot: int) -> None:
        with Queue.connect(dsn, queue.schema) as mine:
            start.wait()
            while batch := mine.reap(limit=17):
                results[slot].extend(batch)

    threads = [threading.Thread(target=reaper, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    reaped = [job_id for batch in results for job_id, _ in batch]
    assert len(reaped) == total and len(set(reaped)) == total
    count = conn.execute(
        sql.SQL("SELECT count(*) FROM {}.job_events WHERE event = 'reaped'").format(
            sql.Identifier(queue.schema)
        )
    ).fetchone()
    assert count == (total,)


def test_batch_complete_rejects_exactly_the_stale_members(queue: Queue, conn: Any) -> None:
    ids = queue.enqueue_many([JobSpec("b", {"n": i}) for i in range(6)])
    jobs = queue.claim("b", 6, LEASE, "w")
    stale = {jobs[1].id, jobs[4].id}
    held = [(j.id, j.fence + 1 if j.id in stale else j.fence) for j in jobs]
    settled = queue.complete_many(held, "w")
    assert set(settled.lost) == stale
    assert set(settled.applied) == set(ids) - stale
    statuses = dict(
        conn.execute(
            sql.SQL("SELECT id, status FROM {}.jobs").format(sql.Identifier(queue.schema))
        ).fetchall()
    )
    assert {i for i, s in statuses.items() if s == "done"} == set(ids) - stale
    assert {i for i, s in statuses.items() if s == "running"} == stale


def test_kill_bumps_the_fence_so_the_holder_loses_its_next_write(queue: Queue, conn: Any) -> None:
    job_id = queue.enqueue("k", {})
    waiting = queue.enqueue("k", {"not": "claimed"}, delay=timedelta(hours=1))
    [job] = queue.claim("k", 1, LEASE, "w")
    assert queue.kill([job_id, waiting], reason="operator says no") == [job_id, waiting]
    killed = row(conn, queue.schema, job_id)
    assert (killed["status"], killed["fence"], killed["last_error"]) == (
        "dead",
        job.fence + 1,
        "operator says no",
    )
    with pytest.raises(LeaseLost):
        queue.heartbeat(job_id, job.fence)
    assert queue.kill([job_id]) == []  # already dead: nothing to kill


def test_requeue_by_id_and_by_queue_touch_only_dead_jobs_of_that_queue(
    queue: Queue, conn: Any
) -> None:
    a1, a2, b1 = (queue.enqueue(q, {}, max_attempts=1) for q in ("a", "a", "b"))
    ready = queue.enqueue("a", {})
    queue.kill([a1, a2, b1])
    assert queue.requeue([a1, ready]) == [a1]
    again = row(conn, queue.schema, a1)
    assert (again["status"], again["attempts"]) == ("ready", 0)
    assert queue.requeue_dead("a") == [a2]
    assert row(conn, queue.schema, b1)["status"] == "dead"
    assert queue.requeue_dead(None) == [b1]


def test_stats_count_every_state_without_done_rows(queue: Queue, conn: Any) -> None:
    queue.enqueue_many([JobSpec("s", {}) for _ in range(5)])
    queue.enqueue("s", {}, delay=timedelta(hours=1))
    jobs = queue.claim("s", 3, timedelta(seconds=5), "w")
    queue.complete_many([(jobs[0].id, jobs[0].fence)], "w")
    queue.kill([jobs[1].id])
    [s] = queue.stats(soon=timedelta(seconds=10))
    assert (s.queue, s.ready, s.scheduled, s.running, s.expiring, s.dead, s.done, s.completed) == (
        "s",
        2,
        1,
        1,
        1,
        1,
        1,
        1,
    )
    assert s.oldest_due_seconds is not None and s.oldest_due_seconds >= 0

    # An operator's plain SQL keeps the counters right too (the trigger sees every statement).
    conn.execute(
        sql.SQL("UPDATE {}.jobs SET status = 'ready' WHERE status = 'done'").format(
            sql.Identifier(queue.schema)
        )
    )
    [s] = queue.stats()
    assert (s.ready, s.done, s.completed) == (3, 0, 1)


def test_prune_deletes_old_done_jobs_with_their_history_in_batches(queue: Queue, conn: Any) -> None:
    ids = queue.enqueue_many([JobSpec("p", {}) for _ in range(25)])
    jobs = queue.claim("p", 20, LEASE, "w")
    queue.complete_many([(j.id, j.fence) for j in jobs], "w")
    ident = sql.Identifier(queue.schema)
    conn.execute(
        sql.SQL(
            "UPDATE {}.jobs SET finished_at = now() - interval '8 days' WHERE id = ANY(%s)"
        ).format(ident),
        [ids[:15]],
    )
    assert list(queue.prune_batches(timedelta(days=7), batch=4)) == [4, 4, 4, 3]
    left = conn.execute(
        sql.SQL("SELECT status, count(*) FROM {}.jobs GROUP BY 1 ORDER BY 1").format(ident)
    )
    assert left.fetchall() == [("done", 5), ("ready", 5)]
    orphans = conn.execute(
        sql.SQL(
            "SELECT count(*) FROM {0}.job_events e WHERE NOT EXISTS"
            " (SELECT 1 FROM {0}.jobs j WHERE j.id = e.job_id)"
        ).format(ident)
    ).fetchone()
    assert orphans == (0,)
    [s] = queue.stats()
    assert (s.done, s.completed) == (5, 20)


def test_release_hands_a_job_back_at_once_without_spending_an_attempt(
    queue: Queue, conn: Any
) -> None:
    job_id = queue.enqueue("rel", {})
    [job] = queue.claim("rel", 1, LEASE, "w")
    settled = queue.release_many([(job_id, job.fence), (job_id, job.fence - 1)], "w", "shutdown")
    assert settled.applied == [job_id]
    back = row(conn, queue.schema, job_id)
    assert (back["status"], back["attempts"]) == ("ready", 0)
    assert queue.claim("rel", 1, LEASE, "w2")[0].fence == job.fence + 1


def test_history_records_every_transition_with_fence_and_worker(queue: Queue, conn: Any) -> None:
    job_id = queue.enqueue("h", {}, max_attempts=2)
    [j1] = queue.claim("h", 1, LEASE, "A")
    queue.fail(job_id, j1.fence, "first", worker="A")
    conn.execute(
        sql.SQL("UPDATE {}.jobs SET run_at = now() WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        [job_id],
    )
    [j2] = queue.claim("h", 1, LEASE, "B")
    queue.record_stale([(job_id, j1.fence)], "A", "complete")
    queue.complete(job_id, j2.fence, worker="B")
    assert events(queue, job_id) == [
        ("enqueued", 0, None),
        ("claimed", 1, "A"),
        ("failed", 1, "A"),
        ("claimed", 2, "B"),
        ("stale", 1, "A"),
        ("completed", 2, "B"),
    ]
    detail = queue.job(job_id)
    assert detail.status == "done" and len(detail.history) == 6


def test_enqueue_many_beyond_one_chunk_is_all_or_nothing(queue: Queue, conn: Any) -> None:
    good = [JobSpec("big", {"n": i}) for i in range(6000)]
    assert len(queue.enqueue_many(good)) == 6000
    bad = [JobSpec("big", {"n": i}) for i in range(6000)]
    bad[5500] = JobSpec("big", {"n": "x"})  # in the second chunk: the first must roll back too
    ident = sql.Identifier(queue.schema)
    conn.execute(
        sql.SQL("ALTER TABLE {}.jobs ADD CONSTRAINT small_n CHECK ((payload->>'n') <> 'x')").format(
            ident
        )
    )
    with pytest.raises(psycopg.errors.CheckViolation):
        queue.enqueue_many(bad)
    count = conn.execute(sql.SQL("SELECT count(*) FROM {}.jobs").format(ident)).fetchone()
    assert count == (6000,)


def test_a_missing_table_of_the_users_is_not_reported_as_a_missing_schema(
    queue: Queue, conn: Any
) -> None:
    ident = sql.Identifier(queue.schema)
    conn.execute(
        sql.SQL(
            "CREATE FUNCTION {0}.audit() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO no_such_audit_table VALUES (NEW.id); RETURN NEW; END $$;"
            " CREATE TRIGGER audit BEFORE INSERT ON {0}.jobs"
            " FOR EACH ROW EXECUTE FUNCTION {0}.audit()"
        ).format(ident)
    )
    with pytest.raises(psycopg.errors.UndefinedTable, match="no_such_audit_table"):
        queue.enqueue("q", {})


SLOW = 1.2


def lease_left_after_a_slow_start(
    queue: Queue, dsn: str, grant: Any, job_id: int
) -> timedelta:
    """Run `grant` (an op that grants or extends `job_id`'s lease) in a transaction that began
    SLOW seconds earlier; the lease the row holds once it ran, counted from that moment."""
    with psycopg.connect(dsn) as slow:
        slow.execute("SELECT pg_sleep(%s)", [SLOW])
        queue.run(grant, slow)
        ((left,),) = slow.execute(
            sql.SQL("SELECT lease_until - clock_timestamp() FROM {}.jobs WHERE id = %s").format(
                sql.Identifier(queue.schema)
            ),
            [job_id],
        ).fetchall()
    assert isinstance(left, timedelta)
    return left


@pytest.mark.parametrize("name", ["claim", "settle_complete_and_claim"])
def test_a_lease_is_counted_from_the_claim_not_the_transactions_start(
    queue: Queue, dsn: str, name: str
) -> None:
    job_id = queue.enqueue("slow", {})
    lease = timedelta(seconds=2)
    grant = (
        ops.claim("slow", 1, lease, "w")
        if name == "claim"
        else ops.complete_and_claim([], "slow", 1, lease, "w")
    )
    left = lease_left_after_a_slow_start(queue, dsn, grant, job_id)
    assert left > lease - timedelta(seconds=SLOW / 2), left


@pytest.mark.parametrize("name", ["extend_leases", "heartbeat"])
def test_a_renewal_is_counted_from_the_renewal_not_the_transactions_start(
    queue: Queue, dsn: str, name: str
) -> None:
    job_id = queue.enqueue("slow", {})
    lease = timedelta(seconds=2)
    [job] = queue.claim("slow", 1, lease, "w")
    held = [(job_id, job.fence)]
    renew = ops.extend_leases(held) if name == "extend_leases" else ops.heartbeat(held)
    left = lease_left_after_a_slow_start(queue, dsn, renew, job_id)
    assert left > lease - timedelta(seconds=SLOW / 2), left
