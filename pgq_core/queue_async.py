"""`AsyncQueue`, the queue API for asyncio (the worker, the dashboard): every operation is an
`ops.Op` run in one round trip.

This file is the one place the queue API is written: `queue_sync.Queue` is generated from it
by tools/async_to_sync.py (the same methods, order and docstrings, without `async`). Every
call runs on the queue's own autocommit connection, so it commits by itself, unless a `conn`
is passed: then it runs inside that connection's open transaction and commits or rolls back
with the caller's own writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import psycopg

from . import jsontext, ops, session
from .config import connect_options
from .defaults import ENQUEUE_CHUNK, SHARED_ROUND_BYTES, SHARED_ROUND_JOBS
from .errors import JobNotFound, PgqError, ScheduleExists
from .filters import JobFilter
from .models import (
    Activity,
    Enqueued,
    ErrorGroup,
    Health,
    Job,
    JobDetail,
    JobEvent,
    JobRow,
    Lease,
    PartitionDay,
    PruneReport,
    QueueLeases,
    QueueStats,
    QueueWindow,
    Schedule,
    ServerRole,
    Settled,
    TableSize,
    WorkerInfo,
)
from .notifier import Notifier, notifier_for
from .ops import JobSpec, Op
from .queries import statement
from .queue_common import (
    Flow,
    T,
    TaskTurn,
    TaskWake,
    alone,
    carry,
    channel,
    checked,
    chunks,
    expect_applied,
    health_of,
    interrupted_round,
    log,
    make_worker_id,
    operator_id,
    outside_pipeline,
    result_json,
    unknown_schedule,
)
from .rounds import Rounds, Ticket
from .session import Failure, adetect_pooler
from .target import find_target

_IDLE = psycopg.pq.TransactionStatus.IDLE
#: The failures of a shared round that are none of one job's fault: it ran out of time
#: (statement_timeout, lock_timeout), as each of its jobs would alone.
_OUT_OF_TIME = (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable)


async def _aopen(dsn: str) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection for a queue, bounded (`config.connect_options`); a pooler
    nobody announced is found (`detect_pooler`) and logged once."""
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, **connect_options(dsn))
    try:
        line = await adetect_pooler(conn)
    except BaseException:
        await conn.close()
        raise
    if line is not None:
        log.warning("%s", line)
    return conn


class AsyncQueue:
    """Every operation on the queue, over one autocommit connection: enqueue, read jobs and
    statistics, requeue, kill, pause, schedules. A context manager; `close()` otherwise."""

    def __init__(
        self, conn: psycopg.AsyncConnection[Any], schema: str = "pgq", *, owns: bool = False
    ):
        self.conn = conn
        self.schema = schema
        self._owns = owns
        #: where `connect` found the server: a broken connection is replaced from it
        self._dsn: str | None = None
        #: the own connection's turn: callers sharing the queue never meet in a transaction
        self._turn = TaskTurn()
        #: blocks of `transaction` open on the own connection: it is not replaced under them
        self._blocks = 0
        #: the process notifiers this queue handed wake-ups to (`enqueue`), left at `close`
        self._notifiers: set[Notifier] = set()
        #: concurrent one-job enqueues on the own connection, one statement per round
        self._rounds: Rounds[TaskWake] = Rounds(
            TaskWake, TaskWake.set, SHARED_ROUND_JOBS, SHARED_ROUND_BYTES
        )

    @classmethod
    async def connect(cls, dsn: str | None = None, schema: str | None = None) -> AsyncQueue:
        """A queue on a connection of its own, to the database the CLI would use: `dsn`, else
        PGQ_DSN, else the embedded server (started and migrated if needed; `AsyncQueue` finds
        it in a thread, since that blocks); `schema`, else PGQ_SCHEMA, else pgq.

        It follows a failover: a connection that broke, or that reached a server taking no
        writes, is replaced on the next call (with a DSN naming every host, by the new
        primary). The call that met the failure raises: whether it committed is unknown, as
        with any lost connection."""
        target = await asyncio.to_thread(find_target, dsn, schema)
        queue = cls(await _aopen(target.dsn), target.schema, owns=True)
        queue._dsn = target.dsn
        return queue

    async def close(self) -> None:
        """Close the connection, if the queue opened it (`connect`); it is not reopened: a
        call after, or one waiting for a shared round, raises OperationalError. The wake-ups
        its enqueues left to the process's notifier are sent first (bounded:
        `notifier.EXIT_FLUSH_SECONDS`)."""
        self._dsn = None  # nothing reopens it
        notifiers, self._notifiers = self._notifiers, set()
        for notifier in notifiers:
            leave = notifier.leave
            await asyncio.to_thread(leave, self)
        if self._owns:
            await self.conn.close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _own(self) -> psycopg.AsyncConnection[Any]:
        """The queue's own connection; one `connect` made is replaced first if it broke or left
        a server taking no writes (see `connect`), but not inside a `transaction` block on it:
        a call there would run, and commit, alone."""
        if self._dsn is not None and self.conn.closed and not self._blocks:
            conn = await _aopen(self._dsn)
            if self._dsn is None:  # the queue was closed meanwhile: it keeps no connection
                await conn.close()
            else:
                self.conn = conn
        return self.conn

    def _turn_on(
        self, conn: psycopg.AsyncConnection[Any] | None
    ) -> TaskTurn | contextlib.nullcontext[None]:
        """The turn on the queue's own connection (`conn` None or it); a caller's own
        connection and its transaction are the caller's to share."""
        return self._turn if conn is None or conn is self.conn else contextlib.nullcontext()

    @contextlib.asynccontextmanager
    async def _joined(self, target: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
        """The block several statements share on `target`: undone whole by any failure inside,
        never committed here. On an autocommit connection a transaction (a savepoint inside a
        caller's block); on one not in autocommit, a savepoint in the caller's transaction,
        begun first when idle (psycopg's block would begin its own there, and commit it)."""
        if not target.autocommit and target.info.transaction_status == _IDLE:
            await self._run(ops.open_transaction(), target)
        async with target.transaction():
            yield

    @contextlib.asynccontextmanager
    async def transaction(
        self, conn: psycopg.AsyncConnection[Any] | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """One transaction for several calls, undone whole by a failure inside: on `conn` (a
        savepoint in the caller's transaction, never committed here; in autocommit, outside a
        block, a transaction of its own), else on the queue's own connection, which no other
        caller sharing the queue uses until it ends (their statements would commit or roll
        back with it). Yields the connection
        to pass the calls as `conn`; on the queue's own, calls without `conn` are inside too,
        when made by this task (thread): another's waits for the block to end, so the block
        must not wait for it."""
        async with self._turn_on(conn):
            target = conn or await self._own()
            own = conn is None or conn is self.conn
            self._blocks += own
            try:
                async with self._joined(target):
                    yield target
            finally:
                self._blocks -= own

    async def run(self, op: Op[T], conn: psycopg.AsyncConnection[Any] | None = None) -> T:
        """Run `op` (on `conn`, else the queue's own): a missing schema raises SchemaMissing,
        text the database's encoding cannot hold `Unstorable`, any other failure the
        database's own error (`session.classify` has noted a pooler)."""
        async with self._turn_on(conn):
            return await self._run(op, conn or await self._own())

    async def _run(self, op: Op[T], target: psycopg.AsyncConnection[Any]) -> T:
        outside_pipeline(target)
        try:
            return await session.arun(target, self.schema, op)
        except psycopg.Error as exc:
            await self._refused(exc, target)
            raise

    async def _refused(self, exc: psycopg.Error, target: psycopg.AsyncConnection[Any]) -> None:
        """Raise what `run` says of `exc`, met on `target`, when it is one of pgq's errors
        (SchemaMissing, `Unstorable`); else return, for the caller to raise `exc` itself. A
        connection `connect` made that reached a server taking no writes is closed first."""
        failure = session.classify(exc, self.schema, target)
        if failure is Failure.SCHEMA_MISSING:
            raise session.schema_missing(exc, self.schema) from exc
        if failure is Failure.READ_ONLY and target is self.conn and self._dsn is not None:
            await target.close()
        if (refused := session.unstorable(exc, target)) is not None:
            raise refused from exc

    # producers
    async def enqueue(
        self,
        queue: str,
        payload: Any,
        *,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int = ops.DEFAULT_MAX_ATTEMPTS,
        priority: int = 0,
        unique_key: str | None = None,
        backoff_base: float | None = None,
        backoff_cap: float | None = None,
        depends_on: Sequence[int] = (),
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> int:
        """The new job's id; with `unique_key` held by a ready or running job, nothing is
        inserted and that job's id is returned (`enqueue_many_detailed` tells which).
        `backoff_base` / `backoff_cap` (seconds) are the job's own retry backoff (see JobSpec).
        `depends_on`: ids of jobs this one waits for (see JobSpec); PgqError if one does not
        exist."""
        if unique_key is None and not depends_on:  # the common case: one INSERT
            job = ops.enqueue_job(
                queue, payload, run_at, delay, max_attempts, priority, backoff_base,
                backoff_cap, alone=True,
            )  # fmt: skip
            if (conn is None or conn is self.conn) and self.conn.autocommit and not self._blocks:
                return await self._enqueue_shared(job)  # its leader checks it is still alone
            return await self._enqueue_alone(job, conn)
        spec = JobSpec(
            queue, payload, run_at=run_at, delay=delay, max_attempts=max_attempts,
            priority=priority,
            unique_key=unique_key,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            depends_on=depends_on,
        )
        return (await self.enqueue_many_detailed([spec], conn))[0].id

    async def _enqueue_alone(
        self, job: Op[tuple[int, str | None]], conn: psycopg.AsyncConnection[Any] | None
    ) -> int:
        """`job` in a statement of its own: in the caller's transaction on `conn` (the jobs
        trigger notifies at its commit), else a transaction of its own that notifies after."""
        async with self._turn_on(conn):
            target = conn or await self._own()
            if not alone(target):
                job = ops.enqueue_within(job)
            job_id, wake = await self.run(job, target)
            if wake is not None:
                await self._notify(target, [wake])
            return job_id

    async def _enqueue_shared(self, job: Op[tuple[int, str | None]]) -> int:
        """`job` in a round shared with the other callers' jobs waiting for the own connection
        (pgq_core/rounds.py): led by this call when no round is, else answered by another's.
        A caller cancelled while its job waits drops it; once a round took it, its outcome is
        the round's, unknown to the caller (as with any statement cancelled in flight)."""
        ticket: Ticket[TaskWake] = Ticket(job, ops.job_bytes(job))
        try:
            if not self._rounds.join(ticket):
                assert ticket.wake is not None  # made by join for a caller that waits
                await ticket.wake.wait()
            led = ticket.lead
            if led:
                async with self._turn:
                    taken = self._rounds.take(ticket)
                    try:
                        if len(taken) == 1:  # its own job only: a cancel is its own
                            await self._round(taken)
                        elif taken:
                            await carry(self._round(taken))
                    except BaseException as exc:  # what the round left unanswered fails
                        self._rounds.fail(taken, exc)
                        raise
        finally:  # whatever stops it, even between two lines: the lead never stays with it
            self._rounds.leave(ticket)
        if ticket.alone:
            return await self._enqueue_alone(job, None)
        if ticket.failure is not None:
            if led:
                raise ticket.failure
            if not isinstance(ticket.failure, Exception):  # the leading call's interrupt
                raise interrupted_round(ticket.failure) from ticket.failure
            raise copy.copy(ticket.failure) from ticket.failure
        assert ticket.answer is not None
        return ticket.answer[0]

    async def _round(self, taken: list[Ticket[TaskWake]]) -> bool:
        """One shared round on the own connection: every taken job answered, or failed (see
        `Rounds.fail`); then the NOTIFYs its jobs left, after its commit. True if it
        committed. Run under the leader's turn, in a task of its own (`carry`)."""
        try:
            target = await self._own()
            if not alone(target):  # a transaction is open there: no job joins it
                self._rounds.fail(taken, None)
                return False
            if len(taken) == 1:
                answers = [await self._run(taken[0].job, target)]
            else:
                answers = await self._run(ops.enqueue_shared([t.job for t in taken]), target)
        except Exception as exc:  # noqa: BLE001 - each caller raises its own (`Rounds.fail`)
            # nothing committed unless the connection broke (then unknown). A lone job's
            # failure is its own; a round's may be one job's (a value the server or json
            # refuses, a refused queue): each goes alone, unless it ran out of time
            lost = self.conn.closed or isinstance(exc, _OUT_OF_TIME)
            self._rounds.fail(taken, None if len(taken) > 1 and not lost else exc)
            return False
        except BaseException as exc:
            self._rounds.fail(taken, exc)
            raise
        if len(answers) != len(taken):  # committed, so never sent again: a trigger skipped one
            unmatched = PgqError(
                f"a shared enqueue of {len(taken)} jobs committed {len(answers)}: which is which"
                " is unknown (a trigger on jobs skipped a row?)"
            )
            self._rounds.fail(taken, unmatched)
            return False
        self._rounds.settle(taken, answers)
        await self._notify(target, [w for _, w in answers if w is not None])
        return True

    async def _notify(self, target: psycopg.AsyncConnection[Any], queues: list[str]) -> None:
        """The NOTIFY of each of `queues` (new due jobs have committed there), by the process's
        notifier, else on `target`: a hint, so a failure is logged, not raised."""
        for queue in dict.fromkeys(queues):
            if self._wake(target, queue):
                continue
            try:
                await self._run(ops.notify_committed(channel(self.schema), queue), target)
            except psycopg.Error as exc:  # the jobs are in: a lost hint is a poll's wait
                log.debug("notify after enqueue on %s failed: %s", queue, exc)

    def _wake(self, target: psycopg.AsyncConnection[Any], queue: str) -> bool:
        """Hand `queue`'s NOTIFY to the process's notifier for `target`'s server (False: it is
        down, send it yourself)."""
        notifier = notifier_for(target, self.schema)
        self._notifiers.add(notifier)
        return notifier.mark(queue, self)

    async def _drive(self, flow: Flow[T], conn: psycopg.AsyncConnection[Any] | None) -> T:
        """Run a flow of ops (see `ops.enqueue_flow`), each on `conn` (or ours). Only the
        flow's own StopIteration ends it: one raised by an op's read is an error."""
        try:
            op = next(flow)
        except StopIteration as stop:
            done: T = stop.value
            return done
        while True:
            answer = await self.run(op, conn)
            try:
                op = flow.send(answer)
            except StopIteration as stop:
                result: T = stop.value
                return result

    async def enqueue_many(
        self, specs: Iterable[JobSpec], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[int]:
        """Enqueue every spec, all or nothing, in one transaction: one id per spec, in order (a
        duplicate of a held unique key gets the holder's id). Thousands of jobs go in one
        round trip."""
        specs = list(specs)
        ids = await self._enqueue_batch(specs, conn)
        return ids if ids is not None else [e.id for e in await self._enqueue_specs(specs, conn)]

    async def enqueue_many_detailed(
        self, specs: Iterable[JobSpec], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[Enqueued]:
        """`enqueue_many`, saying for each spec whether it was inserted or was a duplicate."""
        specs = list(specs)
        ids = await self._enqueue_batch(specs, conn)
        if ids is not None:
            return [Enqueued(job_id, True) for job_id in ids]
        return await self._enqueue_specs(specs, conn)

    async def _enqueue_batch(
        self, specs: list[JobSpec], conn: psycopg.AsyncConnection[Any] | None
    ) -> list[int] | None:
        """`specs` in one `enqueue_batch` statement, a transaction of its own that decides its
        NOTIFY and sends it after its commit (no trigger fires): their ids. None, with
        nothing sent, for a batch it does not take, or inside a transaction."""
        if len(specs) > ENQUEUE_CHUNK or (conn is not None and not alone(conn)):
            return None
        batch = ops.enqueue_batch(specs)
        if batch is None:
            return None
        async with self._turn_on(conn):
            target = conn or await self._own()
            if not alone(target):
                return None
            ids, wake = await self._run(batch, target)
            if wake is not None:
                await self._notify(target, [wake])
            return ids

    async def _enqueue_specs(
        self, specs: list[JobSpec], conn: psycopg.AsyncConnection[Any] | None
    ) -> list[Enqueued]:
        """`enqueue_many_detailed` for any batch, in the caller's transaction or its own."""
        async with self._turn_on(conn):  # no other caller's statement in its transaction
            target = conn or await self._own()
            if len(specs) <= ENQUEUE_CHUNK and ops.enqueue_is_one_statement(specs):
                if not (alone(target) and ops.may_need_rounds(specs)):
                    return await self._drive(ops.enqueue_flow(specs), target)
                async with self._joined(target):  # its rounds commit together, or none does
                    return await self._drive(ops.enqueue_flow(specs), target)
            done: list[Enqueued] = []
            async with self._joined(target):  # a caller's transaction is joined, never committed
                for chunk in chunks(specs):
                    done.extend(await self._drive(ops.enqueue_flow(chunk), target))
            return done

    async def enqueue_copy(
        self, specs: Iterable[JobSpec], conn: psycopg.AsyncConnection[Any] | None = None
    ) -> list[int]:
        """The bulk path: `specs` (none with a unique_key or depends_on: ValueError) through
        COPY, all or nothing, in one transaction (or the caller's, on `conn`); their new ids,
        in order. The jobs and their effects are `enqueue_many`'s, at a fraction of its cost
        per job. A role that row-level security on jobs applies to (COPY refuses it) gets
        `enqueue_many`'s INSERTs, in the same transaction."""
        specs = list(specs)
        delays = ops.copy_delays(specs)
        if not specs:
            return []
        async with self._turn_on(conn):  # no other caller's statement in its transaction
            target = conn or await self._own()
            async with self._joined(target):  # a caller's transaction is joined, never committed
                ids, run_ats = await self.run(
                    ops.copy_ids(self.schema, len(specs), delays), target
                )
                if ids is None:  # row-level security: COPY would refuse the role
                    return await self._insert_instead(specs, target)
                await self._copy_in(ops.copy_text(specs, ids, delays, run_ats), target, len(ids))
        return ids

    async def enqueue_payloads(
        self,
        queue: str,
        payloads: Iterable[Any],
        *,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int = ops.DEFAULT_MAX_ATTEMPTS,
        priority: int = 0,
        backoff_base: float | None = None,
        backoff_cap: float | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[int]:
        """The bulk path for jobs that differ only in their payload: one job of `queue` per
        payload, with the options given, through COPY, as `enqueue_copy` of a JobSpec each
        (without making one: for loading a backlog); all or nothing, in one transaction (or
        the caller's, on `conn`). Their new ids, in order. A role that row-level security on
        jobs applies to gets `enqueue_many`'s INSERTs instead, as with `enqueue_copy`."""
        if isinstance(payloads, str | bytes | bytearray | memoryview | dict):
            raise ValueError("payloads: give one payload per job (a list), not one payload")
        payloads = payloads if isinstance(payloads, list | tuple) else list(payloads)
        template = JobSpec(
            queue, None, run_at=run_at, delay=delay, max_attempts=max_attempts,
            priority=priority, backoff_base=backoff_base, backoff_cap=backoff_cap,
        )  # fmt: skip
        return await self._copy_payloads(
            template, len(payloads), ops.payload_texts(payloads), payloads, conn
        )

    async def enqueue_payload_texts(
        self,
        queue: str,
        texts: Iterable[str],
        *,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int = ops.DEFAULT_MAX_ATTEMPTS,
        priority: int = 0,
        backoff_base: float | None = None,
        backoff_cap: float | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
    ) -> list[int]:
        """`enqueue_payloads` for payloads given as JSON text (a JSON-lines file's lines), each
        stored as jsonb reads it, without being parsed here: all or nothing, as that. A text
        that is not JSON fails the call, nothing written (the server's error names its row);
        one nested too deeply for Python's json to read back, ValueError before any is sent."""
        if isinstance(texts, str | bytes | bytearray | memoryview):
            raise ValueError("texts: give one JSON text per job (a list), not one text")
        checked = ops.checked_texts(texts)
        template = JobSpec(
            queue, None, run_at=run_at, delay=delay, max_attempts=max_attempts,
            priority=priority, backoff_base=backoff_base, backoff_cap=backoff_cap,
        )  # fmt: skip
        return await self._copy_payloads(
            template, len(checked), checked, map(jsontext.loads, checked), conn
        )

    async def _copy_payloads(
        self,
        template: JobSpec,
        n: int,
        texts: Iterable[str],
        payloads: Iterable[Any],
        conn: psycopg.AsyncConnection[Any] | None,
    ) -> list[int]:
        """`n` jobs of `template` but for their payloads, through COPY from their JSON `texts`;
        through INSERTs of the `payloads` themselves for a role COPY refuses (each iterable is
        lazy, and only one of them is read)."""
        delays = ops.copy_delays([template])
        if not n:
            return []
        async with self._turn_on(conn):  # no other caller's statement in its transaction
            target = conn or await self._own()
            async with self._joined(target):  # a caller's transaction is joined, never committed
                ids, run_ats = await self.run(ops.copy_ids(self.schema, n, delays), target)
                if ids is None:  # row-level security: COPY would refuse the role
                    specs = ops.copy_as_specs(template, list(payloads))
                    return await self._insert_instead(specs, target)
                await self._copy_in(
                    ops.payload_copy_text(template, texts, ids, delays, run_ats), target, len(ids)
                )
        return ids

    async def _insert_instead(
        self, specs: Sequence[JobSpec], target: psycopg.AsyncConnection[Any]
    ) -> list[int]:
        """The bulk path's jobs through `enqueue_many`'s statements, on `target`, inside the
        caller's block: for a role COPY refuses."""
        ids: list[int] = []
        for chunk in chunks(specs):
            ids.extend(e.id for e in await self._drive(ops.enqueue_flow(chunk), target))
        return ids

    async def _copy_in(
        self, blocks: Iterable[str], target: psycopg.AsyncConnection[Any], jobs: int
    ) -> None:
        """`blocks` of COPY text of `jobs` jobs into jobs (`enqueue_copy`), on `target`, inside
        the caller's block; a refusal is said as `run` says it (text the database cannot hold:
        `Unstorable`, as for any enqueue), and a row a trigger skipped as `ops.rows_skipped`
        (the ids were taken for every job: the block is undone)."""
        copy_in = statement(ops.ENQUEUE_COPY.name, self.schema)
        try:
            async with target.cursor() as cur:
                async with cur.copy(copy_in) as copy:
                    for block in blocks:
                        await copy.write(block)
                copied = cur.rowcount
        except psycopg.Error as exc:
            await self._refused(exc, target)
            raise
        if copied != jobs:
            raise ops.rows_skipped(jobs, copied)

    # lease holders
    async def claim(
        self, queue: str, limit: int = 10, lease: timedelta = ops.DEFAULT_LEASE, worker: str = ""
    ) -> list[Job]:
        """Up to `limit` due jobs of `queue`, each leased to `worker` (a new id when empty) for
        `lease`, under a new fence every write about it must carry."""
        return await self.run(ops.claim(queue, limit, lease, worker or make_worker_id()))

    async def heartbeat(self, job_id: int, fence: int) -> None:
        """Extend the job's lease; LeaseLost if `fence` is no longer the job's."""
        settled = await self.run(ops.heartbeat([(job_id, fence)]))
        expect_applied(settled, job_id, fence, "heartbeat")

    async def complete(
        self,
        job_id: int,
        fence: int,
        *,
        worker: str | None = None,
        conn: psycopg.AsyncConnection[Any] | None = None,
        result: Any = None,
    ) -> None:
        """Mark the job done with `result` (JSON), if `fence` is still the job's; inside `conn`'s
        transaction, with your own writes. LeaseLost if another claim holds the job now:
        roll your transaction back."""
        settled = await self.run(
            ops.complete([(job_id, fence)], worker, [result_json(result)]), conn
        )
        expect_applied(settled, job_id, fence, "complete")

    async def fail(self, job_id: int, fence: int, error: str, *, worker: str | None = None) -> None:
        """Record the attempt's failure: the job retries after its backoff, or dies when its
        attempts are spent; LeaseLost if `fence` is no longer the job's."""
        settled = await self.run(ops.fail([(job_id, fence, error)], worker))
        expect_applied(settled, job_id, fence, "fail")

    async def complete_many(
        self, held: Sequence[tuple[int, int]], worker: str | None = None
    ) -> Settled:
        """`complete` for many (id, fence) pairs in one statement: which applied, which lost."""
        return await self.run(ops.complete(held, worker))

    async def fail_many(
        self, held: Sequence[tuple[int, int, str]], worker: str | None = None
    ) -> Settled:
        """`fail` for many (id, fence, error) in one statement: which applied, which lost."""
        return await self.run(ops.fail(held, worker))

    async def heartbeat_many(self, held: Sequence[tuple[int, int]]) -> Settled:
        """`heartbeat` for many (id, fence) pairs in one statement."""
        return await self.run(ops.heartbeat(held))

    async def release_many(
        self, held: Sequence[tuple[int, int]], worker: str | None = None, reason: str = "shutdown"
    ) -> Settled:
        """Held jobs back to ready, the attempt not counted (a worker shutting down)."""
        return await self.run(ops.release(held, worker, reason))

    async def record_stale(
        self, lost: Sequence[tuple[int, int]], worker: str | None, action: str
    ) -> None:
        """History rows for writes that matched nothing: (job id, the stale fence it carried)."""
        if lost:
            await self.run(ops.record_stale(lost, worker, action))

    # maintenance and operators
    async def reap(self, limit: int = ops.REAP_BATCH) -> list[tuple[int, str]]:
        """At most `limit` jobs whose lease expired back to ready, or dead when their attempts
        are spent: (id, new status) of each."""
        return await self.run(ops.reap(limit))

    async def requeue(self, ids: Sequence[int]) -> list[int]:
        """Dead jobs of `ids` back to ready with fresh attempts; the ids requeued (ids that are
        not dead are left alone).
        """
        return await self.run(ops.requeue(ids, operator_id()))

    async def requeue_dead(self, queue: str | None, batch: int = ops.BULK_BATCH) -> list[int]:
        """Every dead job of `queue` (None: of every queue) back to ready with fresh attempts, in
        batches of `batch`; the ids requeued.
        """
        return (await self.requeue_dead_report(queue, batch))[0]

    async def requeue_report(self, ids: Sequence[int]) -> ops.RequeueReport:
        """(requeued, left dead because a ready or running job holds their unique key,
        {left dead: (its parent, "dead" | "gone")} for jobs whose parent is dead, or gone
        before it was done, and not requeued too)."""
        return await self.run(ops.requeue_report(ids, operator_id()))

    async def requeue_dead_batches(
        self, queue: str | None, batch: int = ops.BULK_BATCH
    ) -> AsyncIterator[ops.RequeueReport]:
        """The dead jobs of `queue` (of every queue when None) back to ready, in batches of at
        most `batch` (each one statement and one commit, whole or nothing), yielding each
        batch's answer as `requeue_report`."""
        after, actor, where = 0, operator_id(), ops.dead_of(queue)
        while True:
            last, report = await self.run(ops.requeue_batch(where, actor, after, batch))
            if last is None:
                return
            after = last
            yield report

    async def requeue_dead_report(
        self, queue: str | None, batch: int = ops.BULK_BATCH
    ) -> ops.RequeueReport:
        """`requeue_dead_batches`, summed."""
        return ops.summed([r async for r in self.requeue_dead_batches(queue, batch)])

    async def kill(self, ids: Sequence[int], reason: str = "killed by operator") -> list[int]:
        """Ready or running jobs of `ids` to dead with `reason` as their error; the ids killed. A
        worker running one loses its lease: nothing it writes afterwards lands.
        """
        return await self.run(ops.kill(ids, operator_id(), reason))

    # schedules
    async def add_schedule(
        self,
        name: str,
        queue: str,
        cron: str,
        payload: Any = None,
        *,
        max_attempts: int = ops.DEFAULT_MAX_ATTEMPTS,
        replace: bool = False,
    ) -> None:
        """A periodic job: every worker enqueues `payload` on `queue` at each slot of `cron`
        (UTC), each slot once. PgqError if the name exists (unless `replace`) or the input is
        bad."""
        op = checked(ops.add_schedule, name, queue, cron, payload, max_attempts, replace=replace)
        if not await self.run(op):
            raise ScheduleExists(name)

    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, by name."""
        return await self.run(ops.schedules())

    async def schedules_page(
        self, after: str | None = None, limit: int = 100
    ) -> tuple[list[Schedule], int]:
        """At most `limit` schedules by name after `after`, and how many there are in all."""
        return await self.run(ops.schedules_page(after, limit))

    async def schedule(self, name: str) -> Schedule | None:
        """The schedule named `name`, or None."""
        return await self.run(ops.schedule(name))

    async def remove_schedule(self, name: str) -> None:
        """Remove the schedule; PgqError if there is none of that name. Jobs it enqueued stay."""
        if not await self.run(ops.remove_schedule(name)):
            raise unknown_schedule(name)

    async def run_schedule(self, name: str) -> int:
        """Enqueue the schedule's job now (outside its slots): the new job's id."""
        job_id = await self.run(ops.run_schedule(name))
        if job_id is None:
            raise unknown_schedule(name)
        return job_id

    async def prune_batches(
        self, older_than: timedelta, batch: int = ops.PRUNE_BATCH
    ) -> AsyncIterator[int]:
        """Deletes done jobs with their history in bounded batches, yielding each batch's
        count, until nothing is left. Drops no partition (`prune_report` does)."""
        while deleted := await self.run(ops.prune(older_than, batch)):
            yield deleted

    async def prune_report(
        self,
        older_than: timedelta,
        batch: int = ops.PRUNE_BATCH,
        progress: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """Done jobs finished before the cutoff go with their history, in bounded batches, and
        every partition of the history entirely before the cutoff is dropped, the history of
        jobs still present kept (`ops.prune_flow`)."""
        return await self._drive(ops.prune_flow(older_than, batch, progress), None)

    async def prune(self, older_than: timedelta, batch: int = ops.PRUNE_BATCH) -> int:
        """Delete the done jobs finished more than `older_than` ago, with their history, in
        batches that never block workers; drop the days of history wholly before the cutoff.
        The number of jobs deleted (`prune_report` says more)."""
        return (await self.prune_report(older_than, batch)).deleted

    async def ensure_partitions(self, ahead: int = ops.PARTITIONS_AHEAD) -> list[PartitionDay]:
        """The history's daily partitions from today (UTC) to `ahead` days on, each created if
        missing; what the workers' reapers do every hour."""
        return await self.run(ops.ensure_partitions(ahead))

    # queue control
    async def pause(self, queue: str, reason: str | None = None) -> datetime:
        """The queue claims nothing from now on; returns when it was paused."""
        return await self.run(ops.pause(queue, operator_id(), reason))

    async def resume(self, queue: str) -> datetime | None:
        """The queue claims again and its workers are woken; returns when it had been paused."""
        return await self.run(ops.resume(queue, channel(self.schema)))

    async def set_limit(self, queue: str, max_running: int | None) -> int | None:
        """At most `max_running` jobs of `queue` run at once (None: no limit); returns the old."""
        return await self.run(ops.set_limit(queue, max_running, channel(self.schema)))

    async def has_jobs(self, queue: str) -> bool:
        """Whether `queue` has a job (ready, running or dead), or had one that completed."""
        return await self.run(ops.has_jobs(queue))

    async def retries_waiting(self, queues: Sequence[str]) -> tuple[int, datetime | None]:
        """Failed jobs of `queues` waiting for a retry later than now: how many, and when the
        first is due (None: none)."""
        return await self.run(ops.retries_waiting(queues))

    # filters
    async def jobs_matching(self, where: JobFilter, limit: int = 50) -> list[JobRow]:
        """Jobs `where` matches, newest first, at most `limit`, without their payloads."""
        return await self.run(ops.jobs_filtered(where, limit))

    async def count_matching(self, where: JobFilter, action: str | None = None) -> int:
        """Jobs `where` matches (that `action` would change, if given)."""
        return await self.run(ops.count_filtered(where.for_action(action) if action else where))

    async def bulk_batches(
        self,
        action: str,
        where: JobFilter,
        batch: int = ops.BULK_BATCH,
        reason: str = "killed by operator",
    ) -> AsyncIterator[list[int]]:
        """`action` (requeue, kill or delete) over the jobs `where` matches, in batches of at
        most `batch` rows (one short transaction each), yielding each batch's changed ids."""
        after, actor = 0, operator_id()
        while True:
            last, changed = await self.run(ops.bulk(action, where, actor, after, batch, reason))
            if last is None:
                return
            after = last
            yield changed

    async def bulk(
        self,
        action: str,
        where: JobFilter,
        batch: int = ops.BULK_BATCH,
        reason: str = "killed by operator",
    ) -> list[int]:
        """`bulk_batches`, run to the end: every id changed."""
        return [i async for ids in self.bulk_batches(action, where, batch, reason) for i in ids]

    # errors and health
    async def errors(
        self, queue: str | None = None, since: timedelta | None = None, limit: int = 100
    ) -> list[ErrorGroup]:
        """Failed and dead jobs grouped by their error (numbers, ids and URLs normalised), the
        largest group first; `since` keeps errors seen within it.
        """
        return await self.run(ops.errors(queue, since, limit))

    async def health(
        self,
        stuck_factor: float = ops.STUCK_FACTOR,
        stuck_floor: timedelta = ops.STUCK_FLOOR,
        stuck_limit: int = ops.STUCK_LIMIT,
    ) -> Health:
        """What `pgq health` shows: table bloat and vacuum, the oldest open transaction, lock
        waits, and the stuck jobs: a live lease, running past `stuck_factor` times their
        queue's p99 run time and past `stuck_floor` (at most `stuck_limit` listed, all
        counted); and waiting jobs that can never run (a parent dead or gone)."""
        stuck = ops.health_stuck(stuck_factor, stuck_floor, stuck_limit)
        return health_of(
            await self.run(ops.health_tables(self.schema)),
            await self.run(ops.health_xmin()),
            await self.run(ops.health_notify()),
            await self.run(ops.health_lock_waits(self.schema)),
            await self.run(stuck),
            await self.run(ops.health_stranded()),
        )

    # reading
    async def stats(self, soon: timedelta | None = None) -> list[QueueStats]:
        """Per queue: ready, scheduled, waiting, running, expiring, dead and done jobs, the age of
        the oldest due one, and whether the queue is paused or limited.
        """
        return await self.run(ops.stats(soon))

    async def stats_window(self, offset: int, limit: int) -> QueueWindow:
        """At most `limit` queues from the `offset`th by name, and how many in all."""
        return await self.run(ops.stats_window(offset, limit))

    async def queue_stats(self, queues: Sequence[str]) -> list[QueueStats]:
        """The `stats` rows of these queues only (what an action just changed)."""
        return await self.run(ops.queue_stats(queues))

    async def leases(self, limit: int = 100) -> list[Lease]:
        """Running jobs, the lease closest to expiry first: at most `limit`."""
        return await self.run(ops.leases(limit))

    async def workers(self, limit: int = ops.WORKERS_LIMIT) -> list[WorkerInfo]:
        """The live workers (each beats its row in `workers`), oldest first."""
        return await self.run(ops.workers(limit))

    async def jobs(
        self, queue: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[JobRow]:
        """Jobs of `queue` (None: every queue) in `status` (None: any), newest first, without
        their payloads: at most `limit`.
        """
        return await self.run(ops.jobs(queue, status, limit))

    async def history(self, job_id: int) -> list[JobEvent]:
        """The job's history, oldest first: enqueue, each claim with its fence, failures,
        requeues, completion.
        """
        return await self.run(ops.history(job_id))

    async def job(self, job_id: int) -> JobDetail:
        """The job with its payload, result and history; JobNotFound if there is none."""
        detail = await self.run(ops.job(job_id))
        if detail is None:
            raise JobNotFound(job_id)
        detail.history.extend(await self.history(job_id))
        return await self.with_links(detail)

    async def with_links(self, detail: JobDetail, limit: int = ops.LINKS_LIMIT) -> JobDetail:
        """`detail` with its parents and children (at most `limit` of each)."""
        parents, parents_total = await self.run(ops.job_links(detail.id, "parents", limit))
        children, children_total = await self.run(ops.job_links(detail.id, "children", limit))
        return replace(
            detail, parents=parents, parents_total=parents_total, children=children,
            children_total=children_total,
        )

    # production: settings, and what the exporter and the soak read
    async def settings(self) -> dict[str, str]:
        """The schema's settings by name (migration 5), e.g. {'notify': 'always'}."""
        return await self.run(ops.settings())

    async def set_notify(self, mode: str) -> str:
        """When the jobs trigger sends NOTIFY: 'always' | 'edge' | 'off' (ValueError else);
        applies to every statement from the next one on."""
        return await self.run(ops.set_notify(mode))

    async def lease_summary(self) -> list[QueueLeases]:
        """Per queue with running jobs: distinct workers holding them, expired leases."""
        return await self.run(ops.metrics_leases())

    async def activity(self) -> Activity:
        """Worker processes connected to the database; the xmin horizon others hold back."""
        return await self.run(ops.metrics_activity())

    async def server_role(self) -> ServerRole:
        """The server this connection reached: address, standby or primary, lag, timeline."""
        return await self.run(ops.server_role())

    async def table_sizes(self) -> list[TableSize]:
        """Bytes, live and dead tuples of `jobs` and `job_events`."""
        return await self.run(ops.table_sizes(self.schema))

    async def latency(
        self,
        since: timedelta = ops.LATENCY_WINDOW,
        queues: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> ops.LatencyReport:
        """How long each queue's done jobs waited (due to claimed) and ran (claimed to done):
        p50, p95 and p99 over the last 5 minutes and over `since`, from at most the 20,000
        latest done jobs per queue and window."""
        return await self.run(ops.latency(since, queues, limit))

    async def stuck_counts(
        self, factor: float = ops.STUCK_FACTOR, floor: timedelta = ops.STUCK_FLOOR
    ) -> dict[str, int]:
        """How many running jobs are stuck (`health`) per queue that has any."""
        return await self.run(ops.metrics_stuck(factor, floor))
