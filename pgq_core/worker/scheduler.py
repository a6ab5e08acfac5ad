"""The scheduler: every worker enqueues the due slots of every schedule (periodic jobs).

Invariants:
- Each slot of a schedule is enqueued at most once, whatever the number of workers and with no
  leader: `enqueue_due_slot` advances the schedule's `last_slot` and inserts the slot's job in
  one statement, skipping a schedule row another worker has locked (never waiting). The job's
  unique key `schedule:<name>:<slot>` guards it as well.
- Only the latest due slot (at or before now) is enqueued: slots missed while no worker ran
  are skipped, except the latest, which is enqueued once a worker runs again. Slots before a
  schedule was created are never enqueued.
- Slots are computed on the database's clock, in UTC, whatever this host's clock says: each
  pass reads the database's time with the schedules (one round trip) and takes the offset of
  this host's clock (`wall_clock`) from it when the reply arrives; the pass's slots and its
  wake-up use the host's clock corrected by that offset. The reading is never later than the
  reply, so the corrected clock runs behind the database's by at most the reply's way back
  (a slot is that much late, never early); the database still refuses a slot later than its
  own clock.
- A pass wakes just after the next slot of any schedule, and at least every `interval`
  seconds, so new schedules are seen within one interval and a 1-second schedule loses no slot.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import ops
from ..cron import latest_slot, next_slot
from ..errors import SchemaMissing
from ..models import Schedule
from ..text import printable
from .link import DataFault, Disconnected, Transient

log = logging.getLogger("pgq.worker")

#: Seconds between passes at most, and the most a pass waits after a slot starts.
INTERVAL = 1.0
SLOT_DELAY = 0.05


def wall_clock() -> datetime:
    """This host's time: the one place the scheduler reads it (a test shifts it)."""
    return datetime.now(UTC)


async def schedule_forever(
    call: Callable[..., Awaitable[list[Any]]],
    worker_id: str,
    interval: float = INTERVAL,
) -> None:
    """Enqueue due slots until cancelled (see the module's invariants)."""
    unreadable: set[tuple[str, str]] = set()
    offset = timedelta(0)
    while True:
        try:
            rows, database_now = await call(ops.schedule_rows(), ops.database_clock())
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
        wake = interval
        for schedule in rows:
            try:
                await _enqueue_due(call, schedule, now, worker_id)
                upcoming = next_slot(schedule.cron, now)
            except ValueError as exc:
                if (schedule.name, schedule.cron) not in unreadable:
                    unreadable.add((schedule.name, schedule.cron))
                    log.warning(
                        "worker %s: schedule %s skipped: %s",
                        worker_id,
                        printable(schedule.name),
                        printable(str(exc)),
                    )
                continue
            except (Disconnected, Transient, DataFault):
                break
            if upcoming is not None:
                wake = min(wake, (upcoming - (wall_clock() + offset)).total_seconds())
        await asyncio.sleep(max(wake, 0.0) + random.uniform(0.0, SLOT_DELAY))


async def _enqueue_due(
    call: Callable[..., Awaitable[list[Any]]],
    schedule: Schedule,
    now: datetime,
    worker_id: str,
) -> None:
    slot = latest_slot(schedule.cron, now)
    if slot is None or slot < schedule.created_at:
        return
    if schedule.last_slot is not None and slot <= schedule.last_slot:
        return
    (job_id,) = await call(ops.enqueue_due_slot(schedule.name, slot, worker_id))
    if job_id is not None:
        log.info(
            "worker %s: schedule %s: slot %s enqueued as job %d",
            worker_id,
            printable(schedule.name),
            slot.isoformat(),
            job_id,
        )
