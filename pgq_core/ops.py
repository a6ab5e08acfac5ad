"""Each queue operation as data: a named statement, its parameters, and how to read its rows.

The sync `Queue` and the async `AsyncQueue` both run these, so the two can never drift apart:
neither holds SQL or decides anything on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from psycopg import sql
from psycopg.types.json import Jsonb

from . import tracing
from .config import QUEUE_NAME_MAX_BYTES, check_new_queue_name, check_queue_name
from .errors import PgqError, SchemaMissing
from .filters import JobFilter
from .models import (
    Activity,
    Enqueued,
    ErrorGroup,
    EventPartition,
    FailedOver,
    Job,
    JobDetail,
    JobEvent,
    JobLink,
    JobProgress,
    JobRow,
    Lease,
    LockWait,
    PartitionDay,
    PayloadPreview,
    PruneReport,
    QueueLeases,
    QueueStats,
    QueueWindow,
    Schedule,
    ServerRole,
    Settled,
    StrandedJob,
    StrandedJobs,
    StuckJob,
    StuckJobs,
    TableHealth,
    TableSize,
    WorkerInfo,
    XminHolder,
)

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
#: The rows of a `named` op: named tuples, read by column name.
NamedRows = list[Any]

DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_LEASE = timedelta(seconds=30)
#: Retry delay is min(cap, base * 2**attempts) seconds, less up to `jitter` of it at random.
BACKOFF_BASE = 1.0
BACKOFF_CAP = 3600.0
BACKOFF_JITTER = 0.25
#: The longest a job's own backoff base or cap may be (a year; the jobs table checks it too).
BACKOFF_MAX = 365 * 86400.0
REAP_BATCH = 1000
PRUNE_BATCH = 5000
#: Daily partitions of job_events kept ahead of today (UTC), and how long their creation may
#: wait for a lock (ATTACH holds the default partition: readers of the history wait on it).
PARTITIONS_AHEAD = 7
ENSURE_LOCK_TIMEOUT = timedelta(milliseconds=100)
#: Dropping a partition takes job_events exclusively: each try waits at most this long.
DROP_LOCK_TIMEOUT = timedelta(milliseconds=200)
DROP_ATTEMPTS = 5
#: The most bytes of UTF-8 a unique key may have: it is indexed (a btree entry holds ~2.7 kB).
UNIQUE_KEY_MAX_BYTES = QUEUE_NAME_MAX_BYTES
#: A job's parents and children shown (`show`, the dashboard): the lowest ids, and the totals
LINKS_LIMIT = 50
#: How often an enqueue looks again for the holder of a key it conflicted with, when the holder
#: committed (or finished) between the statements. Each round needs a new race to fail.
UNIQUE_ROUNDS = 5
#: Characters of a long text (last_error, an error group's example) that lists carry: the
#: server cuts it, so a list of big errors stays small; `job` and `job_preview` read it whole.
LIST_TEXT_CHARS = 1000
#: Characters of a progress note the leases list carries (the worker stores at most 200).
LEASE_NOTE_CHARS = 200


@dataclass(frozen=True)
class Op(Generic[T]):
    """One round trip: run statement `name` with `params`, turn the rows into `T`."""

    name: str
    params: Mapping[str, Any]
    read: Callable[[Rows], T]
    #: For statements with a `{where}`: the filter that fills it (values bound, never spliced).
    where: JobFilter | None = None
    #: Rows arrive as named tuples (each column of the statement has a name of its own).
    named: bool = False


@dataclass(frozen=True)
class JobSpec:
    """A job to enqueue. `run_at` wins over `delay`; with neither the job is due now. A naive
    `run_at` is the client's local time.

    With a `unique_key`, nothing is inserted while a ready (due or scheduled) or running job
    holds that key: the enqueue returns the holder's id instead. Done and dead jobs hold no key.
    """

    queue: str
    payload: Any
    run_at: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    #: higher is claimed first among due jobs of the queue
    priority: int = 0
    unique_key: str | None = None
    #: ids of jobs this one waits for (status 'waiting'): it becomes ready once every one is
    #: done, and dies when one dies (docs/guides/enqueue.md, workflows). Each must exist; one
    #: done already is satisfied. Not with a unique_key (a waiting job holds no key).
    depends_on: Sequence[int] = ()
    #: seconds: a failed attempt n waits min(backoff_cap, backoff_base * 2**n) before the next
    #: (less jitter); None is the settling worker's (its retry_base; BACKOFF_CAP)
    backoff_base: float | None = None
    backoff_cap: float | None = None

    def __post_init__(self) -> None:
        if self.run_at is not None and self.run_at.tzinfo is None:
            object.__setattr__(self, "run_at", client_time(self.run_at))


def client_time(at: datetime | None) -> datetime | None:
    """A naive datetime is the client's local time, as the CLI's --run-at reads one, never the
    server's TimeZone: made aware here, before any statement sees it."""
    return at if at is None or at.tzinfo is not None else at.astimezone()


def _ids(rows: Rows) -> list[int]:
    return [int(r[0]) for r in rows]


def _settled(held: Sequence[tuple[int, int]]) -> Callable[[Rows], Settled]:
    """Rows are (id, fence) of the members applied; every other member was stale."""

    def read(rows: Rows) -> Settled:
        applied = {(int(r[0]), int(r[1])) for r in rows}
        return Settled(
            applied=[i for i, f in held if (i, f) in applied],
            lost=[i for i, f in held if (i, f) not in applied],
        )

    return read


def check_unique_key(key: str) -> str:
    """ValueError unless `key` is storable and indexable: not empty, no NUL, valid UTF-8, at
    most UNIQUE_KEY_MAX_BYTES bytes."""
    if not key:
        raise ValueError("unique key must not be empty")
    if "\x00" in key:
        raise ValueError("unique key must not hold a NUL character")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("unique key is not valid UTF-8") from None
    if size > UNIQUE_KEY_MAX_BYTES:
        raise ValueError(
            f"unique key is {size} bytes long (UTF-8); at most {UNIQUE_KEY_MAX_BYTES} fit "
            "(it is indexed)"
        )
    return key


def check_backoff(seconds: float | None, what: str) -> float | None:
    """ValueError unless `seconds` is None or a number of seconds from 0 to BACKOFF_MAX."""
    if seconds is None:
        return None
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise ValueError(f"{what} must be a number of seconds, got {type(seconds).__name__}")
    if not 0 <= seconds <= BACKOFF_MAX:
        raise ValueError(f"{what} must be from 0 to {BACKOFF_MAX:g} seconds, got {seconds!r}")
    return float(seconds)


def _check_spec(spec: JobSpec) -> None:
    check_new_queue_name(spec.queue)
    if spec.max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {spec.max_attempts}")
    if spec.unique_key is not None:
        check_unique_key(spec.unique_key)
    check_backoff(spec.backoff_base, "backoff_base")
    check_backoff(spec.backoff_cap, "backoff_cap")
    if spec.depends_on:
        check_depends_on(spec.depends_on)
        if spec.unique_key is not None:
            raise ValueError(
                "a job with depends_on cannot have a unique_key (a waiting job holds no key)"
            )


def check_depends_on(ids: Sequence[int]) -> None:
    """ValueError unless `ids` are job ids (positive integers)."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
        raise ValueError(f"depends_on must be a sequence of job ids, got {ids!r}")
    for job_id in ids:
        if not isinstance(job_id, int) or isinstance(job_id, bool) or not 0 < job_id < 2**63:
            raise ValueError(f"depends_on: {job_id!r} is not a job id")


#: One enqueue round's answer per spec: its outcome, or None when a ready or running job held
#: its key but committed after the statement's snapshot (look the holder up again).
Round = list[Enqueued | None]


def _trace() -> Jsonb | None:
    """The enqueuing code's trace context, recorded in its jobs (`tracing`)."""
    carrier = tracing.current()
    return None if carrier is None else Jsonb(carrier)


def enqueue_one(spec: JobSpec) -> Op[int]:
    """One `enqueue_one` statement for `spec`, already checked and without a unique key."""
    return Op(
        "enqueue_one",
        {
            "queue": spec.queue,
            "payload": Jsonb(spec.payload),
            "run_at": spec.run_at,
            "delay": spec.delay,
            "max_attempts": spec.max_attempts,
            "priority": spec.priority,
            "backoff_base": spec.backoff_base,
            "backoff_cap": spec.backoff_cap,
            "trace": _trace(),
        },
        lambda rows: int(rows[0][0]),
    )


def _id_and_wake(rows: Rows) -> tuple[int, str | None]:
    """(the new id, the queue to notify after the commit, if the statement left it to us)."""
    row = rows[0]
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
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    if run_at is not None and run_at.tzinfo is None:
        run_at = run_at.astimezone()  # the client's local time, as JobSpec reads it
    carrier = tracing.current()
    params = {
        "queue": queue,
        "payload": Jsonb(payload),
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


def notify_committed(channel: str, queue: str) -> Op[None]:
    """The NOTIFY an `enqueue_one_then_notify` left to its caller, sent after its commit."""
    return Op("notify_committed", {"channel": channel, "queue": queue}, _nothing)


def enqueue_round(specs: Sequence[JobSpec]) -> Op[Round]:
    """One `enqueue` statement for `specs`, already checked. A key is sent once: later specs
    with a key already in the batch are duplicates of the first (same outcome, not inserted)."""
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
        plain = iter(sorted(int(r[0]) for r in rows if r[1] and r[2] is None))
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

    return Op("enqueue", _job_arrays(sent), read)


def _job_arrays(specs: Sequence[JobSpec]) -> dict[str, Any]:
    """The parallel arrays of a batch enqueue (the fragment `job_input`), and the trace."""
    return {
        "queues": [s.queue for s in specs],
        "payloads": Jsonb([s.payload for s in specs]),
        "run_ats": [s.run_at for s in specs],
        "delays": [s.delay for s in specs],
        "max_attempts": [s.max_attempts for s in specs],
        "unique_keys": [s.unique_key for s in specs],
        "priorities": [s.priority for s in specs],
        "backoff_bases": [s.backoff_base for s in specs],
        "backoff_caps": [s.backoff_cap for s in specs],
        "trace": _trace(),
    }


def _nothing(rows: Rows) -> None:
    return None


#: The bulk path's COPY: an op naming the statement, run through a cursor's `copy` (its rows
#: from `copy_rows`) rather than executed.
ENQUEUE_COPY: Op[None] = Op("enqueue_copy", {}, _nothing)
#: The column types of `enqueue_copy`'s rows, in its column order.
COPY_TYPES = ("int8", "text", "jsonb", "timestamptz", "int4", "int4", "float8", "float8", "jsonb")
_NO_DELAY = timedelta(0)


def copy_delays(specs: Sequence[JobSpec]) -> list[timedelta]:
    """Check `specs` for the bulk path (ValueError): as `enqueue_flow` does, and none with a
    unique key or dependencies (those need `enqueue_many`). The distinct delays of the specs
    without a run_at, no delay (due now) first."""
    delays = {_NO_DELAY: None}
    for spec in specs:
        _check_spec(spec)
        if spec.unique_key is not None or spec.depends_on:
            raise ValueError(
                "enqueue_copy takes jobs without a unique_key or depends_on: use enqueue_many"
            )
        if spec.run_at is None and spec.delay is not None:
            delays[spec.delay] = None
    return list(delays)


def copy_ids(schema: str, n: int, delays: Sequence[timedelta]) -> Op[tuple[list[int], list[Any]]]:
    """`n` new job ids (ascending) and the run_at each of `delays` gives, from now()."""
    return Op(
        "enqueue_copy_ids",
        {"jobs": f"{sql.Identifier(schema).as_string(None)}.jobs", "n": n, "delays": list(delays)},
        lambda rows: (sorted(int(i) for i in rows[0][0]), list(rows[0][1])),
    )


def may_copy(schema: str) -> Op[bool]:
    """Whether the session's role may enqueue through COPY (INSERT on jobs.id)."""
    return Op(
        "may_copy",
        {"jobs": f"{sql.Identifier(schema).as_string(None)}.jobs"},
        lambda rows: bool(rows[0][0]),
    )


def copy_rows(
    specs: Sequence[JobSpec],
    ids: Sequence[int],
    delays: Sequence[timedelta],
    run_ats: Sequence[Any],
) -> Iterator[tuple[Any, ...]]:
    """The row of each spec for `enqueue_copy` (COPY_TYPES), its run_at as the enqueue
    statements compute it: its own, else now() plus its delay (from `copy_ids`)."""
    due = dict(zip(delays, run_ats, strict=True))
    trace = _trace()
    for job_id, spec in zip(ids, specs, strict=True):
        run_at = spec.run_at
        if run_at is None:
            run_at = due[_NO_DELAY if spec.delay is None else spec.delay]
        yield (
            job_id, spec.queue, Jsonb(spec.payload), run_at, spec.max_attempts, spec.priority,
            spec.backoff_base, spec.backoff_cap, trace,
        )  # fmt: skip


def unique_holders(keys: Sequence[str]) -> Op[dict[str, int]]:
    """The id of the ready or running job holding each key (keys nobody holds are absent)."""
    return Op(
        "unique_holders",
        {"keys": list(keys)},
        lambda rows: {str(r[0]): int(r[1]) for r in rows},
    )


def enqueue_after(specs: Sequence[JobSpec]) -> Op[list[int]]:
    """One `enqueue_after` statement (sql/workflows.sql) for `specs`, already checked, none with
    a unique key: their ids in order. PgqError naming the parents that do not exist (then
    nothing was inserted)."""

    def read(rows: Rows) -> list[int]:
        missing = [int(r[1]) for r in rows if r[0] == "missing"]
        if missing:
            shown = ", ".join(str(i) for i in missing[:10])
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            raise PgqError(f"depends_on: no job {shown}{more}; nothing was enqueued")
        return [int(r[1]) for r in rows if r[0] == "job"]

    ns = [n for n, spec in enumerate(specs, 1) for _ in spec.depends_on]
    parents = [int(p) for spec in specs for p in spec.depends_on]
    return Op(
        "enqueue_after",
        {**_job_arrays(specs), "dep_ns": ns, "dep_parents": parents},
        read,
    )


def enqueue_is_one_statement(specs: Sequence[JobSpec]) -> bool:
    """Whether `enqueue_flow` sends `specs` in one statement (mostly): false when jobs with
    dependencies come with jobs with unique keys, which go in two (the caller makes it one
    transaction)."""
    return not (any(s.depends_on for s in specs) and any(s.unique_key for s in specs))


def enqueue_flow(specs: Iterable[JobSpec]) -> Generator[Op[Any], Any, list[Enqueued]]:
    """Enqueue `specs` (checked first: nothing is sent if any is invalid), one outcome each.

    A generator of ops: the caller runs each op yielded and sends its result back (`Queue` and
    `AsyncQueue` drive it alike). Mostly one round trip. When a key's holder committed after
    the statement's snapshot, the holder is looked up in a new statement; if it finished in
    between, the spec is enqueued again. Never a read-then-write: the unique index decides.
    """
    specs = list(specs)
    for spec in specs:
        _check_spec(spec)
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
    for spec in specs:
        _check_spec(spec)
    op = enqueue_round(specs)
    return Op(op.name, op.params, lambda rows: [r.id if r else 0 for r in op.read(rows)])


def claim(queue: str, limit: int, lease: timedelta, worker: str) -> Op[list[Job]]:
    def read(rows: NamedRows) -> list[Job]:
        return [Job(**r._asdict()) for r in rows]

    params = {"queue": queue, "limit": limit, "lease": lease, "worker": worker}
    return Op("claim", params, read, named=True)


def heartbeat(held: Sequence[tuple[int, int]]) -> Op[Settled]:
    return Op(
        "heartbeat", {"ids": [i for i, _ in held], "fences": [f for _, f in held]}, _settled(held)
    )


def complete(
    held: Sequence[tuple[int, int]],
    worker: str | None,
    results: Sequence[str | None] | None = None,
) -> Op[Settled]:
    """`results`: each job's result as JSON text (None: no result)."""
    return Op(
        "complete",
        {**_pairs(held), "worker": worker, "results": _results(held, results)},
        _settled(held),
    )


def _results(
    held: Sequence[tuple[int, int]], results: Sequence[str | None] | None
) -> list[str | None]:
    if results is None:
        return [None] * len(held)
    if len(results) != len(held):
        raise ValueError("one result per held job")
    return list(results)


def _outcomes(held: Sequence[tuple[int, int]], applied: str) -> Callable[[NamedRows], Settled]:
    """Rows are (outcome, id, fence), by name, of the worker's lock-free writes: `applied`,
    'busy' or 'done'; a member with no row was stale."""

    def read(rows: NamedRows) -> Settled:
        seen = {(int(r.id), int(r.fence)): str(r.outcome) for r in rows}
        by: dict[str, list[int]] = {applied: [], "busy": [], "done": [], "lost": []}
        for i, f in held:
            by[seen.get((i, f), "lost")].append(i)
        return Settled(by[applied], by["lost"], by["busy"], by["done"])

    return read


def _pairs(held: Sequence[tuple[int, int]]) -> dict[str, list[int]]:
    return {"ids": [i for i, _ in held], "fences": [f for _, f in held]}


def complete_and_claim(
    held: Sequence[tuple[int, int]],
    queue: str,
    limit: int,
    lease: timedelta,
    worker: str,
    results: Sequence[str | None] | None = None,
) -> Op[tuple[Settled, list[Job]]]:
    """The worker's hot path: complete `held` (with `results`, JSON text or None) and claim up
    to `limit` of `queue` in one statement, never waiting on a row lock: (settled, claimed)."""
    settled = _outcomes(held, "completed")

    def read(rows: NamedRows) -> tuple[Settled, list[Job]]:
        jobs = [
            Job(r.id, r.queue, r.payload, r.fence, r.attempts, r.max_attempts, r.lease_until,
                r.trace)
            for r in rows
            if r.outcome == "claimed"
        ]
        return settled([r for r in rows if r.outcome != "claimed"]), jobs

    params = {
        **_pairs(held),
        "results": _results(held, results),
        "queue": queue,
        "limit": limit,
        "lease": lease,
        "worker": worker,
    }
    return Op("settle_complete_and_claim", params, read, named=True)


def _fail_params(
    held: Sequence[tuple[int, int, str]], worker: str | None, base: float, cap: float, jitter: float
) -> dict[str, Any]:
    return {
        **_pairs([(i, f) for i, f, _ in held]),
        "errors": [e for _, _, e in held],
        "worker": worker,
        "base": base,
        "cap": cap,
        "jitter": jitter,
    }


def settle_fail(
    held: Sequence[tuple[int, int, str]],
    worker: str | None,
    *,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
    jitter: float = BACKOFF_JITTER,
    final: Sequence[bool] | None = None,
    tracebacks: Sequence[str | None] | None = None,
) -> Op[Settled]:
    """The worker's failures: as `fail`, never waiting on a row lock. A job whose `final` is
    true dies at once (its handler raised DontRetry); `tracebacks` (bounded text or None per
    job) go on the attempt's history row."""
    params = _fail_params(held, worker, base, cap, jitter)
    params["finals"] = list(final) if final is not None else [False] * len(held)
    params["tracebacks"] = list(tracebacks) if tracebacks is not None else [None] * len(held)
    return Op(
        "settle_fail", params, _outcomes([(i, f) for i, f, _ in held], "failed"), named=True
    )


def extend_leases(
    held: Sequence[tuple[int, int]],
    channel: str | None = None,
    progress: Mapping[int, JobProgress] | None = None,
) -> Op[Settled]:
    """The worker's heartbeat, never waiting on a row lock; notifies `channel` (payload '')
    when a lease moved. `progress`: by job id, the new progress to write with the lease (a
    held job without an entry keeps the progress its row has)."""
    new = [(progress or {}).get(i) for i, _ in held]
    params = {
        **_pairs(held),
        "done": [p.done if p else None for p in new],
        "total": [p.total if p else None for p in new],
        "notes": [p.note if p else None for p in new],
        "ages": [p.age if p else None for p in new],
        "channel": channel,
    }
    return Op("extend_leases", params, _outcomes(held, "extended"), named=True)


def settle_snooze(
    held: Sequence[tuple[int, int]], delays: Sequence[float], worker: str
) -> Op[Settled]:
    """Held jobs whose handler raised Snooze go back to ready `delays` seconds from now, the
    attempt not counted; never waits on a row lock."""
    params = {**_pairs(held), "delays": [float(d) for d in delays], "worker": worker}
    return Op("settle_snooze", params, _outcomes(held, "snoozed"), named=True)


def hand_back(held: Sequence[tuple[int, int]], worker: str, reason: str) -> Op[Settled]:
    """The worker hands unfinished jobs back (attempt not counted), never waiting on a lock."""
    params = {**_pairs(held), "worker": worker, "reason": reason}
    return Op("hand_back", params, _outcomes(held, "released"), named=True)


def _failed_over(rows: Rows) -> FailedOver:
    return FailedOver(int(rows[0][0]), [int(r[1]) for r in rows if r[1] is not None])


def hand_back_failed_over(limit: int = REAP_BATCH) -> Op[FailedOver]:
    """Jobs running under a fence from before a promotion go back, the attempt not counted."""
    return Op("hand_back_failed_over", {"limit": limit}, _failed_over)


def hand_back_orphans(held: Sequence[int], worker: str) -> Op[list[int]]:
    """Jobs running under `worker` that it does not hold (a claim's reply was lost) go back."""
    return Op("hand_back_orphans", {"held": list(held), "worker": worker}, _ids)


def fail(
    held: Sequence[tuple[int, int, str]],
    worker: str | None,
    *,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
    jitter: float = BACKOFF_JITTER,
) -> Op[Settled]:
    params = _fail_params(held, worker, base, cap, jitter)
    return Op("fail", params, _settled([(i, f) for i, f, _ in held]))


def release(held: Sequence[tuple[int, int]], worker: str | None, reason: str) -> Op[Settled]:
    return Op(
        "release",
        {
            "ids": [i for i, _ in held],
            "fences": [f for _, f in held],
            "worker": worker,
            "reason": reason,
        },
        _settled(held),
    )


def record_stale(lost: Sequence[tuple[int, int]], worker: str | None, action: str) -> Op[None]:
    """History rows for writes that matched nothing: (job id, the stale fence it carried)."""
    return Op(
        "record_stale",
        {
            "ids": [i for i, _ in lost],
            "events": ["stale"] * len(lost),
            "fences": [f for _, f in lost],
            "workers": [worker] * len(lost),
            "details": [f"{action} rejected: stale fence"] * len(lost),
        },
        lambda rows: None,
    )


def reap(limit: int = REAP_BATCH) -> Op[list[tuple[int, str]]]:
    return Op("reap", {"limit": limit}, lambda rows: [(int(r[0]), str(r[1])) for r in rows])


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
    return Op("kill", {"ids": list(ids), "actor": actor, "reason": reason}, _ids)


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


def stats(soon: timedelta | None = None) -> Op[list[QueueStats]]:
    """Every queue. `expiring` counts leases with under a third of their length left, or
    under `soon`."""
    params = {"soon": soon, "offset": 0, "limit": None}
    return Op("stats", params, lambda rows: [QueueStats(*r[:-1]) for r in rows])


def stats_window(offset: int, limit: int, soon: timedelta | None = None) -> Op[QueueWindow]:
    """At most `limit` queues by name from the `offset`th (0: the first), and how many there
    are in all (0 when the window starts past the last)."""

    def read(rows: Rows) -> QueueWindow:
        total = int(rows[0][-1]) if rows else 0
        return QueueWindow([QueueStats(*r[:-1]) for r in rows], offset, total)

    return Op("stats", {"soon": soon, "offset": offset, "limit": limit}, read)


def queue_stats(queues: Sequence[str], soon: timedelta | None = None) -> Op[list[QueueStats]]:
    """The `stats` rows of these queues only, by name (a queue with no jobs and no settings
    has none): what an action just changed, read again without reading every queue."""
    params = {"soon": soon, "queues": list(queues)}
    return Op("queue_stats", params, lambda rows: [QueueStats(*r) for r in rows])


def leases(limit: int = 100, note_chars: int = LEASE_NOTE_CHARS) -> Op[list[Lease]]:
    """Running jobs, the lease closest to expiry first; progress notes cut to `note_chars`."""
    params = {"limit": limit, "note_chars": note_chars}
    return Op("leases", params, lambda rows: [Lease(*r) for r in rows])


#: Live workers listed at most (`pgq workers`, the dashboard).
WORKERS_LIMIT = 500


def workers(limit: int = WORKERS_LIMIT) -> Op[list[WorkerInfo]]:
    """The live workers (rows not expired), oldest first."""
    return Op("workers", {"limit": limit}, lambda rows: [WorkerInfo(*r) for r in rows])


def worker_beat(
    worker_id: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    concurrency: int,
    version: str,
    ttl: float,
    counts: tuple[int, int, int],
) -> Op[None]:
    """A worker's beat: its row written, live for `ttl` seconds; `counts`: running, done,
    failed. Expired rows of others are deleted."""
    running, done, failed = counts
    params = {
        "id": worker_id, "host": host, "pid": pid, "queues": list(queues),
        "concurrency": concurrency, "version": version, "ttl": ttl,
        "running": running, "done": done, "failed": failed,
    }
    return Op("worker_beat", params, lambda rows: None)


def drop_schema() -> Op[None]:
    """The schema and everything in it (a private test schema, `testing.private_schema`)."""
    return Op("drop_schema", {}, lambda rows: None)


def worker_gone(worker_id: str) -> Op[None]:
    return Op("worker_gone", {"id": worker_id}, lambda rows: None)


def cut_bytes(text: str | None, size: int | None) -> bool:
    """True when `text` is a cut of a stored text of `size` bytes (UTF-8)."""
    return text is not None and size is not None and len(text.encode("utf-8")) < size


def _job_row(row: tuple[Any, ...]) -> JobRow:
    """A list row: its columns, then last_error's whole size in bytes (the text is cut)."""
    *columns, size = row
    job = JobRow(*columns)
    return replace(
        job, last_error_bytes=size, last_error_truncated=cut_bytes(job.last_error, size)
    )


def jobs(
    queue: str | None = None,
    status: str | None = None,
    limit: int = 50,
    error_chars: int = LIST_TEXT_CHARS,
) -> Op[list[JobRow]]:
    """Of each job's last_error only the first `error_chars` characters (`JobRow`)."""
    return Op(
        "jobs",
        {"queue": queue, "status": status, "limit": limit, "error_chars": error_chars},
        lambda rows: [_job_row(r) for r in rows],
    )


#: Columns of `job` and `job_preview` before the progress (JobDetail's, up to last_error_bytes).
_DETAIL_COLUMNS = 19


def _detail(columns: Sequence[Any]) -> JobDetail:
    """A JobDetail from `job`'s columns: its own, then the four of its progress."""
    head, progress = columns[:_DETAIL_COLUMNS], columns[_DETAIL_COLUMNS:]
    done, total, note, at = progress
    return replace(
        JobDetail(*head), progress_done=done, progress_total=total, progress_note=note,
        progress_at=at,
    )


def job(job_id: int) -> Op[JobDetail | None]:
    return Op("job", {"id": job_id}, lambda rows: _detail(rows[0]) if rows else None)


def job_links(job_id: int, kind: str, limit: int = LINKS_LIMIT) -> Op[tuple[list[JobLink], int]]:
    """A job's parents (`kind` 'parents') or children ('children'): at most `limit`, lowest id
    first, and how many there are in all."""
    assert kind in ("parents", "children")

    def read(rows: Rows) -> tuple[list[JobLink], int]:
        links = [JobLink(int(r[0]), r[1], r[2]) for r in rows]
        return links, int(rows[0][3]) if rows else 0

    params = {"id": job_id, "limit": limit}
    if kind == "parents":
        return Op("job_parents", params, read)
    return Op("job_children", params, read)


def history(job_id: int) -> Op[list[JobEvent]]:
    """A job's history, oldest first; a failed attempt's row with its traceback."""
    return Op("history", {"id": job_id}, lambda rows: [JobEvent(*r) for r in rows])


def milliseconds(timeout: timedelta) -> int:
    """`timeout` in whole milliseconds, rounded up: a positive timeout is at least 1 ms, never
    0 (which PostgreSQL reads as no timeout at all)."""
    return -(-timeout // timedelta(milliseconds=1))


def session_limits(
    statement_timeout: timedelta, lock_timeout: timedelta, *, force: bool
) -> Op[None]:
    """Timeouts in whole milliseconds (`milliseconds`; only 0 disables); see `session_limits`
    in sql/*.sql."""
    return Op(
        "session_limits",
        {
            "statement_timeout": str(milliseconds(statement_timeout)),
            "lock_timeout": str(milliseconds(lock_timeout)),
            "force": force,
        },
        lambda rows: None,
    )


def job_preview(
    job_id: int, chars: int, readable: bool = True
) -> Op[tuple[JobDetail, PayloadPreview] | None]:
    """The job without its payload (`payload` is None) and a bounded preview of it; its
    last_error cut to `chars` characters too. `readable` False: for a role that may not read
    payloads and results, which are then left out (the preview's `readable` is False)."""

    def read(rows: Rows) -> tuple[JobDetail, PayloadPreview] | None:
        if not rows:
            return None
        *columns, text, size = rows[0]
        job = _detail(columns)
        job = replace(job, last_error_truncated=cut_bytes(job.last_error, job.last_error_bytes))
        return job, PayloadPreview(str(text), int(size))

    if not readable:
        return Op("job_preview_unread", {"id": job_id, "chars": chars}, read)
    return Op("job_preview", {"id": job_id, "chars": chars}, read)


# -- schedules ----------------------------------------------------------------------------


def _schedule(row: tuple[Any, ...]) -> Schedule:
    from .cron import next_slot

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


def database_clock() -> Op[datetime]:
    """The database's time at the moment the statement runs."""
    return Op("database_clock", {}, lambda rows: rows[0][0])


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
    from .cron import check_cron

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
    from .cron import slot_key

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


# ---------------------------------------------------------------------------- queue control


def pause(queue: str, actor: str | None, reason: str | None) -> Op[datetime]:
    """Returns when the queue was paused. Not a name with an invisible character
    (`config.check_new_queue_name`): it prints like another queue's."""
    check_new_queue_name(queue)
    params = {"queue": queue, "actor": actor, "reason": reason}
    return Op("pause", params, lambda rows: rows[0][0])


def resume(queue: str, channel: str) -> Op[datetime | None]:
    """Returns when the queue had been paused (None: it was not); wakes its workers."""
    _check_queue(queue)
    return Op("resume", {"queue": queue, "channel": channel}, lambda rows: rows[0][0])


def set_limit(queue: str, max_running: int | None, channel: str) -> Op[int | None]:
    """Returns the limit before (None: none); wakes the queue's workers. A limit is set only
    on a name without an invisible character (`config.check_new_queue_name`); any name's
    limit can be removed (None)."""
    if max_running is None:
        _check_queue(queue)
    else:
        check_new_queue_name(queue)
    if max_running is not None and max_running < 0:
        raise ValueError(f"the limit must not be negative, got {max_running}")
    params = {"queue": queue, "max_running": max_running, "channel": channel}
    return Op("set_limit", params, lambda rows: rows[0][0])


def has_jobs(queue: str) -> Op[bool]:
    """Whether `queue` has a job, or had one that completed."""
    _check_queue(queue)
    return Op("queue_has_jobs", {"queue": queue}, lambda rows: bool(rows[0][0]))


def retries_waiting(queues: Sequence[str]) -> Op[tuple[int, datetime | None]]:
    """How many failed jobs of `queues` wait for a later retry, and the earliest run_at."""
    return Op(
        "retries_waiting", {"queues": list(queues)}, lambda rows: (int(rows[0][0]), rows[0][1])
    )


def _check_queue(queue: str) -> None:
    """ValueError unless `queue` is a name a job can have (`config.check_queue_name`): a
    longer one could be paused but never resumed (its NOTIFY payload is too long)."""
    check_queue_name(queue)


# ---------------------------------------------------------------------------- filters

#: Rows changed per statement by a bulk action over a filter.
BULK_BATCH = 1000


def jobs_filtered(
    where: JobFilter, limit: int = 50, error_chars: int = LIST_TEXT_CHARS
) -> Op[list[JobRow]]:
    """As `jobs`: each last_error cut to `error_chars` characters."""

    def read(rows: Rows) -> list[JobRow]:
        return [_job_row(r) for r in rows]

    params = {"limit": limit, "error_chars": error_chars}
    if where.payload and where.live_only():
        return Op("jobs_filtered_live", params, read, where)
    return Op("jobs_filtered", params, read, where)


def count_filtered(where: JobFilter) -> Op[int]:
    return Op("count_filtered", {}, lambda rows: int(rows[0][0]), where)


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


# ---------------------------------------------------------------------------- errors, health


def errors(
    queue: str | None = None,
    since: timedelta | None = None,
    limit: int = 100,
    error_chars: int = LIST_TEXT_CHARS,
) -> Op[list[ErrorGroup]]:
    """Each group's example error cut to `error_chars` characters (`ErrorGroup`)."""

    def read(rows: Rows) -> list[ErrorGroup]:
        groups = []
        for r in rows:
            (group, pattern, dead, failed, first, last, queues, example, error, size) = r
            groups.append(
                ErrorGroup(
                    group=group,
                    pattern=pattern,
                    dead=dead,
                    failed=failed,
                    first_seen=first,
                    last_seen=last,
                    queues=list(queues),
                    example_id=int(example),
                    example_error=error,
                    example_error_bytes=size,
                    example_error_truncated=cut_bytes(error, size),
                )
            )
        return groups

    params = {"queue": queue, "since": since, "limit": limit, "error_chars": error_chars}
    return Op("errors", params, read)


def health_tables(schema: str) -> Op[list[TableHealth]]:
    return Op("health_tables", {"schema": schema}, lambda rows: [TableHealth(*r) for r in rows])


def health_xmin() -> Op[XminHolder | None]:
    return Op("health_xmin", {}, lambda rows: XminHolder(*rows[0]) if rows else None)


def health_notify() -> Op[float]:
    return Op("health_notify", {}, lambda rows: float(rows[0][0]))


def health_lock_waits(schema: str) -> Op[list[LockWait]]:
    def read(rows: Rows) -> list[LockWait]:
        return [LockWait(r[0], r[1], r[2], r[3], list(r[4] or []), r[5]) for r in rows]

    return Op("health_lock_waits", {"schema": schema}, read)


def metrics_leases() -> Op[list[QueueLeases]]:
    return Op(
        "metrics_leases",
        {},
        lambda rows: [QueueLeases(str(r[0]), int(r[1]), int(r[2])) for r in rows],
    )


def metrics_activity() -> Op[Activity]:
    def read(rows: Rows) -> Activity:
        connected, seconds, xids = rows[0]
        return Activity(int(connected), float(seconds), int(xids))

    return Op("metrics_activity", {}, read)


def server_role() -> Op[ServerRole]:
    """The server the session reached: address, standby or primary, lag, timeline."""

    def read(rows: Rows) -> ServerRole:
        host, port, standby, lag, timeline = rows[0]
        return ServerRole(
            None if host is None else str(host),
            None if port is None else int(port),
            bool(standby),
            None if lag is None else float(lag),
            None if timeline is None else int(timeline),
        )

    return Op("server_role", {}, read)


def read_only_session() -> Op[None]:
    """Every transaction of the session starts read-only (a reader's, `--read-dsn`)."""
    return Op("read_only_session", {}, lambda rows: None)


def table_sizes(schema: str) -> Op[list[TableSize]]:
    """Heap and index bytes, live and dead tuples: the size columns of `health_tables`."""

    def read(rows: Rows) -> list[TableSize]:
        tables = [TableHealth(*r) for r in rows]
        return [
            TableSize(t.table, t.table_bytes, t.index_bytes, t.live_tuples, t.dead_tuples)
            for t in tables
        ]

    return Op("health_tables", {"schema": schema}, read)


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


def local_limits(statement_timeout: timedelta, lock_timeout: timedelta) -> Op[None]:
    """Timeouts of the current transaction alone (see `local_limits` in sql/*.sql)."""
    return Op(
        "local_limits",
        {
            "statement_timeout": str(milliseconds(statement_timeout)),
            "lock_timeout": str(milliseconds(lock_timeout)),
        },
        lambda rows: None,
    )


def session_settings() -> Op[None]:
    """The settings pgq's own sessions run with (see `session_settings` in sql/*.sql)."""
    return Op("session_settings", {}, lambda rows: None)


def backend_pid() -> Op[int]:
    """The server process id the statement ran in (see `backend_pid` in sql/*.sql)."""
    return Op("backend_pid", {}, lambda rows: int(rows[0][0]))


#: Database encodings pgq refuses: SQL_ASCII stores whatever bytes a client sends, unchecked
#: and unconverted, so a payload written by one client may not be readable by another.
REFUSED_ENCODINGS = ("SQL_ASCII",)


def encoding_refusal(encoding: str) -> str | None:
    """Why pgq cannot run on a database of `encoding` (its `server_encoding`), or None. Every
    other encoding works: pgq's connections speak UTF-8 and the server converts."""
    if encoding.upper() not in REFUSED_ENCODINGS:
        return None
    return (
        f"the database's encoding is {encoding}, which stores text as unchecked bytes: pgq "
        "needs an encoding PostgreSQL converts (create the database with ENCODING 'UTF8')"
    )


def require_schema(needed: int, schema: str) -> Op[int]:
    """The schema's version; `SchemaMissing` when it is older than `needed` (the statements of
    this pgq would fail on it: a worker must not start there), PgqError when the database's
    encoding is one pgq refuses (`encoding_refusal`)."""

    def read(rows: list[tuple[Any, ...]]) -> int:
        version = int(rows[0][0])
        refusal = encoding_refusal(str(rows[0][1]))
        if refusal is not None:
            raise PgqError(refusal)
        if version < needed:
            raise SchemaMissing(
                f"schema {schema!r} is at version {version}, this pgq needs {needed}:"
                " run `pgq migrate` first"
            )
        return version

    return Op("schema_version", {}, read)


@dataclass(frozen=True)
class Percentiles:
    """Seconds at the 50th, 95th and 99th percentile (continuous); None without jobs."""

    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class LatencyWindow:
    """A queue's done jobs finished within the last `seconds`: `jobs` of them were read, at
    most the cap (`capped`: the window may hold more; the most recent ones were read). `wait`
    is due to claimed (claimed_at - run_at), `run` claimed to done (finished_at - claimed_at)."""

    seconds: float
    jobs: int
    capped: bool
    wait: Percentiles
    run: Percentiles
    #: jobs whose wait or run was negative (clocks that disagree): counted as 0 above
    skewed: int = 0
    #: the most negative of those, as seconds (0 when none)
    skew_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        def pct(p: Percentiles) -> dict[str, float | None]:
            return {"p50": p.p50, "p95": p.p95, "p99": p.p99}

        return {
            "seconds": self.seconds,
            "jobs": self.jobs,
            "capped": self.capped,
            "wait": pct(self.wait),
            "run": pct(self.run),
            "skewed": self.skewed,
            "skew_seconds": self.skew_seconds,
        }


@dataclass(frozen=True)
class QueueLatency:
    """One queue's latency windows by label (`5m`, `1h`), the shortest first."""

    queue: str
    windows: dict[str, LatencyWindow]

    def to_dict(self) -> dict[str, Any]:
        return {label: window.to_dict() for label, window in self.windows.items()}


@dataclass(frozen=True)
class LatencyReport:
    """Latency of the queues asked for, by name. `total`: how many queues there are in all
    (more than `queues` holds when a limit cut the list); `cap`: the most jobs read per queue
    and window; `windows`: the labels, the shortest first."""

    queues: list[QueueLatency]
    total: int
    cap: int
    windows: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cap_per_queue": self.cap,
            "windows": list(self.windows),
            "queues_in_all": self.total,
            "queues": [{"queue": q.queue, "windows": q.to_dict()} for q in self.queues],
        }


#: Latency percentiles (`latency`): the recent window, the default longer one, and the most
#: done jobs read per queue (the most recently finished): every view of them is bounded.
LATENCY_RECENT = timedelta(minutes=5)
LATENCY_WINDOW = timedelta(hours=1)
LATENCY_CAP = 20_000


def latency(
    since: timedelta = LATENCY_WINDOW,
    queues: Sequence[str] | None = None,
    limit: int | None = None,
    cap: int = LATENCY_CAP,
    recent: timedelta = LATENCY_RECENT,
) -> Op[LatencyReport]:
    """Wait (due to claimed) and run (claimed to done) percentiles of each queue's done jobs
    finished within `recent` and within `since` (one window when `since` is no longer than
    `recent`), at most `cap` jobs per queue, the most recent. `queues`: those (each gets a
    row, None figures without jobs); None: every queue that ever completed a job. `limit`:
    at most that many queues, by name (None: all)."""
    if since <= timedelta(0) or recent <= timedelta(0):
        raise ValueError("a latency window must be longer than 0")
    if cap < 1:
        raise ValueError(f"cap must be at least 1, got {cap}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    from .durations import duration_label  # here: the top of this module is others' to edit

    names = None if queues is None else list(queues)
    short = min(recent, since)
    labels = (
        (duration_label(since),)
        if short == since
        else (duration_label(short), duration_label(since))
    )

    def window(
        seconds: float, jobs: Any, wait: Any, run: Any, skewed: Any, skew: Any
    ) -> LatencyWindow:
        def pct(values: Any) -> Percentiles:
            if values is None:
                return Percentiles(None, None, None)
            p50, p95, p99 = (None if v is None else float(v) for v in values)
            return Percentiles(p50, p95, p99)

        return LatencyWindow(
            seconds, int(jobs), int(jobs) >= cap, pct(wait), pct(run), int(skewed),
            float(skew or 0.0),
        )

    def read(rows: Rows) -> LatencyReport:
        found = []
        for row in rows:
            queue, _total, n_short, n_long, w_short, w_long, r_short, r_long = row[:8]
            k_short, k_long, s_short, s_long = row[8:12]
            windows = {
                labels[-1]: window(since.total_seconds(), n_long, w_long, r_long, k_long, s_long)
            }
            if len(labels) == 2:
                windows = {
                    labels[0]: window(
                        short.total_seconds(), n_short, w_short, r_short, k_short, s_short
                    ),
                    **windows,
                }
            found.append(QueueLatency(str(queue), windows))
        total = int(rows[0][1]) if rows else 0
        return LatencyReport(found, total, cap, labels)

    params = {
        "queues": names,
        "limit": limit,
        "cap": cap,
        "short": short,
        "long": since,
    }
    return Op("latency", params, read)


#: A running job with a live lease is stuck past STUCK_FACTOR times its queue's p99 run time
#: (over LATENCY_WINDOW, at most LATENCY_CAP done jobs, as `latency` reads it), and never
#: before STUCK_FLOOR; at most STUCK_LIMIT of them are listed (`health_stuck`).
STUCK_FACTOR = 3.0
STUCK_FLOOR = timedelta(seconds=60)
STUCK_LIMIT = 100
#: a queue's p99 counts only over at least this many done jobs (fewer: its longest run and
#: the floor decide alone)
STUCK_MIN_DONE = 100


def check_stuck(factor: float, floor: timedelta) -> None:
    """ValueError unless `factor` is a positive number and `floor` is not negative."""
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"the stuck factor must be a number over 0, got {factor}")
    if floor < timedelta(0):
        raise ValueError(f"the stuck floor must not be negative, got {floor}")


def _stuck_params(
    factor: float, floor: timedelta, window: timedelta, cap: int
) -> dict[str, Any]:
    check_stuck(factor, floor)
    if window <= timedelta(0):
        raise ValueError("a latency window must be longer than 0")
    if cap < 1:
        raise ValueError(f"cap must be at least 1, got {cap}")
    return {
        "factor": float(factor),
        "floor": floor.total_seconds(),
        "window": window,
        "cap": cap,
        "min_done": STUCK_MIN_DONE,
    }


def health_stuck(
    factor: float = STUCK_FACTOR,
    floor: timedelta = STUCK_FLOOR,
    limit: int = STUCK_LIMIT,
    window: timedelta = LATENCY_WINDOW,
    cap: int = LATENCY_CAP,
) -> Op[StuckJobs]:
    """Running jobs whose lease is live and whose run so far is past `factor` times their
    queue's p99 run time (done jobs finished within `window`, at most `cap` per queue), and
    past `floor` in any case: the longest running first, at most `limit`, and how many in all."""
    params = _stuck_params(factor, floor, window, cap)
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")

    def read(rows: Rows) -> StuckJobs:
        jobs = [
            StuckJob(
                id=int(r[0]),
                queue=str(r[1]),
                worker=r[2],
                claimed_at=r[3],
                lease_until=r[4],
                running_seconds=float(r[5]),
                p99_seconds=None if r[6] is None else float(r[6]),
                done_jobs=int(r[7]),
                threshold_seconds=float(r[8]),
                longest_seconds=None if r[10] is None else float(r[10]),
                factor=float(factor),
                trusted=int(r[7]) >= STUCK_MIN_DONE,
            )
            for r in rows
        ]
        total = int(rows[0][9]) if rows else 0
        return StuckJobs(
            float(factor), floor.total_seconds(), window.total_seconds(), limit, total, jobs
        )

    return Op("health_stuck", {**params, "limit": limit}, read)


#: at most this many stranded jobs (`health_stranded`) are listed
STRANDED_LIMIT = 100


def health_stranded(limit: int = STRANDED_LIMIT) -> Op[StrandedJobs]:
    """Waiting jobs that can never run (a parent dead, or one they wait on gone), lowest id
    first: at most `limit`, and how many in all."""
    if limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")

    def read(rows: Rows) -> StrandedJobs:
        jobs = [
            StrandedJob(int(r[0]), str(r[1]), None if r[2] is None else int(r[2]), int(r[3]),
                        int(r[4]))
            for r in rows
        ]
        return StrandedJobs(limit, int(rows[0][5]) if rows else 0, jobs)

    return Op("health_stranded", {"limit": limit}, read)


def metrics_stuck(
    factor: float = STUCK_FACTOR,
    floor: timedelta = STUCK_FLOOR,
    window: timedelta = LATENCY_WINDOW,
    cap: int = LATENCY_CAP,
) -> Op[dict[str, int]]:
    """How many jobs are stuck (`health_stuck`) per queue that has any."""
    params = _stuck_params(factor, floor, window, cap)
    return Op("metrics_stuck", params, lambda rows: {str(r[0]): int(r[1]) for r in rows})
