"""Cron expressions for schedules, parsed by `cronsim` (imported on first use, so importing
pgq_core stays light). Every time here is UTC: a schedule's slots are UTC wall-clock times.

Expressions have 5 fields (minute hour day month weekday) or 6 with seconds first
(`*/10 * * * * *`: every ten seconds).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

#: The longest cron expression accepted (a schedule row is operator input).
CRON_MAX_CHARS = 200


def _sim(expr: str, at: datetime, *, reverse: bool = False) -> Any:
    from cronsim import CronSim, CronSimError

    try:
        return CronSim(expr, at.astimezone(UTC), reverse=reverse)
    except CronSimError as exc:
        raise ValueError(f"bad cron expression {expr!r}: {exc}") from None


def check_cron(expr: str) -> str:
    """`expr` if it parses and fires at least once in the next 50 years; ValueError otherwise."""
    if not expr.strip():
        raise ValueError("cron expression must not be empty")
    if len(expr) > CRON_MAX_CHARS:
        raise ValueError(f"cron expression longer than {CRON_MAX_CHARS} characters")
    if next_slot(expr, datetime.now(UTC)) is None:
        raise ValueError(f"cron expression {expr!r} never fires")
    return expr


def latest_slot(expr: str, now: datetime) -> datetime | None:
    """The latest slot at or before `now` (whole seconds), or None if there is none."""
    at = now.astimezone(UTC)
    if at.microsecond == 0:  # cronsim starts strictly before a whole-second start time
        at += timedelta(microseconds=1)
    try:
        slot: datetime = next(_sim(expr, at, reverse=True))
    except StopIteration:
        return None
    return slot


def next_slot(expr: str, after: datetime) -> datetime | None:
    """The first slot strictly after `after`, or None if there is none within 50 years."""
    try:
        slot: datetime = next(_sim(expr, after))
    except StopIteration:
        return None
    return slot


def slot_key(name: str, slot: datetime) -> str:
    """The unique key of a schedule's slot job: `schedule:<name>:<slot, ISO 8601 UTC>`."""
    return f"schedule:{name}:{slot.astimezone(UTC).isoformat()}"
