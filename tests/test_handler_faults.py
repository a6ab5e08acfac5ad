"""A database fault inside a handler's own transaction is never its job's fault: a
serialization failure from pgq's own heartbeat, a session ended by the server (57P01), a
read-only session (25006). The job goes back, its attempt not counted, with a line and a
history row saying why; the handler's committed work is never repeated; and a handler whose
transactions always conflict still ends (the bound)."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from support import link_connects, make_worker, running, until

from pgq_core import Queue
from pgq_core.migrate import migrate
from pgq_core.worker import JobContext
from pgq_core.worker.dispatch import MAX_FAULTS_IN_A_ROW


def _prepare(dsn: str, **settings: str) -> None:
    name = str(conninfo_to_dict(dsn)["dbname"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        for setting, value in settings.items():
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(setting), sql.Literal(value)
                )
            )
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        conn.execute("CREATE TABLE effects (job_id bigint NOT NULL, attempt int NOT NULL)")
        conn.execute("CREATE TABLE hot (id int PRIMARY KEY, n int NOT NULL)")
        conn.execute("INSERT INTO hot VALUES (1, 0)")


def _effects(dsn: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [(int(j), int(a)) for j, a in conn.execute("SELECT * FROM effects").fetchall()]


def _released(q: Queue, job_id: int) -> list[str]:
    return [e.detail or "" for e in q.history(job_id) if e.event == "released"]


@pytest.mark.parametrize("isolation", ["serializable", "repeatable read"])
async def test_a_heartbeat_conflict_under_serializable_costs_no_attempt(
    own_database: str, caplog: pytest.LogCaptureFixture, isolation: str
) -> None:
    """The documented exactly-once pattern (a side effect and `job.complete(conn)` in one
    transaction) under serializable or repeatable read: the worker's heartbeat renews the
    lease after the transaction's snapshot, so its completion fails with 40001. The job is
    handed back, not charged, and the second run commits the effect once."""
    _prepare(own_database, default_transaction_isolation=isolation)
    runs: list[int] = []

    def handler(job: JobContext) -> None:
        runs.append(job.id)
        with psycopg.connect(own_database) as conn, psycopg.connect(
            own_database, autocommit=True
        ) as watch:
            lease = conn.execute("SELECT lease_until FROM pgq.jobs WHERE id = %s", [job.id])
            before = lease.fetchone()
            conn.execute("INSERT INTO effects VALUES (%s, %s)", [job.id, job.attempts])
            if len(runs) == 1:  # wait for pgq's own write to the row after our snapshot
                deadline = time.monotonic() + 10
                query = "SELECT lease_until FROM pgq.jobs WHERE id = %s"
                while watch.execute(query, [job.id]).fetchone() == before:
                    assert time.monotonic() < deadline, "no heartbeat renewed the lease"
                    time.sleep(0.02)
            job.complete(conn, {"ok": True})

    with Queue.connect(own_database) as q:
        job_id = q.enqueue("q", {}, max_attempts=1)
        worker = make_worker(own_database, "pgq", handler, lease=timedelta(seconds=1.5))
        with caplog.at_level(logging.WARNING, logger="pgq.worker"):
            async with running(worker):
                await until(lambda: q.job(job_id).status == "done", what="the job done")
        detail = q.job(job_id)
        assert detail.attempts == 1 and detail.result == {"ok": True}
        # a slow machine may see another heartbeat land inside a later run's transaction too:
        # each such run is handed back uncharged, so count hand-backs, not runs
        released = _released(q, job_id)
        assert released and all("40001" in line for line in released), released
        assert runs == [job_id] * (len(released) + 1)
        assert _effects(own_database) == [(job_id, 1)]
        assert "the attempt not counted (1 of" in caplog.text


async def test_a_session_ended_by_the_server_inside_the_handler_costs_no_attempt(
    own_database: str,
) -> None:
    """57P01 (an administrator's or a switchover's termination) in the handler's transaction:
    handed back, not charged; its uncommitted effect never shows."""
    _prepare(own_database)
    runs: list[int] = []

    def handler(job: JobContext) -> None:
        runs.append(job.id)
        with psycopg.connect(own_database) as conn:
            conn.execute("INSERT INTO effects VALUES (%s, %s)", [job.id, job.attempts])
            if len(runs) == 1:
                with psycopg.connect(own_database, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
            job.complete(conn)

    with Queue.connect(own_database) as q:
        job_id = q.enqueue("q", {}, max_attempts=1)
        async with running(make_worker(own_database, "pgq", handler)):
            await until(lambda: q.job(job_id).status == "done", what="the job done")
        assert q.job(job_id).attempts == 1
        assert runs == [job_id, job_id]
        assert _effects(own_database) == [(job_id, 1)]
        released = _released(q, job_id)
        assert len(released) == 1, released
        assert "57P01" in released[0] or "connection lost" in released[0], released


async def test_a_read_only_flip_inside_the_handler_costs_no_attempt(own_database: str) -> None:
    """The database turns read-only (default_transaction_read_only) while a handler opens its
    session, then back: the handler's write fails with 25006, the job is handed back without
    charge and runs once more, its effect committed once."""
    _prepare(own_database)
    name = str(conninfo_to_dict(own_database)["dbname"])
    runs: list[int] = []

    def flip(on: bool) -> None:
        with psycopg.connect(own_database, autocommit=True) as admin:
            admin.execute("SET default_transaction_read_only = off")
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = {}").format(
                    sql.Identifier(name), sql.Literal("on" if on else "off")
                )
            )

    def handler(job: JobContext) -> None:
        runs.append(job.id)
        if len(runs) == 1:
            flip(True)
        try:
            with psycopg.connect(own_database) as conn:
                conn.execute("INSERT INTO effects VALUES (%s, %s)", [job.id, job.attempts])
                job.complete(conn)
        finally:
            flip(False)

    with Queue.connect(own_database) as q:
        job_id = q.enqueue("q", {}, max_attempts=1)
        async with running(make_worker(own_database, "pgq", handler)):
            await until(lambda: q.job(job_id).status == "done", what="the job done")
        assert q.job(job_id).attempts == 1
        assert runs == [job_id, job_id]
        assert _effects(own_database) == [(job_id, 1)]
        released = _released(q, job_id)
        assert len(released) == 1 and "25006" in released[0], released


async def test_a_handler_whose_transactions_always_conflict_still_ends(
    own_database: str,
) -> None:
    """A real 40001 on every run (the handler's own repeatable-read update races a write it
    makes itself): handed back MAX_FAULTS_IN_A_ROW times, then the next run counts and, with
    one attempt, the job is dead with the count in its error."""
    _prepare(own_database)
    runs: list[int] = []

    def handler(job: JobContext) -> Any:
        runs.append(job.id)
        with psycopg.connect(own_database) as conn, psycopg.connect(
            own_database, autocommit=True
        ) as other:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.execute("SELECT n FROM hot WHERE id = 1").fetchone()
            other.execute("UPDATE hot SET n = n + 1 WHERE id = 1")
            conn.execute("UPDATE hot SET n = n + 1 WHERE id = 1")

    with Queue.connect(own_database) as q:
        job_id = q.enqueue("q", {}, max_attempts=1)
        async with running(make_worker(own_database, "pgq", handler)):
            await until(lambda: q.job(job_id).status == "dead", what="the job dead")
        detail = q.job(job_id)
        assert runs == [job_id] * (MAX_FAULTS_IN_A_ROW + 1)
        assert detail.attempts == 1
        assert f"{MAX_FAULTS_IN_A_ROW + 1} database faults in a row" in (detail.last_error or "")
        assert len(_released(q, job_id)) == MAX_FAULTS_IN_A_ROW


async def test_a_handlers_own_data_error_still_counts(own_database: str) -> None:
    """Not every database error is the database's fault: a unique violation of the handler's
    own is its job's, an attempt spent as before."""
    _prepare(own_database)

    def handler(job: JobContext) -> None:
        with psycopg.connect(own_database) as conn:
            conn.execute("INSERT INTO hot VALUES (1, 0)")

    with Queue.connect(own_database) as q:
        job_id = q.enqueue("q", {}, max_attempts=1)
        async with running(make_worker(own_database, "pgq", handler)):
            await until(lambda: q.job(job_id).status == "dead", what="the job dead")
        assert "UniqueViolation" in (q.job(job_id).last_error or "")
        assert _released(q, job_id) == []


async def test_a_result_over_the_bound_is_the_jobs_own_failure_not_a_lost_lease(
    dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A result over RESULT_MAX_BYTES under a 1 s lease: the handler runs once and its job
    fails with the bound in its error (before, the settlement outlasted the lease and the job
    was claimed again until dead, every run a success). One just under the bound is stored."""
    from pgq_core.queue import RESULT_MAX_BYTES

    runs: list[int] = []

    def handler(job: JobContext) -> Any:
        runs.append(job.id)
        return {"blob": "x" * (job.payload["size"] - len('{"blob": ""}'))}

    with Queue(psycopg.connect(dsn, autocommit=True), schema, owns=True) as q:
        big = q.enqueue("q", {"size": 40 * RESULT_MAX_BYTES}, max_attempts=1)
        fits = q.enqueue("q", {"size": RESULT_MAX_BYTES}, max_attempts=1)
        worker = make_worker(dsn, schema, handler, lease=timedelta(seconds=1), concurrency=2)
        with caplog.at_level(logging.WARNING, logger="pgq.worker"):
            async with running(worker):
                await until(
                    lambda: {q.job(big).status, q.job(fits).status} <= {"dead", "done"},
                    what="both settled",
                )
        assert sorted(runs) == sorted([big, fits])
        assert q.job(big).status == "dead"
        assert f"over pgq's bound of {RESULT_MAX_BYTES:,}" in (q.job(big).last_error or "")
        assert q.job(fits).status == "done"
        assert len(q.job(fits).result["blob"]) == RESULT_MAX_BYTES - len('{"blob": ""}')
        assert "lease lost" not in caplog.text


def test_a_result_far_over_the_bound_is_refused_before_json_dumps_holds_the_gil() -> None:
    """`json.dumps` keeps the GIL until it returns (40 MB of it starved a 1 s lease's
    heartbeater on a loaded machine), so a result is measured first, in Python, and refused
    once past RESULT_MAX_BYTES ("at least N bytes", never serialised): 40 MiB of text, a
    million zeros in shared lists. The measure never passes the JSON's own size, and is exact
    for plain text and brackets; a cycle still reads as one."""
    import json

    from pgq_core.queue import RESULT_MAX_BYTES, result_json
    from pgq_core.queue_common import json_size_floor

    for result in ({"blob": "x" * 40 * RESULT_MAX_BYTES}, [[0] * 1000] * 1000):
        with pytest.raises(ValueError, match=r"at least [\d,]+ bytes of JSON, over pgq's bound"):
            result_json(result)

    plain = {"a": ["bc", [0, 1], {}], "": "", "d": [{"e": []}], "f": (7,)}
    assert json_size_floor(plain, RESULT_MAX_BYTES) == len(json.dumps(plain))
    for value in (
        {"a": [1.5, True, False, None, -12, 'é\n"x'], 3: [], None: {"k": "\u2603"}},
        [[[], {}], "", 0],
        "\u00e9t\u00e9",
        12345,
        None,
    ):
        text = json.dumps(value, ensure_ascii=False)
        assert json_size_floor(value, RESULT_MAX_BYTES) <= len(text.encode()), text
        assert result_json(value) == (None if value is None else text)
    loop: list[Any] = []
    loop.append({"again": loop})
    with pytest.raises(ValueError, match="Circular reference detected"):
        result_json(loop)


async def test_a_read_only_outage_is_one_line_when_it_begins_and_one_when_it_ends(
    own_database: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database turns read-only for a few seconds under a running worker: its statements
    fail with 25006 and its reconnects land on read-only sessions again. It says the outage
    began once, that it waits for writes once, and that it ended once, not a line per
    reconnect; then it runs the queue to the end."""
    _prepare(own_database)
    name = str(conninfo_to_dict(own_database)["dbname"])

    def read_only(on: bool) -> None:
        with psycopg.connect(own_database, autocommit=True) as admin:
            admin.execute("SET default_transaction_read_only = off")
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = {}").format(
                    sql.Identifier(name), sql.Literal("on" if on else "off")
                )
            )
            if on:  # end the worker's sessions: they keep the setting they began with
                admin.execute(
                    "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_catalog.pg_backend_pid()",
                    [name],
                )

    caplog.set_level(logging.INFO, logger="pgq.worker")
    tries = link_connects(monkeypatch)
    with Queue.connect(own_database) as q:
        async with running(make_worker(own_database, "pgq", lambda job: None)):
            first = q.enqueue("q", {})
            await until(lambda: q.job(first).status == "done", what="the first job")
            before = tries()
            read_only(True)
            # reconnects to read-only sessions after 0.25, 0.5 and 1 s of backoff
            await until(lambda: tries() >= before + 3, what="three reconnects")
            read_only(False)
            with Queue.connect(own_database) as fresh:
                last = fresh.enqueue("q", {})
                await until(lambda: fresh.job(last).status == "done", what="a job after it")
            await until(
                lambda: any("reachable again" in r.getMessage() for r in caplog.records),
                what="the main connection back",
            )
    lines = [r.getMessage() for r in caplog.records if r.name == "pgq.worker"]
    down = [line for line in lines if "database unavailable" in line]
    waiting = [line for line in lines if line.startswith("pgq main ") and "takes no writes" in line]
    back = [line for line in lines if "database reachable again" in line]
    assert (len(down), len(waiting), len(back)) == (1, 1, 1), lines
    # besides the link's own line, the statement that met the flip says why once per lane
    assert len([line for line in lines if "takes no writes" in line]) <= 3, lines
