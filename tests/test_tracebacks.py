"""A failed attempt keeps its traceback on its history row (bounded, the cut shown), shown by
`pgq show` and `--json`, and logged once at WARNING; the job's last_error and its error group
keep the error line alone."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import pytest
from click.testing import Result
from psycopg import sql
from support import TIMEOUT, make_worker

from pgq_core import DontRetry, Queue
from pgq_core.text import TRACEBACK_LIMIT, bounded_traceback, format_traceback
from pgq_core.worker import JobContext


def _divide(n: int) -> float:
    return 1 / n


def divide_by_zero(ctx: JobContext) -> None:
    _divide(0)


def _tracebacks(queue: Queue, job_id: int) -> list[tuple[str, str | None]]:
    return [(e.event, e.traceback) for e in queue.history(job_id) if e.event in ("failed", "dead")]


async def test_a_failed_attempt_keeps_its_traceback_and_its_error_line(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    retried = queue.enqueue("q", {}, max_attempts=2)
    caplog.set_level(logging.INFO, logger="pgq.worker")
    worker = make_worker(dsn, schema, divide_by_zero, burst=True, retry_base=0.0)
    await asyncio.wait_for(worker.run(), TIMEOUT)

    job = queue.job(retried)
    assert (job.status, job.last_error) == ("dead", "ZeroDivisionError: division by zero")
    rows = _tracebacks(queue, retried)
    assert [event for event, _ in rows] == ["failed", "dead"]
    for _, stack in rows:
        assert stack is not None
        assert stack.startswith("Traceback (most recent call last):")
        assert "in divide_by_zero" in stack and "in _divide" in stack
        assert "return 1 / n" in stack
        assert stack.endswith("ZeroDivisionError: division by zero")
        assert "call_sync" not in stack  # the worker's own frame is left out
    group = queue.conn.execute(
        sql.SQL("SELECT error_group, {s}.error_group(%s) FROM {s}.jobs WHERE id = %s").format(
            s=sql.Identifier(schema)
        ),
        ["ZeroDivisionError: division by zero", retried],
    ).fetchone()
    assert group is not None and group[0] is not None and group[0] == group[1]

    failures = [r for r in caplog.records if f"job {retried} failed" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.WARNING, logging.WARNING]
    first, last = (r.getMessage() for r in failures)
    assert "(attempt 1 of 2), will retry: ZeroDivisionError" in first
    assert "(attempt 2 of 2), dead: ZeroDivisionError" in last
    for message in (first, last):
        assert message.count("Traceback (most recent call last):") == 1
        assert "in _divide" in message


async def test_a_dont_retry_failure_is_logged_dead_with_both_stacks(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """It was logged 'will retry' although dead: the line read the attempt count only."""
    job_id = queue.enqueue("q", {}, max_attempts=3)

    async def handler(ctx: JobContext) -> None:
        try:
            {}["missing"]
        except KeyError as exc:
            raise DontRetry("no such field") from exc

    caplog.set_level(logging.INFO, logger="pgq.worker")
    worker = make_worker(dsn, schema, handler, burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    assert queue.job(job_id).status == "dead"
    (line,) = [r.getMessage() for r in caplog.records if f"job {job_id} failed" in r.getMessage()]
    assert "(attempt 1 of 3), dead: KeyError: 'missing' (not retried: no such field)" in line
    assert "will retry" not in line
    ((event, stack),) = _tracebacks(queue, job_id)
    assert event == "dead" and stack is not None
    assert "KeyError: 'missing'" in stack and "DontRetry: no such field" in stack
    assert "direct cause" in stack


def test_a_long_traceback_is_cut_in_the_middle_and_says_so() -> None:
    def ping(n: int) -> None:  # two frames in turn: Python folds only repeats of one
        if n:
            pong(n - 1)
        raise RuntimeError("at the bottom")

    def pong(n: int) -> None:
        ping(n)

    try:
        ping(200)
    except RuntimeError as exc:
        error = exc
    stack = format_traceback(error)
    assert stack is not None and len(stack) <= TRACEBACK_LIMIT
    assert stack.startswith("Traceback (most recent call last):")
    assert stack.endswith("RuntimeError: at the bottom")
    assert "characters of frames cut" in stack
    for limit in (0, 10, 100, 1000):
        assert len(bounded_traceback("x" * 5000, limit)) <= max(limit, 60)
    assert bounded_traceback("short\x00") == "short"


def test_a_hostile_exception_never_breaks_the_traceback() -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    try:
        raise Hostile()
    except Hostile as exc:
        stack = format_traceback(exc)
    assert stack is not None and "Hostile" in stack


def test_pgq_show_prints_the_last_traceback_and_json_has_each(
    pgq: Any, queue: Queue, dsn: str, schema: str
) -> None:
    job_id = queue.enqueue("q", {}, max_attempts=2)
    worker = make_worker(dsn, schema, divide_by_zero, burst=True, retry_base=0.0)
    asyncio.run(asyncio.wait_for(worker.run(), TIMEOUT))

    shown: Result = pgq("show", str(job_id))
    assert shown.exit_code == 0, shown.output
    assert "traceback (attempt at fence 2, dead; --json has all 2)" in shown.output
    assert "in _divide" in shown.output and "ZeroDivisionError" in shown.output
    detail = json.loads(pgq("show", str(job_id), "--json").output)
    stacks = [e["traceback"] for e in detail["history"] if e["event"] in ("failed", "dead")]
    assert len(stacks) == 2 and all("in _divide" in s for s in stacks)
    assert detail["last_error"] == "ZeroDivisionError: division by zero"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="notes need 3.11")
def test_notes_are_kept() -> None:
    try:
        err = ValueError("x")
        err.add_note("a note")
        raise err
    except ValueError as exc:
        stack = format_traceback(exc)
    assert stack is not None and stack.endswith("ValueError: x\na note")
