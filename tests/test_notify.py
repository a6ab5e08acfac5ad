"""NOTIFY is a hint sent where a listener needs it: jobs that became ready now."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from pgq_core import JobSpec, Queue, channel, listen_statement
from pgq_core.notifier import notifier_for


def listener(dsn: str, schema: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(listen_statement(schema))
    return conn


def drain(conn: psycopg.Connection[Any], wait: float = 0.5) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in conn.notifies(timeout=wait)]


def test_enqueue_notifies_the_schema_channel_with_the_queue_name(queue: Queue, dsn: str) -> None:
    with listener(dsn, queue.schema) as ears:
        queue.enqueue("mail", {})
        assert drain(ears) == [(channel(queue.schema), "mail")]


def test_a_batch_of_ten_thousand_is_one_notification_per_queue(queue: Queue, dsn: str) -> None:
    specs = [JobSpec("a" if i % 2 else "b", {"n": i}) for i in range(10_000)]
    with listener(dsn, queue.schema) as ears:
        queue.enqueue_many(specs)
        got = drain(ears)
    assert sorted(got) == [(channel(queue.schema), "a"), (channel(queue.schema), "b")]


def test_notification_arrives_only_when_the_callers_transaction_commits(
    queue: Queue, dsn: str
) -> None:
    with listener(dsn, queue.schema) as ears, psycopg.connect(dsn) as own:
        with own.transaction():
            queue.enqueue("tx", {}, conn=own)
            assert drain(ears, 0.2) == []
        assert drain(ears) == [(channel(queue.schema), "tx")]
        with own.transaction(force_rollback=True):
            queue.enqueue("tx", {}, conn=own)
        assert drain(ears, 0.3) == []


def test_no_notification_for_delayed_jobs_claims_or_completions(queue: Queue, dsn: str) -> None:
    job_id = queue.enqueue("q", {})
    assert notifier_for(queue.conn, queue.schema).flush(10)  # its NOTIFY is out, unheard
    with listener(dsn, queue.schema) as ears:
        queue.enqueue("q", {}, delay=timedelta(hours=1))
        [job] = queue.claim("q", 1, timedelta(seconds=30), "w")
        queue.complete(job_id, job.fence)
        assert drain(ears) == []


def test_requeue_and_reap_wake_listeners(queue: Queue, dsn: str, conn: Any) -> None:
    dead = queue.enqueue("d", {})
    queue.kill([dead])
    running = queue.enqueue("r", {})
    queue.claim("r", 1, timedelta(seconds=30), "w")
    conn.execute(
        sql.SQL(
            "UPDATE {}.jobs SET lease_until = now() - interval '1 second' WHERE id = %s"
        ).format(sql.Identifier(queue.schema)),
        [running],
    )
    with listener(dsn, queue.schema) as ears:
        queue.requeue([dead])
        queue.reap()
        assert sorted(drain(ears)) == [(channel(queue.schema), "d"), (channel(queue.schema), "r")]


def test_plain_sql_insert_by_an_operator_also_wakes_workers(
    queue: Queue, dsn: str, conn: Any
) -> None:
    with listener(dsn, queue.schema) as ears:
        conn.execute(
            sql.SQL("INSERT INTO {}.jobs (queue, payload) VALUES ('manual', '{{}}')").format(
                sql.Identifier(queue.schema)
            )
        )
        assert drain(ears) == [(channel(queue.schema), "manual")]


def test_a_heartbeat_that_moves_a_lease_sends_one_empty_notification(
    queue: Queue, dsn: str
) -> None:
    """The dashboard shows a new lease at once; workers ignore the empty payload (no queue is
    named ''). A heartbeat that moved no lease sends nothing."""
    from pgq_core import ops

    queue.enqueue_many([JobSpec("q", {}) for _ in range(3)])
    held = [(j.id, j.fence) for j in queue.claim("q", 3, timedelta(seconds=30), "w")]
    with listener(dsn, queue.schema) as ears:
        drain(ears, 0.2)
        assert queue.run(ops.extend_leases(held, channel(queue.schema))).applied == [
            i for i, _ in held
        ]
        assert drain(ears) == [(channel(queue.schema), "")]
        assert queue.run(ops.extend_leases([(10**12, 1)], channel(queue.schema))).lost
        assert drain(ears) == []
