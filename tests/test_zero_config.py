"""Zero configuration from Python and the shell: `Queue.connect()`, `AsyncQueue.connect()`,
`Tasks(...)` and `sqlalchemy_engine()` with no DSN find the database as the CLI does (PGQ_DSN,
else the embedded server, started if needed and its schema migrated); `pgq dsn` and `pgq psql`
hand that database to your own tools. All on a real PostgreSQL."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from pgq_cli.cli import main
from pgq_core import AsyncQueue, Queue, Tasks, embedded, enqueue_in, sqlalchemy_engine


@dataclass(frozen=True)
class Embedded:
    dsn: str
    schema: str


def _drop(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _jobs(dsn: str, schema: str) -> list[tuple[str, object]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL("SELECT queue, payload FROM {}.jobs ORDER BY id").format(
            sql.Identifier(schema)
        )
        return [(str(queue), payload) for queue, payload in conn.execute(query)]


@pytest.fixture
def on_embedded(pg_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Embedded]:
    """No PGQ_DSN, PGQ_HOME at the session's embedded home and PGQ_SCHEMA a schema that does
    not exist yet: whatever finds the database must start (or join) the embedded server and
    migrate that schema itself."""
    schema = f"z_{secrets.token_hex(5)}"
    monkeypatch.delenv("PGQ_DSN", raising=False)
    monkeypatch.setenv("PGQ_HOME", str(pg_home))
    monkeypatch.setenv("PGQ_SCHEMA", schema)
    dsn = embedded.start(pg_home)
    yield Embedded(dsn, schema)
    _drop(dsn, schema)


@pytest.fixture
def on_pgq_dsn(dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """PGQ_DSN and PGQ_SCHEMA name the test server and its fresh schema."""
    monkeypatch.setenv("PGQ_DSN", dsn)
    monkeypatch.setenv("PGQ_SCHEMA", schema)
    return schema


def test_queue_connect_without_a_dsn_starts_and_migrates_the_embedded_server(
    on_embedded: Embedded,
) -> None:
    with Queue.connect() as q:
        assert q.schema == on_embedded.schema
        q.enqueue("emails", {"to": "ada@example.com"})
    assert _jobs(on_embedded.dsn, on_embedded.schema) == [("emails", {"to": "ada@example.com"})]


def test_queue_connect_reads_pgq_dsn_and_pgq_schema(on_pgq_dsn: str, dsn: str) -> None:
    with Queue.connect() as q:
        assert q.schema == on_pgq_dsn
        q.enqueue("thumbs", {"id": 1})
    assert _jobs(dsn, on_pgq_dsn) == [("thumbs", {"id": 1})]


async def test_async_queue_connect_without_a_dsn_uses_the_embedded_server(
    on_embedded: Embedded,
) -> None:
    q = await AsyncQueue.connect()
    try:
        assert q.schema == on_embedded.schema
        await q.enqueue("emails", {"n": 1})
    finally:
        await q.close()
    assert _jobs(on_embedded.dsn, on_embedded.schema) == [("emails", {"n": 1})]


async def test_tasks_without_a_client_connect_on_first_enqueue(
    on_pgq_dsn: str, dsn: str
) -> None:
    tasks = Tasks(queue="emails")

    @tasks.task
    def send(to: str) -> None: ...

    assert tasks.client is None and tasks.schema == on_pgq_dsn
    send.enqueue(to="ada@example.com")
    send.enqueue(to="bob@example.com")
    client = tasks.client
    assert client is not None
    await send.enqueue_async(to="cy@example.com")
    assert tasks.async_client is not None
    assert tasks.client is client, "one connection for every enqueue, not one each"
    assert [payload for _, payload in _jobs(dsn, on_pgq_dsn)] == [
        {"task": "send", "args": {"to": to}}
        for to in ("ada@example.com", "bob@example.com", "cy@example.com")
    ]
    client.close()
    await tasks.async_client.close()


def test_sqlalchemy_engine_without_a_dsn_reaches_the_embedded_server_and_hides_its_password(
    on_embedded: Embedded,
) -> None:
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    engine = sqlalchemy_engine()
    password = str(psycopg.conninfo.conninfo_to_dict(on_embedded.dsn)["password"])
    assert password not in repr(engine) and password not in str(engine.url)
    try:
        with Session(engine) as session:
            enqueue_in(session, "emails", {"order": 42})
            session.rollback()
        with Session(engine) as session:
            assert session.execute(text("SELECT 1")).scalar() == 1
            enqueue_in(session, "emails", {"order": 43})
            session.commit()
    finally:
        engine.dispose()
    assert _jobs(on_embedded.dsn, on_embedded.schema) == [("emails", {"order": 43})]


# ---------------------------------------------------------------------- pgq dsn, pgq psql


def _pgq(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`pgq ARGS` in its own process: `pgq dsn` leaves the embedded server running when it
    exits, which the test process's own hold on it must not be mixed up with."""
    return subprocess.run(
        [sys.executable, "-m", "pgq_cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQ_")}
    env.update(changes)
    return env


def test_pgq_dsn_prints_a_dsn_with_the_password_that_connects(on_embedded: Embedded) -> None:
    env = _env(PGQ_HOME=os.environ["PGQ_HOME"], PGQ_SCHEMA=on_embedded.schema)
    done = _pgq("dsn", env=env)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.strip()
    assert len(done.stdout.splitlines()) == 1
    assert psycopg.conninfo.conninfo_to_dict(printed)["password"]
    with psycopg.connect(printed) as conn:
        row = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", [f"{on_embedded.schema}.jobs"]
        ).fetchone()
        assert row == (True,), "the schema pgq dsn names is migrated"
    as_json = json.loads(_pgq("dsn", "--json", env=env).stdout)
    assert as_json == {"dsn": printed, "schema": on_embedded.schema, "embedded": True}


def test_pgq_dsn_help_says_it_prints_the_password() -> None:
    result = CliRunner().invoke(main, ["dsn", "--help"])
    assert result.exit_code == 0
    assert "password included" in result.output
    assert "the one command that shows the password" in " ".join(result.output.split())


def test_pgq_psql_runs_psql_on_the_queue_schema_and_keeps_the_password_off_its_command_line(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.enqueue("emails", {})
    env = _env(PGQ_DSN=dsn, PGQ_SCHEMA=schema, PGQ_HOME=os.environ.get("PGQ_HOME", ""))
    done = _pgq("psql", "-At", "-c", "SELECT queue FROM jobs", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "emails"
    failed = _pgq("psql", "-c", "SELECT 1/0", env=env)
    assert failed.returncode != 0 and "division by zero" in failed.stderr


def test_pgq_psql_on_the_embedded_server(on_embedded: Embedded) -> None:
    env = _env(PGQ_HOME=os.environ["PGQ_HOME"], PGQ_SCHEMA=on_embedded.schema)
    done = _pgq("psql", "-At", "-c", "SELECT count(*) FROM jobs", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


def test_psql_environment_puts_the_password_in_pgpassword_only() -> None:
    from pgq_cli.db_cli import psql_environment

    conninfo, env = psql_environment(
        "postgresql://pgq:s3cret-pw@db.example:5433/app", "jobs_schema"
    )
    assert "s3cret-pw" not in conninfo
    assert env["PGPASSWORD"] == "s3cret-pw"
    assert "search_path=jobs_schema,public" in env["PGOPTIONS"]
    assert psycopg.conninfo.conninfo_to_dict(conninfo)["host"] == "db.example"


def test_pgq_psql_without_psql_is_one_line(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded, "psql_path", lambda: None)
    result = CliRunner(env={"PATH": "/nonexistent"}).invoke(
        main, ["--dsn", dsn, "--schema", schema, "psql"]
    )
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgq: error: psql is not installed")
    assert "Traceback" not in result.output


CHAINED_TASKS = '''
from pgq_core import Tasks

tasks = Tasks(queue="chain")


@tasks.task
def first(n: int) -> None:
    second.enqueue(n=n + 1)      # no conn, no client: the registry connects by itself


@tasks.task
def second(n: int) -> int:
    return n
'''


def test_a_task_enqueuing_another_reaches_the_database_its_worker_was_given(
    dsn: str, schema: str, queue: Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pgq --dsn X worker --tasks ...` with no PGQ_DSN: the chained enqueue must go to X,
    not to the embedded server (PGQ_HOME here is an empty directory: nothing runs there)."""
    (tmp_path / "chained_tasks.py").write_text(CHAINED_TASKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PGQ_DSN", raising=False)
    monkeypatch.delenv("PGQ_SCHEMA", raising=False)
    monkeypatch.setenv("PGQ_HOME", str(tmp_path / "no-server-here"))
    queue.enqueue("chain", {"task": "first", "args": {"n": 1}})
    result = CliRunner().invoke(
        main, ["--dsn", dsn, "--schema", schema, "worker", "--tasks", "chained_tasks:tasks",
               "--burst"],
    )
    assert result.exit_code == 0, result.output
    details = [queue.job(j.id) for j in queue.jobs("chain")]
    assert sorted((d.status, d.payload["task"], d.result) for d in details) == [
        ("done", "first", None), ("done", "second", 2)
    ]
    assert not (tmp_path / "no-server-here" / "pgdata").exists()
