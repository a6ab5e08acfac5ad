"""pgq's roles (`pgq roles`, sql/roles.sql, migration 28), each run against its own limits by
a login that holds it and nothing else: what the role is for works, and what it is not for
fails with insufficient_privilege (or one `pgq: error: permission denied` line), never
succeeds. The roles get a prefix of the test's own (no collision across xdist workers) and
are dropped after it."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support import ENV, error_line, make_worker, running, statuses, until

from pgq_core import AsyncQueue, JobSpec, PgqError, Queue, migrate, ops, roles
from pgq_core.exporter import QueueCollector
from pgq_tui.source import PgSource

Login = Callable[[str], str]
TESTS = Path(__file__).parent


def _may_create_roles(dsn: str) -> str | None:
    """Why the test server's user may not create roles, or None."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    if row and row[0]:
        return None
    return "the test DSN's user may not create roles (needs SUPERUSER or CREATEROLE)"


@pytest.fixture
def prefix(dsn: str, schema: str) -> Iterator[str]:
    """The test's own role prefix; pgq's four roles made with it, dropped after."""
    if (why := _may_create_roles(dsn)) is not None:
        pytest.skip(why)
    mine = f"t{secrets.token_hex(5)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        made = roles.create(admin, schema, prefix=mine)
    try:
        yield mine
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            for _, role, _ in made:
                drop(admin, role)


def drop(admin: psycopg.Connection[Any], role: str) -> None:
    ident = sql.Identifier(role)
    admin.execute(sql.SQL("DROP OWNED BY {}").format(ident))
    admin.execute(sql.SQL("DROP ROLE {}").format(ident))


@pytest.fixture
def login(dsn: str, schema: str, prefix: str) -> Iterator[Login]:
    """login(kind): the DSN of a new LOGIN role (with a password: the embedded server takes
    no login without one) holding pgq's `kind` role only."""
    made: list[str] = []

    def make(kind: str) -> str:
        name, password = f"{prefix}_{kind}_{len(made)}", secrets.token_hex(8)
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(name), sql.Literal(password)
                )
            )
            made.append(name)
            roles.grant(admin, schema, kind, name, prefix)
        return make_conninfo(dsn, user=name, password=password)

    yield make
    with psycopg.connect(dsn, autocommit=True) as admin:
        for name in made:
            admin.execute(  # a login's sessions end before it is dropped
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [name],
            )
            drop(admin, name)


def cli(dsn: str, schema: str, *args: str) -> Result:
    from pgq_cli.cli import main

    return CliRunner(env=ENV).invoke(main, ["--dsn", dsn, "--schema", schema, *args])


def refused(conn: psycopg.Connection[Any], query: sql.Composable, *params: Any) -> str:
    """The message of `query` failing with insufficient_privilege (the test fails if it ran)."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
        conn.execute(query, list(params) or None)
    conn.rollback()
    return str(caught.value)


def q(schema: str, text: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def assert_refused(result: Result) -> None:
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1].startswith("pgq: error: permission denied"), (
        result.output
    )
    assert "Traceback" not in result.output


# ------------------------------------------------------------------------------ producer


def test_a_producer_enqueues_in_every_form(queue: Queue, schema: str, login: Login) -> None:
    dsn = login("producer")
    parent = queue.enqueue("billing", {"secret": 1})
    later = datetime.now(UTC) + timedelta(hours=1)
    with Queue.connect(dsn, schema) as producer:
        one = producer.enqueue("q", {"a": 1}, priority=5, run_at=later, max_attempts=3)
        keyed = producer.enqueue("q", {"k": 1}, unique_key="k1")
        assert producer.enqueue("q", {"k": 2}, unique_key="k1") == keyed
        many = producer.enqueue_many(
            [JobSpec("q", {"n": n}, delay=timedelta(seconds=n)) for n in range(3)]
        )
        child = producer.enqueue("shipping", {"c": 1}, depends_on=[parent])
        own_child = producer.enqueue("q", {"c": 2}, depends_on=[one, parent])
    assert len(many) == 3
    rows = {j.id: j for j in queue.jobs(limit=20)}
    assert rows[one].status == "ready" and rows[one].priority == 5
    assert rows[child].status == "waiting" and rows[own_child].status == "waiting"
    assert queue.job(child).payload == {"c": 1}
    queue.kill([parent])  # a dead parent: its next dependent is enqueued dead, naming it
    with Queue.connect(dsn, schema) as producer:
        doomed = producer.enqueue("q", {}, depends_on=[parent])
    detail = queue.job(doomed)
    assert detail.status == "dead" and detail.last_error == f"parent {parent} died"
    group = queue.conn.execute(
        q(schema, "SELECT error_group, {s}.error_group(last_error) FROM {s}.jobs WHERE id = %s"),
        [doomed],
    ).fetchone()
    assert group is not None and group[0] == group[1] is not None, "set after the insert"


def test_pgq_enqueue_as_a_producer(schema: str, login: Login, queue: Queue, tmp_path: Path) -> None:
    """One job, and a file: without INSERT on jobs.id the file skips COPY for enqueue_many."""
    dsn = login("producer")
    done = cli(dsn, schema, "enqueue", "q", '{"x": 1}', "--priority", "2")
    assert done.exit_code == 0, done.output
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("".join(f'{{"line": {n}}}\n' for n in range(5)))
    filed = cli(dsn, schema, "enqueue", "f", "--file", str(lines))
    assert filed.exit_code == 0, filed.output
    assert queue.job(queue.jobs(queue="q", limit=5)[0].id).payload == {"x": 1}
    assert sorted(queue.job(j.id).payload["line"] for j in queue.jobs(queue="f", limit=9)) == [
        0,
        1,
        2,
        3,
        4,
    ]


def test_a_producer_reads_no_payload_and_writes_no_lease(
    queue: Queue, schema: str, login: Login
) -> None:
    other = queue.enqueue("billing", {"card": "4242"})
    with psycopg.connect(login("producer")) as conn:
        refused(conn, q(schema, "SELECT payload FROM {s}.jobs"))
        refused(conn, q(schema, "SELECT result FROM {s}.jobs"))
        refused(conn, q(schema, "SELECT * FROM {s}.jobs"))
        said = refused(
            conn,
            q(schema, "INSERT INTO {s}.jobs (queue, payload, status) VALUES ('q', '{{}}', %s)"),
            "running",
        )
        assert "may not insert a job as running" in said
        refused(
            conn,
            q(schema, "INSERT INTO {s}.jobs (queue, payload, status) VALUES ('q', '{{}}', %s)"),
            "done",
        )
        refused(
            conn,
            q(
                schema,
                "INSERT INTO {s}.jobs (queue, payload, status, last_error)"
                " VALUES ('q', '{{}}', 'dead', 'made up')",
            ),
        )
        for column, value in (
            ("lease_until", "now() + interval '100 years'"),
            ("fence", "99"),
            ("attempts", "1"),
            ("worker", "'me'"),
            ("id", "1000000"),
        ):
            refused(
                conn,
                sql.SQL("INSERT INTO {}.jobs (queue, payload, {}) VALUES ('q', '{{}}', {})").format(
                    sql.Identifier(schema), sql.Identifier(column), sql.SQL(value)
                ),
            )
        # no row lock on any job: with one, the claims would skip every row it holds
        refused(conn, q(schema, "SELECT id FROM {s}.jobs FOR UPDATE"))
        refused(conn, q(schema, "SELECT id FROM {s}.jobs FOR KEY SHARE"))
        refused(conn, q(schema, "UPDATE {s}.jobs SET run_at = now()"))
        refused(conn, q(schema, "DELETE FROM {s}.jobs"))
        refused(conn, q(schema, "UPDATE {s}.queue_counts SET done = 0"))
        refused(conn, q(schema, "SELECT {s}.claim_allowance('q', 1, '{{}}')"))
        # history only for its own job, as its enqueue writes it
        refused(
            conn,
            q(
                schema,
                "INSERT INTO {s}.job_events (job_id, event, fence) VALUES (%s, 'completed', 1)",
            ),
            other,
        )
    with (
        Queue.connect(login("producer"), schema) as producer,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        producer.enqueue_copy([JobSpec("q", {})])
    assert queue.job(other).status == "ready"


def test_a_producer_cannot_make_another_queues_job_wait_on_its_own(
    queue: Queue, schema: str, login: Login
) -> None:
    """The break this was filed for: an edge from `shipping`'s child to the producer's job,
    made afterwards, would count the child off when the producer's job is done."""
    billing = queue.enqueue("billing", {})
    child = queue.enqueue("shipping", {}, depends_on=[billing])
    dsn = login("producer")
    with Queue.connect(dsn, schema) as producer:
        mine = producer.enqueue("mine", {})
    with psycopg.connect(dsn) as conn:
        said = refused(
            conn,
            q(schema, "INSERT INTO {s}.job_deps (child, parent) VALUES (%s, %s)"),
            child,
            mine,
        )
        assert f"may not add a dependency to job {child}" in said
        # nor in the transaction of an enqueue of its own: the child must be a job it wrote
        conn.execute(q(schema, "INSERT INTO {s}.jobs (queue, payload) VALUES ('mine', '{{}}')"))
        refused(
            conn,
            q(schema, "INSERT INTO {s}.job_deps (child, parent) VALUES (%s, %s)"),
            child,
            mine,
        )
    assert [(d.id, d.status) for d in queue.with_links(queue.job(child)).parents] == [
        (billing, "ready")
    ]
    assert queue.job(child).status == "waiting"


def test_a_producers_copy_and_one_statement_keep_the_status_check(
    queue: Queue, schema: str, login: Login
) -> None:
    """The check runs after the row (migration 38, so COPY inserts in batches) and refuses
    what it refused before: a running job by COPY, and a dead job naming a parent that is not
    dead before it (a later row of its own statement), while a dead job may name a dead one."""
    dead = queue.enqueue("q", {})
    queue.kill([dead])
    copy_in = q(schema, "COPY {s}.jobs (queue, payload, status, last_error) FROM STDIN")
    with psycopg.connect(login("producer")) as conn:
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            conn.cursor().copy(copy_in) as copy,
        ):
            for n in range(300):
                status = "running" if n == 299 else "ready"
                copy.write_row(("c", json.dumps({"n": n}), status, None))
        conn.rollback()
        with conn.cursor().copy(copy_in) as copy:
            copy.write_row(("c", "{}", "ready", None))
            copy.write_row(("c", "{}", "dead", f"parent {dead} died"))
        conn.commit()
        row = conn.execute(q(schema, "SELECT pg_catalog.nextval('{s}.jobs_id_seq')")).fetchone()
        assert row is not None
        after = int(row[0])
        two_dead = q(
            schema,
            "INSERT INTO {s}.jobs (queue, payload, status, last_error)"
            " VALUES ('c', '{{}}', 'dead', %s), ('c', '{{}}', 'dead', %s)",
        )
        said = refused(conn, two_dead, f"parent {after + 2} died", f"parent {after + 1} died")
        assert "may not insert a job as dead" in said
        conn.execute(q(schema, "SELECT pg_catalog.nextval('{s}.jobs_id_seq')"))  # after + 3
        conn.execute(two_dead, [f"parent {dead} died", f"parent {after + 4} died"])
        conn.commit()
    statuses = queue.conn.execute(
        q(schema, "SELECT status, count(*) FROM {s}.jobs WHERE queue = 'c' GROUP BY 1 ORDER BY 1")
    ).fetchall()
    assert statuses == [("dead", 3), ("ready", 1)]


def bulk_loader_under_row_security(dsn: str, schema: str, login: Login, check: str) -> str:
    """A producer login also granted INSERT on jobs.id (so it may COPY), with row-level
    security on jobs and one policy whose WITH CHECK is `check`."""
    loader = login("producer")
    name = conninfo_to_dict(loader)["user"]
    with psycopg.connect(dsn, autocommit=True) as admin:
        grant = sql.SQL("GRANT INSERT (id) ON {}.jobs TO {}")
        admin.execute(grant.format(sql.Identifier(schema), sql.Identifier(str(name))))
        admin.execute(q(schema, "ALTER TABLE {s}.jobs ENABLE ROW LEVEL SECURITY"))
        admin.execute(
            q(schema, f"CREATE POLICY loader ON {{s}}.jobs USING (true) WITH CHECK ({check})")
        )
    return loader


def test_the_bulk_path_inserts_for_a_role_under_row_level_security(
    queue: Queue, schema: str, login: Login, dsn: str, tmp_path: Path
) -> None:
    """COPY FROM refuses a role that row-level security applies to (the INSERT privilege on
    jobs.id is not enough): `enqueue_copy`, `enqueue_payloads` and `enqueue_payload_texts`
    write the same jobs through `enqueue_many`'s INSERTs, in the caller's transaction, and
    `pgq enqueue --file` loads its file. They raised FeatureNotSupported, and the file failed
    whole."""
    loader = bulk_loader_under_row_security(dsn, schema, login, "true")
    assert queue.run(ops.may_copy(schema)), "a superuser is not subject to it: COPY still"
    specs = [JobSpec("c", {"n": 1}), JobSpec("c", [2], delay=timedelta(hours=1), priority=3),
             JobSpec("d", "\\N", max_attempts=2, backoff_base=1.5)]  # fmt: skip
    columns = "queue, payload, status, max_attempts, priority, backoff_base, backoff_cap"
    read = q(
        schema, f"SELECT {columns}, run_at > now() FROM {{s}}.jobs WHERE id = ANY(%s) ORDER BY id"
    )
    with Queue.connect(loader, schema) as bulk:
        assert not bulk.run(ops.may_copy(schema))
        copied = bulk.enqueue_copy(specs)
        loaded = bulk.enqueue_payloads("p", [{"a": 1}, [2], "three"], priority=4)
        texts = bulk.enqueue_payload_texts("p", ['{"a": 1}', "[2]", '"three"'], priority=4)
        with psycopg.connect(loader) as own:
            undone = bulk.enqueue_copy(specs, conn=own)
            own.rollback()
    assert copied == sorted(copied) and loaded == sorted(loaded)
    expected = queue.enqueue_many(specs)
    rows = queue.conn.execute(read, [copied]).fetchall()
    assert rows == queue.conn.execute(read, [expected]).fetchall()
    assert [r[:2] for r in queue.conn.execute(read, [loaded]).fetchall()] == [
        ("p", {"a": 1}), ("p", [2]), ("p", "three")
    ]  # fmt: skip
    assert queue.conn.execute(read, [texts]).fetchall() == queue.conn.execute(
        read, [loaded]
    ).fetchall()
    assert queue.conn.execute(read, [undone]).fetchall() == [], "rolled back with the caller"
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("".join(f'{{"line": {n}}}\n' for n in range(5)))
    filed = cli(loader, schema, "enqueue", "f", "--file", str(lines), "--json")
    assert filed.exit_code == 0, filed.output
    ids = json.loads(filed.stdout)
    payloads = queue.conn.execute(read, [ids]).fetchall()
    assert [r[1] for r in payloads] == [{"line": n} for n in range(5)]


def test_a_file_a_row_security_policy_refuses_is_not_loaded_at_all(
    queue: Queue, schema: str, login: Login, dsn: str, tmp_path: Path
) -> None:
    """The policy refuses the last line's job: nothing from the file is written, and the
    error is one line saying why."""
    loader = bulk_loader_under_row_security(dsn, schema, login, "payload ? 'ok'")
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"ok": 1}\n' * 4 + '{"no": 1}\n')
    said = error_line(cli(loader, schema, "enqueue", "f", "--file", str(lines)), 1)
    assert "row-level security" in said and "nothing from" in said, said
    with Queue.connect(loader, schema) as bulk, pytest.raises(psycopg.errors.InsufficientPrivilege):
        bulk.enqueue_payloads("f", [{"ok": 1}, {"no": 1}])
    assert not queue.has_jobs("f")


# -------------------------------------------------------------------------------- worker


async def test_a_worker_runs_its_queues_and_nothing_more(
    dsn: str, queue: Queue, schema: str, login: Login
) -> None:
    """Claims on a limited queue, settles, a workflow, a failure and a retry, a schedule,
    the registry; then the operator's statements are refused."""
    worker_dsn = login("worker")
    queue.set_limit("limq", 1)
    parent = queue.enqueue("limq", {"n": 0})
    queue.enqueue_many([JobSpec("limq", {"n": n}) for n in range(1, 5)])
    queue.enqueue("q", {"then": 1}, depends_on=[parent])
    failing = queue.enqueue("q", {"fail": True}, max_attempts=2)
    queue.add_schedule("tick", "q", "* * * * * *", {"tick": 1})
    seen: list[dict[str, Any]] = []

    def handler(job: Any) -> None:
        seen.append(job.payload)
        if job.payload.get("fail"):
            raise RuntimeError("no")
        if job.payload.get("tick") and not any(p.get("made") for p in seen):
            with Queue.connect(worker_dsn, schema) as own:  # a handler enqueues as the worker
                own.enqueue("q", {"made": True})

    worker = make_worker(worker_dsn, schema, handler, queues=["limq", "q"])
    async with running(worker):
        await until(
            lambda: (
                any(p.get("made") for p in seen)
                and queue.job(failing).status == "dead"
                and len(queue.jobs(status="done", limit=100)) >= 8
            ),
            what="the worker's jobs",
        )
        assert any(w.queues == ["limq", "q"] for w in queue.workers())
    assert {"then": 1} in seen
    with psycopg.connect(worker_dsn) as conn:
        refused(conn, q(schema, "DELETE FROM {s}.jobs"))
        refused(conn, q(schema, "UPDATE {s}.queue_settings SET max_running = 100"))
        refused(conn, q(schema, "SELECT 1 FROM {s}.queue_settings FOR UPDATE"))
        refused(conn, q(schema, "INSERT INTO {s}.settings (name, value) VALUES ('notify', 'off')"))
        refused(conn, q(schema, "DELETE FROM {s}.schedules"))
        refused(conn, q(schema, "UPDATE {s}.jobs SET parents_left = 0"))
    for args in (
        ("pause", "q"),
        ("limit", "q", "9"),
        ("requeue", str(failing)),
        ("schedule", "remove", "tick"),
    ):
        assert_refused(cli(worker_dsn, schema, *args))
    del dsn  # the worker's own DSN is all it used


def test_pgq_worker_runs_as_a_worker_and_keeps_the_partitions(
    queue: Queue, schema: str, login: Login
) -> None:
    """The command itself, in its own process: schema checks, registry, LISTEN, burst."""
    dsn = login("worker")
    ids = queue.enqueue_many([JobSpec("q", {"n": n}) for n in range(3)])
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
    )
    env.pop("PGQ_DSN", None)
    done = subprocess.run(
        [sys.executable, "-m", "pgq_cli", "--dsn", dsn, "--schema", schema, "worker", "q",
         "--handler", "handlers_for_tests:noop", "--burst"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "permission denied" not in done.stderr and "could not" not in done.stderr
    assert statuses(queue, ids) == {"done"}
    with Queue.connect(dsn, schema) as worker:  # as its reaper does, with the owner's rights
        days = worker.ensure_partitions(ahead=10)
    assert days and {d.outcome for d in days} <= {"created", "exists"}


# ------------------------------------------------------------------------------ observer


def test_an_observer_reads_everything_but_what_jobs_carry(
    queue: Queue, schema: str, login: Login
) -> None:
    job = queue.enqueue("q", {"card": "4242"})
    dead = queue.enqueue("q", {"x": 1})
    queue.kill([dead], reason="boom")
    dsn = login("observer")
    for args in (
        ("stats",),
        ("jobs",),
        ("errors",),
        ("latency",),
        ("health",),
        ("workers",),
        ("schedule", "list"),
        ("stats", "--json"),
    ):
        done = cli(dsn, schema, *args)
        assert done.exit_code == 0, (args, done.output)
    listed = cli(dsn, schema, "jobs", "--json")
    assert listed.exit_code == 0 and {r["id"] for r in json.loads(listed.output)} == {job, dead}
    shown = cli(dsn, schema, "show", str(job))  # everything but the payload, and why
    assert shown.exit_code == 0, shown.output
    assert "not shown: this login may not read them" in shown.output
    assert "4242" not in shown.output
    assert_refused(cli(dsn, schema, "show", str(job), "--json"))
    for args in (
        ("requeue", str(dead)),
        ("kill", str(job)),
        ("pause", "q"),
        ("enqueue", "q", "{}"),
        ("delete", "--queue", "q"),
    ):
        assert_refused(cli(dsn, schema, *args))
    with psycopg.connect(dsn) as conn:
        refused(conn, q(schema, "SELECT payload FROM {s}.jobs"))
        refused(conn, q(schema, "SELECT id FROM {s}.jobs FOR UPDATE"))
    assert queue.job(job).status == "ready"


async def test_an_observer_scrapes_metrics_and_runs_the_dashboards_reads(
    queue: Queue, schema: str, login: Login
) -> None:
    job = queue.enqueue("q", {"card": "4242"})
    dsn = login("observer")
    collector = QueueCollector(lambda: psycopg.connect(dsn, autocommit=True), schema)
    try:
        families = {m.name: m for m in collector.collect()}
    finally:
        collector.close()
    assert families["pgq_up"].samples[0].value == 1
    assert {(s.labels["queue"], s.labels["status"]): s.value for s in families["pgq_jobs"].samples}[
        ("q", "ready")
    ] == 1
    source = PgSource(dsn, schema)
    try:
        assert [s.queue for s in await source.stats()] == ["q"]
        assert [j.id for j in await source.jobs("q", None, 10)] == [job]
        with pytest.raises(PgqError, match=r"^permission denied: permission denied for table jobs"):
            await source.job(job)  # the job screen's alert line: it shows the payload
    finally:
        await source.close()


# ------------------------------------------------------------------------------ operator


def test_an_operator_requeues_kills_deletes_and_sets(
    queue: Queue, schema: str, login: Login
) -> None:
    dsn = login("operator")
    a = queue.enqueue("q", {"a": 1})
    b = queue.enqueue("q", {"b": 1})
    for args in (
        ("show", str(a)),
        ("kill", str(a)),
        ("requeue", str(a)),
        ("pause", "q"),
        ("resume", "q"),
        ("limit", "q", "3"),
        ("schedule", "add", "nightly", "--cron", "0 3 * * *", "--queue", "q"),
        ("schedule", "run", "nightly"),
        ("schedule", "remove", "nightly"),
        ("config", "notify", "edge"),
        ("kill", str(b)),
        ("delete", "--queue", "q", "--status", "dead"),
        ("prune", "--older-than", "1d"),
        ("stats",),
    ):
        done = cli(dsn, schema, *args)
        assert done.exit_code == 0, (args, done.output)
    assert queue.job(a).payload == {"a": 1} and queue.job(a).status == "ready"
    assert queue.settings()["notify"] == "edge"
    with psycopg.connect(dsn) as conn:
        refused(
            conn, q(schema, "INSERT INTO {s}.jobs (queue, payload, id) VALUES ('q', '{{}}', 10)")
        )
        refused(conn, q(schema, "DROP TABLE {s}.jobs"))


# ------------------------------------------------------------------------ the grants' upkeep


def test_migrate_applies_the_grants_again(
    dsn: str, queue: Queue, schema: str, prefix: str, login: Login
) -> None:
    """A grant lost (as a column a later migration adds has none) is back after `migrate`."""
    dsn_op = login("operator")
    job = queue.enqueue("q", {"p": 1})
    role = roles.role_name(schema, "operator", prefix)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("REVOKE SELECT (payload) ON {}.jobs FROM {}").format(
                sql.Identifier(schema), sql.Identifier(role)
            )
        )
    with psycopg.connect(dsn_op) as conn:
        refused(conn, q(schema, "SELECT payload FROM {s}.jobs"))
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert migrate(admin, schema) == []
        assert sorted(r for r, _ in roles.of_schema(admin, schema)) == sorted(
            roles.role_name(schema, k, prefix) for k in roles.KINDS
        )
    with psycopg.connect(dsn_op) as conn:
        assert conn.execute(
            q(schema, "SELECT payload FROM {s}.jobs WHERE id = %s"), [job]
        ).fetchone() == ({"p": 1},)


#: Columns no role is granted anything on, on purpose (a table's column not here and granted
#: to no role fails the test below: a migration that adds a column decides who gets it).
NOBODY: set[tuple[str, str]] = set()


def test_every_column_is_some_roles_or_left_out_on_purpose(
    dsn: str, schema: str, prefix: str
) -> None:
    names = [roles.role_name(schema, k, prefix) for k in roles.KINDS]
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT c.relname, a.attname,"
            " bool_or(has_column_privilege(r, c.oid, a.attname, 'SELECT, INSERT, UPDATE'))"
            " FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
            " AND NOT a.attisdropped, unnest(%s::text[]) r"
            " WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'p')"
            " AND NOT c.relispartition GROUP BY 1, 2",
            [names, schema],
        ).fetchall()
    orphans = sorted((t, c) for t, c, any_role in rows if not any_role and (t, c) not in NOBODY)
    assert orphans == []
    assert len(rows) > 60


def test_only_functions_that_read_nothing_are_publics(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        public = admin.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = %s::regnamespace"
            " AND p.prorettype <> 'trigger'::regtype"
            " AND has_function_privilege('public', p.oid, 'EXECUTE') ORDER BY 1",
            [schema],
        ).fetchall()
    assert [name for (name,) in public] == [
        "error_group",
        "error_pattern",
        "job_written_here",
        "may_write_leases",
        "written_here",
    ]


def test_roles_cli_prints_creates_and_grants(dsn: str, schema: str) -> None:
    if (why := _may_create_roles(dsn)) is not None:
        pytest.skip(why)
    mine = f"t{secrets.token_hex(5)}"
    printed = cli(dsn, schema, "roles", "create", "--prefix", mine, "--print")
    assert printed.exit_code == 0, printed.output
    assert f'CREATE ROLE "{mine}_producer" NOLOGIN;' in printed.output
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert not roles.exists(admin, f"{mine}_producer")  # --print changes nothing
    try:
        made = cli(dsn, schema, "roles", "create", "--prefix", mine)
        assert made.exit_code == 0, made.output
        assert f"producer: {mine}_producer created" in made.output
        again = cli(dsn, schema, "roles", "create", "observer", "--prefix", mine)
        assert again.output.strip() == f"observer: {mine}_observer exists, grants applied again"
        missing = cli(dsn, schema, "roles", "grant", "producer", f"{mine}_nobody", "--prefix", mine)
        assert missing.exit_code == 1
        assert missing.output.strip() == f"pgq: error: role '{mine}_nobody' does not exist"
        bad = cli(dsn, schema, "roles", "grant", "admin", "x")
        assert bad.exit_code == 2
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(
                    sql.Identifier(f"{mine}_plain")
                )
            )
        plain = make_conninfo(dsn, user=f"{mine}_plain", password="pw")
        refused_create = cli(plain, schema, "roles", "create", "--prefix", mine)
        assert refused_create.exit_code == 1
        # the server's own reason between (PostgreSQL 15 says "must have CREATEROLE privilege",
        # 16 and later "permission denied to create role"): one line, the role and the remedy
        said = refused_create.output
        assert said.count("\n") == 1, said
        assert said.startswith(f"pgq: error: may not create or grant role '{mine}_producer': ")
        assert said.rstrip().endswith("with CREATEROLE)"), said
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(f"{mine}_app")))
        granted = cli(dsn, schema, "roles", "grant", "worker", f"{mine}_app", "--prefix", mine)
        assert granted.output.strip() == f"granted {mine}_worker to {mine}_app"
        with psycopg.connect(dsn, autocommit=True) as admin:
            assert admin.execute(
                "SELECT pg_has_role(%s, %s, 'MEMBER')", [f"{mine}_app", f"{mine}_worker"]
            ).fetchone() == (True,)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            for kind in (*roles.KINDS, "app", "plain"):
                if roles.exists(admin, f"{mine}_{kind}"):
                    drop(admin, f"{mine}_{kind}")


async def test_a_shared_round_a_row_security_policy_refuses_fails_only_that_job(
    schema: str, login: Login, dsn: str
) -> None:
    """pgq's producer role under a row-level security policy refusing one queue: tasks
    sharing one AsyncQueue share a round, which the policy refuses whole; each job is then
    sent alone, so only the refused one's caller raises, naming the policy's refusal."""
    producer = login("producer")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(q(schema, "ALTER TABLE {s}.jobs ENABLE ROW LEVEL SECURITY"))
        admin.execute(
            q(schema, "CREATE POLICY no_x ON {s}.jobs USING (true) WITH CHECK (queue <> 'x')")
        )
    aqueue = await AsyncQueue.connect(producer, schema)
    try:
        async with aqueue._turn:  # the first caller leads, and waits for it with the rest
            tasks = [
                asyncio.create_task(aqueue.enqueue(name, {"n": n}))
                for n, name in enumerate(["a", "x", "b"])
            ]
            while len(aqueue._rounds._waiting) < 3:
                await asyncio.sleep(0.01)
        first, refused, last = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await aqueue.close()
    assert isinstance(refused, psycopg.errors.InsufficientPrivilege), refused
    assert "row-level security" in str(refused)
    with psycopg.connect(dsn, autocommit=True) as admin:
        rows = admin.execute(q(schema, "SELECT id, queue, xmin::text FROM {s}.jobs ORDER BY 2"))
        written = rows.fetchall()
    assert [(r[0], r[1]) for r in written] == [(first, "a"), (last, "b")]
    assert written[0][2] != written[1][2], "each went alone after the round was refused"
