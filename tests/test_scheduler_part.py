"""The scheduler alone (pgq_core/worker/scheduler.py), on a real PostgreSQL, two of them at
once with no worker around them: each due slot is enqueued once, missed slots are skipped but
the latest, and a schema without the schedules table stops the scheduler with a warning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from support import until

from pgq_core import Queue, ops
from pgq_core.worker.link import Link, Timeouts
from pgq_core.worker.scheduler import SlotCounts, schedule_forever


@contextlib.asynccontextmanager
async def links(dsn: str, schema: str, n: int) -> AsyncIterator[list[Link]]:
    opened = [Link(dsn, schema, Timeouts(), lambda r: None, lambda: None, "s") for _ in range(n)]
    try:
        for link in opened:
            await link.open()
        yield opened
    finally:
        for link in opened:
            await link.close()


@contextlib.asynccontextmanager
async def scheduling(opened: list[Link]) -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks = [
        asyncio.create_task(schedule_forever(link.call, f"sched-{i}", interval=0.5))
        for i, link in enumerate(opened)
    ]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def slot_jobs(queue: Queue, name: str) -> Counter[datetime]:
    rows = queue.conn.execute(
        sql.SQL("SELECT unique_key FROM {}.jobs WHERE unique_key LIKE %s").format(
            sql.Identifier(queue.schema)
        ),
        [f"schedule:{name}:%"],
    ).fetchall()
    return Counter(datetime.fromisoformat(str(r[0]).split(":", 2)[2]) for r in rows)


async def test_two_schedulers_enqueue_each_slot_of_a_1s_schedule_once(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.add_schedule("tick", "ticks", "* * * * * *")
    async with links(dsn, schema, 2) as opened, scheduling(opened):
        await until(lambda: len(slot_jobs(queue, "tick")) >= 3, what="three slots enqueued")
    slots = slot_jobs(queue, "tick")  # once both schedulers have stopped
    assert len(slots) >= 2, slots
    assert set(slots.values()) == {1}, "a slot enqueued twice"
    assert all(slot.microsecond == 0 for slot in slots)
    assert len(
        queue.conn.execute(
            sql.SQL("SELECT id FROM {}.jobs WHERE queue = 'ticks'").format(
                sql.Identifier(queue.schema)
            )
        ).fetchall()
    ) == len(slots)


async def test_an_hour_of_missed_slots_is_one_job_the_latest(
    dsn: str, schema: str, queue: Queue
) -> None:
    queue.add_schedule("missed", "later", "* * * * * *")
    queue.conn.execute(
        sql.SQL(
            "UPDATE {}.schedules SET created_at = created_at - interval '1 hour' WHERE name = %s"
        ).format(sql.Identifier(queue.schema)),
        ["missed"],
    )
    started = datetime.now(UTC)
    async with links(dsn, schema, 2) as opened, scheduling(opened):
        await asyncio.sleep(0.3)
    slots = slot_jobs(queue, "missed")
    assert 1 <= len(slots) <= 2, slots  # not 3600: the latest, and maybe the next second's
    assert min(slots) >= started - timedelta(seconds=2)
    assert set(slots.values()) == {1}


async def test_no_schedules_table_stops_the_scheduler_with_a_warning(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    bare = f"t_{secrets.token_hex(5)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(bare)))
    try:
        caplog.set_level(logging.WARNING, logger="pgq.worker")
        async with links(dsn, bare, 1) as (link,):
            await asyncio.wait_for(schedule_forever(link.call, "sched-bare"), 10)
        assert "no schedules table" in caplog.text
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(bare)))


async def test_missed_slots_are_said_in_a_line_and_counted(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """Slots passed over for the latest one are never skipped silently: the scheduler that
    advances past them says how many in a warning line and counts them; none is counted
    twice by the other scheduler, nor at INFO per enqueued slot."""
    queue.add_schedule("gap", "later", "* * * * * *")
    queue.conn.execute(
        sql.SQL(
            "UPDATE {}.schedules SET created_at = created_at - interval '10 minutes',"
            " last_slot = date_trunc('second', now()) - interval '100 seconds' WHERE name = %s"
        ).format(sql.Identifier(queue.schema)),
        ["gap"],
    )
    last = queue.conn.execute(
        sql.SQL("SELECT last_slot FROM {}.schedules WHERE name = 'gap'").format(
            sql.Identifier(queue.schema)
        )
    ).fetchone()
    assert last is not None
    counts = [SlotCounts(), SlotCounts()]
    caplog.set_level(logging.INFO, logger="pgq.worker")
    async with links(dsn, schema, 2) as opened:
        tasks = [
            asyncio.create_task(schedule_forever(link.call, f"s{i}", 0.5, counts[i]))
            for i, link in enumerate(opened)
        ]
        await asyncio.sleep(0.4)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    first = min(slot_jobs(queue, "gap"))
    expected = int((first - last[0]).total_seconds()) - 1  # the slots strictly between
    assert expected >= 99
    assert sum(c.skipped for c in counts) == expected
    lines = [r.getMessage() for r in caplog.records if "missed and skipped" in r.getMessage()]
    assert len(lines) == 1 and f"{expected} slot(s) before" in lines[0], lines
    assert not [
        r for r in caplog.records if r.levelno == logging.INFO and "enqueued as" in r.getMessage()
    ]


async def test_many_schedules_skipping_at_once_are_one_line(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """200 schedules each past 50 missed slots (workers down): one warning line for the
    statement, naming a few, and every skipped slot counted, not 200 lines."""
    queue.conn.execute(
        sql.SQL(
            "INSERT INTO {}.schedules (name, queue, cron, payload, max_attempts, created_at,"
            " last_slot) SELECT 'g' || i, 'later', '* * * * * *', '{{}}', 1,"
            " now() - interval '10 minutes', date_trunc('second', now()) - interval '50 seconds'"
            " FROM generate_series(1, 200) i"
        ).format(sql.Identifier(queue.schema))
    )
    counts = SlotCounts()
    caplog.set_level(logging.WARNING, logger="pgq.worker")
    async with links(dsn, schema, 1) as (link,):
        task = asyncio.create_task(schedule_forever(link.call, "s0", 0.5, counts))
        await asyncio.sleep(0.4)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    lines = [r.getMessage() for r in caplog.records if "missed and skipped" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "of 200 schedules" in lines[0] and "e.g. g" in lines[0], lines[0]
    assert counts.skipped >= 200 * 48  # 49 or so slots between, for each
    assert f"{counts.skipped} slot(s) of 200 schedules" in lines[0]


@pytest.mark.slow
async def test_two_thousand_5s_schedules_with_three_schedulers_lose_no_slot(
    dsn: str, schema: str, queue: Queue
) -> None:
    """2,000 schedules of `*/5 * * * * *` with three schedulers for 16 s: every slot of every
    schedule in the window is enqueued exactly once and none is skipped (before: a pass made
    one round trip per schedule and half the slots went missing, silently)."""
    queue.conn.execute(
        sql.SQL(
            "INSERT INTO {}.schedules (name, queue, cron, payload, max_attempts)"
            " SELECT 's' || i, 'fives', '*/5 * * * * *', '{{}}', 1"
            " FROM generate_series(1, 2000) i"
        ).format(sql.Identifier(queue.schema))
    )
    counts = [SlotCounts() for _ in range(3)]
    begun = datetime.now(UTC)
    async with links(dsn, schema, 3) as opened:
        tasks = [
            asyncio.create_task(schedule_forever(link.call, f"s{i}", counts=counts[i]))
            for i, link in enumerate(opened)
        ]
        await asyncio.sleep(16)
        ended = datetime.now(UTC)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    rows = queue.conn.execute(
        sql.SQL("SELECT unique_key FROM {}.jobs WHERE queue = 'fives'").format(
            sql.Identifier(queue.schema)
        )
    ).fetchall()
    keys = Counter(str(r[0]) for r in rows)
    assert set(keys.values()) == {1}, "a slot enqueued twice"
    # every 5 s slot after the first pass and a second before the end: all 2,000 of each
    window = [
        begun.replace(microsecond=0) + timedelta(seconds=s)
        for s in range(2, int((ended - begun).total_seconds()) - 1)
    ]
    slots = [t for t in window if t.second % 5 == 0]
    assert len(slots) >= 2
    for slot in slots:
        have = sum(1 for i in range(1, 2001) if f"schedule:s{i}:{slot.isoformat()}" in keys)
        assert have == 2000, (slot, have)
    assert sum(c.skipped for c in counts) == 0


def opens_at(queue: Queue, name: str) -> str:
    row = queue.conn.execute(
        sql.SQL("SELECT opens_at::text FROM {}.schedules WHERE name = %s").format(
            sql.Identifier(queue.schema)
        ),
        [name],
    ).fetchone()
    assert row is not None
    return str(row[0])


async def test_a_pass_reads_only_due_schedules_and_any_change_makes_one_due(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Once a pass has worked out when each schedule opens, the schedules not due are not read
    again (`due_schedules` is empty) until they open; a new cron, by `replace` or plain SQL,
    or a last slot written by another writer, makes the row due at once."""
    now = datetime.now(UTC)
    if now.minute == 59 and now.second >= 40:  # the hourly slot opens at :59:50: wait it out
        await asyncio.sleep(61 - now.second)
    queue.add_schedule("hourly", "later", "0 * * * *")
    queue.conn.execute(
        sql.SQL(
            "INSERT INTO {}.schedules (name, queue, cron)"
            " VALUES ('unreadable', 'later', '61 * * * *')"
        ).format(sql.Identifier(queue.schema))
    )
    assert {r[0] for r in queue.run(ops.due_schedules(10))} == {"hourly", "unreadable"}  # new
    async with links(dsn, schema, 1) as opened, scheduling(opened):
        await asyncio.sleep(0.4)
    assert queue.run(ops.due_schedules(10)) == []
    assert opens_at(queue, "unreadable") == "infinity"  # said once, not read again
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    opens = datetime.fromisoformat(opens_at(queue, "hourly").replace(" ", "T"))
    assert opens == hour - timedelta(seconds=10)  # AHEAD of the next hour's slot
    queue.add_schedule("hourly", "later", "* * * * * *", replace=True)
    assert [r[0] for r in queue.run(ops.due_schedules(10))] == ["hourly"]
    queue.add_schedule("hourly", "later", "0 * * * *", replace=True)
    async with links(dsn, schema, 1) as opened, scheduling(opened):
        await asyncio.sleep(0.4)  # the pass may enqueue the 1 s schedule's slot first: fine
    queue.conn.execute(
        sql.SQL("UPDATE {}.schedules SET last_slot = now() - interval '1 day' WHERE name = %s")
        .format(sql.Identifier(queue.schema)),
        ["hourly"],
    )
    assert opens_at(queue, "hourly") == "-infinity"
    assert [r[0] for r in queue.run(ops.due_schedules(10))] == ["hourly"]


def test_a_slot_worked_out_from_an_old_cron_is_refused(queue: Queue) -> None:
    """A pass that read a cron the row no longer has enqueues nothing for it (its slot and its
    next opening would be the old expression's)."""
    queue.add_schedule("changing", "later", "* * * * * *")
    slot = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)  # after creation
    ahead = timedelta(seconds=10)
    stale = ops.enqueue_due_slots([("changing", slot)], "w", ahead, [("0 * * * *", None)])
    assert queue.run(stale) == []
    fresh = ops.enqueue_due_slots([("changing", slot)], "w", ahead, [("* * * * * *", slot)])
    assert [(name, at) for name, at, _ in queue.run(fresh)] == [("changing", slot)]
    assert opens_at(queue, "changing") != "-infinity"


async def test_a_schedule_whose_job_the_database_refuses_holds_up_no_other(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """A row no statement can enqueue (plain SQL gave it a name whose slot key no index can
    hold) fails its statement for its data: the other slots of that statement are enqueued
    one by one, and the row is said in a warning and left for a while, not retried each pass
    (it was in every pass's statement, and every schedule stopped, silently)."""
    queue.add_schedule("tick", "ticks", "* * * * * *")
    long = secrets.token_hex(1340)  # its row indexed, its slot key (35 more) too wide
    queue.conn.execute(
        sql.SQL("INSERT INTO {}.schedules (name, queue, cron) VALUES (%s, 'ticks', %s)").format(
            sql.Identifier(queue.schema)
        ),
        [long, "* * * * * *"],
    )
    with caplog.at_level(logging.WARNING, logger="pgq.worker"):
        async with links(dsn, schema, 1) as opened, scheduling(opened):
            await asyncio.sleep(3.2)
    slots = slot_jobs(queue, "tick")
    assert len(slots) >= 2, slots
    assert set(slots.values()) == {1}
    refused = [r.getMessage() for r in caplog.records if "not enqueued" in r.getMessage()]
    assert len(refused) == 1, refused
    assert long not in refused[0]  # a name is data: cut for the line
    left = queue.conn.execute(
        sql.SQL("SELECT opens_at > now() + interval '30 seconds' FROM {}.schedules WHERE name = %s")
        .format(sql.Identifier(queue.schema)),
        [long],
    ).fetchone()
    assert left == (True,)  # left for a while, not read by every pass
