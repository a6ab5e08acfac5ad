"""The test schema pool (tests/schema_pool.py): a schema goes back only emptied and unchanged,
and only when no other session is on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from schema_pool import SchemaPool, fingerprint, others, read_layout, reset
from support import private_database

from pgq_core import JobSpec, Queue

Conn = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def own_dsn(dsn: str) -> Iterator[str]:
    """A database of this module's own: a `pgq` session another test of this process left
    behind in the shared one (the pool then drops every schema, rightly) is not one of these
    tests' sessions, and would change what they see."""
    with private_database(dsn, "pgq_pool") as own:
        yield own


@pytest.fixture
def pool(own_dsn: str) -> Iterator[SchemaPool]:
    p = SchemaPool(own_dsn, enabled=True)
    try:
        yield p
    finally:
        p.close()


def run(conn: Conn, schema: str, text: str) -> None:
    conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)))


def schemas(conn: Conn, *names: str) -> set[str]:
    rows = conn.execute(
        "SELECT nspname::text FROM pg_catalog.pg_namespace WHERE nspname = ANY(%s)", [list(names)]
    ).fetchall()
    return {str(r[0]) for r in rows}


def test_a_used_but_unchanged_schema_comes_back_empty(pool: SchemaPool, own_dsn: str) -> None:
    name = pool.take()
    with Queue.connect(own_dsn, name) as q:
        ids = [q.enqueue("q", {"n": n}) for n in range(3)]
        assert q.claim("q", 1, worker="w")
    pool.give_back(name)
    pool.settle()
    assert pool.counts.get("pooled") == 1
    assert pool.take() == name  # the same schema again
    with Queue.connect(own_dsn, name) as q:
        assert q.stats() == []
        assert q.enqueue("q", {}) == ids[0]  # identities restart
    with psycopg.connect(own_dsn) as conn:
        jobs = sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(name))
        assert conn.execute(jobs).fetchone() == (1,)
    pool.close()
    with psycopg.connect(own_dsn) as conn:
        assert schemas(conn, name) == set()  # dropped at the end


def test_emptying_leaves_the_fingerprint_as_migrated(pool: SchemaPool, own_dsn: str) -> None:
    name = pool.take()
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        layout = read_layout(conn, name)
        assert layout.filled == ["schema_version", "settings"]
        assert "jobs" in layout.emptied and "job_events" in layout.emptied
        before = fingerprint(conn, name, layout)
        with Queue.connect(own_dsn, name) as q:
            for n in range(20):
                q.enqueue("q", {"n": n})
        assert fingerprint(conn, name, layout) != before  # sequences moved
        with conn.transaction():
            reset(conn, name, layout)
        assert fingerprint(conn, name, layout) == before


def _enqueue_then_delete(conn: Conn, schema: str, own_dsn: str) -> None:
    with Queue.connect(own_dsn, schema) as q:
        q.enqueue("q", {"big": "x" * 100_000})  # its payload in the TOAST table
    run(conn, schema, "DELETE FROM {s}.jobs")


def _enqueue_rolled_back(conn: Conn, schema: str, own_dsn: str) -> None:
    with Queue.connect(own_dsn, schema) as q, psycopg.connect(own_dsn) as tx:
        q.enqueue_many([JobSpec("q", {})], conn=tx)
        tx.rollback()


#: What leaves an emptied table empty, or its sequence moved, but not as a TRUNCATE leaves it.
TOUCHES: dict[str, Callable[[Conn, str, str], None]] = {
    "rows deleted": _enqueue_then_delete,
    "insert rolled back": _enqueue_rolled_back,
    "analyze": lambda conn, schema, _: run(conn, schema, "ANALYZE {s}.queue_counts"),
    "vacuum": lambda conn, schema, _: run(conn, schema, "VACUUM {s}.workers"),
    "sequence used": lambda conn, schema, _: run(conn, schema, "SELECT nextval('{s}.jobs_id_seq')"),
}


@pytest.mark.parametrize("touch", sorted(TOUCHES))
def test_an_emptied_table_touched_but_left_empty_comes_back_as_migrated(
    pool: SchemaPool, own_dsn: str, touch: str
) -> None:
    """The reset truncates the tables a test wrote to, not all: one whose heap grew, or whose
    size figures a VACUUM or ANALYZE moved, is one of them even with no row left."""
    name = pool.take()
    migrated = pool._out[name].fingerprint
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        TOUCHES[touch](conn, name, own_dsn)
        assert fingerprint(conn, name, pool._out[name].layout) != migrated
    pool.give_back(name)
    pool.settle()
    assert pool.counts == {"migrated": 1, "pooled": 1}
    assert pool.take() == name
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        sizes = conn.execute(
            "SELECT pg_catalog.sum(pg_catalog.pg_relation_size(c.oid)"
            " + coalesce(pg_catalog.pg_relation_size(NULLIF(c.reltoastrelid, 0)), 0))"
            " FROM pg_catalog.pg_class c"
            " WHERE c.relnamespace = pg_catalog.to_regnamespace(%s) AND c.relkind = 'r'"
            " AND c.relname <> ALL(%s)",
            [name, pool._out[name].layout.filled],
        ).fetchone()
        assert sizes == (0,)  # every emptied heap, and its TOAST table, as TRUNCATE left it


CHANGES: dict[str, str] = {
    "fillfactor": "ALTER TABLE {s}.jobs SET (fillfactor = 42)",
    "grant": "GRANT SELECT ON {s}.jobs TO PUBLIC",
    "column grant": "GRANT UPDATE (payload) ON {s}.jobs TO PUBLIC",
    "schema grant": "GRANT USAGE ON SCHEMA {s} TO PUBLIC",
    "default privileges": "ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT ON TABLES TO PUBLIC",
    "settings row": "UPDATE {s}.settings SET value = 'edge'",
    "schema_version row": "DELETE FROM {s}.schema_version WHERE version = 1",
    "column default": "ALTER TABLE {s}.jobs ALTER COLUMN queue SET DEFAULT 'x'",
    "new column": "ALTER TABLE {s}.jobs ADD COLUMN extra int",
    "not null": "ALTER TABLE {s}.jobs ALTER COLUMN payload DROP NOT NULL",
    "new index": "CREATE INDEX extra ON {s}.jobs (queue, id)",
    "new table": "CREATE TABLE {s}.extra (id int)",
    "unlogged": "ALTER TABLE {s}.queue_settings SET UNLOGGED",
    "row security": "ALTER TABLE {s}.jobs ENABLE ROW LEVEL SECURITY",
    "policy": "CREATE POLICY p ON {s}.jobs USING (true)",
    "check": "ALTER TABLE {s}.jobs ADD CONSTRAINT extra CHECK (id > 0)",
    "analyze": "ANALYZE {s}.settings",
    "function setting": (
        "ALTER FUNCTION {s}.job_events_add_partitions(date, date, interval) SET work_mem = '8MB'"
    ),
    "function grant": (
        "GRANT EXECUTE ON FUNCTION {s}.job_events_add_partitions(date, date, interval) TO PUBLIC"
    ),
    "new function": "CREATE FUNCTION {s}.extra() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "sequence": "ALTER SEQUENCE {s}.jobs_id_seq INCREMENT BY 2",
    "view elsewhere": "CREATE VIEW public.{s} AS SELECT id FROM {s}.jobs",
    "partition": "DROP TABLE {s}.job_events_default",
}


def _replace_function(conn: Conn, schema: str) -> None:
    row = conn.execute(
        "SELECT pg_catalog.pg_get_functiondef(pg_catalog.format("
        "'%%I.job_events_add_partitions(date, date, interval)', %s::text)::regprocedure)",
        [schema],
    ).fetchone()
    assert row is not None
    conn.execute(str(row[0]).replace("BEGIN", "BEGIN\n  PERFORM 1;", 1).encode())


def _disable_trigger(conn: Conn, schema: str) -> None:
    row = conn.execute(
        "SELECT tgname::text FROM pg_catalog.pg_trigger"
        " WHERE tgrelid = pg_catalog.format('%%I.jobs', %s::text)::regclass AND NOT tgisinternal"
        " ORDER BY tgname LIMIT 1",
        [schema],
    ).fetchone()
    assert row is not None
    conn.execute(
        sql.SQL("ALTER TABLE {}.jobs DISABLE TRIGGER {}").format(
            sql.Identifier(schema), sql.Identifier(str(row[0]))
        )
    )


def _statement(text: str) -> Callable[[Conn, str], None]:
    return lambda conn, schema: run(conn, schema, text)


CHANGERS: dict[str, Callable[[Conn, str], None]] = {
    **{what: _statement(text) for what, text in CHANGES.items()},
    "replaced function": _replace_function,
    "disabled trigger": _disable_trigger,
}


@pytest.mark.parametrize("change", sorted(CHANGERS))
def test_a_changed_schema_is_dropped(pool: SchemaPool, own_dsn: str, change: str) -> None:
    name = pool.take()
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        CHANGERS[change](conn, name)
    pool.give_back(name)
    pool.settle()
    assert pool.counts.get("drop: fingerprint differs") == 1, pool.counts
    assert pool.free == []
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        assert schemas(conn, name) == set()
        conn.execute(sql.SQL("DROP VIEW IF EXISTS public.{}").format(sql.Identifier(name)))


def test_untouched_schema_is_kept(pool: SchemaPool, own_dsn: str) -> None:
    name = pool.take()
    pool.give_back(name)
    pool.settle()
    assert pool.counts == {"migrated": 1, "pooled": 1}
    assert pool.take() == name


SESSIONS: dict[str, tuple[str, str]] = {
    # what the other session does, and the reason the pool gives
    "query": ("SELECT count(*) FROM {s}.jobs", "another session on it"),
    "listen": ("LISTEN {channel}", "another session on it"),
    "lock": ("BEGIN; LOCK TABLE {s}.settings IN ACCESS SHARE MODE; SELECT 1", "lock on it"),
    "advisory": ("SELECT pg_catalog.pg_advisory_lock(42)", "advisory lock"),
    "worker name": ("SET application_name = 'pgq main w1'", "another session on it"),
}


@pytest.mark.parametrize("held", sorted(SESSIONS))
def test_a_schema_another_session_is_on_is_dropped(
    pool: SchemaPool, own_dsn: str, held: str
) -> None:
    name = pool.take()
    statement, reason = SESSIONS[held]
    with psycopg.connect(own_dsn, autocommit=True) as other:
        for part in statement.split("; "):
            other.execute(
                sql.SQL(part).format(s=sql.Identifier(name), channel=sql.Identifier(f"{name}_jobs"))
            )
        if held == "worker name":
            other.execute("SELECT 1")
        with psycopg.connect(own_dsn, autocommit=True) as conn:
            found = others(conn, name)
            assert found is not None and reason in found
        # What settle decides (its DROP would wait for the other session's lock).
        why = pool._reset(pool._out[name])
        assert why is not None and reason in why


def test_nobody_else_on_a_schema(pool: SchemaPool, own_dsn: str) -> None:
    name = pool.take()
    with psycopg.connect(own_dsn, autocommit=True) as conn:
        assert others(conn, name) is None


@pytest.mark.fresh_schema
def test_a_fresh_schema_is_never_pooled(schema: str, schema_pool: SchemaPool) -> None:
    assert schema not in {s.name for s in schema_pool.free}
    assert schema not in schema_pool._out  # give_back drops it at once
