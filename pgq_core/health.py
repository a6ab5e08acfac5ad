"""Thresholds that turn a database-health reading into a warning. Pure: no database here.

Invariant: each warning is one line naming the reading and the threshold it passed.
"""

from __future__ import annotations

from datetime import timedelta

from .durations import duration_label
from .models import Health

#: Dead tuples are worth a warning past this share of live ones and this count, together.
DEAD_SHARE = 0.20
DEAD_MIN = 10_000
#: An open transaction older than this holds back vacuum on every table.
XMIN_AGE_SECONDS = 300.0
#: Past this share of the NOTIFY queue, notifications are close to failing.
NOTIFY_USAGE = 0.50
#: A lock wait on jobs longer than this.
LOCK_WAIT_SECONDS = 5.0


def assess(health: Health) -> list[str]:
    """The warnings for `health`, in the order the readings are shown."""
    found: list[str] = []
    for t in health.tables:
        if t.dead_tuples > DEAD_MIN and t.dead_tuples > DEAD_SHARE * t.live_tuples:
            found.append(
                f"{t.table}: {t.dead_tuples:,} dead tuples against {t.live_tuples:,} live "
                f"(over {DEAD_SHARE:.0%} and {DEAD_MIN:,}): is vacuum keeping up?"
            )
    x = health.xmin
    if x is not None and x.age_seconds is not None and x.age_seconds > XMIN_AGE_SECONDS:
        found.append(
            f"pid {x.pid} has held a transaction open for {x.age_seconds:,.0f}s "
            f"(over {XMIN_AGE_SECONDS:.0f}s): vacuum cannot remove rows it may still see"
        )
    if health.notify_usage > NOTIFY_USAGE:
        found.append(
            f"NOTIFY queue {health.notify_usage:.0%} full (over {NOTIFY_USAGE:.0%}): "
            "a listener is not reading its notifications"
        )
    for w in health.lock_waits:
        if w.waited_seconds is not None and w.waited_seconds > LOCK_WAIT_SECONDS:
            blockers = ", ".join(map(str, w.blocked_by)) or "unknown"
            found.append(
                f"pid {w.pid} has waited {w.waited_seconds:,.1f}s for a {w.mode} lock on jobs "
                f"(over {LOCK_WAIT_SECONDS:.0f}s), blocked by pid {blockers}"
            )
    stuck = health.stuck_jobs
    if stuck is not None and stuck.total:
        longest = stuck.jobs[0] if stuck.jobs else None
        which = (
            f": the longest, job {longest.id} on {longest.queue!r}, {longest.reason}"
            if longest
            else ""
        )
        floor = duration_label(timedelta(seconds=stuck.floor_seconds))
        found.append(
            f"{stuck.total:,} running job{'' if stuck.total == 1 else 's'} stuck (past "
            f"{stuck.factor:g}x the queue's p99 run time, the longest done run and {floor}, "
            f"lease still renewed){which}"
        )
    stranded = health.stranded
    if stranded is not None and stranded.total:
        first = stranded.jobs[0] if stranded.jobs else None
        example = f": job {first.id} on {first.queue!r}, {first.reason}" if first else ""
        found.append(
            f"{stranded.total:,} waiting job{'' if stranded.total == 1 else 's'} can never run "
            f"(a parent dead or gone){example}"
        )
    return found
