"""Periodic jobs on a real server: the schedule API, the slot guard, and three in-process
workers enqueuing each slot of a 1-second schedule exactly once."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql
from support import Pgq, make_worker, until

from pgq_core import PgqError, Queue, ops
from pgq_core.cron import latest_slot, next_slot, slot_key
from pgq_core.worker import JobContext, Worker, scheduler


def slot_jobs(queue: Queue, name: str) -> Counter[str]:
    rows = queue.conn.execute(
        sql.SQL("SELECT unique_key FROM {}.jobs WHERE unique_key LIKE %s").format(
            sql.Identifier(queue.schema)
        ),
        [f"schedule:{name}:%"],
    ).fetchall()
    return Counter(str(r[0]) for r in rows)


def backdate(queue: Queue, name: str, seconds: float) -> None:
    queue.conn.execute(
        sql.SQL(
            "UPDATE {}.schedules SET created_at = created_at - make_interval(secs => %s)"
            " WHERE name = %s"
        ).format(sql.Identifier(queue.schema)),
        [seconds, name],
    )


def test_add_list_run_remove(queue: Queue) -> None:
    queue.add_schedule("digest", "emails", "*/5 * * * *", {"kind": "digest"}, max_attempts=3)
    with pytest.raises(PgqError, match="already exists"):
        queue.add_schedule("digest", "emails", "* * * * *")
    queue.add_schedule(
        "digest", "emails", "0 * * * *", {"kind": "hourly"}, max_attempts=3, replace=True
    )
    (s,) = queue.list_schedules()
    assert (s.name, s.queue, s.cron, s.payload, s.max_attempts) == (
        "digest",
        "emails",
        "0 * * * *",
        {"kind": "hourly"},
        3,
    )
    assert s.last_slot is None and s.next_slot is not None
    assert s.next_slot > datetime.now(UTC) and s.next_slot.minute == 0
    job_id = queue.run_schedule("digest")
    job = queue.job(job_id)
    assert (job.queue, job.payload, job.max_attempts, job.unique_key) == (
        "emails",
        {"kind": "hourly"},
        3,
        None,
    )
    assert "run now" in (job.history[0].detail or "")
    queue.remove_schedule("digest")
    assert queue.list_schedules() == []
    for call in (lambda: queue.remove_schedule("digest"), lambda: queue.run_schedule("digest")):
        with pytest.raises(PgqError, match="no schedule named 'digest'"):
            call()


@pytest.mark.parametrize(
    ("cron", "fragment"),
    [
        ("* * *", "bad cron expression"),
        ("61 * * * *", "bad cron"),
        ("", "empty"),
        ("0 0 30 2 *", "bad cron"),
    ],
)
def test_bad_cron_is_refused(queue: Queue, cron: str, fragment: str) -> None:
    with pytest.raises(PgqError, match=fragment):
        queue.add_schedule("s", "q", cron)
    assert queue.list_schedules() == []


def test_a_slot_is_enqueued_once_even_after_its_job_is_done(queue: Queue) -> None:
    queue.add_schedule("tick", "q", "* * * * * *")
    backdate(queue, "tick", 60)
    slot = latest_slot("* * * * * *", datetime.now(UTC))
    assert slot is not None
    first = queue.run(ops.enqueue_due_slot("tick", slot, "w1"))
    assert first is not None
    assert queue.run(ops.enqueue_due_slot("tick", slot, "w2")) is None
    (job,) = queue.claim("q", 1)
    queue.complete(job.id, job.fence)  # the unique key no longer holds: the guard does
    assert queue.run(ops.enqueue_due_slot("tick", slot, "w3")) is None
    older = slot - timedelta(seconds=5)
    assert queue.run(ops.enqueue_due_slot("tick", older, "w3")) is None  # never backwards
    assert queue.job(first).unique_key == slot_key("tick", slot)
    (s,) = queue.list_schedules()
    assert s.last_slot == slot


def test_slots_before_creation_or_in_the_future_are_refused(queue: Queue) -> None:
    queue.add_schedule("tick", "q", "* * * * * *")
    now = datetime.now(UTC).replace(microsecond=0)
    assert queue.run(ops.enqueue_due_slot("tick", now - timedelta(seconds=30), "w")) is None
    assert queue.run(ops.enqueue_due_slot("tick", now + timedelta(seconds=30), "w")) is None
    assert queue.jobs() == []


def test_cron_slots_are_utc_and_whole() -> None:
    at = datetime(2030, 1, 1, 12, 7, 30, 500, tzinfo=UTC)
    assert latest_slot("*/5 * * * *", at) == datetime(2030, 1, 1, 12, 5, tzinfo=UTC)
    assert latest_slot("*/5 * * * *", at.replace(minute=10, second=0, microsecond=0)) == (
        datetime(2030, 1, 1, 12, 10, tzinfo=UTC)
    )
    assert next_slot("*/5 * * * *", at) == datetime(2030, 1, 1, 12, 10, tzinfo=UTC)
    assert latest_slot("*/10 * * * * *", at) == datetime(2030, 1, 1, 12, 7, 30, tzinfo=UTC)


async def test_missed_slots_are_skipped_except_the_latest(dsn: str, schema: str) -> None:
    # hourly, at the minute half an hour from now: three hours of slots passed with no worker
    # running, and the next slot is far from now (no slot of its own during the test, and no
    # waiting for a minute to turn)
    minute = (datetime.now(UTC).minute + 30) % 60
    with Queue.connect(dsn, schema) as q:
        q.add_schedule("hourly", "other", f"{minute} * * * *")
        backdate(q, "hourly", 3 * 3600)
    worker = make_worker(dsn, schema, lambda ctx: None, queues=["q"])
    task = asyncio.create_task(worker.run())
    try:
        with Queue.connect(dsn, schema) as q:
            await until(lambda: sum(slot_jobs(q, "hourly").values()) >= 1, what="a slot")
            await asyncio.sleep(1.5)
            jobs = slot_jobs(q, "hourly")
            assert list(jobs.values()) == [1]  # the missed slots skipped but the latest
            slot = datetime.fromisoformat(next(iter(jobs)).split(":", 2)[2])
            now = datetime.now(UTC)
            assert now - timedelta(hours=1) < slot <= now
            assert (slot.minute, slot.second) == (minute, 0)
    finally:
        worker.stop(immediately=True)
        await asyncio.wait_for(task, 30)


@pytest.mark.slow
async def test_three_workers_enqueue_each_slot_of_a_1s_schedule_exactly_once(
    dsn: str, schema: str
) -> None:
    done: list[int] = []

    def handle(ctx: JobContext) -> None:
        done.append(ctx.id)

    with Queue.connect(dsn, schema) as q:
        q.add_schedule("tick", "ticks", "* * * * * *", {"kind": "tick"})
    workers = [make_worker(dsn, schema, handle, queues=["ticks"]) for _ in range(3)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        await asyncio.sleep(10)
    finally:
        for w in workers:
            w.stop(immediately=True)
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    with Queue.connect(dsn, schema) as q:
        jobs = slot_jobs(q, "tick")
        (schedule,) = q.list_schedules()
    assert set(jobs.values()) == {1}, jobs  # no slot twice
    slots = sorted(datetime.fromisoformat(k.split(":", 2)[2]) for k in jobs)
    assert len(slots) >= 8, slots
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(slots)]
    assert set(gaps) == {1.0}, gaps  # every slot of the run, none skipped
    assert schedule.last_slot == slots[-1]
    assert len(done) >= len(slots) - 1  # and the workers ran them


# ---------------------------------------------------------------------------- the database's clock

#: The skew of the worker's clock, per worker task (each task copies the context it starts in).
SKEW: contextvars.ContextVar[timedelta] = contextvars.ContextVar("skew", default=timedelta(0))


@pytest.fixture
def skewed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler's wall clock runs SKEW ahead of this host's (behind when negative)."""
    monkeypatch.setattr(scheduler, "wall_clock", lambda: datetime.now(UTC) + SKEW.get())


def start(worker: Worker, skew: timedelta) -> asyncio.Task[None]:
    context = contextvars.copy_context()
    context.run(SKEW.set, skew)
    return asyncio.create_task(worker.run(), context=context)


async def run_workers(dsn: str, schema: str, skews: list[timedelta], seconds: float) -> None:
    workers = [make_worker(dsn, schema, lambda ctx: None, queues=["other"]) for _ in skews]
    tasks = [start(w, skew) for w, skew in zip(workers, skews, strict=True)]
    try:
        await asyncio.sleep(seconds)
    finally:
        for w in workers:
            w.stop(immediately=True)
        await asyncio.wait_for(asyncio.gather(*tasks), 30)


def slot_times(queue: Queue, name: str) -> list[tuple[datetime, datetime]]:
    """(slot, when it could first be claimed) of each slot job, by slot: its enqueue, or its
    run_at for a slot enqueued ahead of its time."""
    rows = queue.conn.execute(
        sql.SQL(
            "SELECT unique_key, GREATEST(queued_at, run_at) FROM {}.jobs"
            " WHERE unique_key LIKE %s ORDER BY 1"
        ).format(sql.Identifier(queue.schema)),
        [f"schedule:{name}:%"],
    ).fetchall()
    return [(datetime.fromisoformat(str(k).split(":", 2)[2]), at) for k, at in rows]


def database_now(queue: Queue) -> datetime:
    row = queue.conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.usefixtures("skewed_clock")
async def test_a_worker_75s_ahead_enqueues_the_minutes_slot_once(dsn: str, schema: str) -> None:
    """Before, every slot the worker computed lay past the database's clock and was refused:
    no job, no log line."""
    with Queue.connect(dsn, schema) as q:
        q.add_schedule("minutely", "other", "* * * * *")
        backdate(q, "minutely", 3600)
        began = database_now(q)
        await run_workers(dsn, schema, [timedelta(seconds=75)], 3.0)
        ended = database_now(q)
        slots = slot_times(q, "minutely")
    ahead = ended + timedelta(seconds=scheduler.AHEAD)  # the next minute may be enqueued ahead
    minutes = {t.replace(second=0, microsecond=0) for t in (began, ended, ahead)}
    assert slots, "no slot enqueued"
    assert slots[0][0] == began.replace(second=0, microsecond=0)
    assert {slot for slot, _ in slots} <= minutes and len(slots) == len({s for s, _ in slots})


@pytest.mark.slow
@pytest.mark.usefixtures("skewed_clock")
@pytest.mark.parametrize("skew", [75, -12], ids=["ahead-75s", "behind-12s"])
async def test_slots_run_on_the_databases_clock(dsn: str, schema: str, skew: int) -> None:
    """Every 2-second slot once, none early and none late by the worker's skew (before: 75 s
    ahead enqueued nothing, 12 s behind enqueued each slot 12 s late)."""
    with Queue.connect(dsn, schema) as q:
        q.add_schedule("two", "other", "*/2 * * * * *")
        backdate(q, "two", 60)
        await run_workers(dsn, schema, [timedelta(seconds=skew)], 6.0)
        slots = slot_times(q, "two")
    assert len(slots) >= 3, slots
    gaps = [(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(slots)]
    assert set(gaps) == {2.0}, gaps
    lateness = [(at - slot).total_seconds() for slot, at in slots[1:]]
    assert all(0 <= late < 1.5 for late in lateness), lateness


@pytest.mark.slow
@pytest.mark.usefixtures("skewed_clock")
async def test_workers_with_different_clocks_enqueue_each_slot_exactly_once(
    dsn: str, schema: str
) -> None:
    with Queue.connect(dsn, schema) as q:
        q.add_schedule("tick", "other", "* * * * * *")
        skews = [timedelta(seconds=s) for s in (75, -12, 0, 3)]
        await run_workers(dsn, schema, skews, 5.0)
        jobs = slot_jobs(q, "tick")
        slots = slot_times(q, "tick")
    assert set(jobs.values()) == {1}, jobs
    assert len(slots) >= 4, slots
    gaps = [(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(slots)]
    assert set(gaps) == {1.0}, gaps
    assert all(0 <= (at - slot).total_seconds() < 1.5 for slot, at in slots)


def test_schedule_list_is_bounded_and_paged(queue: Queue, pgq: Pgq) -> None:
    """250 schedules: `pgq schedule list` shows a page of 100 by name and says how to get the
    next; --after walks the rest; the last page says nothing more; --json --limit bounds too."""
    queue.conn.execute(
        sql.SQL(
            "INSERT INTO {}.schedules (name, queue, cron, payload, max_attempts)"
            " SELECT 'n' || lpad(i::text, 3, '0'), 'q', '* * * * *', '{{}}', 1"
            " FROM generate_series(1, 250) i"
        ).format(sql.Identifier(queue.schema))
    )
    seen: list[str] = []
    after: list[str] = []
    for page in range(3):
        result = pgq("schedule", "list", *after)
        assert result.exit_code == 0, result.output
        names = re.findall(r"\bn\d{3}\b", result.output)
        seen += list(dict.fromkeys(names))
        last_line = result.output.strip().splitlines()[-1]
        if page < 2:
            assert last_line == f"100 of 250 schedules shown; the next page: --after {seen[-1]}"
            after = ["--after", seen[-1]]
        else:
            assert "next page" not in result.output
    assert seen == [f"n{i:03d}" for i in range(1, 251)]
    shown = pgq("schedule", "list", "--json", "--limit", "5", "--after", "n100")
    assert [s["name"] for s in json.loads(shown.output)] == [f"n{i}" for i in range(101, 106)]


@pytest.mark.slow
async def test_a_slot_is_enqueued_ahead_and_claimed_at_its_time(dsn: str, schema: str) -> None:
    """A slot's job is inserted up to AHEAD (here half the 10 s period: 5 s) before its slot
    with run_at at the slot, so no claim takes it early; at the slot the scheduler wakes the
    worker's claim loop, which a 60 s poll would otherwise leave idle."""
    done: list[int] = []
    with Queue.connect(dsn, schema) as q:
        # made just after a slot: its first slot is 9.5 s away and enqueued 5 s before it
        await asyncio.sleep((10.5 - database_now(q).timestamp() % 10) % 10)
        q.add_schedule("ten", "tens", "*/10 * * * * *")
        worker = make_worker(dsn, schema, lambda ctx: done.append(ctx.id), queues=["tens"],
                             poll_interval=60.0)  # fmt: skip
        task = asyncio.create_task(worker.run())
        try:
            await until(lambda: q.jobs(), timeout=20, what="a slot job")
            (job,) = q.jobs()
            slot = datetime.fromisoformat(str(q.job(job.id).unique_key).split(":", 2)[2])
            row = q.conn.execute(
                sql.SQL(
                    "SELECT queued_at, run_at, clock_timestamp() FROM {}.jobs WHERE id = %s"
                ).format(sql.Identifier(schema)),
                [job.id],
            ).fetchone()
            assert row is not None
            queued_at, run_at, db_now = row
            assert run_at == slot and queued_at < slot, (queued_at, run_at, slot)
            assert db_now < slot  # still ahead of it
            assert q.claim("tens", 1) == []  # not claimable before its slot
            await until(lambda: job.id in done, timeout=30, what="the slot's job run")
            assert database_now(q) >= slot
        finally:
            worker.stop(immediately=True)
            await asyncio.wait_for(task, 30)
