"""The fence history partitioned by day (migration 9), on real PostgreSQL: where rows land, the
partitions made ahead, prune dropping whole days without losing the history of jobs still
present, the upgrade of a version-6 database, and prune beside a working worker."""

from __future__ import annotations

import asyncio
import importlib
import json
import secrets
import threading
import time
from datetime import date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from pgq_cli.cli import main
from pgq_core import JobSpec, PgqError, Queue, migrate, ops
from pgq_core.migrate import migrations
from pgq_core.models import PartitionDay
from pgq_core.queries import query
from pgq_core.worker import JobContext, Worker

LEASE = timedelta(seconds=30)
WEEK = timedelta(days=7)
TIMEOUT = 60.0


def run(conn: Any, schema: str, text: str, *params: Any) -> list[tuple[Any, ...]]:
    cur = conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params or None)
    return cur.fetchall() if cur.description else []


def today(conn: Any) -> date:
    row = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()
    return row[0]  # type: ignore[no-any-return]


def day_name(day: date) -> str:
    return f"job_events_p{day:%Y%m%d}"


def partitions(conn: Any, schema: str) -> dict[str, tuple[Any, Any, bool]]:
    rows = run(
        conn, schema, "SELECT name, from_at, to_at, is_default FROM {s}.job_events_partitions()"
    )
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def add_days(conn: Any, schema: str, first: date, last: date) -> dict[date, str]:
    rows = run(conn, schema, "SELECT * FROM {s}.job_events_add_partitions(%s, %s)", first, last)
    return {r[0]: r[1] for r in rows}


def homes(conn: Any, schema: str, job_id: int) -> list[tuple[str, str]]:
    """(partition, event) of each history row of a job, in id order."""
    rows = run(
        conn,
        schema,
        "SELECT tableoid::regclass::text, event FROM {s}.job_events WHERE job_id = %s ORDER BY id",
        job_id,
    )
    return [(r[0].split(".")[-1], r[1]) for r in rows]


def history_rows(conn: Any, schema: str) -> list[tuple[Any, ...]]:
    return run(
        conn,
        schema,
        "SELECT id, job_id, at, event, fence, worker, detail FROM {s}.job_events ORDER BY id",
    )


def done_job(queue: Queue, name: str = "q") -> int:
    job_id = queue.enqueue(name, {})
    [job] = queue.claim(name, 1, LEASE, "w")
    queue.complete(job.id, job.fence)
    return job_id


def age(conn: Any, schema: str, job_ids: list[int], days: float, *, finished: bool) -> None:
    """Move jobs and their whole history `days` back in time (rows change partition)."""
    shift = timedelta(days=days)
    run(
        conn,
        schema,
        "UPDATE {s}.job_events SET at = at - %s, claimed_at = claimed_at - %s"
        " WHERE job_id = ANY(%s)",
        shift,
        shift,
        job_ids,
    )
    run(
        conn,
        schema,
        "UPDATE {s}.jobs SET queued_at = queued_at - %s, claimed_at = claimed_at - %s,"
        " finished_at = CASE WHEN %s THEN finished_at - %s END WHERE id = ANY(%s)",
        shift,
        shift,
        finished,
        shift,
        job_ids,
    )


# ---------------------------------------------------------------------------- layout


def test_partitions_exist_after_migrate(schema: str, conn: Any) -> None:
    first = today(conn)
    parts = partitions(conn, schema)
    days = {day_name(first + timedelta(days=n)) for n in range(8)}
    assert set(parts) == days | {"job_events_default"}
    assert parts["job_events_default"] == (None, None, True)
    start, end, _ = parts[day_name(first)]
    assert end - start == timedelta(days=1) and start.utcoffset() is not None
    assert start.astimezone().timestamp() % 86400 == 0  # UTC midnight
    [(kind, key)] = run(
        conn,
        schema,
        "SELECT c.relkind::text, pg_get_constraintdef(k.oid) FROM pg_class c"
        " JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'p'"
        " WHERE c.oid = %s::regclass",
        f"{schema}.job_events",
    )
    assert (kind, key) == ("p", "PRIMARY KEY (id, at)")


def test_events_of_today_land_in_todays_partition(schema: str, conn: Any, queue: Queue) -> None:
    job_id = done_job(queue)
    todays = day_name(today(conn))
    assert homes(conn, schema, job_id) == [(todays, "completed")]  # one row per attempt
    assert [e.event for e in queue.history(job_id)] == ["enqueued", "claimed", "completed"]


def test_an_event_outside_every_daily_partition_lands_in_the_default(
    schema: str, conn: Any, queue: Queue
) -> None:
    job_id = queue.enqueue("q", {})
    for offset in ("-40 days", "+40 days"):
        run(
            conn,
            schema,
            "INSERT INTO {s}.job_events (job_id, at, event, fence)"
            " VALUES (%s, now() + %s::interval, 'note', 0)",
            job_id,
            offset,
        )
    assert homes(conn, schema, job_id) == [
        ("job_events_default", "note"),
        ("job_events_default", "note"),
    ]


def test_a_jobs_history_reads_with_plain_sql(schema: str, conn: Any, queue: Queue) -> None:
    job_id = done_job(queue)
    run(
        conn,
        schema,
        "INSERT INTO {s}.job_events (job_id, at, event, fence)"
        " VALUES (%s, now() + interval '40 days', 'late', 0)",
        job_id,
    )
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    cur = conn.execute(f"SELECT * FROM job_events WHERE job_id = {job_id} ORDER BY id")
    assert [d.name for d in cur.description] == [
        *("id", "job_id", "at", "event", "fence", "worker", "detail", "claimed_at", "claimed_by"),
        "traceback",
    ]
    assert [r[3] for r in cur.fetchall()] == ["completed", "late"]
    cur = conn.execute(
        f"SELECT event, fence, worker FROM job_history WHERE job_id = {job_id}"
        " ORDER BY phase, at, seq"
    )
    assert cur.fetchall() == [
        ("enqueued", 0, None), ("claimed", 1, "w"), ("completed", 1, None), ("late", 0, None)
    ]
    assert [e.event for e in queue.history(job_id)] == ["enqueued", "claimed", "completed", "late"]


# ---------------------------------------------------------------------------- partitions ahead


def test_ensure_is_idempotent_and_skips_a_day_the_default_holds(
    schema: str, conn: Any, queue: Queue
) -> None:
    first = today(conn)
    assert {d.outcome for d in queue.ensure_partitions()} == {"exists"}
    job_id = queue.enqueue("q", {})
    held = first + timedelta(days=10)
    run(
        conn,
        schema,
        "INSERT INTO {s}.job_events (job_id, at, event, fence)"
        " VALUES (%s, (%s::date + time '12:00') AT TIME ZONE 'UTC', 'far', 0)",
        job_id,
        held,
    )
    wanted = {first + timedelta(days=n): "exists" for n in range(8)}
    wanted |= {first + timedelta(days=n): "created" for n in (8, 9, 11, 12)}
    wanted[held] = "default holds rows"
    assert add_days(conn, schema, first, first + timedelta(days=12)) == wanted
    again = add_days(conn, schema, first, first + timedelta(days=12))
    assert again == {d: ("default holds rows" if d == held else "exists") for d in wanted}
    assert day_name(held) not in partitions(conn, schema)
    assert homes(conn, schema, job_id)[-1] == ("job_events_default", "far")
    assert [d.outcome for d in queue.ensure_partitions(ahead=12)].count("default holds rows") == 1


def test_prune_says_which_day_the_default_holds(
    schema: str, conn: Any, dsn: str, queue: Queue
) -> None:
    held = today(conn) + timedelta(days=5)
    run(conn, schema, f"ALTER TABLE {{s}}.job_events DETACH PARTITION {{s}}.{day_name(held)}")
    run(conn, schema, f"DROP TABLE {{s}}.{day_name(held)}")
    run(
        conn,
        schema,
        "INSERT INTO {s}.job_events (job_id, at, event, fence)"
        " VALUES (1, (%s::date + time '06:00') AT TIME ZONE 'UTC', 'early', 0)",
        held,
    )
    out = CliRunner().invoke(
        main, ["--dsn", dsn, "--schema", schema, "prune", "--older-than", "7d"]
    )
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        "pruned 0 done jobs older than 7d",
        f"no history partition for {held}: default holds rows "
        "(its rows go to the default partition)",
    ]


def test_ensure_gives_way_to_a_lock_and_to_another_session(
    schema: str, conn: Any, dsn: str, queue: Queue
) -> None:
    first = today(conn)
    with psycopg.connect(dsn) as holder:
        holder.execute(
            sql.SQL("SELECT count(*) FROM {}.job_events WHERE job_id = 1").format(
                sql.Identifier(schema)
            )
        )  # a reader holds every partition, the default included, until it ends
        t0 = time.monotonic()
        days = add_days(conn, schema, first + timedelta(days=8), first + timedelta(days=9))
        assert time.monotonic() - t0 < 2.0
        assert days == {first + timedelta(days=8): "locked"}
    with psycopg.connect(dsn) as other:
        other.execute(
            sql.SQL("SELECT {}.job_events_add_partitions(%s, %s)").format(sql.Identifier(schema)),
            [first, first],
        )
        assert [(d.day, d.outcome) for d in queue.ensure_partitions()] == [(None, "busy")]
    assert queue.ensure_partitions(ahead=9)[-2:] == [
        PartitionDay(first + timedelta(days=8), "created"),
        PartitionDay(first + timedelta(days=9), "created"),
    ]


async def test_a_workers_reaper_creates_the_partitions_ahead(
    schema: str, conn: Any, dsn: str
) -> None:
    last = day_name(today(conn) + timedelta(days=7))
    run(conn, schema, f"ALTER TABLE {{s}}.job_events DETACH PARTITION {{s}}.{last}")
    run(conn, schema, f"DROP TABLE {{s}}.{last}")
    worker = Worker(dsn, ["q"], lambda ctx: None, schema=schema, reap_interval=0.1)
    task = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + TIMEOUT
        while last not in partitions(conn, schema):
            assert time.monotonic() < deadline, "the reaper made no partition"
            await asyncio.sleep(0.05)
    finally:
        worker.stop(immediately=True)
        await asyncio.wait_for(task, TIMEOUT)


# ---------------------------------------------------------------------------- prune


def test_prune_drops_old_days_and_keeps_the_history_of_jobs_still_present(
    schema: str, conn: Any, dsn: str, queue: Queue
) -> None:
    first = today(conn)
    add_days(conn, schema, first - timedelta(days=20), first - timedelta(days=1))
    dead = queue.enqueue("q", {}, max_attempts=1)
    [job] = queue.claim("q", 1, LEASE, "w")
    queue.fail(job.id, job.fence, "boom")
    old_done = [done_job(queue) for _ in range(3)]
    late_done = done_job(queue)  # enqueued long ago, finished yesterday: stays
    ready = queue.enqueue("q", {}, delay=timedelta(days=1))
    age(conn, schema, [dead, *old_done], 15, finished=True)
    age(conn, schema, [late_done, ready], 15, finished=False)
    run(
        conn,
        schema,
        "UPDATE {s}.jobs SET finished_at = now() - interval '1 day' WHERE id = %s",
        late_done,
    )
    kept_before = {j: homes(conn, schema, j) for j in (dead, late_done, ready)}
    rows_before = {r[0]: r for r in history_rows(conn, schema)}
    old_day = day_name(first - timedelta(days=15))
    assert {h for h, _ in kept_before[dead]} == {old_day}

    out = CliRunner().invoke(
        main, ["--dsn", dsn, "--schema", schema, "prune", "--older-than", "7d", "--json"]
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    dropped = [day_name(first - timedelta(days=n)) for n in range(20, 7, -1)]
    assert report["deleted"] == 3
    assert report["partitions_dropped"] == dropped
    assert report["history_rows_kept"] == 1 + 1  # dead's and late_done's attempt: the old day
    assert report["partitions_locked"] == []
    parts = partitions(conn, schema)
    assert not set(dropped) & set(parts)
    assert day_name(first - timedelta(days=7)) in parts  # ends after the cutoff: kept

    for job_id, before in kept_before.items():
        after = homes(conn, schema, job_id)
        assert [e for _, e in after] == [e for _, e in before]
        assert {h for h, _ in after if h != "job_events_default"} <= {day_name(first)}
    rows_after = {r[0]: r for r in history_rows(conn, schema)}
    assert {i: r for i, r in rows_before.items() if r[1] not in old_done} == rows_after
    assert all(r[1] not in old_done for r in rows_after.values())
    assert [e.event for e in queue.history(dead)] == ["enqueued", "claimed", "dead"]
    assert json.loads(
        CliRunner()
        .invoke(main, ["--dsn", dsn, "--schema", schema, "prune", "--older-than", "7d", "--json"])
        .output
    ) == {
        "deleted": 0,
        "partitions_dropped": [],
        "history_rows_kept": 0,
        "partitions_locked": [],
        "orphan_rows_deleted": 0,
        "days_not_created": [],
    }


def test_prune_text_names_the_partitions_dropped(
    schema: str, conn: Any, dsn: str, queue: Queue
) -> None:
    first = today(conn)
    add_days(conn, schema, first - timedelta(days=9), first - timedelta(days=9))
    dead = queue.enqueue("q", {}, max_attempts=1)
    queue.kill([dead])
    age(conn, schema, [dead], 9, finished=True)
    out = CliRunner().invoke(
        main, ["--dsn", dsn, "--schema", schema, "prune", "--older-than", "7d"]
    )
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        "pruned 0 done jobs older than 7d",
        f"dropped 1 history partition ({day_name(first - timedelta(days=9))}), keeping 1 "
        "history row of jobs still present",
    ]


def test_prune_deletes_a_pruned_jobs_history_from_the_default_and_later_days(
    schema: str, conn: Any, queue: Queue
) -> None:
    """History rows of a pruned job that no dropped day held go too: rows in the default
    (a day without a partition) and a stale report hours after the job ended."""
    first = today(conn)
    add_days(conn, schema, first - timedelta(days=3), first - timedelta(days=3))
    gone, still = done_job(queue), done_job(queue)
    age(conn, schema, [gone, still], 9.5, finished=True)  # a day without partition: the default
    run(
        conn,
        schema,
        "UPDATE {s}.jobs SET finished_at = now() - interval '1 day' WHERE id = %s",
        still,
    )
    run(
        conn,
        schema,
        "INSERT INTO {s}.job_events (job_id, at, event, fence)"
        " SELECT id, finished_at + interval '20 hours', 'stale', fence FROM {s}.jobs"
        " WHERE id = %s",
        gone,
    )
    assert {h for h, _ in homes(conn, schema, gone)} == {"job_events_default"}
    assert queue.prune_report(WEEK) == ops.PruneReport(deleted=1)
    assert homes(conn, schema, gone) == []
    assert homes(conn, schema, still) == [("job_events_default", "completed")]


def test_prunes_history_delete_reads_only_the_partitions_of_its_days(
    schema: str, conn: Any, queue: Queue
) -> None:
    first = today(conn)
    add_days(conn, schema, first - timedelta(days=30), first - timedelta(days=1))
    old = [done_job(queue) for _ in range(20)]
    age(conn, schema, old, 12, finished=True)
    run(conn, schema, "ANALYZE {s}.job_events")
    statement = query("prune", schema)
    with conn.transaction(force_rollback=True):
        [(plan,)] = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement,
            {"older_than": WEEK, "limit": 100, "dropping_before": None},
        ).fetchall()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    read: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        name = node.get("Relation Name", "")
        if name.startswith("job_events_") and node.get("Actual Loops", 0) > 0:
            read.add(name)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    days = len(partitions(conn, schema))
    assert days >= 39
    assert read <= {
        day_name(first - timedelta(days=12)),
        day_name(first - timedelta(days=11)),
        "job_events_default",
    }, read


def test_a_row_written_into_a_day_while_it_is_dropped_is_kept(
    schema: str, conn: Any, dsn: str, queue: Queue
) -> None:
    """The rows to keep are found before the locks; a row written by hand into that day
    meanwhile (newer than any seen) is kept as well, its job being present."""
    day = today(conn) - timedelta(days=9)
    add_days(conn, schema, day, day)
    dead = queue.enqueue("q", {}, max_attempts=1)
    queue.kill([dead])
    age(conn, schema, [dead], 9, finished=True)
    outcome: list[tuple[str, int]] = []

    def drop() -> None:
        with Queue.connect(dsn, schema) as q:
            outcome.append(q.run(ops.drop_event_partition(day_name(day), WEEK, attempts=40)))

    with psycopg.connect(dsn) as reader:
        reader.execute(
            sql.SQL("SELECT count(*) FROM {}.job_events").format(sql.Identifier(schema))
        )  # holds every partition: the drop finds its rows, then waits for its locks
        dropper = threading.Thread(target=drop)
        dropper.start()
        time.sleep(0.5)
        run(
            conn,
            schema,
            "INSERT INTO {s}.job_events (job_id, at, event, fence)"
            " VALUES (%s, (%s::date + time '12:00') AT TIME ZONE 'UTC', 'by hand', 0)",
            dead,
            day,
        )
        time.sleep(0.3)
        assert dropper.is_alive()
    dropper.join(TIMEOUT)
    assert outcome == [("dropped", 2)]
    assert [e for _, e in homes(conn, schema, dead)] == ["killed", "by hand"]
    assert {h for h, _ in homes(conn, schema, dead)} == {"job_events_default"}


def test_two_prunes_at_once_drop_each_day_once(
    schema: str, conn: Any, dsn: str, queue: Queue
) -> None:
    first = today(conn)
    add_days(conn, schema, first - timedelta(days=14), first - timedelta(days=1))
    dead = [queue.enqueue("q", {}, max_attempts=1) for _ in range(20)]
    queue.kill(dead)
    for n, job_id in enumerate(dead):
        age(conn, schema, [job_id], 8 + n % 6, finished=True)
    old = [done_job(queue) for _ in range(50)]
    age(conn, schema, old, 10, finished=True)
    before = {r[0]: r for r in history_rows(conn, schema) if r[1] in dead}
    reports: list[ops.PruneReport] = []

    def prune() -> None:
        with Queue.connect(dsn, schema) as q:
            reports.append(q.prune_report(WEEK, batch=7))

    threads = [threading.Thread(target=prune) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert len(reports) == 2
    assert sum(r.deleted for r in reports) == 50
    dropped = sorted(p for r in reports for p in r.partitions_dropped)
    assert dropped == sorted(day_name(first - timedelta(days=n)) for n in range(8, 15))
    assert sum(r.history_rows_kept for r in reports) == len(before)
    after = {r[0]: r for r in history_rows(conn, schema)}
    assert after == before


# ---------------------------------------------------------------------------- upgrade


def test_upgrade_from_version_6_keeps_every_history_row(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate_mod = importlib.import_module("pgq_core.migrate")
    name = f"t_{secrets.token_hex(5)}"
    reader = f"{name}_reader"
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            with monkeypatch.context() as m:
                m.setattr(migrate_mod, "migrations", lambda: migrations()[:6])
                assert migrate(conn, name) == [1, 2, 3, 4, 5, 6]
            run(conn, name, f"CREATE ROLE {reader}")
            run(conn, name, f"GRANT SELECT ON {{s}}.job_events TO {reader}")
            # version 6's data, as version 6 wrote it: jobs and their history over 30 days
            run(
                conn,
                name,
                "INSERT INTO {s}.jobs (queue, payload, status, attempts, fence, queued_at,"
                " finished_at)"
                " SELECT 'q', '{{}}', s, 1, 1, now() - g * interval '7 hours',"
                " CASE WHEN s IN ('done', 'dead') THEN now() - g * interval '7 hours' END"
                " FROM generate_series(1, 100) g,"
                " LATERAL (SELECT (ARRAY['ready', 'done', 'dead', 'done'])[g % 4 + 1] AS s) x",
            )
            run(
                conn,
                name,
                "INSERT INTO {s}.job_events (job_id, at, event, fence, worker, detail)"
                " SELECT j.id, j.queued_at + e.n * interval '1 second', e.event, e.n, 'w', 'd'"
                " FROM {s}.jobs j, (VALUES (0, 'enqueued'), (1, 'claimed'), (1, 'completed'))"
                " AS e(n, event)",
            )
            before = history_rows(conn, name)
            assert len(before) == 300
            assert migrate(conn, name) == [v for v, _, _ in migrations()][6:]
            assert history_rows(conn, name) == before
            [(can_read,)] = run(
                conn, name, "SELECT has_table_privilege(%s, %s, 'SELECT')", reader,
                f"{name}.job_events",
            )
            assert can_read
            parts = partitions(conn, name)
            assert parts["job_events_legacy"][0] is None
            assert parts["job_events_legacy"][1] == parts[day_name(today(conn))][0]
            [(legacy,)] = run(conn, name, "SELECT count(*) FROM {s}.job_events_legacy")
            assert legacy == 300
            q = Queue(conn, name)
            job_id = q.enqueue("fresh", {})
            [claimed] = q.claim("fresh", 1, LEASE, "w")
            assert claimed.id == job_id
            q.complete(job_id, claimed.fence)
            [(new_id, home)] = run(
                conn,
                name,
                "SELECT id, tableoid::regclass::text FROM {s}.job_events WHERE job_id = %s",
                job_id,
            )
            assert new_id > max(r[0] for r in before)
            assert home.endswith(day_name(today(conn)))
            ids = [int(r[0]) for r in run(conn, name, "SELECT id FROM {s}.jobs ORDER BY id")]
            assert [e.event for e in q.history(ids[0])] == ["enqueued", "claimed", "completed"]

            # the legacy partition goes like a day once it lies before the cutoff
            time.sleep(0.05)
            report = q.prune_report(timedelta(milliseconds=10))
            assert report.partitions_dropped == ["job_events_legacy"]
            present = {
                int(r[0])
                for r in run(conn, name, "SELECT id FROM {s}.jobs WHERE status <> 'done'")
            }
            assert report.history_rows_kept == 3 * len(present - {job_id})
            assert {r for r in before if r[1] in present} == set(history_rows(conn, name)) - {
                r for r in history_rows(conn, name) if r[1] == job_id
            }
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(reader)))


def test_upgrade_with_history_dated_after_the_migration(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit `at` later than the migration: the legacy partition reaches just past it."""
    migrate_mod = importlib.import_module("pgq_core.migrate")
    name = f"t_{secrets.token_hex(5)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            with monkeypatch.context() as m:
                m.setattr(migrate_mod, "migrations", lambda: migrations()[:6])
                migrate(conn, name)
            run(
                conn,
                name,
                "INSERT INTO {s}.job_events (job_id, at, event, fence)"
                " VALUES (1, now() - interval '1 day', 'enqueued', 0),"
                " (1, now() + interval '2 days', 'note', 0)",
            )
            before = history_rows(conn, name)
            migrate(conn, name)
            assert history_rows(conn, name) == before
            parts = partitions(conn, name)
            latest: datetime = before[-1][2]
            assert parts["job_events_legacy"][1] == latest + timedelta(microseconds=1)
            first = today(conn)
            assert day_name(first) not in parts and day_name(first + timedelta(days=1)) not in parts
            assert parts[day_name(first + timedelta(days=2))][0] == parts["job_events_legacy"][1]
            assert day_name(first + timedelta(days=7)) in parts
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


# ---------------------------------------------------------------------------- beside a worker


async def test_prune_beside_a_running_worker_loses_nothing(
    schema: str, conn: Any, dsn: str, queue: Queue
) -> None:
    """Jobs enqueued long ago (their `enqueued` rows in days prune drops) are worked while a
    prune drops those days and deletes old done jobs: every job keeps its whole history."""
    first = today(conn)
    add_days(conn, schema, first - timedelta(days=14), first - timedelta(days=1))
    ready = queue.enqueue_many([JobSpec("q", {"i": i}) for i in range(300)])
    for n in range(6):
        age(conn, schema, ready[n::6], 8 + n, finished=False)
    old = [done_job(queue, "other") for _ in range(200)]
    age(conn, schema, old, 10, finished=True)

    async def handler(ctx: JobContext) -> None:
        await asyncio.sleep(0.01)

    worker = Worker(dsn, ["q"], handler, schema=schema, concurrency=5, burst=True)
    task = asyncio.create_task(worker.run())
    reports: list[ops.PruneReport] = []
    done_by_then: list[int] = []

    def prune() -> None:
        with Queue.connect(dsn, schema) as q:
            while True:
                reports.append(q.prune_report(WEEK, batch=20))
                if reports[-1].partitions_dropped:
                    done_by_then.append(worker.snapshot().done)
                if task.done():
                    return

    await asyncio.gather(asyncio.wait_for(task, TIMEOUT), asyncio.to_thread(prune))
    assert sum(r.deleted for r in reports) == 200
    assert sorted(p for r in reports for p in r.partitions_dropped) == sorted(
        day_name(first - timedelta(days=n)) for n in range(8, 15)
    )
    assert not any(r.partitions_locked for r in reports)
    assert done_by_then[0] < 300, "the days went while the worker was at work"
    for job_id in ready:
        assert [e.event for e in queue.history(job_id)] == ["enqueued", "claimed", "completed"]
    [(left,)] = run(conn, schema, "SELECT count(*) FROM {s}.job_events WHERE job_id = ANY(%s)", old)
    assert left == 0
    assert worker.snapshot().done == 300


async def test_workers_run_through_the_upgrade_from_version_6(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade from version 6 on a live queue: the application's producers insert while it
    runs, a worker of this pgq refuses the old schema (one line naming `pgq migrate`) and drains
    everything once it is done; no job and no history row is lost."""
    migrate_mod = importlib.import_module("pgq_core.migrate")
    name = f"t_{secrets.token_hex(5)}"
    insert = (  # the application's own INSERT, as version 6 takes it
        "INSERT INTO {s}.jobs (queue, payload)"
        " SELECT 'q', jsonb_build_object('i', i) FROM generate_series(1, 20) i RETURNING id"
    )

    async def handler(ctx: JobContext) -> None:
        await asyncio.sleep(0.005)

    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            with monkeypatch.context() as m:
                m.setattr(migrate_mod, "migrations", lambda: migrations()[:6])
                migrate(conn, name)
            q = Queue(conn, name)
            ids = [r[0] for r in run(conn, name, insert)]
            early = Worker(dsn, ["q"], handler, schema=name, concurrency=4, burst=True)
            with pytest.raises(PgqError, match=r"is at version 6, .* run `pgq migrate` first"):
                await asyncio.wait_for(early.run(), TIMEOUT)

            stop = threading.Event()

            def produce() -> None:
                with psycopg.connect(dsn, autocommit=True) as producer:
                    while not stop.is_set():
                        ids.extend(r[0] for r in run(producer, name, insert))
                        time.sleep(0.01)

            producer = threading.Thread(target=produce)
            producer.start()
            try:
                time.sleep(0.1)

                def upgrade() -> list[int]:
                    with psycopg.connect(dsn, autocommit=True) as other:
                        return migrate(other, name)

                assert await asyncio.to_thread(upgrade) == [v for v, _, _ in migrations()][6:]
                time.sleep(0.1)
            finally:
                stop.set()
                producer.join(TIMEOUT)
            assert len(ids) > 40, "the producer inserted before and after the upgrade"
            worker = Worker(dsn, ["q"], handler, schema=name, concurrency=4, burst=True)
            await asyncio.wait_for(worker.run(), TIMEOUT)
            assert worker.snapshot().done == len(ids)
            [(done,)] = run(conn, name, "SELECT count(*) FROM {s}.jobs WHERE status = 'done'")
            assert done == len(ids)
            for job_id in ids:  # the enqueue of a plain INSERT is read from the job's row
                assert [e.event for e in q.history(job_id)] == ["enqueued", "claimed", "completed"]
            held = run(conn, name, "SELECT DISTINCT tableoid::regclass::text FROM {s}.job_events")
            assert {r[0].split(".")[-1] for r in held} == {day_name(today(conn))}
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
