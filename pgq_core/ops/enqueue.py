"""Enqueueing (sql/enqueue.sql, and `enqueue` of sql/protocol.sql): one job, a
batch with unique keys or without, and `enqueue_flow`, which drives them (the COPY path is
`bulk`'s).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from .. import jsontext, tracing
from ..config import check_new_queue_name
from ..defaults import UNIQUE_ROUNDS
from ..errors import PgqError
from ..models import Enqueued
from .op import NamedRows, Op, Rows, read_nothing
from .spec import (
    JobSpec,
    check_backoff,
    check_max_attempts,
    check_priority,
    check_spec,
    job_arrays,
    trace_context,
    unless_all_none,
)
from .workflows import enqueue_after

#: One enqueue round's answer per spec: its outcome, or None when a ready or running job held
#: its key but committed after the statement's snapshot (look the holder up again).
Round = list[Enqueued | None]


def enqueue_one(spec: JobSpec) -> Op[int]:
    """One `enqueue_one` statement for `spec`, already checked and without a unique key."""
    return Op(
        "enqueue_one",
        {
            "queue": spec.queue,
            "payload": jsontext.jsonb(spec.payload),
            "run_at": spec.run_at,
            "delay": spec.delay,
            "max_attempts": spec.max_attempts,
            "priority": spec.priority,
            "backoff_base": spec.backoff_base,
            "backoff_cap": spec.backoff_cap,
            "trace": trace_context(),
        },
        lambda rows: int(_one_row_each(rows, 1)[0][0]),
    )


def _one_row_each(rows: Rows, jobs: int) -> Rows:
    """`rows`, when the statement answered one row per job it was sent: else PgqError (a
    trigger on jobs skipped some, a BEFORE INSERT trigger returning NULL: pgq has none, an
    application may), since which id is whose is then unknown."""
    if len(rows) != jobs:
        raise rows_skipped(jobs, len(rows))
    return rows


def rows_skipped(jobs: int, inserted: int) -> PgqError:
    """What an enqueue of `jobs` raises that inserted fewer (`_one_row_each`; COPY too)."""
    return PgqError(
        f"an enqueue of {jobs} job(s) inserted {inserted}: a trigger on jobs skipped some"
        " (a BEFORE INSERT trigger returning NULL?), so which id is whose is unknown; the"
        " rows it did insert stand or fall with the statement's transaction"
    )


def _id_and_wake(rows: Rows) -> tuple[int, str | None]:
    """(the new id, the queue to notify after the commit, if the statement left it to us)."""
    row = _one_row_each(rows, 1)[0]
    return int(row[0]), (str(row[1]) if len(row) > 1 and row[1] is not None else None)


def enqueue_job(
    queue: str,
    payload: Any,
    run_at: datetime | None,
    delay: timedelta | None,
    max_attempts: int,
    priority: int,
    backoff_base: float | None,
    backoff_cap: float | None,
    alone: bool = False,
) -> Op[tuple[int, str | None]]:
    """`enqueue_one` for one job without a unique key or dependencies, checked as `JobSpec`s
    are (ValueError): what `Queue.enqueue` sends, without a spec, a flow or its arrays (they
    cost a one-job enqueue ~30 us of Python). `alone`: the statement is its own transaction
    (autocommit), so `enqueue_one_then_notify` decides its NOTIFY itself (no trigger fires)
    and leaves it to the caller, who sends `notify_committed` for the queue it answers once
    the statement has returned."""
    check_new_queue_name(queue)
    check_max_attempts(max_attempts)
    check_priority(priority)
    if run_at is not None and run_at.tzinfo is None:
        run_at = run_at.astimezone()  # the client's local time, as JobSpec reads it
    carrier = tracing.current()
    params = {
        "queue": queue,
        "payload": jsontext.encoded(jsontext.dumps(payload)),  # its size is known (job_bytes)
        "run_at": run_at,
        "delay": delay,
        "max_attempts": max_attempts,
        "priority": priority,
        "backoff_base": check_backoff(backoff_base, "backoff_base"),
        "backoff_cap": check_backoff(backoff_cap, "backoff_cap"),
        "trace": None if carrier is None else Jsonb(carrier),
    }
    if alone:
        return Op("enqueue_one_then_notify", params, _id_and_wake)
    return Op("enqueue_one", params, _id_and_wake)


def job_bytes(job: Op[tuple[int, str | None]]) -> int:
    """The bytes of `enqueue_job`'s payload as JSON text (ASCII: one byte a character)."""
    return len(job.params["payload"].obj)


def enqueue_within(job: Op[tuple[int, str | None]]) -> Op[tuple[int, str | None]]:
    """`enqueue_job`'s op inside a caller's transaction: the jobs trigger notifies at its
    commit (nothing is left to the caller)."""
    return Op("enqueue_one", job.params, job.read)


def enqueue_shared(jobs: Sequence[Op[tuple[int, str | None]]]) -> Op[list[tuple[int, str | None]]]:
    """One `enqueue_shared_then_notify` statement for the one-job ops of `enqueue_job`: (the
    new id, the queue to notify after the commit or None) for each row, in the jobs' order."""
    params = [job.params for job in jobs]

    def column(name: str) -> list[Any]:
        return [p[name] for p in params]

    arrays = {
        "queues": column("queue"),
        "payloads": jsontext.array_of([p["payload"].obj for p in params]),
        "run_ats": unless_all_none(column("run_at")),
        "delays": unless_all_none(column("delay")),
        "max_attempts": column("max_attempts"),
        "unique_keys": [],
        "priorities": column("priority"),
        "backoff_bases": unless_all_none(column("backoff_base")),
        "backoff_caps": unless_all_none(column("backoff_cap")),
        "traces": unless_all_none(column("trace")),
    }

    def read(rows: NamedRows) -> list[tuple[int, str | None]]:
        """Never raises: the statement has committed (the caller checks one row per job)."""
        return sorted((int(r.id), None if r.wake is None else str(r.wake)) for r in rows)

    return Op("enqueue_shared_then_notify", arrays, read, named=True)


def notify_committed(channel: str, queue: str) -> Op[None]:
    """The NOTIFY an `enqueue_one_then_notify` left to its caller, sent after its commit."""
    return Op("notify_committed", {"channel": channel, "queue": queue}, read_nothing)


def notify_queues(channel: str, queues: Sequence[str]) -> Op[None]:
    """One NOTIFY on `channel` for each of `queues` (the notifier's round)."""
    return Op("notify_queues", {"channel": channel, "queues": list(queues)}, read_nothing)


def enqueue_batch(specs: Sequence[JobSpec]) -> Op[tuple[list[int], str | None]] | None:
    """`enqueue_batch_then_notify` for a batch of one queue's jobs due now (no run_at, delay,
    unique key or dependencies), checked first (ValueError), to run as a transaction of its
    own: (the new ids ascending, as the specs go; the queue to notify after the commit, or
    None). None for any other batch, unchecked: `enqueue_flow` takes it."""
    if not specs:
        return None
    queue = specs[0].queue
    for spec in specs:
        if (
            spec.queue != queue or spec.run_at is not None or spec.delay is not None
            or spec.unique_key is not None or spec.depends_on
        ):  # fmt: skip
            return None
    named: set[str] = set()
    for spec in specs:
        check_spec(spec, named)

    def read(rows: Rows) -> tuple[list[int], str | None]:
        _one_row_each(rows, len(specs))  # so at least one: specs is not empty
        return sorted(row[0] for row in rows), (queue if rows[0][1] else None)

    return Op("enqueue_batch_then_notify", _once_if_shared(job_arrays(specs)), read)


def enqueue_round(specs: Sequence[JobSpec]) -> Op[Round]:
    """One `enqueue` statement for `specs`, already checked (`enqueue_plain` when none has a
    unique key). A key is sent once: later specs with a key already in the batch are
    duplicates of the first (same outcome, not inserted)."""
    if all(spec.unique_key is None for spec in specs):
        jobs = len(specs)
        return Op(
            "enqueue_plain",
            _once_if_shared(job_arrays(specs)),
            lambda rows: _inserted(_one_row_each(rows, jobs)),
        )
    first: dict[str, int] = {}
    sent: list[JobSpec] = []
    source: list[int] = []  # for each spec, the index in `sent` of the spec that stands for it
    repeated: list[bool] = []  # for each spec, whether an earlier spec had its key
    for spec in specs:
        key = spec.unique_key
        repeated.append(key is not None and key in first)
        if key is not None and key in first:
            source.append(first[key])
            continue
        if key is not None:
            first[key] = len(sent)
        source.append(len(sent))
        sent.append(spec)

    def read(rows: Rows) -> Round:
        new_plain = [r for r in rows if r[1] and r[2] is None]
        _one_row_each(new_plain, sum(spec.unique_key is None for spec in sent))
        plain = iter(sorted(int(r[0]) for r in new_plain))
        keyed = {str(r[2]): (None if r[0] is None else int(r[0]), bool(r[1])) for r in rows if r[2]}
        outcomes: list[Enqueued | None] = []
        for spec in sent:
            if spec.unique_key is None:
                outcomes.append(Enqueued(next(plain), True))
                continue
            job_id, inserted = keyed[spec.unique_key]
            outcomes.append(None if job_id is None else Enqueued(job_id, inserted))
        result: Round = []
        for at, again in zip(source, repeated, strict=True):
            outcome = outcomes[at]
            if outcome is not None and outcome.inserted and again:
                outcome = Enqueued(outcome.id, False)  # a duplicate within the batch
            result.append(outcome)
        return result

    return Op("enqueue", job_arrays(sent), read)


#: `enqueue_plain`'s columns sent once when every job shares the value: (array, scalar).
_SHARED = (("queues", "queue"), ("max_attempts", "max_attempt"), ("priorities", "priority"))


def _once_if_shared(arrays: dict[str, Any]) -> dict[str, Any]:
    """`arrays` with each of `_SHARED`'s arrays whose elements are all one value sent empty,
    that value as its scalar (else None): the statement reads a missing element as it."""
    for array, scalar in _SHARED:
        values = arrays[array]
        shared = values and values.count(values[0]) == len(values)
        arrays[scalar] = values[0] if shared else None
        if shared:
            arrays[array] = []
    return arrays


def _inserted(rows: Rows) -> Round:
    """`enqueue_plain`'s answer: every spec inserted, the ids ascending as the specs go (one
    INSERT takes its ids from the sequence in its rows' order)."""
    return [Enqueued(job_id, True) for job_id in sorted(row[0] for row in rows)]


def unique_holders(keys: Sequence[str]) -> Op[dict[str, int]]:
    """The id of the ready or running job holding each key (keys nobody holds are absent)."""
    return Op(
        "unique_holders",
        {"keys": list(keys)},
        lambda rows: {str(r[0]): int(r[1]) for r in rows},
    )


def enqueue_is_one_statement(specs: Sequence[JobSpec]) -> bool:
    """Whether `enqueue_flow` sends `specs` in one statement (mostly): false when jobs with
    dependencies come with jobs with unique keys, which go in two (the caller makes it one
    transaction)."""
    return not (any(s.depends_on for s in specs) and any(s.unique_key for s in specs))


def may_need_rounds(specs: Sequence[JobSpec]) -> bool:
    """Whether `enqueue_flow` may send `specs` in more than one statement after its first
    inserted some: a batch with a unique key (a holder that committed after the first
    statement's snapshot is looked up, or its spec enqueued again, in the next)."""
    return len(specs) > 1 and any(s.unique_key is not None for s in specs)


def enqueue_flow(specs: Iterable[JobSpec]) -> Generator[Op[Any], Any, list[Enqueued]]:
    """Enqueue `specs` (checked first: nothing is sent if any is invalid), one outcome each.

    A generator of ops: the caller runs each op yielded and sends its result back (`Queue` and
    `AsyncQueue` drive it alike). Mostly one round trip. When a key's holder committed after
    the statement's snapshot, the holder is looked up in a new statement; if it finished in
    between, the spec is enqueued again. Never a read-then-write: the unique index decides.
    """
    specs = list(specs)
    named: set[str] = set()
    for spec in specs:
        check_spec(spec, named)
    if any(spec.depends_on for spec in specs):
        # jobs with dependencies, and those without a key, in one `enqueue_after`; the keyed
        # ones (none has dependencies) first, as usual
        plain = [i for i, spec in enumerate(specs) if spec.unique_key is None]
        keyed = [i for i, spec in enumerate(specs) if spec.unique_key is not None]
        outcomes: dict[int, Enqueued] = {}
        if keyed:
            done = yield from enqueue_flow([specs[i] for i in keyed])
            outcomes.update(zip(keyed, done, strict=True))
        ids: list[int] = yield enqueue_after([specs[i] for i in plain])
        outcomes.update((i, Enqueued(job_id, True)) for i, job_id in zip(plain, ids, strict=True))
        return [outcomes[i] for i in range(len(specs))]
    if len(specs) == 1 and specs[0].unique_key is None:
        return [Enqueued((yield enqueue_one(specs[0])), True)]
    results: Round = yield enqueue_round(specs)
    for _ in range(UNIQUE_ROUNDS):
        missing = [i for i, r in enumerate(results) if r is None]
        if not missing:
            return [r for r in results if r is not None]
        keys = list(dict.fromkeys(str(specs[i].unique_key) for i in missing))
        holders: dict[str, int] = yield unique_holders(keys)
        again: list[int] = []
        for i in missing:
            holder = holders.get(str(specs[i].unique_key))
            if holder is None:
                again.append(i)
            else:
                results[i] = Enqueued(holder, False)
        if again:
            retried: Round = yield enqueue_round([specs[i] for i in again])
            for i, outcome in zip(again, retried, strict=True):
                results[i] = outcome
    if any(r is None for r in results):
        raise PgqError(
            f"unique keys contended too long ({UNIQUE_ROUNDS} rounds): their jobs kept "
            "finishing and reappearing while this enqueue ran; try again"
        )
    return [r for r in results if r is not None]


def enqueue(specs: Iterable[JobSpec]) -> Op[list[int]]:
    """One statement enqueuing `specs`: their ids (for a duplicate, its holder's id, or 0 if
    the holder committed after the statement's snapshot). `enqueue_flow` never answers 0."""
    specs = list(specs)
    named: set[str] = set()
    for spec in specs:
        check_spec(spec, named)
    op = enqueue_round(specs)
    return Op(op.name, op.params, lambda rows: [r.id if r else 0 for r in op.read(rows)])
