"""Schedules (read in sql/observer.sql, changed in sql/operator.sql): list, add, remove, run,
and the slots a scheduler enqueues.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from ..config import check_new_queue_name
from ..defaults import DEFAULT_MAX_ATTEMPTS
from ..models import Schedule
from .op import Op, Rows


def _schedule(row: tuple[Any, ...]) -> Schedule:
    from ..cron import next_slot

    schedule = Schedule(*row)
    try:
        after = max(datetime.now(schedule.created_at.tzinfo), schedule.created_at)
        upcoming = next_slot(schedule.cron, after)
    except ValueError:  # a row written by plain SQL with a cron expression we cannot read
        upcoming = None
    return replace(schedule, next_slot=upcoming)


def schedules_page(after: str | None, limit: int) -> Op[tuple[list[Schedule], int]]:
    """At most `limit` schedules by name after `after` (None: the first), each with its next
    slot, and how many schedules there are in all."""

    def read(rows: Rows) -> tuple[list[Schedule], int]:
        return [_schedule(r[:-1]) for r in rows], int(rows[0][-1]) if rows else 0

    return Op("schedules_page", {"after": after, "limit": limit}, read)


def schedule(name: str) -> Op[Schedule | None]:
    """The schedule named `name` with its next slot, or None."""
    return Op("schedule", {"name": name}, lambda rows: _schedule(rows[0]) if rows else None)


def schedules() -> Op[list[Schedule]]:
    """Every schedule with its next slot (computed here from its cron expression)."""
    return Op("schedules", {}, lambda rows: [_schedule(r) for r in rows])


def check_schedule_name(name: str) -> str:
    """ValueError unless `name` can name a schedule (the rules of a new queue's name)."""
    try:
        return check_new_queue_name(name)
    except ValueError as exc:
        raise ValueError(str(exc).replace("queue name", "schedule name")) from None


def add_schedule(
    name: str,
    queue: str,
    cron: str,
    payload: Any = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    *,
    replace: bool = False,
) -> Op[bool]:
    """True if added (or replaced, with `replace`); False if the name exists. ValueError for
    a bad name, queue, cron expression or max_attempts, before anything is sent."""
    from ..cron import check_cron

    check_schedule_name(name)
    check_new_queue_name(queue)
    check_cron(cron)
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    return Op(
        "add_schedule",
        {
            "name": name,
            "queue": queue,
            "cron": cron,
            "payload": Jsonb({} if payload is None else payload),
            "max_attempts": max_attempts,
            "replace": replace,
        },
        lambda rows: bool(rows),
    )


def remove_schedule(name: str) -> Op[bool]:
    """True if a schedule of that name was removed."""
    return Op("remove_schedule", {"name": name}, lambda rows: bool(rows))


def run_schedule(name: str) -> Op[int | None]:
    """Enqueue the schedule's job now: its id, or None when no schedule has that name."""
    return Op("run_schedule", {"name": name}, lambda rows: int(rows[0][0]) if rows else None)


def enqueue_due_slot(
    name: str, slot: datetime, worker: str | None, ahead: timedelta = timedelta(0)
) -> Op[int | None]:
    """Enqueue `slot` of schedule `name` unless it (or a later slot) already was: the new job's
    id, or None. Safe from any number of workers at once; never waits on a lock."""
    batch = enqueue_due_slots([(name, slot)], worker, ahead)
    return Op(
        batch.name,
        batch.params,
        lambda rows: next((int(r[2]) for r in rows if r[2] is not None), None),
    )


def enqueue_due_slots(
    slots: Sequence[tuple[str, datetime]], worker: str | None, ahead: timedelta = timedelta(0)
) -> Op[list[tuple[str, datetime, int | None]]]:
    """Enqueue each (schedule name, slot) unless it (or a later slot) already was, in one
    statement: (name, slot, new job id or None) per slot advanced; a slot another worker
    enqueued, or whose row it holds, is not among them. Never waits on a lock."""
    from ..cron import slot_key

    return Op(
        "enqueue_due_slots",
        {
            "names": [n for n, _ in slots],
            "slots": [s for _, s in slots],
            "keys": [slot_key(n, s) for n, s in slots],
            "worker": worker,
            "ahead": ahead,
        },
        lambda rows: [(str(r[0]), r[1], None if r[2] is None else int(r[2])) for r in rows],
    )


def schedule_slots() -> Op[list[tuple[str, str, datetime, datetime | None]]]:
    """Every schedule's (name, cron, created_at, last_slot): what a scheduler pass reads."""
    return Op("schedule_slots", {}, lambda rows: [(r[0], r[1], r[2], r[3]) for r in rows])
