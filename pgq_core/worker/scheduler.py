"""The scheduler: every worker enqueues the due slots of schedules (periodic jobs).

Invariants:
- Each slot of a schedule is enqueued at most once, whatever the number of workers and with no
  leader: `enqueue_due_slots` advances the schedule's `last_slot` and inserts the slot's job in
  one statement, skipping a schedule row another worker has locked (never waiting). The job's
  unique key `schedule:<name>:<slot>` guards it as well.
- Only the latest due slot (at or before now) is enqueued: slots missed while no worker ran
  are skipped, except the latest, which is enqueued once a worker runs again; the worker that
  advances past them says how many in a warning line and counts them (`SlotCounts.skipped`).
  Slots before a schedule was created are never enqueued.
- A pass reads only the schedules that are due: each row keeps `opens_at`, when its next slot
  may be enqueued, which the statement enqueuing a slot sets for the slot after it
  ('-infinity' when any other writer changed the row: due, worked out again). A pass is one
  round trip when nothing is due (the due rows, none, and the clock, by indexes), whatever
  the number of schedules; due rows come DUE_PER_PASS at a time, earliest first and in random
  order among equals, so workers waking together mostly take different rows. A due row whose
  slot is not open yet (a new row) gets its `opens_at` written, 'infinity' when it never
  fires again or its cron cannot be read (said once, by the worker that read it).
- A statement the database refuses for its data (a row plain SQL gave a name whose slot key
  no index holds, a user's trigger) holds up no other schedule: its slots are enqueued one
  statement each, and a row refused alone is said in a warning and left REFUSED_WAIT seconds
  (its `opens_at`), then tried again.
- Which slot a due row gets, and when the schedule opens next, is `plan`: no I/O, the time an
  argument. Cron expressions are evaluated once per expression and last slot in a pass.
  An enqueued slot is a debug line, never one at INFO per slot.
- Slots are computed on the database's clock, in UTC, whatever this host's clock says: each
  pass reads the database's time (the same transaction as its due rows) and takes the offset
  of this host's clock (`wall_clock`) from it when the reply arrives; the pass's slots and its
  wake-up use the host's clock corrected by that offset. The reading is never later than the
  reply, so the corrected clock runs behind the database's by at most the reply's way back
  (a slot is that much late, never early); the database still refuses a slot later than its
  own clock.
- A slot's job is enqueued up to `AHEAD` seconds before the slot (at most half the schedule's
  period ahead, so one slot at a time), with its run_at at the slot: thousands of slots due at
  one instant are inserted before it, and none is claimed before it. The database refuses a
  slot later than its clock plus AHEAD.
- A pass wakes at the latest when the next schedule opens, and just after a slot enqueued
  ahead comes due, when it tells the worker's claim loop (`on_due`: the jobs' NOTIFY came
  before they were due); at least every `interval` seconds, so new schedules are seen within
  one interval and a 1-second schedule loses no slot.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import ops
from ..cron import latest_slot, next_slot
from ..errors import SchemaMissing
from ..text import printable, storable
from .link import DataFault, Disconnected, Transient

log = logging.getLogger("pgq.worker")

#: Seconds between passes at most, and the most a pass waits after a slot starts.
INTERVAL = 1.0
SLOT_DELAY = 0.05
#: Schedules with skipped slots one statement names in a line each; more are one line.
SKIPS_NAMED = 3
#: Due schedules one pass reads at most (more: the next pass follows at once).
DUE_PER_PASS = 1000
#: Seconds between passes at least (a row another worker holds is not asked for in a spin).
MIN_GAP = 0.02
#: Due slots enqueued per statement (one round trip each).
SLOTS_PER_STATEMENT = 1000
#: Seconds before its slot a slot's job may be enqueued (run_at at the slot); at most half
#: the schedule's period.
AHEAD = 10.0
#: The most missed slots of one schedule counted in one pass (a line says "at least"), and
#: the most cron evaluations one pass spends counting (about 0.15 ms each).
MISSED_COUNTED = 1000
MISSED_BUDGET = 2000
#: Seconds a schedule whose slot the database refused is left before it is tried again.
REFUSED_WAIT = 60.0
#: Characters of a schedule's name a line shows (a name is data: plain SQL sets any).
NAME_SHOWN = 100


def wall_clock() -> datetime:
    """This host's time: the one place the scheduler reads it (a test shifts it)."""
    return datetime.now(UTC)


@dataclass
class SlotCounts:
    """What one worker's scheduler did: slots it enqueued, and slots it skipped (missed
    slots passed over for a later one, each said in a warning line)."""

    enqueued: int = 0
    skipped: int = 0


class Slots:
    """One pass's cron arithmetic, memoized: schedules sharing an expression and a last slot
    (thousands of `* * * * *`) cost one evaluation, not one each (about 0.15 ms apiece)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._next: dict[tuple[str, datetime], datetime | None] = {}
        self._opens: dict[tuple[str, datetime, datetime | None], datetime] = {}
        self._latest: dict[str, datetime | None] = {}
        #: cron evaluations counting missed slots may still cost this pass
        self.budget = MISSED_BUDGET

    def next(self, cron: str, after: datetime) -> datetime | None:
        key = (cron, after)
        if key not in self._next:
            self._next[key] = next_slot(cron, after)
        return self._next[key]

    def opens(self, cron: str, slot: datetime, before: datetime | None = None) -> datetime:
        """When `slot`'s job may be enqueued: AHEAD before it, or half the gap to the slot
        after it when that is shorter, and never before `before` (the slot enqueued before
        it, perhaps ahead): never two slots of one schedule ahead, even where the gaps are
        uneven (`0,5 * * * * *`)."""
        key = (cron, slot, before)
        if key not in self._opens:
            after = self.next(cron, slot)
            ahead = timedelta(seconds=AHEAD)
            opens = slot - (ahead if after is None else min(ahead, (after - slot) / 2))
            self._opens[key] = opens if before is None else max(opens, before)
        return self._opens[key]

    def latest(self, cron: str) -> datetime | None:
        if cron not in self._latest:
            self._latest[cron] = latest_slot(cron, self.now)
        return self._latest[cron]

    def first_pending(
        self, cron: str, created_at: datetime, last_slot: datetime | None
    ) -> datetime | None:
        """The first slot after `last_slot` (none yet: the first at or after `created_at`)."""
        after = last_slot if last_slot is not None else created_at - timedelta(microseconds=1)
        return self.next(cron, after)

    def missed(self, cron: str, first: datetime, latest: datetime) -> tuple[int, bool]:
        """Slots from `first` up to, not including, `latest`, and whether that is all of them:
        counting stops at MISSED_COUNTED per schedule, and once the pass has spent
        MISSED_BUDGET evaluations on counting (a long outage must not stall the loop)."""
        n = 0
        at: datetime | None = first
        while at is not None and at < latest:
            if n >= MISSED_COUNTED or self.budget <= 0:
                return max(n, 1), False
            n += 1
            key = (cron, at)
            if key not in self._next:
                self.budget -= 1
            at = self.next(cron, at)
        return n, True


Row = tuple[str, str, datetime, datetime | None]


@dataclass
class Plan:
    """What a pass does with its due rows (`plan`)."""

    #: (name, slot) to enqueue, and per slot (its cron, when the slot after it opens: None,
    #: never)
    due: list[tuple[str, datetime]] = field(default_factory=list)
    then: list[tuple[str, datetime | None]] = field(default_factory=list)
    #: per schedule to enqueue: its cron and first pending slot (what a skip is counted from)
    firsts: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    #: per schedule to enqueue: its row as read
    read: dict[str, Row] = field(default_factory=dict)
    #: rows not open yet, or never again: the row as read and when it opens (None: never)
    opens: list[tuple[str, str, datetime, datetime | None, datetime | None]] = field(
        default_factory=list
    )
    #: rows whose cron cannot be read: (name, why)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    #: the earliest time a row of this pass opens again (None: none)
    wake_at: datetime | None = None

    def wake(self, at: datetime | None) -> None:
        if at is not None and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at


def plan(rows: Sequence[Row], slots: Slots) -> Plan:
    """Per due row (name, cron, created_at, last_slot) at `slots.now`: the slot to enqueue
    (the first pending one when it is open but not yet due, else the latest at or before
    now, passing over missed ones) and when the slot after it opens; or, when nothing is to
    be enqueued, when the row opens (None: never). No I/O."""
    out = Plan()
    now = slots.now
    for name, cron, created_at, last_slot in rows:
        try:
            first = slots.first_pending(cron, created_at, last_slot)
            if first is None:
                out.opens.append((name, cron, created_at, last_slot, None))
                continue
            opens = slots.opens(cron, first, last_slot)
            if first > now:
                if opens > now:  # not open yet: say when it is
                    out.opens.append((name, cron, created_at, last_slot, opens))
                    out.wake(opens)
                    continue
                slot = first  # ahead of its time
            else:
                latest = slots.latest(cron)
                if latest is None or latest < first:  # not due after all: read it again
                    out.opens.append((name, cron, created_at, last_slot, opens))
                    out.wake(opens)
                    continue
                slot = latest
            upcoming = slots.next(cron, slot)
            reopens = None if upcoming is None else slots.opens(cron, upcoming, slot)
        except ValueError as exc:
            out.unreadable.append((name, str(exc)))
            out.opens.append((name, cron, created_at, last_slot, None))
            continue
        out.due.append((name, slot))
        out.then.append((cron, reopens))
        out.firsts[name] = (cron, first)
        out.read[name] = (name, cron, created_at, last_slot)
        out.wake(reopens)
    return out


async def schedule_forever(
    call: Callable[..., Awaitable[list[Any]]],
    worker_id: str,
    interval: float = INTERVAL,
    counts: SlotCounts | None = None,
    on_due: Callable[[], None] | None = None,
) -> None:
    """Enqueue due slots until cancelled (see the module's invariants)."""
    counts = counts if counts is not None else SlotCounts()
    offset = timedelta(0)
    before: datetime | None = None  # the previous pass's time
    ahead = timedelta(seconds=AHEAD)
    while True:
        next_open: datetime | None = None
        next_due: datetime | None = None
        came_due = False
        try:
            rows, (database_now, next_open, next_due, came_due) = await call(
                ops.due_schedules(DUE_PER_PASS), ops.schedules_clock(before)
            )
            offset = database_now - wall_clock()
        except SchemaMissing:
            log.warning(
                "worker %s: no schedules table (run `pgq migrate`); periodic jobs are not "
                "enqueued by this worker",
                worker_id,
            )
            return
        except (Disconnected, Transient, DataFault):
            rows = []
        now = wall_clock() + offset
        slots = Slots(now)
        planned = plan(rows, slots)
        for name, why in planned.unreadable:
            log.warning(
                "worker %s: schedule %s skipped: %s", worker_id, printable(name), printable(why)
            )
        if came_due and on_due is not None:
            on_due()
        before = now
        wake_at = now + timedelta(seconds=interval)
        for at in (next_open, next_due, planned.wake_at):
            if at is not None and at < wake_at:
                wake_at = at
        if len(rows) >= DUE_PER_PASS:  # more are due: the next pass at once
            wake_at = now
        try:
            if planned.opens:
                await call(ops.schedules_opens(planned.opens))
            for start in range(0, len(planned.due), SLOTS_PER_STATEMENT):
                end = start + SLOTS_PER_STATEMENT
                due, then = planned.due[start:end], planned.then[start:end]
                try:
                    (advanced,) = await call(ops.enqueue_due_slots(due, worker_id, ahead, then))
                except DataFault:
                    advanced = await _one_by_one(call, due, then, planned.read, worker_id, now)
                _said(advanced, planned.firsts, slots, counts, worker_id)
        except (Disconnected, Transient, DataFault):
            pass
        wake = (wake_at - now).total_seconds()
        elapsed = (wall_clock() + offset - now).total_seconds()
        await asyncio.sleep(max(wake - elapsed, MIN_GAP) + random.uniform(0.0, SLOT_DELAY))


async def _one_by_one(
    call: Callable[..., Awaitable[list[Any]]],
    due: list[tuple[str, datetime]],
    then: list[tuple[str, datetime | None]],
    read: dict[str, Row],
    worker_id: str,
    now: datetime,
) -> list[tuple[str, datetime, int | None]]:
    """The slots of a statement the database refused for its data, one statement each: what
    they advanced. A slot refused alone is said, its row left REFUSED_WAIT seconds."""
    ahead = timedelta(seconds=AHEAD)
    advanced: list[tuple[str, datetime, int | None]] = []
    refused: list[tuple[str, datetime, str]] = []
    for (name, slot), opens in zip(due, then, strict=True):
        try:
            (one,) = await call(ops.enqueue_due_slots([(name, slot)], worker_id, ahead, [opens]))
        except DataFault as exc:
            refused.append((name, slot, str(exc)))
            continue
        advanced.extend(one)
    if not refused:
        return advanced
    wait = now + timedelta(seconds=REFUSED_WAIT)
    await call(ops.schedules_opens([(*read[name], wait) for name, _, _ in refused]))
    for name, slot, why in refused[:SKIPS_NAMED]:
        log.warning(
            "worker %s: schedule %s: slot %s not enqueued, the database refused it: %s; "
            "tried again in %gs",
            worker_id,
            printable(storable(name, NAME_SHOWN)),
            slot.isoformat(),
            printable(why),
            REFUSED_WAIT,
        )
    if len(refused) > SKIPS_NAMED:
        log.warning(
            "worker %s: %d more schedules' slots not enqueued, the database refused them; "
            "tried again in %gs",
            worker_id,
            len(refused) - SKIPS_NAMED,
            REFUSED_WAIT,
        )
    return advanced


def _said(
    advanced: list[tuple[str, datetime, int | None]],
    firsts: dict[str, tuple[str, datetime]],
    slots: Slots,
    counts: SlotCounts,
    worker_id: str,
) -> None:
    """Count what a statement advanced; a slot's enqueue is a debug line, the slots it passed
    over a warning (said by the worker that advanced past them, so once): a line per
    schedule for up to SKIPS_NAMED of them, else one line for the statement naming a few."""
    debug = log.isEnabledFor(logging.DEBUG)  # 10,000 slots' lines cost, even unshown
    skips: list[tuple[str, datetime, int, bool]] = []
    for name, slot, job_id in advanced:
        if job_id is not None:
            counts.enqueued += 1
        if job_id is not None and debug:
            log.debug(
                "worker %s: schedule %s: slot %s enqueued as job %d",
                worker_id,
                printable(name),
                slot.isoformat(),
                job_id,
            )
        cron, first = firsts[name]
        if first >= slot:
            continue
        skipped, exact = slots.missed(cron, first, slot)
        counts.skipped += skipped
        skips.append((name, slot, skipped, exact))
    if len(skips) > SKIPS_NAMED:
        total = sum(n for _, _, n, _ in skips)
        named = ", ".join(f"{printable(name)} ({n})" for name, _, n, _ in skips[:SKIPS_NAMED])
        log.warning(
            "worker %s: %s%d slot(s) of %d schedules missed and skipped (no worker enqueued "
            "them in time), e.g. %s; %d skipped by this worker so far",
            worker_id,
            "" if all(exact for *_, exact in skips) else "at least ",
            total,
            len(skips),
            named,
            counts.skipped,
        )
        return
    for name, slot, skipped, exact in skips:
        log.warning(
            "worker %s: schedule %s: %s%d slot(s) before %s missed and skipped (no worker "
            "enqueued them in time); %d skipped by this worker so far",
            worker_id,
            printable(name),
            "" if exact else "at least ",
            skipped,
            slot.isoformat(),
            counts.skipped,
        )
