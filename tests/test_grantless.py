"""Nothing a login without a single grant on the queue can do stalls a queue: the limited
queues' claims serialize on their settings row, which only a role granted UPDATE on it or
EXECUTE on claim_allowance (pgq's worker role) can lock, never on an advisory lock whose key
anyone can compute."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support import make_worker, running, until

from pgq_core import JobSpec, Queue

TESTS = Path(__file__).parent


@pytest.fixture
def stranger(dsn: str) -> Iterator[str]:
    """The DSN of a login role with no grant at all (PUBLIC's defaults only)."""
    role = f"stranger_{secrets.token_hex(4)}"
    password = secrets.token_hex(8)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    try:
        yield make_conninfo("", **{**params, "user": role, "password": password})
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


async def test_a_grantless_login_cannot_stall_a_limited_queue(
    dsn: str, schema: str, queue: Queue, stranger: str
) -> None:
    """The stranger holds the advisory lock limited claims once took (the settings table's
    oid and the queue's hashtext, both readable by anyone) and tries the settings row itself
    (refused): the limited queue drains beside an unlimited one all the same."""
    queue.set_limit("limq", 2)
    queue.enqueue_many([JobSpec("limq", {}) for _ in range(20)])
    queue.enqueue_many([JobSpec("freeq", {}) for _ in range(20)])
    with psycopg.connect(stranger) as holder:
        oid = holder.execute(
            "SELECT c.oid::int FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = 'queue_settings'",
            [schema],
        ).fetchone()
        assert oid is not None
        holder.execute("SELECT pg_advisory_lock(%s, hashtext('limq'))", [oid[0]])
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            holder.execute(
                sql.SQL("SELECT 1 FROM {}.queue_settings FOR NO KEY UPDATE").format(
                    sql.Identifier(schema)
                )
            )
        holder.rollback()
        for locking in (  # each locks rows with the owner's rights: not the stranger's to run
            "SELECT {}.claim_allowance('limq', 1, '{{}}')",
            "SELECT * FROM {}.workflow_parents(ARRAY(SELECT generate_series(1, 40)::bigint))",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                holder.execute(sql.SQL(locking).format(sql.Identifier(schema)))
            holder.rollback()
        holder.execute("SELECT pg_advisory_lock(%s, hashtext('limq'))", [oid[0]])
        worker = make_worker(dsn, schema, lambda job: None, queues=["limq", "freeq"])
        async with running(worker):
            await until(
                lambda: len(queue.jobs(status="done", limit=100)) == 40, what="all 40 done"
            )
        locks = holder.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ).fetchone()
        assert locks is not None and locks[0] >= 1  # the stranger held it throughout


def test_a_worker_without_grants_says_so_in_the_operators_words(
    dsn: str, schema: str, stranger: str
) -> None:
    """`pgq worker` as a login that may not read the schema: one line, permission denied,
    and no internal class name (it was `unexpected Refused`)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
    )
    env.pop("PGQ_DSN", None)
    done = subprocess.run(
        [sys.executable, "-m", "pgq_cli", "--dsn", stranger, "--schema", schema, "worker", "q",
         "--handler", "handlers_for_tests:noop", "--burst"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pgq: error: permission denied"), done.stderr
    assert "unexpected" not in done.stderr and "Refused" not in done.stderr
