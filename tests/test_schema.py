"""Migrations, and the seed's table kept exactly as the seed wrote it."""

from __future__ import annotations

import importlib
import multiprocessing
import secrets
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgq_core import migrate
from pgq_core.migrate import latest_version, migrations, schema_version

SEED_COLUMNS = {
    "id": ("bigint", "nextval"),
    "queue": ("text", None),
    "payload": ("jsonb", None),
    "status": ("text", "'ready'::text"),
    "run_at": ("timestamp with time zone", "now()"),
    "attempts": ("integer", "0"),
    "max_attempts": ("integer", "5"),
    "lease_until": ("timestamp with time zone", None),
    "fence": ("bigint", "0"),
    "last_error": ("text", None),
}


def test_jobs_keeps_the_seed_columns_types_defaults_and_indexes(schema: str, conn: Any) -> None:
    cols = {
        name: (dtype, default)
        for name, dtype, default in conn.execute(
            "SELECT column_name, data_type, column_default FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'jobs'",
            [schema],
        )
    }
    for name, (dtype, default) in SEED_COLUMNS.items():
        assert cols[name][0] == dtype, name
        if default is None:
            assert cols[name][1] is None, name
        else:
            assert default in cols[name][1], name
    indexes = dict(
        conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes"
            " WHERE schemaname = %s AND tablename = 'jobs'",
            [schema],
        ).fetchall()
    )
    assert "(queue, run_at) WHERE (status = 'ready'::text)" in indexes["jobs_ready_idx"]
    # The seed's lease index gave way to one on running rows that heartbeats never change
    # (version 6), so a heartbeat is a HOT update; the seed's reaper SQL runs unchanged.
    assert "jobs_lease_idx" not in indexes
    assert "(id, queue) WHERE (status = 'running'::text)" in indexes["jobs_running_idx"]
    assert not [d for d in indexes.values() if "lease_until" in d]


@pytest.mark.slow  # the serial pass: pruning waits on every snapshot another test process on
# a shared server (PGQ_TEST_DSN, PG 15 in CI) holds, even from a database of its own
@pytest.mark.parametrize("progress", [False, True])
def test_heartbeats_are_hot_updates(own_database: str, progress: bool) -> None:
    """A heartbeat changes only lease_until, which no index holds, and fillfactor leaves room on
    the page: PostgreSQL updates the row on its page with no new index entry (HOT). So does one
    that carries every job's progress (migration 19: no index on the progress columns).

    Twenty heartbeats overflow any page's free space, so HOT relies on pruning, which only
    another session's open snapshot can hold back: the test has a database of its own, and
    autovacuum is off on its table."""
    from datetime import timedelta

    from pgq_core import JobSpec, Queue, ops
    from pgq_core.models import JobProgress

    with psycopg.connect(own_database, autocommit=True) as conn:
        if conn.info.server_version < 150000:
            pytest.skip("pg_stat_force_next_flush() needs PostgreSQL 15")
        migrate(conn, "pgq")
        conn.execute("ALTER TABLE pgq.jobs SET (autovacuum_enabled = off)")
        with Queue.connect(own_database, "pgq") as queue:
            queue.enqueue_many([JobSpec("q", {"pad": "x" * 200}) for _ in range(2000)])
            held = [(j.id, j.fence) for j in queue.claim("q", 200, timedelta(seconds=60), "w")]

            def updates() -> tuple[int, int]:
                queue.conn.execute("SELECT pg_stat_force_next_flush()")
                time.sleep(0.6)  # the flush happens when the backend next goes idle
                conn.execute("SELECT pg_stat_clear_snapshot()")
                row = conn.execute(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                    " WHERE schemaname = 'pgq' AND relname = 'jobs'"
                ).fetchone()
                assert row is not None
                return int(row[0]), int(row[1])

            before = updates()
            for beat in range(20):
                reports = {
                    i: JobProgress(beat, 20, f"step {beat} of 20") for i, _ in held if progress
                }
                assert len(queue.run(ops.extend_leases(held, None, reports)).applied) == 200
            after = updates()
    updated, hot = after[0] - before[0], after[1] - before[1]
    assert updated == 4000
    print(f"heartbeats{' with progress' if progress else ''}: {hot} of {updated} HOT")
    assert hot >= 0.95 * updated, (updated, hot)


def test_the_seeds_own_sql_runs_unchanged_against_the_table(schema: str, conn: Any) -> None:
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    conn.execute("INSERT INTO jobs (queue, payload) VALUES ('seed', '{}')")
    claimed = conn.execute(
        """UPDATE jobs
SET status      = 'running',
    attempts    = attempts + 1,
    fence       = fence + 1,
    lease_until = now() + interval '30 seconds'
WHERE id IN (
  SELECT id FROM jobs
  WHERE queue = %s AND status = 'ready' AND run_at <= now()
  ORDER BY run_at
  LIMIT 10
  FOR UPDATE SKIP LOCKED
)
RETURNING id, payload, fence""",
        ["seed"],
    ).fetchall()
    assert len(claimed) == 1 and claimed[0][2] == 1
    done = conn.execute(
        "UPDATE jobs SET status = 'done', lease_until = NULL"
        " WHERE id = %s AND fence = %s AND status = 'running'",
        [claimed[0][0], claimed[0][2]],
    )
    assert done.rowcount == 1


def test_migrate_is_idempotent_and_versioned(dsn: str) -> None:
    name = f"t_{secrets.token_hex(5)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            assert schema_version(conn, name) == 0
            assert migrate(conn, name) == [v for v, _, _ in migrations()]
            assert migrate(conn, name) == []
            assert schema_version(conn, name) == latest_version()
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def _migrate_in_child(dsn: str, name: str, out: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        out.put(migrate(conn, name))


def test_two_processes_migrating_at_once_apply_each_version_once(dsn: str) -> None:
    name = f"t_{secrets.token_hex(5)}"
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_migrate_in_child, args=(dsn, name, out)) for _ in range(3)]
    try:
        for p in procs:
            p.start()
        results = sorted((out.get(timeout=60) for _ in procs), key=len)
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        assert results == [[], [], [v for v, _, _ in migrations()]]
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_a_lower_version_merged_later_is_still_applied(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Branches add migrations in parallel: a schema migrated without version 3 (and so at 4)
    still gets 3 when it ships (with 35, which changes 3's schedules table)."""
    m = importlib.import_module("pgq_core.migrate")  # the package's `migrate` is the function
    shipped = m.migrations()
    name = f"t_{secrets.token_hex(5)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            monkeypatch.setattr(
                m, "migrations", lambda: [v for v in shipped if v[0] not in (3, 35)]
            )
            first = migrate(conn, name)
            assert 3 not in first and 4 in first
            monkeypatch.setattr(m, "migrations", lambda: shipped)
            assert migrate(conn, name) == [3, 35]
            assert migrate(conn, name) == []
            conn.execute(sql.SQL("SELECT unique_key FROM {}.jobs").format(sql.Identifier(name)))
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def test_done_counts_follow_plain_sql_inserts_updates_and_deletes(
    schema: str, conn: Any, queue: Any
) -> None:
    """The jobs trigger keeps queue_counts right whatever statement moves rows in or out of
    `done`, and says nothing for statements that move none (version 7 skips that work)."""
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

    def counted() -> int:
        return sum(s.done for s in queue.stats() if s.queue == "plain")

    def actual() -> int:
        row = conn.execute("SELECT count(*) FROM jobs WHERE queue = 'plain' AND status = 'done'")
        return int(row.fetchone()[0])

    conn.execute(
        "INSERT INTO jobs (queue, payload, status)"
        " SELECT 'plain', '{}', CASE WHEN g % 3 = 0 THEN 'ready' ELSE 'done' END"
        "   FROM generate_series(1, 30) g"
    )
    assert counted() == actual() == 20
    conn.execute(
        "UPDATE jobs SET status = 'ready' WHERE queue = 'plain' AND status = 'done'"
        " AND id IN (SELECT id FROM jobs WHERE queue = 'plain' AND status = 'done' LIMIT 4)"
    )
    assert counted() == actual() == 16
    conn.execute("UPDATE jobs SET status = 'done' WHERE queue = 'plain' AND status = 'ready'")
    assert counted() == actual() == 30
    conn.execute("DELETE FROM jobs WHERE queue = 'plain' AND id % 2 = 0")
    assert counted() == actual() < 30
    conn.execute("DELETE FROM jobs WHERE queue = 'plain' AND status = 'ready'")
    conn.execute("UPDATE jobs SET lease_until = now() WHERE queue = 'plain'")
    assert counted() == actual()


@pytest.mark.fresh_schema  # reads page positions (ctid)
def test_a_claimed_batch_keeps_its_new_row_versions_on_their_pages(
    schema: str, conn: Any, queue: Any
) -> None:
    """A claim writes a new version of every row it takes (status is in the partial indexes'
    predicates, so never HOT); jobs' fillfactor leaves room on each page for a batch claimed
    together, so most versions stay on their pages (a moved row logs the whole row and a lock).
    A running row is wider than a ready one (worker, claimed_at, lease_length), so a full page
    cannot keep all: at fillfactor 85 five in six rows moved, at 50 about one in seven."""
    from datetime import timedelta

    from pgq_core import JobSpec

    queue.enqueue_many([JobSpec("q", {"pad": "x" * 100}) for _ in range(600)])
    table = sql.SQL("{}.jobs").format(sql.Identifier(schema))
    page_of = sql.SQL("SELECT id, (ctid::text::point)[0]::int AS page FROM {} ORDER BY id")
    before = dict(conn.execute(page_of.format(table)).fetchall())
    claimed = queue.claim("q", 600, timedelta(seconds=60), "w")
    assert len(claimed) == 600
    after = dict(conn.execute(page_of.format(table)).fetchall())
    moved = sum(before[i] != after[i] for i in before)
    assert moved <= 0.2 * len(before), (moved, len(before))


def test_the_per_column_checks_are_domains_attached_without_a_rewrite(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 33 moves the checks on max_attempts, the backoffs and progress into domains:
    the table keeps its file (no rewrite), and every bad value is still refused, by an INSERT,
    an UPDATE or a COPY."""
    m = importlib.import_module("pgq_core.migrate")
    shipped = m.migrations()
    name = f"t_{secrets.token_hex(5)}"
    ident = sql.Identifier(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            monkeypatch.setattr(m, "migrations", lambda: [v for v in shipped if v[0] < 33])
            migrate(conn, name)
            insert = sql.SQL("INSERT INTO {}.jobs (queue, payload) VALUES ('q', '{{}}')")
            conn.execute(insert.format(ident))
            filenode = "SELECT pg_relation_filenode(%s::regclass)"
            before = conn.execute(filenode, [f"{name}.jobs"]).fetchone()
            monkeypatch.setattr(m, "migrations", lambda: shipped)
            assert 33 in migrate(conn, name)
            assert conn.execute(filenode, [f"{name}.jobs"]).fetchone() == before
            constraints = conn.execute(
                "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c'",
                [f"{name}.jobs"],
            ).fetchall()
            assert sorted(c for (c,) in constraints) == [
                "jobs_progress_order_check",
                "jobs_status_check",
            ]
            bad = [
                ("INSERT INTO {}.jobs (queue, payload, max_attempts) VALUES ('q', '{{}}', 0)", {}),
                ("INSERT INTO {}.jobs (queue, payload, backoff_base) VALUES ('q', '{{}}', -1)", {}),
                ("INSERT INTO {}.jobs (queue, payload, backoff_cap) VALUES ('q', '{{}}', 4e7)", {}),
                ("UPDATE {}.jobs SET max_attempts = 0", {}),
                ("UPDATE {}.jobs SET progress_done = -1", {}),
                ("UPDATE {}.jobs SET progress_total = 0", {}),
                ("UPDATE {}.jobs SET progress_done = 5, progress_total = 3", {}),
                ("UPDATE {}.jobs SET progress_note = repeat('x', 1001)", {}),
            ]
            for statement, params in bad:
                with pytest.raises(psycopg.errors.CheckViolation):
                    conn.execute(sql.SQL(statement).format(ident), params)
            copy = sql.SQL("COPY {}.jobs (queue, payload, max_attempts) FROM STDIN")
            with (
                pytest.raises(psycopg.errors.CheckViolation),
                conn.cursor() as cur,
                cur.copy(copy.format(ident)) as cp,
            ):
                cp.write_row(("q", "{}", 0))
            good = sql.SQL(
                "UPDATE {}.jobs SET max_attempts = 1, backoff_base = 0, backoff_cap = 31536000,"
                " progress_done = 3, progress_total = 3, progress_note = repeat('x', 1000)"
                " RETURNING max_attempts, backoff_cap, progress_done"
            )
            assert conn.execute(good.format(ident)).fetchall() == [(1, 31536000.0, 3)]
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(ident))


def test_jobs_has_no_before_row_insert_trigger_so_copy_inserts_in_batches(
    schema: str, conn: Any
) -> None:
    """COPY inserts rows one at a time into a table with a BEFORE (or INSTEAD OF) ROW INSERT
    trigger, whatever its WHEN, or with a volatile default other than nextval (migration 38):
    jobs has neither, and its two row checks on insert fire after the row."""
    triggers = conn.execute(
        "SELECT tgname, tgtype & 1 = 1 AND tgtype & 4 = 4, tgtype & (2 | 64) <> 0"
        " FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
        [f"{schema}.jobs"],
    ).fetchall()
    row_insert = {name: before for name, row_insert, before in triggers if row_insert}
    assert row_insert == {"jobs_check_insert": False, "jobs_error_group_insert": False}
    # a WHEN is planned again at every statement's start: one calling pgq's SQL functions
    # (inlined, their bodies parsed) cost each one-job INSERT ~40 us
    whens = conn.execute(
        "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger"
        " WHERE tgrelid = %s::regclass AND NOT tgisinternal AND tgqual IS NOT NULL",
        [f"{schema}.jobs"],
    ).fetchall()
    assert len(whens) >= 4
    calling = [n for n, d in whens if f"{schema}." in d.split(" WHEN ", 1)[1].split(" EXECUTE ")[0]]
    assert calling == []
    volatile = conn.execute(
        "SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d"
        " JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum"
        " WHERE d.adrelid = %s::regclass AND EXISTS ("
        "   SELECT FROM pg_proc p WHERE p.provolatile = 'v' AND p.proname <> 'nextval'"
        "   AND pg_get_expr(d.adbin, d.adrelid) ~ ('\\m' || p.proname || '\\(')"
        " )",
        [f"{schema}.jobs"],
    ).fetchall()
    assert volatile == []
