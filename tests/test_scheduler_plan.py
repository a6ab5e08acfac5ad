"""The scheduler's policy alone (`scheduler.plan`): which slot a due schedule gets and when it
opens next, at a given time, with no database and no clock but the one passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgq_core.cron import next_slot
from pgq_core.worker import scheduler
from pgq_core.worker.scheduler import AHEAD, Slots, plan

NOW = datetime(2026, 12, 4, 18, 0, 55, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
CREATED = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_minute_schedule_is_enqueued_ahead_and_opens_again_ahead_of_the_next() -> None:
    last = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)  # 18:01's slot opens at 18:00:50
    got = plan([("m", "* * * * *", CREATED, last)], Slots(NOW))
    assert got.due == [("m", last + MINUTE)]
    assert got.then == [("* * * * *", last + 2 * MINUTE - timedelta(seconds=AHEAD))]
    assert got.firsts == {"m": ("* * * * *", last + MINUTE)}
    assert got.opens == [] and got.unreadable == []
    assert got.wake_at == last + 2 * MINUTE - timedelta(seconds=AHEAD)


def test_a_schedule_not_open_yet_says_when_it_opens_and_is_not_enqueued() -> None:
    now = datetime(2026, 12, 4, 18, 0, 30, tzinfo=UTC)
    last = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
    row = ("m", "* * * * *", CREATED, last)
    got = plan([row], Slots(now))
    opens = last + MINUTE - timedelta(seconds=AHEAD)
    assert got.due == [] and got.opens == [(*row, opens)]
    assert got.wake_at == opens


def test_a_new_schedule_opens_at_its_first_slot_at_or_after_creation() -> None:
    created = datetime(2026, 12, 4, 18, 0, 0, tzinfo=UTC)
    now = datetime(2026, 12, 4, 18, 0, 0, 500000, tzinfo=UTC)
    got = plan([("new", "* * * * *", created, None)], Slots(now))
    assert got.due == [("new", created)]  # 18:00:00 itself, not 18:01
    assert got.then == [("* * * * *", created + MINUTE - timedelta(seconds=AHEAD))]


def test_missed_slots_pass_to_the_latest_and_count_from_the_first() -> None:
    last = NOW.replace(second=0) - 60 * MINUTE
    got = plan([("late", "* * * * *", CREATED, last)], Slots(NOW))
    latest = NOW.replace(second=0)
    assert got.due == [("late", latest)]
    assert got.firsts == {"late": ("* * * * *", last + MINUTE)}
    slots = Slots(NOW)
    assert slots.missed("* * * * *", last + MINUTE, latest) == (59, True)


def test_a_short_period_opens_half_its_gap_ahead_not_ten_seconds() -> None:
    now = datetime(2026, 12, 4, 18, 0, 3, tzinfo=UTC)
    last = datetime(2026, 12, 4, 18, 0, 0, tzinfo=UTC)  # the 18:00:05 slot opens at 02.5
    got = plan([("fives", "*/5 * * * * *", CREATED, last)], Slots(now))
    assert got.due == [("fives", last + timedelta(seconds=5))]
    assert got.then == [("*/5 * * * * *", last + timedelta(seconds=7.5))]


class Ending(Slots):
    """Cron arithmetic for an expression with no slot after 18:00 today (none fire for 50
    years: cronsim's horizon, which no real expression reaches cheaply)."""

    def next(self, cron: str, after: datetime) -> datetime | None:
        slot = super().next(cron, after)
        return None if slot is None or slot > datetime(2026, 12, 4, 18, 0, tzinfo=UTC) else slot


def test_a_schedule_that_never_fires_again_opens_never() -> None:
    row = ("once", "* * * * *", CREATED, datetime(2026, 12, 4, 18, 0, tzinfo=UTC))
    got = plan([row], Ending(NOW))
    assert got.due == [] and got.unreadable == [] and got.opens == [(*row, None)]
    assert got.wake_at is None
    last = ("last", "* * * * *", CREATED, datetime(2026, 12, 4, 17, 59, tzinfo=UTC))
    got = plan([last], Ending(NOW))  # its last slot, 18:00, and then never again
    assert got.due == [("last", datetime(2026, 12, 4, 18, 0, tzinfo=UTC))]
    assert got.then == [("* * * * *", None)]


def test_an_unreadable_cron_is_said_and_opens_never() -> None:
    row = ("bad", "61 * * * *", CREATED, None)
    good = ("m", "* * * * *", CREATED, NOW.replace(second=0))
    got = plan([row, good], Slots(NOW))
    assert [name for name, _ in got.unreadable] == ["bad"]
    assert "61 * * * *" in got.unreadable[0][1]
    assert got.opens == [(*row, None)]
    assert got.due == [("m", NOW.replace(second=0) + MINUTE)]  # the others go on


def test_ten_thousand_rows_of_one_expression_cost_a_few_evaluations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, datetime]] = []

    def counted(expr: str, after: datetime) -> datetime | None:
        calls.append((expr, after))
        return next_slot(expr, after)

    monkeypatch.setattr(scheduler, "next_slot", counted)
    last = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
    rows = [(f"s{i}", "* * * * *", CREATED, last) for i in range(10_000)]
    got = plan(rows, Slots(NOW))
    assert len(got.due) == 10_000 and {slot for _, slot in got.due} == {last + MINUTE}
    assert len(calls) <= 3  # the first pending slot, the one after it, the one after that


def test_an_uneven_schedule_has_one_slot_ahead_at_a_time() -> None:
    """Slots at :00 and :05 of each minute: the :05 slot's gap to the next is 55 s, so it would
    open 10 s ahead, at :55 of the minute before, before the :00 slot it follows. With :00
    enqueued ahead (at :57.5), :05 does not open until :00 has come."""
    cron = "0,5 * * * * *"
    ahead_of = datetime(2026, 12, 4, 18, 1, 0, tzinfo=UTC)  # enqueued ahead, not due yet
    now = datetime(2026, 12, 4, 18, 0, 58, tzinfo=UTC)
    row = ("uneven", cron, CREATED, ahead_of)
    got = plan([row], Slots(now))
    assert got.due == []
    assert got.opens == [(*row, ahead_of)]
    before = plan([("uneven", cron, CREATED, ahead_of - MINUTE + timedelta(seconds=5))], Slots(now))
    assert before.due == [("uneven", ahead_of)]
    assert before.then == [(cron, ahead_of)]  # :05 opens when :00 comes, not at :55
