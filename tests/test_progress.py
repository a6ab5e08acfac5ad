"""A handler's progress (`JobContext.progress`): validated, kept in memory, written by the
heartbeat's own statement, fenced, at most once a second per job, cleared by a new claim, and
shown by `pgq show`. On a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import TIMEOUT, Pgq, make_worker, ok, running, until

from pgq_core import Queue, migrate, ops
from pgq_core.models import Job, JobProgress
from pgq_core.worker import JobContext
from pgq_core.worker.context import PROGRESS_NOTE_CHARS, ProgressCell, check_progress
from pgq_core.worker.heartbeater import Heartbeater
from pgq_core.worker.link import Timeouts

#: a 1.2 s lease: the worker beats every 0.4 s
LEASE = timedelta(seconds=1.2)


def progress_of(queue: Queue, job_id: int) -> tuple[Any, ...]:
    d = queue.job(job_id)
    return d.progress_done, d.progress_total, d.progress_note


# -------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("done", "total", "message"),
    [
        (-1, None, "done must be >= 0"),
        (1, 0, "total must be > 0"),
        (5, -3, "total must be > 0"),
        (11, 10, "done must be <= total, not 11 of 10"),
        (1.5, None, "done must be an integer, not float"),
        (True, None, "done must be an integer, not bool"),
        ("3", None, "done must be an integer, not str"),
        (1, 2.0, "total must be an integer, not float"),
        (2**63, None, "done must be at most"),
    ],
)
def test_bad_progress_is_a_clear_value_error(done: Any, total: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_progress(done, total)


def test_a_note_is_one_line_without_control_characters_and_bounded() -> None:
    with pytest.raises(ValueError, match="note must be a string"):
        check_progress(1, 2, 42)  # type: ignore[arg-type]
    p = check_progress(3, 10, "\x1b[31mred\x1b[0m\nline two\ttab\x00")
    assert p == JobProgress(3, 10, "[31mred [0m line two tab")
    long = check_progress(0, None, "é" * 1000)
    assert long.note is not None and len(long.note) == PROGRESS_NOTE_CHARS
    assert long.note.endswith("…")
    assert check_progress(0, None, " \n ").note is None
    assert check_progress(7) == JobProgress(7, None, None)


def test_the_cell_coalesces_to_one_write_a_second() -> None:
    """`due` hands the latest value once, then nothing until a second after the write it
    landed; an unwritten value (a failed or busy beat) stays due."""
    cell = ProgressCell()
    assert cell.due(100.0) is None and cell.latest(100.0) is None
    for i in range(1000):
        cell.set(JobProgress(i, 1000), now=100.0 + i / 1000)
    found = cell.due(101.0)
    assert found is not None and found[1] == JobProgress(999, 1000, None, found[1].age)
    assert found[1].age == pytest.approx(0.001)
    assert cell.due(101.2) is not None, "not written yet: still due"
    cell.written(found[0], 101.2)
    assert cell.due(101.3) is None, "nothing new"
    cell.set(JobProgress(1000, 1000), now=101.4)
    assert cell.due(102.1) is None, "within a second of the last write"
    again = cell.due(102.2)
    assert again is not None and again[1].done == 1000
    cell.set(JobProgress(1000, 1000, "newer"), now=102.3)
    cell.written(again[0], 102.2)  # an older version landed: the newer one stays due
    latest = cell.due(103.3)
    assert latest is not None and latest[1].note == "newer"


# -------------------------------------------------------------------------------- in a worker


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_progress_from_a_handler_reaches_the_row(
    dsn: str, schema: str, queue: Queue, kind: str
) -> None:
    job_id = queue.enqueue("q", {})
    release = threading.Event()

    def sync_handler(ctx: JobContext) -> None:
        ctx.progress(3, 10, "step\n3")
        release.wait(TIMEOUT)

    async def async_handler(ctx: JobContext) -> None:
        ctx.progress(3, 10, "step\n3")
        while not release.is_set():
            await asyncio.sleep(0.02)

    handler = sync_handler if kind == "sync" else async_handler
    worker = make_worker(dsn, schema, handler, lease=LEASE)
    try:
        async with running(worker):
            await until(lambda: progress_of(queue, job_id)[0] == 3, what="progress written")
            d = queue.job(job_id)
            assert (d.status, d.progress_done, d.progress_total, d.progress_note) == (
                "running", 3, 10, "step 3",
            )
            assert d.progress_at is not None and d.claimed_at is not None
            assert d.progress_at >= d.claimed_at
            [job] = worker.snapshot().running
            assert job.progress is not None and (job.progress.done, job.progress.total) == (3, 10)
            [lease] = queue.leases()
            assert (lease.progress_done, lease.progress_total, lease.progress_note) == (
                3, 10, "step 3",
            )
            release.set()
            await until(lambda: queue.job(job_id).status == "done", what="job done")
    finally:
        release.set()
    assert progress_of(queue, job_id) == (3, 10, "step 3"), "a finished job keeps its progress"


def test_a_new_claim_clears_the_progress(queue: Queue) -> None:
    job_id = queue.enqueue("q", {})
    [job] = queue.claim("q", 1, timedelta(seconds=30), "w")
    settled = queue.run(ops.extend_leases([(job.id, job.fence)], None, {job.id: JobProgress(4)}))
    assert settled.applied == [job.id]
    assert progress_of(queue, job_id) == (4, None, None)
    assert queue.release_many([(job.id, job.fence)]).applied == [job.id]
    assert progress_of(queue, job_id) == (4, None, None), "kept once the attempt ended"
    [again] = queue.claim("q", 1, timedelta(seconds=30), "w2")
    d = queue.job(job_id)
    assert (again.id, d.fence, d.progress_done, d.progress_at) == (job_id, 2, None, None)


def test_a_beat_without_progress_leaves_it_as_it_was(queue: Queue) -> None:
    job_id = queue.enqueue("q", {})
    [job] = queue.claim("q", 1, timedelta(seconds=30), "w")
    held = [(job.id, job.fence)]
    queue.run(ops.extend_leases(held, None, {job.id: JobProgress(2, 5, "half", age=60.0)}))
    first = queue.job(job_id)
    assert first.progress_at is not None and first.lease_until is not None
    # the age is counted back from the server's clock: reported a minute before the beat
    assert (first.lease_until - first.progress_at).total_seconds() == pytest.approx(90, abs=5)
    queue.run(ops.extend_leases(held))
    again = queue.job(job_id)
    assert (again.progress_done, again.progress_total, again.progress_note) == (2, 5, "half")
    assert again.progress_at == first.progress_at
    assert again.lease_until is not None and again.lease_until > first.lease_until


# ------------------------------------------------------------------------------- the heartbeat


class Beats:
    def __init__(self, dsn: str, schema: str) -> None:
        self.worker_id = f"hb-{secrets.token_hex(3)}"
        self.lost: list[tuple[int, int]] = []
        self.heart = Heartbeater(
            dsn, schema, Timeouts(), 0.1, self.worker_id, asyncio.get_running_loop(),
            self.lost.extend,
        )


@pytest.fixture
async def beats(dsn: str, schema: str) -> AsyncIterator[Beats]:
    beats = Beats(dsn, schema)
    beats.heart.start()
    try:
        yield beats
    finally:
        await asyncio.to_thread(beats.heart.stop)


def claim(queue: Queue, worker: str) -> Job:
    queue.enqueue("q", {})
    [job] = queue.claim("q", 1, timedelta(seconds=30), worker)
    return job


async def test_a_stale_workers_progress_lands_nowhere(beats: Beats, queue: Queue) -> None:
    """Claim two jobs, bump one's fence by SQL (as a kill or a reclaim does), report progress on
    both: only the job whose fence is still ours gets it; the other row is unchanged."""
    kept, stale = claim(queue, beats.worker_id), claim(queue, beats.worker_id)
    queue.conn.execute(
        sql.SQL("UPDATE {}.jobs SET fence = fence + 1 WHERE id = %s").format(
            sql.Identifier(queue.schema)
        ),
        [stale.id],
    )
    before = queue.job(stale.id)
    for job in (kept, stale):
        cell = ProgressCell()
        cell.set(JobProgress(5, 9, "mine"))
        beats.heart.track(job.id, job.fence, cell)
    await until(lambda: progress_of(queue, kept.id)[0] == 5, timeout=5, what="progress kept")
    await until(lambda: beats.lost, timeout=5, what="the stale job reported lost")
    assert beats.lost == [(stale.id, stale.fence)]
    after = queue.job(stale.id)
    assert (after.progress_done, after.progress_note, after.progress_at) == (None, None, None)
    assert (after.fence, after.lease_until) == (before.fence, before.lease_until)
    assert beats.heart.progress_writes == 1


async def test_a_thousand_reports_in_two_seconds_make_at_most_three_writes(
    own_database: str,
) -> None:
    """Measured in the database: a row trigger counts the updates that change progress_at and
    those that move the lease. The worker beats every 0.4 s; the handler reports 1000 times."""
    with psycopg.connect(own_database, autocommit=True) as conn:
        migrate(conn, "pgq")
        conn.execute(
            """
            CREATE TABLE pgq.writes (kind text);
            CREATE FUNCTION pgq.count_writes() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF OLD.progress_at IS DISTINCT FROM NEW.progress_at THEN
                INSERT INTO pgq.writes VALUES ('progress');
              END IF;
              IF OLD.lease_until IS DISTINCT FROM NEW.lease_until THEN
                INSERT INTO pgq.writes VALUES ('lease');
              END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER count_writes BEFORE UPDATE ON pgq.jobs
              FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status = 'running')
              EXECUTE FUNCTION pgq.count_writes();
            """
        )
        with Queue.connect(own_database, "pgq") as queue:
            job_id = queue.enqueue("q", {})
        reported = 0

        def handler(ctx: JobContext) -> None:
            nonlocal reported
            end = time.monotonic() + 2.0
            for i in range(1000):
                ctx.progress(i + 1, 1000, f"item {i + 1}")
                reported += 1
                time.sleep(max(0.0, (end - time.monotonic()) / (1000 - i)))

        worker = make_worker(own_database, "pgq", handler, lease=LEASE, burst=True)
        await asyncio.wait_for(worker.run(), TIMEOUT)
        writes = dict(
            conn.execute("SELECT kind, count(*) FROM pgq.writes GROUP BY kind").fetchall()
        )
        done = conn.execute("SELECT status FROM pgq.jobs WHERE id = %s", [job_id]).fetchone()
    assert reported == 1000 and done == ("done",)
    assert 1 <= writes.get("progress", 0) <= 3, writes
    # the heartbeat (every 0.4 s) ran more often than progress landed (at most once a second)
    assert writes["lease"] >= 3 and writes["lease"] > writes["progress"], writes


# ---------------------------------------------------------------------------------- pgq show


def test_show_prints_the_progress_and_json_carries_it(pgq: Pgq, queue: Queue) -> None:
    job_id = queue.enqueue("mail", {})
    [job] = queue.claim("mail", 1, timedelta(seconds=30), "w-1")
    note = "[bold]sent[/bold] \x1b]0;title"
    queue.run(
        ops.extend_leases([(job.id, job.fence)], None, {job.id: JobProgress(40, 100, note)})
    )
    detail = json.loads(ok(pgq("show", str(job_id), "--json")))
    assert (detail["progress_done"], detail["progress_total"], detail["progress_note"]) == (
        40, 100, note,
    )
    assert detail["progress_at"] is not None
    keys = list(detail)
    assert keys[: keys.index("history") + 1][-3:] == [
        "last_error_bytes", "last_error_truncated", "history",
    ], "the existing keys keep their order; the new ones come after"
    human = ok(pgq("show", str(job_id)))
    assert "40 of 100 (40%), reported" in human
    assert "[bold]sent[/bold] \\x1b]0;title" in human  # as data: no markup, no control

    other = queue.enqueue("mail", {})
    assert "progress" not in ok(pgq("show", str(other))).split("payload")[0]
    assert json.loads(ok(pgq("show", str(other), "--json")))["progress_done"] is None
