"""Errors the queue raises. Each carries a message fit to show an operator as one line."""

from __future__ import annotations


class PgqError(Exception):
    """Base of every error pgq raises on purpose."""


class LeaseLost(PgqError):
    """A fenced write matched no row: another claim (or an operator) holds the job now.

    The holder must stop and throw its work away.
    """

    def __init__(self, job_id: int, fence: int, action: str) -> None:
        super().__init__(f"lease lost: job {job_id} fence {fence} ({action} matched no row)")
        self.job_id = job_id
        self.fence = fence
        self.action = action


class DontRetry(PgqError):
    """Raised by a handler: its job fails for good (dead) at once, whatever attempts it has
    left. Raise it from the error that decided it (`raise DontRetry("why") from exc`): the
    job's error then names that error first, then why it was not retried."""


#: The longest a job may be snoozed (seconds): a year, as a backoff.
SNOOZE_MAX = 365 * 86400.0


class Snooze(PgqError):
    """Raised (or returned) by a handler: not now, again in `seconds`. The job goes back to
    `ready` at the database's `now() + seconds` without spending an attempt, fenced like every
    write of the worker's, with a `snoozed` row in its history. `seconds`: 0 to a year."""

    def __init__(self, seconds: float) -> None:
        if not isinstance(seconds, int | float) or isinstance(seconds, bool):
            raise TypeError(f"Snooze takes a number of seconds, got {type(seconds).__name__}")
        if not 0 <= seconds <= SNOOZE_MAX:
            raise ValueError(f"Snooze must be from 0 to {SNOOZE_MAX:g} seconds, got {seconds!r}")
        super().__init__(f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)


class ScheduleExists(PgqError):
    """A schedule of that name exists (add it with `replace` to change it)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"schedule {name!r} already exists (remove it first, or replace it)")
        self.name = name


class JobNotFound(PgqError):
    """No job has this id (never enqueued, or deleted since)."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"no job with id {job_id}")
        self.job_id = job_id


class SchemaMissing(PgqError):
    """The schema has not been migrated (run `pgq migrate`)."""


class Unstorable(PgqError):
    """Text the database's encoding cannot hold (a LATIN1 database and an emoji): the statement
    that sent it was refused and wrote nothing."""


class UnreadableValue(PgqError):
    """A value PostgreSQL stores that Python cannot load: JSON nested past the recursion limit,
    an integer of more digits than Python converts. pgq never writes one; plain SQL can."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(
            f"a stored JSON value cannot be read by Python ({why_unreadable(exc)}); "
            "was it written by plain SQL?"
        )


def why_unreadable(exc: BaseException) -> str:
    """Why Python's json could not load a value (`exc` from `json.loads`), in a few words."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split(";")[0]
