"""What an operator does to jobs and queues (sql/operator.sql): requeue, kill, bulk actions
over a filter, prune and the history's partitions, pause, resume, limits and settings.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..config import check_new_queue_name
from ..defaults import (
    BULK_BATCH,
    DROP_ATTEMPTS,
    DROP_LOCK_TIMEOUT,
    ENSURE_LOCK_TIMEOUT,
    PARTITIONS_AHEAD,
    PRUNE_BATCH,
)
from ..filters import JobFilter
from ..models import EventPartition, PartitionDay, PruneReport
from .op import Op, Rows, read_ids
from .spec import check_queue


def _requeued(rows: Rows) -> list[int]:
    return [int(r[1]) for r in rows if r[0] == "requeued"]


def _key_held(rows: Rows) -> list[int]:
    return [int(r[1]) for r in rows if r[0] == "key_held"]


def _orphaned(rows: Rows) -> dict[int, tuple[int, str]]:
    return {
        int(r[1]): (int(r[2]), str(r[0]).removeprefix("parent_"))
        for r in rows
        if r[0] in ("parent_dead", "parent_gone")
    }


#: a requeue's answer: (requeued ids, ids left dead because a live job holds their unique key,
#: {id left dead: (its parent, "dead" | "gone")} for jobs whose parent is dead, or gone before
#: it was done, and was not requeued with them: they would wait for ever)
RequeueReport = tuple[list[int], list[int], dict[int, tuple[int, str]]]


def _report(rows: Rows) -> RequeueReport:
    return _requeued(rows), _key_held(rows), _orphaned(rows)


def requeue(ids: Sequence[int], actor: str | None) -> Op[list[int]]:
    """Dead jobs back to ready; a dead job whose unique key a live job holds, or whose parent
    is dead or gone (and not requeued with it), stays dead."""
    return Op("requeue_ids", {"ids": list(ids), "actor": actor, "detail": None}, _requeued)


def requeue_report(ids: Sequence[int], actor: str | None) -> Op[RequeueReport]:
    """`requeue`, answering what was requeued and why the rest stayed dead (RequeueReport)."""
    return Op("requeue_ids", {"ids": list(ids), "actor": actor, "detail": None}, _report)


def summed(reports: Iterable[RequeueReport]) -> RequeueReport:
    """Batches' requeue answers as one."""
    requeued: list[int] = []
    held: list[int] = []
    orphaned: dict[int, tuple[int, str]] = {}
    for batch_requeued, batch_held, batch_orphaned in reports:
        requeued += batch_requeued
        held += batch_held
        orphaned.update(batch_orphaned)
    return requeued, held, orphaned


def dead_of(queue: str | None) -> JobFilter:
    """The filter of `pgq requeue --queue Q --dead` (every queue when `queue` is None)."""
    return JobFilter(queue=queue, statuses=("dead",))


def requeue_batch(
    where: JobFilter,
    actor: str | None,
    after: int,
    batch: int,
    detail: str | None = None,
) -> Op[tuple[int | None, RequeueReport]]:
    """One batch (one statement, one commit) of the requeue of the dead jobs `where` matches
    with an id above `after`: (the last id looked at, None when none was left; what the batch
    requeued and left dead, as `requeue_report`). Each batch is whole or nothing."""

    def read(rows: Rows) -> tuple[int | None, RequeueReport]:
        [last] = [r[1] for r in rows if r[0] == "last"]
        return (None if last is None else int(last)), _report([r for r in rows if r[0] != "last"])

    params = {"actor": actor, "after": after, "batch": batch, "detail": detail}
    return Op("requeue_filtered", params, read, where.for_action("requeue"))


def kill(
    ids: Sequence[int], actor: str | None, reason: str = "killed by operator"
) -> Op[list[int]]:
    return Op("kill", {"ids": list(ids), "actor": actor, "reason": reason}, read_ids)


def prune(
    older_than: timedelta, limit: int = PRUNE_BATCH, dropping_before: datetime | None = None
) -> Op[int]:
    """Up to `limit` done jobs finished before the cutoff, with their history; history rows
    before `dropping_before` are left to the partition drops that follow (`prune_flow`)."""
    params = {"older_than": older_than, "limit": limit, "dropping_before": dropping_before}
    return Op("prune", params, lambda rows: int(rows[0][0]))


def event_partitions_before(older_than: timedelta) -> Op[list[EventPartition]]:
    """The partitions of job_events entirely before the cutoff, oldest first."""
    return Op(
        "event_partitions_before",
        {"older_than": older_than},
        lambda rows: [EventPartition(*r) for r in rows],
    )


def drop_event_partition(
    name: str,
    older_than: timedelta,
    lock_timeout: timedelta = DROP_LOCK_TIMEOUT,
    attempts: int = DROP_ATTEMPTS,
) -> Op[tuple[str, int]]:
    """(outcome, history rows kept): 'dropped' | 'locked' | 'busy' (another prune is at it) |
    'gone' | 'too new'."""
    params = {
        "name": name,
        "older_than": older_than,
        "lock_timeout": lock_timeout,
        "attempts": attempts,
    }
    return Op("drop_event_partition", params, lambda rows: (str(rows[0][0]), int(rows[0][1])))


def prune_default_orphans(dropping_before: datetime) -> Op[int]:
    return Op(
        "prune_default_orphans",
        {"dropping_before": dropping_before},
        lambda rows: int(rows[0][0]),
    )


def prune_flow(
    older_than: timedelta,
    batch: int = PRUNE_BATCH,
    progress: Callable[[PruneReport], None] | None = None,
) -> Generator[Op[Any], Any, PruneReport]:
    """A whole prune, as a generator of ops (driven like `enqueue_flow`): done jobs finished
    before the cutoff go in batches with their history, then every partition of job_events
    entirely before the cutoff is dropped (the history of jobs still present kept), then the
    default partition loses its rows of jobs gone from the dropped days, and the partitions
    ahead are made sure of. The batches leave the history in the partitions about to be
    dropped to the drop; one a lock kept is dropped by the next prune. `progress` sees the
    report after each step."""
    report = PruneReport()
    droppable: list[EventPartition] = yield event_partitions_before(older_than)
    dropping_before = droppable[-1].to_at if droppable else None
    while deleted := (yield prune(older_than, batch, dropping_before)):
        report.deleted += deleted
        if progress is not None:
            progress(report)
    for part in droppable:
        outcome, kept = yield drop_event_partition(part.name, older_than)
        if outcome == "dropped":
            report.partitions_dropped.append(part.name)
            report.history_rows_kept += kept
        elif outcome == "locked":
            report.partitions_locked.append(part.name)
        if progress is not None:
            progress(report)
    if dropping_before is not None:
        report.orphan_rows_deleted = yield prune_default_orphans(dropping_before)
    days: list[PartitionDay] = yield ensure_partitions()
    report.days_not_created = [
        f"{d.day}: {d.outcome}" for d in days if d.outcome in ("default holds rows", "overlaps")
    ]
    return report


def pause(queue: str, actor: str | None, reason: str | None) -> Op[datetime]:
    """Returns when the queue was paused. Not a name with an invisible character
    (`config.check_new_queue_name`): it prints like another queue's."""
    check_new_queue_name(queue)
    params = {"queue": queue, "actor": actor, "reason": reason}
    return Op("pause", params, lambda rows: rows[0][0])


def resume(queue: str, channel: str) -> Op[datetime | None]:
    """Returns when the queue had been paused (None: it was not); wakes its workers."""
    check_queue(queue)
    return Op("resume", {"queue": queue, "channel": channel}, lambda rows: rows[0][0])


def set_limit(queue: str, max_running: int | None, channel: str) -> Op[int | None]:
    """Returns the limit before (None: none); wakes the queue's workers. A limit is set only
    on a name without an invisible character (`config.check_new_queue_name`); any name's
    limit can be removed (None)."""
    if max_running is None:
        check_queue(queue)
    else:
        check_new_queue_name(queue)
    if max_running is not None and max_running < 0:
        raise ValueError(f"the limit must not be negative, got {max_running}")
    params = {"queue": queue, "max_running": max_running, "channel": channel}
    return Op("set_limit", params, lambda rows: rows[0][0])


def _batch(rows: Rows) -> tuple[int | None, list[int]]:
    last, changed = rows[0]
    return (None if last is None else int(last)), [int(i) for i in changed]


def _requeued_batch(batch: tuple[int | None, RequeueReport]) -> tuple[int | None, list[int]]:
    return batch[0], batch[1][0]


def bulk(
    action: str,
    where: JobFilter,
    actor: str | None,
    after: int,
    batch: int = BULK_BATCH,
    reason: str = "killed by operator",
) -> Op[tuple[int | None, list[int]]]:
    """One batch of `action` (requeue, kill or delete) over the jobs `where` matches with an id
    above `after`: (the last id looked at, None when none was left; the ids changed). The
    history rows name `actor` and the filter."""
    text = f"filter: {where.describe()}"
    params: dict[str, Any] = {"actor": actor, "after": after, "batch": batch, "detail": text}
    if action == "kill":
        params["reason"] = reason
        params["detail"] = f"{reason} ({text})"
    if action == "requeue":
        op = requeue_batch(where, actor, after, batch, text)
        return Op(op.name, op.params, lambda rows: _requeued_batch(op.read(rows)), op.where)
    if action == "kill":
        return Op("kill_filtered", params, _batch, where.for_action(action))
    if action == "delete":
        return Op("delete_filtered", params, _batch, where.for_action(action))
    raise ValueError(f"unknown bulk action {action!r}")


#: Values of the `notify` setting (see `set_notify` in sql/*.sql).
NOTIFY_MODES = ("always", "edge", "off")


def check_notify_mode(mode: str) -> str:
    if mode not in NOTIFY_MODES:
        raise ValueError(f"notify must be one of {', '.join(NOTIFY_MODES)}, got {mode!r}")
    return mode


def settings() -> Op[dict[str, str]]:
    return Op("settings", {}, lambda rows: {str(r[0]): str(r[1]) for r in rows})


def set_notify(mode: str) -> Op[str]:
    return Op("set_notify", {"mode": check_notify_mode(mode)}, lambda rows: str(rows[0][0]))


def ensure_partitions(
    ahead: int = PARTITIONS_AHEAD, lock_timeout: timedelta = ENSURE_LOCK_TIMEOUT
) -> Op[list[PartitionDay]]:
    """The daily partitions of job_events from today (UTC) to `ahead` days on, each created if
    missing; never waits on a lock longer than `lock_timeout`."""
    return Op(
        "ensure_partitions",
        {"ahead": ahead, "lock_timeout": lock_timeout},
        lambda rows: [PartitionDay(*r) for r in rows],
    )
