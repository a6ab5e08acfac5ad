"""Schedules (read in sql/observer.sql, changed in sql/operator.sql): list, add, remove, run,
and the slots a scheduler enqueues.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from .. import jsontext
from ..config import check_new_queue_name
from ..defaults import DEFAULT_MAX_ATTEMPTS
from ..models import Schedule
from .op import Op, Rows
from .spec import check_max_attempts


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
    check_max_attempts(max_attempts)
    return Op(
        "add_schedule",
        {
            "name": name,
            "queue": queue,
            "cron": cron,
            "payload": jsontext.jsonb({} if payload is None else payload),
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


#: What `opens_at` says of a schedule: None, never (its expression fires no more, or cannot be
#: read); _NOT_KNOWN, the next scheduler pass works it out (a datetime: when it opens).
_NOT_KNOWN = "-infinity"


def _opens_text(opens: datetime | str | None) -> str:
    """An `opens_at` as the statements take it (text, so 'infinity' can be said)."""
    if opens is None:
        return "infinity"
    return opens if isinstance(opens, str) else opens.isoformat()


def enqueue_due_slots(
    slots: Sequence[tuple[str, datetime]],
    worker: str | None,
    ahead: timedelta = timedelta(0),
    then: Sequence[tuple[str, datetime | None]] | None = None,
) -> Op[list[tuple[str, datetime, int | None]]]:
    """Enqueue each (schedule name, slot) unless it (or a later slot) already was, in one
    statement: (name, slot, new job id or None) per slot advanced; a slot another worker
    enqueued, or whose row it holds, is not among them. Never waits on a lock. `then`, per
    slot: the cron it was worked out from (a row whose cron differs is not advanced) and when
    the slot after it may be enqueued (None: never); without it, the next pass works that out."""
    from ..cron import slot_key

    pairs: Sequence[tuple[str | None, datetime | str | None]] = (
        then if then is not None else [(None, _NOT_KNOWN)] * len(slots)
    )
    return Op(
        "enqueue_due_slots",
        {
            "names": [n for n, _ in slots],
            "slots": [s for _, s in slots],
            "keys": [slot_key(n, s) for n, s in slots],
            "crons": [cron for cron, _ in pairs],
            "opens": [_opens_text(opens) for _, opens in pairs],
            "worker": worker,
            "ahead": ahead,
        },
        lambda rows: [(str(r[0]), r[1], None if r[2] is None else int(r[2])) for r in rows],
    )


def due_schedules(limit: int) -> Op[list[tuple[str, str, datetime, datetime | None]]]:
    """Up to `limit` schedules whose next slot may be enqueued now, earliest first: each one's
    (name, cron, created_at, last_slot), what a scheduler pass works on."""
    return Op(
        "due_schedules", {"limit": limit}, lambda rows: [(r[0], r[1], r[2], r[3]) for r in rows]
    )


def schedules_clock(
    before: datetime | None,
) -> Op[tuple[datetime, datetime | None, datetime | None, bool]]:
    """The database's time, the next `opens_at` to come, the next slot enqueued ahead to come
    due (None: none), and whether a slot enqueued ahead came due after `before`."""
    return Op(
        "schedules_clock",
        {"before": before},
        lambda rows: (rows[0][0], rows[0][1], rows[0][2], bool(rows[0][3])),
    )


def schedules_opens(
    rows: Sequence[tuple[str, str, datetime, datetime | None, datetime | None]],
) -> Op[list[str]]:
    """Write when each (name, cron, created_at, last_slot) schedule's next slot may be
    enqueued (None: never), unless its row changed since it was read or another worker holds
    it: the names written."""
    return Op(
        "schedules_opens",
        {
            "names": [r[0] for r in rows],
            "crons": [r[1] for r in rows],
            "created": [r[2] for r in rows],
            "lasts": [r[3] for r in rows],
            "opens": [_opens_text(r[4]) for r in rows],
        },
        lambda rows: [str(r[0]) for r in rows],
    )
