"""Migrated test schemas, reused within one test process when that is provably safe.

Migrating a schema (18 migrations, 17 tables, the daily partitions ahead) costs about ten
times what emptying one does. The `schema` fixture takes a schema from this process's pool
(each xdist worker is its own process) when one is there, else migrates a fresh one; once the
test's teardown is complete, the schema goes back only if it is indistinguishable from a fresh
one, else it is dropped as before.

Invariant: a test never sees another test's rows, objects or sessions. A schema goes back to
the pool only when, after the test:
  1. no other session is on it: no other backend whose last statement names the schema, no
     pgq connection (application_name `pgq ...`; a process notifier's only for its own
     schema) left in this database, no lock (granted or awaited) by another session on one of
     its relations, no advisory lock held by any other session in this database (pgq keys
     them on strings holding the schema name), and no prepared transaction in this database;
  2. one transaction could, within a short lock_timeout, lock every table the migration left
     empty, `TRUNCATE ... RESTART IDENTITY` those a test wrote to and restart every sequence
     that handed out a value;
  3. then, in that transaction, its fingerprint (`FINGERPRINT`: every catalog row a test can
     change in the schema, the planner's statistics, sequence positions, and the full contents
     of the tables the migration filled) equals the one taken right after its migration.
Otherwise, and on any error, it is dropped. A newly migrated schema is reset once before its
fingerprint is taken (see `reset`: the index size figures), so new and reused ones are alike. A
schema is handed out again only on the UTC day it was migrated on (the daily partitions ahead
start from that day) and if its fingerprint still holds at that moment. Tests that read server
statistics that outlive a TRUNCATE (tuple counters, page positions, row versions) carry
`@pytest.mark.fresh_schema`: a fresh schema, dropped after. At the end of the session every
pooled schema is dropped. PGQ_TEST_SCHEMA_POOL=0 turns reuse off.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import psycopg
from psycopg import sql

from pgq_core import migrate

APPLICATION_NAME = "tests schema pool"
RESET_LOCK_TIMEOUT = "2s"
#: how often, and how long apart, `_reset` looks again for a closed session still leaving
#: (it is usually gone within a few milliseconds; 100 ms in all, as before)
SETTLE_WAITS = 20
SETTLE_WAIT = 0.005

#: Everything in the catalog a test could change in schema %(schema)s, in one md5. Relations
#: with their options, ACLs, persistence, row security, ownership, size figures (a TRUNCATE
#: puts a never-vacuumed table's back as they were; a VACUUM or ANALYZE does not), partition
#: bounds and inheritance; columns with types, defaults, identity, options and ACLs;
#: constraints (also those of other schemas referring to it); indexes; triggers and whether
#: they are enabled; rules and policies; functions by signature, body, settings, ACL and
#: security; types and enum labels; the schema's own ACL and owner and its default ACLs;
#: sequences with their position; the planner statistics ANALYZE stored; and the count of
#: everything that depends on one of its objects (a view elsewhere, a new object in it).
FINGERPRINT = """
WITH nsp AS (
  SELECT oid, nspowner, nspacl FROM pg_catalog.pg_namespace WHERE nspname = %(schema)s
), rels AS (
  SELECT c.* FROM pg_catalog.pg_class c WHERE c.relnamespace = (SELECT oid FROM nsp)
), procs AS (
  SELECT p.* FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM nsp)
), parts(part) AS (
  SELECT (SELECT pg_catalog.concat_ws('|', nspowner::regrole::text, nspacl::text) FROM nsp)
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', relname, relkind, reloptions::text,
           relacl::text, relrowsecurity, relforcerowsecurity, relpersistence,
           relowner::regrole::text, reltablespace, reltuples, relpages, relallvisible,
           relispartition, pg_catalog.pg_get_expr(relpartbound, oid), relreplident,
           relhasindex, relhastriggers, relhasrules, relhassubclass, relam, reloftype),
         E'\\n' ORDER BY relname) FROM rels
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', c.relname, a.attnum, a.attname,
           pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attisdropped,
           pg_catalog.pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
           a.attoptions::text, a.attacl::text, a.attcollation, a.attstorage,
           a.atthasdef, a.attislocal, a.attinhcount),
         E'\\n' ORDER BY c.relname, a.attnum)
    FROM pg_catalog.pg_attribute a
    JOIN rels c ON c.oid = a.attrelid
    LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE a.attnum > 0
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', k.conname, k.conrelid::regclass::text,
           k.contypid::regtype::text, pg_catalog.pg_get_constraintdef(k.oid), k.convalidated,
           k.condeferrable, k.condeferred, k.conislocal),
         E'\\n' ORDER BY k.conrelid::regclass::text, k.conname, k.oid)
    FROM pg_catalog.pg_constraint k
   WHERE k.connamespace = (SELECT oid FROM nsp) OR k.confrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', pg_catalog.pg_get_indexdef(i.indexrelid),
           i.indisvalid, i.indisready, i.indislive, i.indisclustered, i.indisreplident,
           i.indisprimary, i.indisunique),
         E'\\n' ORDER BY i.indexrelid::regclass::text)
    FROM pg_catalog.pg_index i WHERE i.indrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', t.tgrelid::regclass::text, t.tgname,
           t.tgenabled, t.tgfoid::regprocedure::text, pg_catalog.pg_get_triggerdef(t.oid)),
         E'\\n' ORDER BY t.tgrelid::regclass::text, t.tgname)
    FROM pg_catalog.pg_trigger t WHERE t.tgrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', r.ev_class::regclass::text, r.rulename,
           r.ev_enabled, pg_catalog.md5(r.ev_action::text)),
         E'\\n' ORDER BY r.ev_class::regclass::text, r.rulename)
    FROM pg_catalog.pg_rewrite r WHERE r.ev_class IN (SELECT oid FROM rels)
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', p.polrelid::regclass::text, p.polname,
           p.polcmd, p.polpermissive, p.polroles::text,
           pg_catalog.pg_get_expr(p.polqual, p.polrelid),
           pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid)),
         E'\\n' ORDER BY p.polrelid::regclass::text, p.polname)
    FROM pg_catalog.pg_policy p WHERE p.polrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', p.proname,
           pg_catalog.pg_get_function_identity_arguments(p.oid),
           p.prorettype::regtype::text, p.prokind, pg_catalog.md5(p.prosrc),
           p.proconfig::text, p.proacl::text, p.prosecdef, p.provolatile, p.proisstrict,
           p.proowner::regrole::text, p.prolang, p.proparallel, p.procost, p.prorows),
         E'\\n' ORDER BY p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid))
    FROM procs p
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', t.typname, t.typtype, t.typacl::text,
           t.typowner::regrole::text,
           (SELECT pg_catalog.string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
              FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid)),
         E'\\n' ORDER BY t.typname)
    FROM pg_catalog.pg_type t WHERE t.typnamespace = (SELECT oid FROM nsp)
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', d.defaclrole::regrole::text,
           d.defaclobjtype, d.defaclacl::text), E'\\n' ORDER BY d.defaclrole, d.defaclobjtype)
    FROM pg_catalog.pg_default_acl d WHERE d.defaclnamespace = (SELECT oid FROM nsp)
  UNION ALL
  SELECT pg_catalog.string_agg(pg_catalog.concat_ws('|', s.sequencename, s.data_type,
           s.start_value, s.min_value, s.max_value, s.increment_by, s.cycle, s.cache_size,
           s.last_value), E'\\n' ORDER BY s.sequencename)
    FROM pg_catalog.pg_sequences s WHERE s.schemaname = %(schema)s
  UNION ALL
  SELECT 'stats ' || pg_catalog.count(*) FROM pg_catalog.pg_stats WHERE schemaname = %(schema)s
  UNION ALL
  SELECT 'extended stats ' || pg_catalog.count(*) FROM pg_catalog.pg_statistic_ext
   WHERE stxnamespace = (SELECT oid FROM nsp) OR stxrelid IN (SELECT oid FROM rels)
  UNION ALL
  SELECT 'dependents ' || pg_catalog.count(*) FROM pg_catalog.pg_depend d
   WHERE (d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid IN (SELECT oid FROM rels))
      OR (d.refclassid = 'pg_catalog.pg_proc'::regclass AND d.refobjid IN (SELECT oid FROM procs))
      OR (d.refclassid = 'pg_catalog.pg_namespace'::regclass
          AND d.refobjid = (SELECT oid FROM nsp))
)
SELECT pg_catalog.md5(pg_catalog.string_agg(coalesce(part, '-'), E'\\n---\\n'))
       || (SELECT CASE WHEN pg_catalog.count(*) = 0 THEN ' (no such schema)' ELSE '' END
             FROM nsp)
  FROM parts
"""

#: Why a schema may not go back: sessions other than this one that are, or may still be, on it.
OTHERS = """
SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity
         WHERE pid <> pg_catalog.pg_backend_pid()
           AND (pg_catalog.strpos(query, %(schema)s) > 0
                OR (datname = pg_catalog.current_database()
                    AND pg_catalog.starts_with(application_name, 'pgq')
                    -- a process notifier names its schema: another schema's is not on it
                    AND (NOT pg_catalog.starts_with(application_name, 'pgq notifier ')
                         OR application_name = 'pgq notifier ' || %(schema)s)))),
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks l
          JOIN pg_catalog.pg_class c ON c.oid = l.relation
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = %(schema)s
           AND l.database = (SELECT oid FROM pg_catalog.pg_database
                              WHERE datname = pg_catalog.current_database())
           AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()),
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_locks l
         WHERE l.locktype = 'advisory'
           AND l.database = (SELECT oid FROM pg_catalog.pg_database
                              WHERE datname = pg_catalog.current_database())
           AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()),
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_prepared_xacts
         WHERE database = pg_catalog.current_database())
"""

#: The schema's plain and partitioned tables (partitions aside: their parent's TRUNCATE takes
#: them).
LAYOUT = """
SELECT c.relname::text FROM pg_catalog.pg_class c
 WHERE c.relnamespace = pg_catalog.to_regnamespace(%(schema)s)
   AND c.relkind IN ('r', 'p') AND NOT c.relispartition
"""

#: The plain tables and leaf partitions under the emptied tables %(tables)s that a TRUNCATE
#: would change: a row was written to them (kept or not, in the heap or its TOAST table), or a
#: VACUUM or ANALYZE moved their size figures or those of one of their indexes from what a
#: TRUNCATE leaves (relpages 0, reltuples -1, relallvisible 0).
TOUCHED = """
WITH tops AS (
  SELECT c.oid, c.relkind FROM pg_catalog.pg_class c
   WHERE c.relnamespace = pg_catalog.to_regnamespace(%(schema)s) AND c.relname = ANY(%(tables)s)
), heaps AS (
  SELECT oid FROM tops WHERE relkind = 'r'
  UNION
  SELECT tree.relid FROM tops, LATERAL pg_catalog.pg_partition_tree(tops.oid) tree
   WHERE tops.relkind = 'p' AND tree.isleaf
)
SELECT c.relname::text FROM heaps JOIN pg_catalog.pg_class c ON c.oid = heaps.oid
 -- the CASE keeps pg_relation_size (it locks the relation it sizes) off other schemas' rows,
 -- whatever the plan: another worker's reset holds those locked, and PG 15 deadlocked on them
 WHERE CASE WHEN c.relnamespace = pg_catalog.to_regnamespace(%(schema)s) THEN
         pg_catalog.pg_relation_size(c.oid) > 0
         OR (c.relpages, c.reltuples, c.relallvisible) <> (0, -1, 0)
         OR (c.reltoastrelid <> 0 AND pg_catalog.pg_relation_size(c.reltoastrelid) > 0)
         OR EXISTS (SELECT FROM pg_catalog.pg_index i
                      JOIN pg_catalog.pg_class x ON x.oid = i.indexrelid
                     WHERE i.indrelid = c.oid
                       AND (x.relpages, x.reltuples, x.relallvisible) <> (0, -1, 0))
       ELSE false END
 ORDER BY 1
"""

#: The schema's sequences that handed out a value since they were created or restarted.
CALLED = """
SELECT c.relname::text FROM pg_catalog.pg_class c
 WHERE c.relkind = 'S'
   AND CASE WHEN c.relnamespace = pg_catalog.to_regnamespace(%(schema)s)
            THEN pg_catalog.pg_sequence_last_value(c.oid) IS NOT NULL ELSE false END
 ORDER BY 1
"""

TODAY = "SELECT (pg_catalog.now() AT TIME ZONE 'UTC')::date"


@dataclass
class Layout:
    """What a freshly migrated schema holds: tables the migration filled (kept as they are
    and fingerprinted in full) and tables it left empty (truncated)."""

    filled: list[str]
    emptied: list[str]


@dataclass
class Migrated:
    name: str
    day: date
    layout: Layout
    fingerprint: str


@dataclass
class SchemaPool:
    """This process's reusable schemas (see the module's docstring)."""

    dsn: str
    enabled: bool = field(default_factory=lambda: os.environ.get("PGQ_TEST_SCHEMA_POOL") != "0")
    free: list[Migrated] = field(default_factory=list)
    returned: list[Migrated] = field(default_factory=list)
    #: What happened, for whoever wonders: migrated, reused, pooled, and each reason to drop.
    counts: dict[str, int] = field(default_factory=dict)
    _conn: psycopg.Connection[Any] | None = None
    _out: dict[str, Migrated] = field(default_factory=dict)

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def conn(self) -> psycopg.Connection[Any]:
        """The pool's own connection (autocommit, idle between calls); a new one when the old
        one is gone (a test may restart or cut off the server)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            try:
                self._conn.execute("SELECT 1")
                return self._conn
            except psycopg.Error:
                self._conn.close()
        self._conn = psycopg.connect(self.dsn, autocommit=True, application_name=APPLICATION_NAME)
        return self._conn

    def take(self, fresh: bool = False) -> str:
        """A schema no test has touched since it was migrated or emptied."""
        if not fresh and self.enabled:
            while self.free:
                schema = self.free.pop()
                try:
                    conn = self.conn()
                    today = conn.execute(TODAY).fetchone()
                    if today is None or today[0] != schema.day:
                        self._drop(schema.name, "drop: migrated on another day")
                        continue
                    if fingerprint(conn, schema.name, schema.layout) != schema.fingerprint:
                        self._drop(schema.name, "drop: changed while pooled")
                        continue
                except psycopg.Error:
                    self._drop(schema.name, "drop: error when taken")
                    continue
                self._count("reused")
                self._out[schema.name] = schema
                return schema.name
        schema = self._migrate(emptied=not fresh and self.enabled)
        if not fresh:
            self._out[schema.name] = schema
        return schema.name

    def give_back(self, name: str) -> None:
        """The test holding `name` is over: settle it once its teardown is complete (`settle`);
        a fresh_schema test's schema (never handed out for reuse) is dropped now."""
        schema = self._out.pop(name, None)
        if schema is None or not self.enabled:
            self._drop(name, "drop: fresh_schema" if schema is None else "drop: pool off")
        else:
            self.returned.append(schema)

    def settle(self) -> None:
        """Empty and pool, or drop, every schema given back (after the test's teardown: its
        own connections are closed by then)."""
        while self.returned:
            schema = self.returned.pop()
            try:
                reason = self._reset(schema)
            except psycopg.Error as exc:
                reason = f"drop: {type(exc).__name__}"
            if reason is None:
                self._count("pooled")
                self.free.append(schema)
            else:
                self._drop(schema.name, reason)

    def close(self) -> None:
        """Drop every schema this pool still knows of; close its connection."""
        for schema in [*self.returned, *self.free, *self._out.values()]:
            self._drop(schema.name, "drop: session end")
        if log := os.environ.get("PGQ_TEST_SCHEMA_POOL_LOG"):  # what happened, for the curious
            with open(log, "a") as out:
                out.write(f"{os.getpid()} {sorted(self.counts.items())}\n")
        self.returned.clear()
        self.free.clear()
        self._out.clear()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _migrate(self, emptied: bool) -> Migrated:
        """A freshly migrated schema; `emptied`: reset once as well (see `reset`), so that a
        fresh schema and a reused one are alike down to the index size figures."""
        from secrets import token_hex

        name = f"t_{token_hex(5)}"
        conn = self.conn()
        migrate(conn, name)
        layout = read_layout(conn, name)
        if emptied:
            with conn.transaction():
                reset(conn, name, layout)
        today = conn.execute(TODAY).fetchone()
        assert today is not None
        self._count("migrated")
        return Migrated(name, today[0], layout, fingerprint(conn, name, layout))

    def _reset(self, schema: Migrated) -> str | None:
        """Empty `schema` in one transaction if nobody else is on it and, emptied, it matches
        its fingerprint; None when it may go back, else why not (rolled back)."""
        conn = self.conn()
        # A client's closed connection leaves pg_stat_activity a moment later: a few short
        # waits for such sessions to go cost less than a new migration.
        for _ in range(SETTLE_WAITS):
            if others(conn, schema.name) != "drop: another session on it":
                break
            time.sleep(SETTLE_WAIT)
        with conn.transaction(force_rollback=True) as tx:
            conn.execute(
                "SELECT pg_catalog.set_config('lock_timeout', %s, true)", [RESET_LOCK_TIMEOUT]
            )
            if reason := others(conn, schema.name):
                return reason
            reset(conn, schema.name, schema.layout)
            # Sessions that came (and locks taken) before the TRUNCATE's locks were granted.
            if reason := others(conn, schema.name):
                return reason
            if fingerprint(conn, schema.name, schema.layout) != schema.fingerprint:
                return "drop: fingerprint differs"
            tx.force_rollback = False
        return None

    def _drop(self, name: str, reason: str) -> None:
        self._count(reason)
        try:
            self.conn().execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
            )
        except psycopg.Error:
            # Once more on a new connection (this one may have been cut off mid-statement).
            if self._conn is not None:
                self._conn.close()
            self.conn().execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
            )


def read_layout(conn: psycopg.Connection[Any], schema: str) -> Layout:
    rows = conn.execute(LAYOUT, {"schema": schema}).fetchall()
    tables = sorted(str(name) for (name,) in rows)
    ident = sql.Identifier(schema)
    probe = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {} WHERE EXISTS (SELECT FROM {}.{})").format(
            sql.Literal(table), ident, sql.Identifier(table)
        )
        for table in tables
    )
    filled = sorted(str(row[0]) for row in conn.execute(probe).fetchall())
    return Layout(filled, [t for t in tables if t not in filled])


def fingerprint(conn: psycopg.Connection[Any], schema: str, layout: Layout) -> str:
    """The catalog's fingerprint (FINGERPRINT) and each filled table's contents, as text."""
    ident = sql.Identifier(schema)
    contents = [
        sql.SQL(
            "(SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(t::text, E'\\n'"
            " ORDER BY t::text), '')) FROM {}.{} t)"
        ).format(ident, sql.Identifier(table))
        for table in layout.filled
    ]
    query = sql.SQL("SELECT ({}), {}").format(
        sql.SQL(FINGERPRINT), sql.SQL(", ").join(contents) if contents else sql.SQL("''")
    )
    row = conn.execute(query, {"schema": schema}).fetchone()
    assert row is not None
    return " ".join(str(value) for value in row)


def others(conn: psycopg.Connection[Any], schema: str) -> str | None:
    """Why another session may still be on `schema` (see OTHERS), or None."""
    row = conn.execute(OTHERS, {"schema": schema}).fetchone()
    assert row is not None
    sessions, locks, advisory, prepared = (int(v) for v in row)
    if sessions:
        return "drop: another session on it"
    if locks:
        return "drop: another session's lock on it"
    if advisory:
        return "drop: another session's advisory lock"
    if prepared:
        return "drop: a prepared transaction"
    return None


def reset(conn: psycopg.Connection[Any], schema: str, layout: Layout) -> None:
    """Empty every table the migration left empty and restart every sequence (in the caller's
    transaction).

    A TRUNCATE leaves what a migration leaves but for one thing: the size figures in pg_class
    of the emptied tables' indexes (relpages 0, reltuples -1 where CREATE INDEX leaves 1 and 0;
    the planner reads them only for a partial index, before any VACUUM or ANALYZE). No command
    short of VACUUM or ANALYZE (which leave their own traces) puts them back, so every pooled
    schema is reset once right after its migration, and any schema the fixture hands out, new
    or reused, is in exactly this state.

    Every emptied table is locked as a TRUNCATE of them all would lock it, but only the plain
    tables and leaf partitions that are not in that state any more (`TOUCHED`) are truncated,
    and only the sequences that handed out a value are restarted: a test writes to a few of
    them, and truncating an untouched one (a new file for it and each of its indexes) changes
    nothing a test can see."""
    ident = sql.Identifier(schema)
    if layout.emptied:
        conn.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                sql.SQL(", ").join(sql.Identifier(schema, t) for t in layout.emptied)
            )
        )
        rows = conn.execute(TOUCHED, {"schema": schema, "tables": layout.emptied}).fetchall()
        if rows:
            conn.execute(
                sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                    sql.SQL(", ").join(sql.Identifier(schema, str(r[0])) for r in rows)
                )
            )
    called = conn.execute(CALLED, {"schema": schema}).fetchall()
    for (sequence,) in called:
        conn.execute(
            sql.SQL("ALTER SEQUENCE {}.{} RESTART").format(ident, sql.Identifier(str(sequence)))
        )
