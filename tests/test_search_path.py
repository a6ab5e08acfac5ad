"""Nothing pgq runs resolves a name outside pg_catalog and its own schema.

A role with only CREATE on `public` plants look-alikes of every function and operator name
pgq's SQL uses (tests/hostile_sql.py reads the names from the SQL), each recording that it
ran. A superuser with the default search_path (`"$user", public`) then migrates (an install of
version 9 and a fresh one), enqueues, claims, fails with retry, reaps, prunes, makes the
history's partitions, requeues, kills, runs a worker and the CLI: none of the planted objects
may run. Each test gets a database of its own, so the look-alikes reach no other test.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import secrets
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from hostile_sql import Planter, pgq_sql_texts, runs, used_names
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgq_bench.soak import claim_latency
from pgq_cli.cli import main
from pgq_core import JobSpec, PgqError, Queue, migrate, ops
from pgq_core.filters import JobFilter, parse_payload_match
from pgq_core.migrate import migrations
from pgq_core.worker import JobContext, Worker

LEASE = timedelta(seconds=30)


@pytest.fixture
def hostile(dsn: str, own_database: str) -> Iterator[tuple[str, str]]:
    """(dsn of a database of this test's own, the name of a role with CREATE on its public)."""
    name = f"pgq_sp_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    try:
        with psycopg.connect(own_database, autocommit=True) as conn:
            conn.execute(
                sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(name))
            )
        yield own_database, name
    finally:
        with psycopg.connect(own_database, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


class Attempts:
    """Runs each step, noting the ones that raised (a planted object may break a statement
    instead of running: resolved, its wrong type fails the statement)."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, label: str, step: Callable[[], Any]) -> Any:
        try:
            return step()
        except (PgqError, psycopg.Error) as exc:
            self.failed.append(f"{label}: {type(exc).__name__}: {exc}")
            return None


def _run(conn: Any, schema: str, text: str, *params: Any) -> list[tuple[Any, ...]]:
    conn.execute("SET search_path = pg_catalog")
    try:
        cur = conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params or None)
        return cur.fetchall() if cur.description else []
    finally:
        conn.execute("RESET search_path")


def test_the_names_come_from_pgqs_sql() -> None:
    functions, operators = used_names(pgq_sql_texts())
    assert {"power", "generate_series", "pg_notify", "make_interval", "unnest"} <= functions
    assert {"||", "=", "<", "+", "-", "%", "~~*"} <= operators


#: Words followed by "(" that are SQL syntax, not a function looked up on the search_path.
SYNTAX = {
    "all", "and", "any", "array", "as", "cast", "coalesce", "conflict", "else", "exists",
    "extract", "filter", "from", "greatest", "group", "in", "lateral", "least", "materialized",
    "not", "nullif", "on", "or", "over", "rows", "select", "substring", "then", "using",
    "values", "when", "where", "with",
    "insert", "update",  # a GRANT's column list (roles.sql)
}


def test_every_call_with_arguments_in_pgqs_statements_is_qualified() -> None:
    """The statements pgq's worker, queue and CLI run (pgq_core/sql/*.sql and the SQL of pgq_core's
    modules; not the migrations, which run under a pinned search_path) name each function
    with arguments by schema: pg_catalog's or pgq's. An unqualified call resolves through the
    caller's search_path, where a look-alike with a closer type match wins (polymorphic ones
    such as unnest(anyarray) or count("any") never match exactly)."""
    texts = [t for t in pgq_sql_texts() if "-- pgq schema, version" not in t]
    unqualified: set[str] = set()
    for text in texts:
        unqualified |= _unqualified_names(text)
    assert unqualified == set()


def test_no_planted_look_alike_runs(hostile: tuple[str, str], monkeypatch: Any) -> None:
    db, role = hostile
    attempt = Attempts()
    with psycopg.connect(db, autocommit=True) as conn:
        with monkeypatch.context() as m:
            module = importlib.import_module("pgq_core.migrate")
            m.setattr(module, "migrations", lambda: migrations()[:9])
            migrate(conn, "old")
        conn.execute("""INSERT INTO old.jobs (queue, payload) VALUES ('q', '{"before": 1}')""")
        planted = Planter(conn, role).plant(*used_names(pgq_sql_texts()))
        assert planted > 1000
        search_path = conn.execute("SHOW search_path").fetchone()
        assert search_path is not None and "public" in search_path[0]

        attempt("migrate an install of version 9", lambda: migrate(conn, "old"))
        attempt("migrate a fresh schema", lambda: migrate(conn, "s"))
    _queue_steps(db, "s", attempt)
    _queue_steps(db, "old", attempt)
    _worker_steps(db, "s", attempt)
    _cli_steps(db, "s", attempt)

    with psycopg.connect(db, autocommit=True) as conn:
        moved, logged = runs(conn)
        versions = _run(conn, "old", "SELECT max(version) FROM {s}.schema_version")
    failed = "\n".join(attempt.failed)
    assert (moved, logged) == ([], []), f"planted objects ran: {moved} {logged}\n{failed}"
    assert attempt.failed == [], failed
    assert versions == [(migrations()[-1][0],)]


def _queue_steps(db: str, schema: str, attempt: Attempts) -> None:
    with Queue.connect(db, schema) as queue:
        conn = queue.conn
        attempt("set_notify edge", lambda: queue.set_notify("edge"))
        attempt("enqueue one", lambda: queue.enqueue("q", {"n": 1}))
        attempt("set_notify always", lambda: queue.set_notify("always"))
        attempt(
            "enqueue many",
            lambda: queue.enqueue_many(
                [
                    JobSpec("q", {"n": 2}, unique_key="k"),
                    JobSpec("q", {"n": 3}, unique_key="k"),
                    JobSpec("q", {"n": 4}, delay=timedelta(seconds=1)),
                    JobSpec("q", {"n": 5}, run_at=datetime.now(UTC), max_attempts=1),
                    JobSpec("q", {"n": 6}, priority=3),
                ]
            ),
        )
        jobs = attempt("claim", lambda: queue.claim("q", 10, LEASE, "w")) or []
        for job in jobs[:1]:
            attempt("heartbeat", lambda j=job: queue.heartbeat(j.id, j.fence))
            attempt(
                "complete",
                lambda j=job: queue.complete(j.id, j.fence, worker="w", result={"ok": 1}),
            )
        for job in jobs[1:]:
            attempt("fail", lambda j=job: queue.fail(j.id, j.fence, "boom 42", worker="w"))
        attempt("enqueue to hand back", lambda: queue.enqueue_many([JobSpec("h", {})] * 2))
        handed = attempt("claim to hand back", lambda: queue.claim("h", 2, LEASE, "w2")) or []
        pairs = [(j.id, j.fence) for j in handed]
        attempt("extend_leases", lambda: queue.run(ops.extend_leases(pairs, "dash")))
        attempt("hand_back", lambda: queue.run(ops.hand_back(pairs[:1], "w2", "bye")))
        attempt("hand_back_orphans", lambda: queue.run(ops.hand_back_orphans([], "w2")))
        attempt("record_stale", lambda: queue.run(ops.record_stale(pairs, "w2", "complete")))
        attempt("job_preview", lambda: queue.run(ops.job_preview(queue.enqueue("p", {}), 10)))
        live = JobFilter(statuses=("ready", "dead"), payload=(parse_payload_match("n=2"),))
        attempt("jobs_filtered_live", lambda: queue.jobs_matching(live))
        attempt("pause", lambda: queue.pause("lim", "why"))
        attempt("resume", lambda: queue.resume("lim"))
        attempt("set_limit", lambda: queue.set_limit("lim", 1))
        attempt("enqueue limited", lambda: queue.enqueue("lim", {}))
        lease = timedelta(milliseconds=50)
        attempt("claim limited", lambda: queue.claim("lim", 5, lease, "w"))
        time.sleep(0.2)
        attempt("reap", lambda: queue.reap())
        attempt("run(hand_back)", lambda: queue.release_many([], "w", "x"))
        attempt("kill", lambda: queue.kill([j.id for j in jobs]))
        attempt("requeue", lambda: queue.requeue([j.id for j in jobs[:1]]))
        attempt("requeue dead", lambda: queue.requeue_dead("q"))
        attempt("requeue report", lambda: queue.requeue_report([j.id for j in jobs]))
        every = JobFilter(
            queue="q",
            statuses=("dead", "failed"),
            error="boom",
            payload=(parse_payload_match("n=2"), parse_payload_match("n=x")),
            older_than=timedelta(seconds=0),
            newer_than=timedelta(days=1),
        )
        attempt("jobs_matching", lambda: queue.jobs_matching(every))
        attempt("count_matching", lambda: queue.count_matching(every, "requeue"))
        for action in ("requeue", "kill", "delete"):
            attempt(f"bulk {action}", lambda a=action: queue.bulk(a, JobFilter(queue="q")))
        attempt(
            "add schedule",
            lambda: queue.add_schedule("every", "q", "* * * * *", {"s": 1}),
        )
        attempt("run schedule", lambda: queue.run_schedule("every"))
        attempt(
            "backdate schedule",
            lambda: _run(
                conn, schema, "UPDATE {s}.schedules SET created_at = now() - interval '1 hour'"
            ),
        )
        slot = datetime.now(UTC).replace(second=0, microsecond=0)
        attempt("enqueue_due_slot", lambda: queue.run(ops.enqueue_due_slot("every", slot, "w")))
        attempt("list schedules", queue.list_schedules)
        for label, read in (
            ("stats", queue.stats), ("leases", queue.leases), ("jobs", queue.jobs),
            ("errors", queue.errors), ("health", queue.health), ("settings", queue.settings),
            ("lease_summary", queue.lease_summary), ("activity", queue.activity),
            ("table_sizes", queue.table_sizes),
            ("claim_latency", lambda: claim_latency(queue, datetime.now(UTC) - LEASE)),
            ("latency", queue.latency),
            ("latency of named queues", lambda: queue.latency(queues=["q"])),
            ("health stuck, no floor", lambda: queue.health(stuck_floor=timedelta(0))),
            ("stuck_counts", lambda: queue.stuck_counts(floor=timedelta(0))),
            ("job", lambda: queue.job(queue.enqueue("q", {}))),
            ("history", lambda: queue.history(queue.enqueue("q", {}))),
        ):
            attempt(label, read)
        attempt(
            "old partitions",
            lambda: _run(
                conn,
                schema,
                "SELECT {s}.job_events_add_partitions(current_date - 40, current_date - 38);"
                " INSERT INTO {s}.job_events (job_id, event, fence, at)"
                " SELECT id, 'old', 0, now() - interval '39 days' FROM {s}.jobs",
            ),
        )
        attempt("prune", lambda: queue.prune_report(timedelta(days=7)))
        attempt("prune all done", lambda: queue.prune(timedelta(0)))
        attempt("ensure partitions", queue.ensure_partitions)


def _worker_steps(db: str, schema: str, attempt: Attempts) -> None:
    seen: list[int] = []

    async def handler(ctx: JobContext) -> None:
        seen.append(ctx.id)
        if ctx.attempts == 1:
            raise RuntimeError(f"first attempt of {ctx.id} fails")

    with Queue.connect(db, schema) as queue:
        attempt(
            "enqueue for the worker",
            lambda: queue.enqueue_many([JobSpec("w", {"i": i}) for i in range(5)]),
        )
    for run in ("first", "second"):
        worker = Worker(
            db, ["w"], handler, schema=schema, burst=True, retry_base=0.01, poll_interval=0.05,
            reap_interval=0.1,
        )
        attempt(f"worker {run} burst", lambda w=worker: asyncio.run(asyncio.wait_for(w.run(), 60)))
        time.sleep(0.2)
    with psycopg.connect(db, autocommit=True) as conn:
        query = "SELECT status, count(*) FROM {s}.jobs WHERE queue = 'w' GROUP BY 1"
        states = attempt("worker's jobs", lambda: _run(conn, schema, query)) or []
    if dict(states) != {"done": 5} or len(seen) != 10:
        attempt.failed.append(f"worker: jobs {states}, {len(seen)} runs")


def _cli_steps(db: str, schema: str, attempt: Attempts) -> None:
    runner = CliRunner()
    base = ["--dsn", db, "--schema", schema]
    for args in (
        ["migrate"],
        ["enqueue", "c", '{"x": 1}'],
        ["kill", "--queue", "c"],
        ["requeue", "--dead", "--queue", "c"],
        ["prune", "--older-than", "0s"],
        ["stats"],
        ["errors"],
    ):
        result = runner.invoke(main, [*base, *args])
        if result.exit_code != 0:
            attempt.failed.append(f"pgq {' '.join(args)}: exit {result.exit_code}: {result.output}")


REPORTED = {
    # the jobs trigger's channel: TG_TABLE_SCHEMA || '_jobs' is name || unknown
    "enqueue": (
        "CREATE FUNCTION public.hostile_cat(name, name) RETURNS text LANGUAGE sql"
        " AS $$INSERT INTO public.ran VALUES ('||(name, name)');"
        " SELECT $1::text OPERATOR(pg_catalog.||) $2::text$$;"
        " CREATE OPERATOR public.|| (LEFTARG = name, RIGHTARG = name,"
        " FUNCTION = public.hostile_cat)"
    ),
    # settle_fail's backoff: power(2, j.attempts) is (integer, integer)
    "fail with retry": (
        "CREATE FUNCTION public.power(integer, integer) RETURNS double precision LANGUAGE sql"
        " AS $$INSERT INTO public.ran VALUES ('power(integer, integer)');"
        " SELECT pg_catalog.power($1::float8, $2::float8)$$"
    ),
    # the partition upkeep: generate_series(date, date, interval)
    "ensure partitions": (
        "CREATE FUNCTION public.generate_series(date, date, interval) RETURNS SETOF date"
        " LANGUAGE sql AS $$INSERT INTO public.ran VALUES ('generate_series(date, date,"
        " interval)'); SELECT g::date FROM pg_catalog.generate_series($1::timestamp,"
        " $2::timestamp, $3) g$$"
    ),
}


@pytest.mark.parametrize("step", sorted(REPORTED))
def test_the_reported_look_alikes_never_run(hostile: tuple[str, str], step: str) -> None:
    """The three of the report, each alone and behaving as pg_catalog's would (so the step
    succeeds whether it ran or not): it must not run."""
    db, role = hostile
    with psycopg.connect(db, autocommit=True) as conn:
        migrate(conn, "s")
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        conn.execute("CREATE TABLE public.ran (what text); GRANT INSERT ON public.ran TO PUBLIC")
        conn.execute(REPORTED[step])
        conn.execute("RESET ROLE")
        with Queue(conn, "s") as queue:
            job_id = queue.enqueue("q", {})
            if step == "fail with retry":
                worker = Worker(db, ["q"], _fails, schema="s", burst=True, retry_base=10.0)
                asyncio.run(asyncio.wait_for(worker.run(), 60))
                assert queue.job(job_id).status == "ready"
                assert queue.job(job_id).attempts == 1
            elif step == "ensure partitions":
                _run(conn, "s", "DROP TABLE {s}.job_events_p" + f"{datetime.now(UTC):%Y%m%d}")
                assert any(day.outcome == "created" for day in queue.ensure_partitions())
        ran = conn.execute("SELECT what FROM public.ran").fetchall()
    assert ran == []


async def _fails(ctx: JobContext) -> None:
    raise RuntimeError("fails")


def test_every_function_pgq_creates_pins_search_path_or_qualifies_every_name(
    schema: str, conn: Any
) -> None:
    """Procedural functions pin `pg_catalog, <schema>, pg_temp`; a SQL function may instead
    name every function it calls by schema and use no operator (so it stays inlinable)."""
    rows = conn.execute(
        "SELECT p.oid::regprocedure::text, p.proconfig, l.lanname, p.prosrc FROM pg_proc p"
        " JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.pronamespace = %s::regnamespace ORDER BY 1",
        [schema],
    ).fetchall()
    assert len(rows) >= 8
    pinned = f"search_path=pg_catalog, {schema}, pg_temp"
    unsafe = [
        name
        for name, config, language, body in rows
        if pinned not in (config or [])
        and not (language == "sql" and not _unqualified_names(body) and not _operators(body))
    ]
    assert unsafe == []
    assert sum(pinned in (config or []) for _, config, _, _ in rows) >= 6


def _code(text: str) -> str:
    return re.sub(r"--[^\n]*|E?'(?:[^']|'')*'", " ", text).lower()


def _unqualified_names(text: str) -> set[str]:
    code = _code(text)
    found: set[str] = set()
    for match in re.finditer(r'(?<![.\w"$%])([a-z_][a-z0-9_]*)\s*\((?!\s*\*?\s*\))', code):
        before = code[: match.start(1)].rstrip()
        if match.group(1) not in SYNTAX and not before.endswith((" as", "\nas")):
            found.add(match.group(1))
    return found


def _operators(text: str) -> list[str]:
    return re.findall(r"[-+*/<>=~!@#%^&|`?]+", _code(text))


def test_the_database_is_the_tests_own(hostile: tuple[str, str], dsn: str) -> None:
    assert conninfo_to_dict(hostile[0])["dbname"] != conninfo_to_dict(dsn).get("dbname")
