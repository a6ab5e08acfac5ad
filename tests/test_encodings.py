"""Any server encoding works, or `pgq migrate` refuses it in one line: payloads, errors, queue
names and results round-trip; text the database cannot hold is refused at enqueue, never at
claim; no job is claimed and then left without its handler running."""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql
from psycopg.conninfo import make_conninfo
from support import ENV, TIMEOUT, make_worker, running, until

from pgq_cli.cli import main
from pgq_core import JobSpec, PgqError, Queue, Unstorable
from pgq_core.migrate import migrate
from pgq_core.worker import JobContext


@contextmanager
def encoded_database(dsn: str, encoding: str) -> Iterator[str]:
    """The DSN of a new database of `encoding` (C locale), dropped after."""
    name = f"pgq_enc_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} ENCODING {} LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
            ).format(sql.Identifier(name), sql.Literal(encoding))
        )
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def cli(dsn: str, *args: str) -> Result:
    return CliRunner(env=ENV).invoke(main, ["--dsn", dsn, *args], prog_name="pgq")


def test_migrate_refuses_sql_ascii_in_one_line_and_creates_nothing(dsn: str) -> None:
    with encoded_database(dsn, "SQL_ASCII") as db:
        result = cli(db, "migrate")
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1, result.output
        assert "SQL_ASCII" in lines[0] and "ENCODING 'UTF8'" in lines[0], lines
        with psycopg.connect(db) as conn, pytest.raises(PgqError, match="SQL_ASCII"):
            migrate(conn)
        with psycopg.connect(db) as conn:
            found = conn.execute("SELECT to_regnamespace('pgq') IS NOT NULL").fetchone()
        assert found == (False,)


async def test_a_worker_refuses_a_sql_ascii_schema_and_claims_nothing(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema migrated before migrate refused SQL_ASCII: the worker stops at start with the
    reason, and the job it would have claimed and lost stays ready for a worker elsewhere."""
    ran: list[int] = []
    with encoded_database(dsn, "SQL_ASCII") as db:
        with monkeypatch.context() as patched, psycopg.connect(db) as conn:
            patched.setattr(sys.modules["pgq_core.migrate"], "encoding_refusal", lambda e: None)
            migrate(conn)
            conn.commit()
        with Queue.connect(db) as q:
            job_id = q.enqueue("q", {"a": 1})
            worker = make_worker(db, "pgq", lambda job: ran.append(job.id), burst=True)
            with pytest.raises(PgqError, match="SQL_ASCII"):
                await asyncio.wait_for(worker.run(), TIMEOUT)
            assert q.job(job_id).status == "ready"
            assert q.job(job_id).attempts == 0
        assert ran == []


@pytest.mark.parametrize("encoding", ["LATIN1", "WIN1252", "EUC_JP"])
async def test_text_round_trips_in_a_database_of_another_encoding(
    dsn: str, encoding: str
) -> None:
    """Payload, queue name, error and result, with characters the encoding holds, come back
    exactly through the API and the CLI; the handler runs for every job."""
    text = {"LATIN1": "café ü", "WIN1252": "café € ü", "EUC_JP": "日本語 ü"}[encoding]
    queue_name = {"LATIN1": "qué", "WIN1252": "q€", "EUC_JP": "キュー"}[encoding]
    seen: list[Any] = []

    def handler(job: JobContext) -> Any:
        seen.append(job.payload)
        if job.attempts == 1:
            raise RuntimeError(f"first try: {job.payload['t']}")
        return {"echo": job.payload["t"]}

    with encoded_database(dsn, encoding) as db:
        assert cli(db, "migrate").exit_code == 0
        with Queue.connect(db) as q:
            by_api = q.enqueue(queue_name, {"t": text}, max_attempts=3)
            by_cli = cli(db, "enqueue", queue_name, json.dumps({"t": text}, ensure_ascii=False))
            assert by_cli.exit_code == 0, by_cli.output
            worker = make_worker(db, "pgq", handler, queues=[queue_name], retry_base=0.01)
            async with running(worker):
                await until(lambda: len(q.jobs(status="done", limit=10)) == 2, what="done")
            assert seen == [{"t": text}] * 4
            for job in q.jobs(queue=queue_name, limit=10):
                detail = q.job(job.id)
                assert detail.status == "done", detail
                assert detail.queue == queue_name
                assert detail.payload == {"t": text}
                assert detail.result == {"echo": text}
                failed = [e for e in detail.history if e.event == "failed"]
                assert failed and f"first try: {text}" in (failed[0].detail or "")
            shown = cli(db, "show", str(by_api), "--json")
            assert shown.exit_code == 0, shown.output
            assert json.loads(shown.output)["payload"] == {"t": text}
            stats = cli(db, "stats", "--json")
            assert stats.exit_code == 0, stats.output
            assert queue_name in {row["queue"] for row in json.loads(stats.output)}


def test_text_the_encoding_cannot_hold_is_refused_at_enqueue(dsn: str) -> None:
    """An emoji in a LATIN1 database: the enqueue is refused in one line naming the encoding
    (API and CLI, in the payload or the queue name), and no job exists to be claimed."""
    with encoded_database(dsn, "LATIN1") as db:
        assert cli(db, "migrate").exit_code == 0
        with Queue.connect(db) as q:
            with pytest.raises(Unstorable, match="LATIN1"):
                q.enqueue("q", {"t": "\N{GRINNING FACE}"})
            with pytest.raises(Unstorable, match="LATIN1"):
                q.enqueue("q\N{GRINNING FACE}", {"t": 1})
            for args in (("q", '{"t": "\N{GRINNING FACE}"}'), ("q\N{GRINNING FACE}", "{}")):
                result = cli(db, "enqueue", *args)
                assert result.exit_code == 1, result.output
                assert len(result.output.strip().splitlines()) == 1, result.output
                assert "LATIN1" in result.output and "Traceback" not in result.output
            assert q.jobs(limit=10) == []


def test_the_bulk_path_refuses_what_the_encoding_cannot_hold_in_one_line(
    dsn: str, tmp_path: Any
) -> None:
    """COPY (`enqueue_payloads`, `enqueue_copy`, `pgq enqueue --file`) refuses an emoji in a
    LATIN1 database as the one-job enqueue does: `Unstorable` naming the encoding, one line
    from the CLI, and nothing written."""
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"t": 1}\n{"t": "\\ud83d\\ude00"}\n')
    with encoded_database(dsn, "LATIN1") as db:
        assert cli(db, "migrate").exit_code == 0
        with Queue.connect(db) as q:
            with pytest.raises(Unstorable, match="LATIN1"):
                q.enqueue_payloads("q", [{"t": 1}, {"t": "\N{GRINNING FACE}"}])
            with pytest.raises(Unstorable, match="LATIN1"):
                q.enqueue_payloads("q\N{GRINNING FACE}", [{"t": 1}])
            with pytest.raises(Unstorable, match="LATIN1"):
                q.enqueue_copy([JobSpec("q", {}), JobSpec("q\N{GRINNING FACE}", {})])
            for args in (("q", "--file", str(lines)), ("q\N{GRINNING FACE}", "--file", str(lines))):
                result = cli(db, "enqueue", *args)
                assert result.exit_code == 1, result.output
                assert len(result.output.strip().splitlines()) == 1, result.output
                assert "LATIN1" in result.output and "Traceback" not in result.output
            assert q.jobs(limit=10) == []
            assert q.enqueue_payloads("q", [{"t": "café"}]), "the connection is still usable"


async def test_a_result_the_encoding_cannot_hold_is_the_jobs_own_failure(dsn: str) -> None:
    """The handler ran and returned text LATIN1 lacks: the job fails with the reason (its own
    fault, as any result that cannot be stored), never left running or re-run silently."""
    with encoded_database(dsn, "LATIN1") as db:
        assert cli(db, "migrate").exit_code == 0
        with Queue.connect(db) as q:
            job_id = q.enqueue("q", {}, max_attempts=1)
            worker = make_worker(db, "pgq", lambda job: {"r": "\N{GRINNING FACE}"}, burst=True)
            await asyncio.wait_for(worker.run(), TIMEOUT)
            detail = q.job(job_id)
            assert detail.status == "dead"
            assert "completion refused by the database" in (detail.last_error or "")
            assert "LATIN1" in (detail.last_error or "")


def test_the_client_encoding_of_the_environment_or_role_changes_nothing(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PGCLIENTENCODING (or a role's client_encoding) naming another encoding: pgq's own
    connections still speak UTF-8, so any character round-trips in a UTF-8 database."""
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    payload = {"t": "\N{GRINNING FACE} café"}
    with Queue.connect(dsn, schema) as q:
        assert q.conn.info.encoding == "utf-8"
        job_id = q.enqueue("q\N{GRINNING FACE}", payload)
        assert q.job(job_id).payload == payload
        assert q.job(job_id).queue == "q\N{GRINNING FACE}"
