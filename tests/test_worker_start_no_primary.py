"""A worker started while a cluster has no writable primary (its DSN names several hosts;
they answer, none takes writes, as mid-failover) waits for one, saying so once, and then runs
its queue; a stop while it waits ends it cleanly. Nothing answering still fails at once."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support import make_worker, until

from pgq_core import Queue
from pgq_core.errors import PgqError
from pgq_core.migrate import migrate


def _read_only(dsn: str, on: bool) -> None:
    name = str(conninfo_to_dict(dsn)["dbname"])
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SET default_transaction_read_only = off")
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = {}").format(
                sql.Identifier(name), sql.Literal("on" if on else "off")
            )
        )


def _two_hosts(dsn: str) -> str:
    """The same server named twice: a DSN of several hosts, so clients ask for read-write."""
    params = conninfo_to_dict(dsn)
    host, port = str(params.get("host", "localhost")), str(params.get("port", "5432"))
    return make_conninfo(dsn, host=f"{host},{host}", port=f"{port},{port}")


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_a_worker_started_with_no_primary_waits_for_one(
    own_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(own_database) as conn:
        migrate(conn)
    with Queue.connect(own_database) as q:
        job_id = q.enqueue("q", {})
    _read_only(own_database, True)
    caplog.set_level(logging.INFO, logger="pgq.worker")
    worker = make_worker(_two_hosts(own_database), "pgq", lambda job: None)
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: _lines(caplog, "no writable primary"), what="the waiting line")
        await asyncio.sleep(1.0)  # several tries' worth of backoff: still one line
        assert not task.done(), task
        _read_only(own_database, False)
        with Queue.connect(own_database) as q:
            await until(lambda: q.job(job_id).status == "done", what="the job done")
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert len(_lines(caplog, "no writable primary among 2 hosts")) == 1, caplog.text
    assert len(_lines(caplog, "a writable primary answers")) == 1, caplog.text


async def test_a_stop_while_waiting_for_a_primary_ends_the_worker_cleanly(
    own_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(own_database) as conn:
        migrate(conn)
    _read_only(own_database, True)
    caplog.set_level(logging.INFO, logger="pgq.worker")
    worker = make_worker(_two_hosts(own_database), "pgq", lambda job: None)
    task = asyncio.create_task(worker.run())
    await until(lambda: _lines(caplog, "no writable primary"), what="the waiting line")
    worker.stop()
    await asyncio.wait_for(task, 10)  # returns: no error, no job touched
    assert _lines(caplog, "stopped before a writable primary answered"), caplog.text


async def test_a_burst_worker_with_no_primary_fails_at_once(own_database: str) -> None:
    with psycopg.connect(own_database) as conn:
        migrate(conn)
    _read_only(own_database, True)
    worker = make_worker(_two_hosts(own_database), "pgq", lambda job: None, burst=True)
    with pytest.raises(PgqError, match="database unavailable"):
        await asyncio.wait_for(worker.run(), 30)
