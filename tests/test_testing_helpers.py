"""Testing users' tasks: a private schema, queues drained in-process, eager mode, and the
pytest plugin as a user's own conftest enables it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from pgq_core import DontRetry, Snooze, Tasks
from pgq_core.testing import drain, eager, private_schema


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_catalog.pg_namespace WHERE nspname LIKE 'pgq_test_%'"
        ).fetchall()
    return {str(r[0]) for r in rows}


def test_a_private_schema_is_migrated_used_and_dropped(dsn: str) -> None:
    tasks = Tasks("mail")
    sent: list[str] = []

    @tasks.task()
    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    @tasks.task(max_attempts=3)
    def bounce(to: str) -> None:
        raise DontRetry(f"{to} does not exist")

    @tasks.task()
    def later() -> None:
        raise Snooze(600)

    with private_schema(dsn) as where, where.queue() as queue:
        assert where.schema in _schemas(dsn)
        ok = send.enqueue("ada@example.com", conn=queue)
        dead = bounce.enqueue("nobody@example.com", conn=queue)
        snoozed = later.enqueue(conn=queue)
        snap = drain(tasks, where)
        assert (snap.done, snap.failed) == (1, 1)
        assert sent == ["ada@example.com"]
        assert queue.job(ok).result == "sent to ada@example.com"
        assert (queue.job(dead).status, queue.job(dead).attempts) == ("dead", 1)
        assert queue.job(snoozed).status == "ready"  # not due for ten minutes: left
    assert where.schema not in _schemas(dsn)


def test_eager_mode_runs_a_task_as_it_is_enqueued(dsn: str) -> None:
    tasks = Tasks("orders")
    ran: list[int] = []

    @tasks.task()
    def ship(order: int) -> int:
        ran.append(order)
        if order == 1:
            follow_up.enqueue(order)  # a task enqueued by a task runs in the same drain
        return order * 10

    @tasks.task()
    def follow_up(order: int) -> None:
        ran.append(-order)

    with private_schema(dsn) as where:
        with eager(tasks, where):
            job_id = ship.enqueue(1)
            assert sorted(ran) == [-1, 1]  # both ran before enqueue returned
        with where.queue() as queue:
            assert (queue.job(job_id).status, queue.job(job_id).result) == ("done", 10)
    assert tasks.client is None  # as it was before


@pytest.mark.slow  # a pytest run of its own (about 10 s)
def test_the_pytest_plugin_in_a_users_own_tests(dsn: str, tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["pgq_core.pytest_plugin"]\n')
    (tmp_path / "shop_tasks.py").write_text(textwrap.dedent('''
        from pgq_core import Tasks
        tasks = Tasks("shop")

        @tasks.task()
        def total(prices: list[int]) -> int:
            return sum(prices)
    '''))
    (tmp_path / "test_shop.py").write_text(textwrap.dedent('''
        from shop_tasks import tasks, total

        def test_total(pgq_schema, pgq_queue, pgq_drain):
            open("schema.txt", "w").write(pgq_schema.schema)
            job_id = total.enqueue([2, 3], conn=pgq_queue)
            snap = pgq_drain(tasks)
            assert snap.done == 1
            assert pgq_queue.job(job_id).result == 5
    '''))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQ_")}
    env["PGQ_DSN"] = dsn
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    used = (tmp_path / "schema.txt").read_text()
    assert used.startswith("pgq_test_") and used not in _schemas(dsn)  # dropped after
