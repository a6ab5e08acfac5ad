"""The worker's settle statements stay linear in the jobs they settle, whatever the planner
guesses. A prepared statement runs a generic plan from its sixth execution, and a generic plan
cannot see how many ids its arrays hold: it planned joins that compared every held job with
every other (480 held: 229,920 rows removed by a join filter, 67 ms) and one that read the
jobs table once per held job. Each statement here runs under a forced generic plan with
`auto_explain`, and its plan is read back."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgq_core import JobSpec, Queue, ops, queries

HELD = 300


@pytest.fixture
def explained(dsn: str) -> Iterator[tuple[psycopg.Connection[Any], list[str]]]:
    """A connection whose statements run generic plans and send their analyzed plans as
    notices (collected in the list)."""
    plans: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.Error as exc:
            pytest.skip(f"auto_explain cannot be loaded here: {exc}")
        for setting, value in [
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_level", "notice"),
            ("plan_cache_mode", "force_generic_plan"),
        ]:
            conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(*setting.split(".")), value))
        conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
        yield conn, plans


def _held(queue: Queue, conn: psycopg.Connection[Any], n: int = HELD) -> list[tuple[int, int]]:
    """`n` jobs claimed by worker 'w' (of `2 n` enqueued): (id, fence) each."""
    queue.enqueue_many([JobSpec("q", {"i": i}) for i in range(2 * n)])
    op = ops.claim("q", n, timedelta(minutes=5), "w")
    rows = conn.execute(queries.statement(op.name, queue.schema), op.params).fetchall()
    assert len(rows) == n
    return [(int(r[0]), int(r[3])) for r in rows]


def _quadratic(plan: str) -> list[str]:
    """The plan's lines that compared held jobs pairwise (a join filter that removed at least
    as many rows as jobs are held) or scanned a table or CTE again for each row of another."""
    lines = [line.strip() for line in plan.splitlines()]
    removed = [
        line
        for line in lines
        if (m := re.match(r"Rows Removed by Join Filter: (\d+)", line)) and int(m[1]) >= HELD
    ]
    rescans = [
        line
        for line in lines
        if (m := re.match(r"(->\s+)?(Seq|CTE) Scan .* loops=(\d+)\)", line)) and int(m[3]) > 1
    ]
    return removed + rescans


def _settling(name: str, held: list[tuple[int, int]]) -> ops.Op[Any]:
    if name == "settle_complete_and_claim":
        return ops.complete_and_claim(held, "q", HELD, timedelta(minutes=5), "w")
    if name == "settle_fail":
        return ops.settle_fail([(i, f, "boom") for i, f in held], "w")
    if name == "extend_leases":
        return ops.extend_leases(held)
    if name == "hand_back":
        return ops.hand_back(held, "w", "stopping")
    if name == "settle_snooze":
        return ops.settle_snooze(held, [30.0] * len(held), "w")
    if name == "complete":
        return ops.complete(held, "w")
    if name == "fail":
        return ops.fail([(i, f, "boom") for i, f in held], "w")
    if name == "heartbeat":
        return ops.heartbeat(held)
    return ops.release(held, "w", "stopping")


@pytest.mark.parametrize(
    "name",
    [
        "settle_complete_and_claim",
        "settle_fail",
        "extend_leases",
        "hand_back",
        "settle_snooze",
        "complete",
        "fail",
        "heartbeat",
        "release",
    ],
)
def test_a_settle_statements_generic_plan_is_linear_in_the_jobs_it_settles(
    name: str,
    explained: tuple[psycopg.Connection[Any], list[str]],
    queue: Queue,
) -> None:
    conn, plans = explained
    held = _held(queue, conn)
    op = _settling(name, held)
    plans.clear()
    rows = conn.execute(queries.statement(op.name, queue.schema), op.params, prepare=True)
    outcome = {
        "settle_complete_and_claim": "completed",
        "settle_fail": "failed",
        "extend_leases": "extended",
        "hand_back": "released",
        "settle_snooze": "snoozed",
    }.get(name)
    found = rows.fetchall()
    settled = [r for r in found if r[0] == outcome] if outcome else found
    assert len(settled) == HELD
    [plan] = [p for p in plans if "Append" in p or "Update on" in p or "Insert on" in p]
    assert _quadratic(plan) == [], plan


@pytest.mark.parametrize("name", ["complete", "fail", "heartbeat", "release"])
def test_the_batch_api_writes_a_row_updated_while_it_waited_for_its_lock(
    name: str, dsn: str, queue: Queue
) -> None:
    """A heartbeat commits while the statement waits for the row's lock: the statement began
    before that update, and still writes the row (a plain UPDATE's semantics, kept)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(job_id, fence)] = _held(queue, conn, 1)
    with psycopg.connect(dsn) as blocker:
        blocker.execute(
            sql.SQL(
                "UPDATE {}.jobs SET lease_until = lease_until + interval '1 minute' WHERE id = %s"
            ).format(sql.Identifier(queue.schema)),
            [job_id],
        )
        op = _settling(name, [(job_id, fence)])
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = conn.info.backend_pid
            box: dict[str, Any] = {}

            def settle() -> None:
                box["rows"] = conn.execute(
                    queries.statement(op.name, queue.schema), op.params
                ).fetchall()

            thread = threading.Thread(target=settle)
            thread.start()
            with psycopg.connect(dsn, autocommit=True) as watch:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    row = watch.execute(
                        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
                    ).fetchone()
                    if row is not None and row[0] == "Lock":
                        break
                    time.sleep(0.01)
                else:
                    pytest.fail("the statement never waited for the row's lock")
            blocker.commit()
            thread.join(10)
    assert [int(r[0]) for r in box["rows"]] == [job_id]
