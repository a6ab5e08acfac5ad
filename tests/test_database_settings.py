"""Every setting a database or role can carry leaves the queue's promise whole: pgq's own
sessions set what they need (read committed, ISO dates, postgres intervals, no idle-session
timeout), its triggers fire under any session_replication_role, a naive run_at is the
client's local time whatever the server's TimeZone, and search_path or deferrable change
nothing. One sweep: all of them at once on one database, the worker, the API and the CLI."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from support import ENV, make_worker, running, until

from pgq_cli.cli import main
from pgq_core import Queue
from pgq_core.migrate import migrate
from pgq_core.worker import JobContext

#: What a database (or role) may carry that once changed what pgq's statements meant.
SWEEP = {
    "default_transaction_isolation": "serializable",
    "default_transaction_deferrable": "on",
    "session_replication_role": "replica",
    "idle_session_timeout": "1s",
    "DateStyle": "SQL, DMY",
    "IntervalStyle": "sql_standard",
    "TimeZone": "Asia/Kathmandu",
    "search_path": "nowhere, public",
}


def _set_on_database(dsn: str) -> None:
    name = str(conninfo_to_dict(dsn)["dbname"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        for setting, value in SWEEP.items():
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(setting), sql.Literal(value)
                )
            )


async def test_the_settings_a_database_can_carry_change_nothing(own_database: str) -> None:
    _set_on_database(own_database)
    with psycopg.connect(own_database) as conn:
        assert conn.execute("SHOW session_replication_role").fetchone() == ("replica",)
        migrate(conn)
        conn.commit()
        enabled = conn.execute(
            "SELECT t.tgname, t.tgenabled FROM pg_trigger t"
            " JOIN pg_proc p ON p.oid = t.tgfoid"
            " WHERE NOT t.tgisinternal AND p.pronamespace = 'pgq'::regnamespace"
        ).fetchall()
    assert enabled and all(state == "A" for _, state in enabled), enabled

    ran: list[int] = []

    def handler(job: JobContext) -> Any:
        ran.append(job.id)
        if job.payload.get("fail_once") and job.attempts == 1:
            raise RuntimeError("once")
        return {"n": job.id}

    with Queue.connect(own_database) as q:
        session = q.conn.execute(
            "SELECT current_setting('transaction_isolation'),"
            " current_setting('DateStyle'), current_setting('IntervalStyle')"
        ).fetchone()
        assert session == ("read committed", "ISO, MDY", "postgres")
        parent = q.enqueue("q", {"fail_once": True}, max_attempts=3)
        child = q.enqueue("q", {}, depends_on=[parent])
        later = datetime.now() + timedelta(hours=1)  # naive: the client's local time
        scheduled = q.enqueue("q", {}, run_at=later)
        assert q.job(scheduled).run_at == later.astimezone()
        assert q.job(child).status == "waiting"

        time.sleep(1.5)  # past the database's idle_session_timeout: the session lives on
        worker = make_worker(own_database, "pgq", handler, retry_base=0.01)
        async with running(worker):
            await until(lambda: q.job(child).status == "done", what="the child done")
        assert ran == [parent, parent, child]

        detail = q.job(parent)
        assert detail.status == "done" and detail.attempts == 2
        assert detail.lease_seconds == 30
        assert [e.event for e in detail.history] == [
            "enqueued", "claimed", "failed", "claimed", "completed"
        ]
        stats = {s.queue: s for s in q.stats()}["q"]
        assert (stats.ready, stats.scheduled, stats.running, stats.done) == (0, 1, 0, 2)

    cli = CliRunner(env=ENV)
    for args in (["stats", "--json"], ["jobs", "--json"], ["show", str(parent), "--json"]):
        result = cli.invoke(main, ["--dsn", own_database, *args], prog_name="pgq")
        assert result.exit_code == 0, (args, result.output)
        json.loads(result.output)
    shown = cli.invoke(main, ["--dsn", own_database, "show", str(parent)], prog_name="pgq")
    assert shown.exit_code == 0 and "completed" in shown.output, shown.output
