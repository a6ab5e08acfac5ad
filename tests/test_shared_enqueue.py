"""Shared rounds on real PostgreSQL: concurrent one-job enqueues on one queue's connection go
in one statement and commit together (pgq_core/rounds.py), each call still returning only
once its job has committed; a job's own fault stays its own, a lost round fails its callers,
and a cancelled caller drops only its own waiting job.

Rounds are made to share deterministically: another session holds the jobs table against
INSERT, so the first round waits on it while the other callers join behind it."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pgproxy import PgProxy
from psycopg import sql
from psycopg.types.json import Jsonb

from pgq_core import (
    AsyncQueue,
    JobSpec,
    PgqError,
    Queue,
    Tasks,
    Unstorable,
    listen_statement,
    ops,
)
from pgq_core.defaults import SHARED_ROUND_BYTES, SHARED_ROUND_JOBS
from pgq_core.ops import Op


@contextmanager
def jobs_held(dsn: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """Another session holding the jobs table against INSERT until it commits (or the block
    ends): a round's statement waits on it."""
    with psycopg.connect(dsn) as holder:
        holder.execute(sql.SQL("LOCK TABLE {}.jobs IN SHARE MODE").format(sql.Identifier(schema)))
        yield holder


def until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def waiting(queue: Queue | AsyncQueue) -> int:
    """Jobs waiting for the queue's next round (not counting one in flight)."""
    return len(queue._rounds._waiting)


def blocked_backends(conn: psycopg.Connection[Any], schema: str) -> list[int]:
    """Backends waiting on a lock with an INSERT into `schema`'s jobs."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        [f"%INSERT INTO {sql.Identifier(schema).as_string(conn)}.jobs%"],
    ).fetchall()
    return [int(r[0]) for r in rows]


def job_rows(conn: psycopg.Connection[Any], schema: str) -> list[tuple[int, int, Any]]:
    """(id, transaction id that wrote it, payload) of every job."""
    query = sql.SQL("SELECT id, xmin::text::bigint, payload FROM {}.jobs ORDER BY id")
    return [
        (int(r[0]), int(r[1]), r[2])
        for r in conn.execute(query.format(sql.Identifier(schema))).fetchall()
    ]


def on_loops_of_their_own(
    call: Callable[[int], Coroutine[Any, Any, Any]], n: int, outcomes: dict[int, Any]
) -> list[threading.Thread]:
    """`n` threads, not started, each running `call(i)` in an event loop of its own, its
    result (or what it raised) in `outcomes[i]`."""

    def run(i: int) -> None:
        try:
            outcomes[i] = asyncio.run(call(i))
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcomes[i] = exc

    return [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]


class Callers:
    """Threads each enqueueing one payload on a shared queue; outcome per payload."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.outcomes: dict[Any, Any] = {}
        self.threads: list[threading.Thread] = []

    def start(self, *payloads: Any, seen: Callable[[int], bool] | None = None) -> None:
        for p in payloads:
            t = threading.Thread(target=self._call, args=(p, seen), daemon=True)
            t.start()
            self.threads.append(t)

    def _call(self, payload: Any, seen: Callable[[int], bool] | None) -> None:
        try:
            job_id = self.queue.enqueue("q", payload)
            # committed when the call returns: another session sees it at once
            self.outcomes[repr(payload)] = job_id if seen is None or seen(job_id) else "unseen"
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.outcomes[repr(payload)] = exc

    @contextmanager
    def queued(
        self,
        dsn: str,
        reader: psycopg.Connection[Any],
        first: Any,
        *rest: Any,
        seen: Callable[[int], bool] | None = None,
        behind: int | None = None,
    ) -> Iterator[psycopg.Connection[Any]]:
        """`first` enqueued, its round waiting on the jobs table another session holds, then
        `rest` enqueued behind it (`behind` of them waiting, by default all); yields that
        session: commit it to let the rounds go."""
        schema = self.queue.schema
        with jobs_held(dsn, schema) as holder:
            self.start(first, seen=seen)
            until(lambda: blocked_backends(reader, schema) != [], "the first round to wait")
            self.start(*rest, seen=seen)
            n = len(rest) if behind is None else behind
            until(lambda: waiting(self.queue) == n, f"{n} jobs waiting behind it")
            yield holder

    def join(self) -> dict[Any, Any]:
        for t in self.threads:
            t.join(30)
            assert not t.is_alive(), "an enqueue never returned"
        return self.outcomes


def test_concurrent_enqueues_share_one_transaction_and_each_is_committed_on_return(
    queue: Queue, dsn: str
) -> None:
    check_lock = threading.Lock()
    with psycopg.connect(dsn, autocommit=True) as reader:

        def seen(job_id: int) -> bool:
            with check_lock:
                query = sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s")
                found = reader.execute(query.format(sql.Identifier(queue.schema)), [job_id])
                return found.fetchone() is not None

        callers = Callers(queue)
        rest = ({"n": n} for n in range(1, 16))
        with callers.queued(dsn, reader, {"n": 0}, *rest, seen=seen) as holder:
            holder.commit()
        outcomes = callers.join()
        assert all(isinstance(v, int) for v in outcomes.values()), outcomes
        written = job_rows(reader, queue.schema)
    assert sorted(outcomes.values()) == [r[0] for r in written], "each call's id is its own job"
    assert sorted(r[2]["n"] for r in written) == list(range(16)), "every job once"
    by_payload = {r[2]["n"]: r[1] for r in written}
    assert len({by_payload[n] for n in range(1, 16)}) == 1, "the 15 that waited went in one"
    assert by_payload[0] != by_payload[1], "the first went alone, at once"


def test_a_job_refused_in_a_shared_round_fails_alone(queue: Queue, dsn: str) -> None:
    """A NUL character in a payload: the statement is refused whole (Unstorable); its jobs are then
    enqueued alone, so the bad one fails and the others are in."""
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as reader:
        rest = ({"n": 1}, {"bad": "\x00"}, {"n": 2}, {"n": 3})
        with callers.queued(dsn, reader, {"n": 0}, *rest) as holder:
            holder.commit()
        outcomes = callers.join()
        written = job_rows(reader, queue.schema)
    bad = outcomes.pop(repr({"bad": "\x00"}))
    assert isinstance(bad, Unstorable), bad
    assert all(isinstance(v, int) for v in outcomes.values()), outcomes
    assert sorted(r[2]["n"] for r in written) == [0, 1, 2, 3]


def test_a_round_whose_connection_dies_fails_every_caller_in_it(queue: Queue, dsn: str) -> None:
    """The outcome of a round on a lost connection is unknown: each of its callers raises,
    as a lone enqueue does, and none is sent again behind their back."""
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as admin:
        with callers.queued(dsn, admin, {"n": 0}, *({"n": n} for n in range(1, 6))):
            (first,) = blocked_backends(admin, queue.schema)
            admin.execute("SELECT pg_terminate_backend(%s)", [first])
            # the next caller leads on a new connection, and waits on the lock in turn
            until(
                lambda: blocked_backends(admin, queue.schema) not in ([], [first]),
                "the second round to wait on a new connection",
            )
            (second,) = blocked_backends(admin, queue.schema)
            assert waiting(queue) == 0, "the five went in one round"
            admin.execute("SELECT pg_terminate_backend(%s)", [second])
            outcomes = callers.join()
        assert all(isinstance(v, psycopg.OperationalError) for v in outcomes.values()), outcomes
        assert job_rows(admin, queue.schema) == []
    assert isinstance(queue.enqueue("q", {"after": True}), int), "the queue reconnects"


def test_a_round_that_cannot_reconnect_fails_its_callers(dsn: str, schema: str) -> None:
    """The server gone for good: the round whose connection broke fails its caller, and the
    next leader, failing to reconnect, fails every caller waiting with it; none hangs."""
    proxy = PgProxy(dsn)
    queue = Queue.connect(proxy.dsn, schema)
    try:
        callers = Callers(queue)
        with psycopg.connect(dsn, autocommit=True) as admin, jobs_held(dsn, schema):
            callers.start({"n": 0})
            until(lambda: blocked_backends(admin, schema) != [], "the first round to wait")
            callers.start(*({"n": n} for n in range(1, 5)))
            until(lambda: waiting(queue) == 4, "4 jobs waiting")
            proxy.close()
            outcomes = callers.join()
            assert all(isinstance(v, psycopg.OperationalError) for v in outcomes.values())
            assert job_rows(admin, schema) == []
    finally:
        proxy.close()
        queue.close()


def test_a_shared_round_out_of_time_fails_its_callers(queue: Queue, dsn: str) -> None:
    queue.conn.execute("SET statement_timeout = '300ms'")
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as reader:
        with jobs_held(dsn, queue.schema):
            callers.start({"n": 0})
            until(lambda: blocked_backends(reader, queue.schema) != [], "the first round to wait")
            callers.start(*({"n": n} for n in range(1, 4)))
            outcomes = callers.join()
        assert job_rows(reader, queue.schema) == []
    assert all(isinstance(v, psycopg.errors.QueryCanceled) for v in outcomes.values()), outcomes


def test_an_enqueue_in_a_transaction_block_is_not_shared(queue: Queue, dsn: str) -> None:
    with pytest.raises(RuntimeError), queue.transaction():
        queue.enqueue("q", {"in": "block"})
        raise RuntimeError("undo")
    kept = queue.enqueue("q", {"after": "block"})
    with psycopg.connect(dsn, autocommit=True) as reader:
        written = [(r[0], r[2]) for r in job_rows(reader, queue.schema)]
    assert written == [(kept, {"after": "block"})]


def test_a_shared_round_onto_an_idle_queue_wakes_listeners(queue: Queue, dsn: str) -> None:
    queue.set_notify("edge")
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as ears:
        ears.execute(listen_statement(queue.schema))
        with callers.queued(dsn, ears, {"n": 0}, *({"n": n} for n in range(1, 6))) as holder:
            holder.commit()
        assert all(isinstance(v, int) for v in callers.join().values())
        heard = [n.payload for n in ears.notifies(timeout=2, stop_after=1)]
    assert heard == ["q"]


async def test_tasks_share_rounds_and_a_cancelled_caller_drops_only_its_waiting_job(
    aqueue: AsyncQueue, dsn: str
) -> None:
    """Tasks sharing an AsyncQueue share rounds. A leader cancelled in a round of its own job
    only: that statement is cancelled, as a lone enqueue's. A leader cancelled in a round
    carrying others: the round still ends, its own job included; so does a follower's whose
    job a round took. A follower cancelled while its job waits: the job is dropped."""
    with psycopg.connect(dsn, autocommit=True) as reader:

        async def rounds_waiting(n: int) -> None:
            while len(blocked_backends(reader, aqueue.schema)) != n:
                await asyncio.sleep(0.01)

        with jobs_held(dsn, aqueue.schema) as holder:
            alone = asyncio.create_task(aqueue.enqueue("q", {"n": 0}))
            await rounds_waiting(1)
            taken = [asyncio.create_task(aqueue.enqueue("q", {"n": n})) for n in (1, 2, 3)]
            while waiting(aqueue) < 3:
                await asyncio.sleep(0.01)
            alone.cancel()  # its round is its own: cancelled; the next leads the three
            with pytest.raises(asyncio.CancelledError):
                await alone
            while waiting(aqueue) > 0:  # taken by the next round, which waits on the lock
                await asyncio.sleep(0.01)
            await rounds_waiting(1)
            dropped = asyncio.create_task(aqueue.enqueue("q", {"n": 4}))
            while waiting(aqueue) < 1:
                await asyncio.sleep(0.01)
            taken[0].cancel()  # the leader of a round carrying others
            taken[1].cancel()  # a follower whose job that round took
            dropped.cancel()  # a follower still waiting
            await asyncio.sleep(0.05)
            assert not taken[0].done(), "the leader waits for the round it carries"
            holder.commit()
        for task in (taken[0], taken[1], dropped):
            with pytest.raises(asyncio.CancelledError):
                await task
        kept = await taken[2]
        written = job_rows(reader, aqueue.schema)
    assert sorted(r[2]["n"] for r in written) == [1, 2, 3]
    assert kept in {r[0] for r in written}
    assert len({r[1] for r in written}) == 1, "the three went in one round"


def test_a_task_enqueued_from_threads_shares_rounds(queue: Queue, dsn: str) -> None:
    """`Task.enqueue` of one job takes the one-job path, so a `Tasks` client shared by a
    process's threads shares rounds too."""
    tasks = Tasks(queue="q", client=queue)

    @tasks.task
    def note(n: int) -> None:
        return None

    outcomes: dict[int, Any] = {}

    def call(n: int) -> None:
        outcomes[n] = note.enqueue(n=n)

    with psycopg.connect(dsn, autocommit=True) as reader:
        with jobs_held(dsn, queue.schema) as holder:
            threads = [threading.Thread(target=call, args=(0,), daemon=True)]
            threads[0].start()
            until(lambda: blocked_backends(reader, queue.schema) != [], "the first round to wait")
            threads += [threading.Thread(target=call, args=(n,), daemon=True) for n in (1, 2, 3)]
            for t in threads[1:]:
                t.start()
            until(lambda: waiting(queue) == 3, "3 jobs waiting")
            holder.commit()
        for t in threads:
            t.join(30)
        written = job_rows(reader, queue.schema)
    assert sorted(outcomes.values()) == [r[0] for r in written]
    xmins = {r[2]["args"]["n"]: r[1] for r in written}
    assert xmins[1] == xmins[2] == xmins[3] != xmins[0]


def test_a_shared_round_runs_no_trigger(queue: Queue, dsn: str) -> None:
    """A shared round decides its NOTIFY itself, as a lone enqueue does: the jobs INSERT
    trigger does not fire for it (counted by the server's function statistics)."""
    if queue.conn.info.server_version < 150000:
        pytest.skip("pg_stat_force_next_flush() needs PostgreSQL 15")
    queue.conn.execute("SET track_functions = 'pl'")
    count = sql.SQL(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions"
        " WHERE schemaname = %s AND funcname = 'jobs_after_change'"
    )

    def calls() -> int:
        queue.conn.execute("SELECT pg_stat_force_next_flush()")
        row = queue.conn.execute(count, [queue.schema]).fetchone()
        return int(row[0]) if row else 0

    before = calls()
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as reader:
        with callers.queued(dsn, reader, {"n": 0}, *({"n": n} for n in range(1, 4))) as holder:
            holder.commit()
        assert all(isinstance(v, int) for v in callers.join().values())
        assert len({r[1] for r in job_rows(reader, queue.schema)}) == 2, "two rounds"
    assert calls() == before
    queue.conn.execute(
        sql.SQL("INSERT INTO {}.jobs (queue, payload) VALUES ('n', '{{}}')").format(
            sql.Identifier(queue.schema)
        )
    )
    assert calls() == before + 1, "the count sees the trigger fire"


def test_a_leader_interrupted_before_its_round_fails_its_jobs(
    queue: Queue, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anything that stops a leader between taking its jobs and its round answering them
    (here the round itself raising at once, as an interrupt would) fails those jobs' callers:
    none waits for good. The interrupt stays the leader's (a KeyboardInterrupt or SystemExit
    raised in another thread would stop that thread, past its `except Exception`): the
    others raise OperationalError, their outcome unknown as after a lost connection."""
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as reader:
        with callers.queued(dsn, reader, {"n": 0}, *({"n": n} for n in range(1, 4))) as holder:

            def interrupted(taken: Any) -> bool:
                raise KeyboardInterrupt

            monkeypatch.setattr(queue, "_round", interrupted)  # the next round's leader
            holder.commit()
        outcomes = callers.join()
    assert isinstance(outcomes.pop(repr({"n": 0})), int)
    assert isinstance(outcomes.pop(repr({"n": 1})), KeyboardInterrupt), "the leader's own"
    assert all(isinstance(v, psycopg.OperationalError) for v in outcomes.values()), outcomes
    assert all(isinstance(v.__cause__, KeyboardInterrupt) for v in outcomes.values())
    assert all("KeyboardInterrupt" in str(v) for v in outcomes.values())


def test_a_shared_round_keeps_each_jobs_trace_context(queue: Queue) -> None:
    """Callers in different spans share a round; each job records its own trace context."""
    jobs = [
        ops.enqueue_job("q", {"n": n}, None, None, 5, 0, None, None, alone=True) for n in range(3)
    ]
    traced = [
        Op(job.name, {**job.params, "trace": trace}, job.read)
        for job, trace in zip(
            jobs, [Jsonb({"traceparent": "00-a"}), None, Jsonb({"b": "1"})], strict=True
        )
    ]
    answers = queue.run(ops.enqueue_shared(traced))
    query = sql.SQL("SELECT id, trace FROM {}.jobs ORDER BY id").format(
        sql.Identifier(queue.schema)
    )
    rows = queue.conn.execute(query).fetchall()
    assert [a[0] for a in answers] == [r[0] for r in rows]
    assert [r[1] for r in rows] == [{"traceparent": "00-a"}, None, {"b": "1"}]
    untraced = queue.run(ops.enqueue_shared(jobs[:2]))
    assert len(untraced) == 2


async def test_a_round_takes_at_most_its_limit(aqueue: AsyncQueue, dsn: str) -> None:
    """150 tasks waiting behind a round go in rounds of SHARED_ROUND_JOBS (100), in order."""
    with psycopg.connect(dsn, autocommit=True) as reader:
        with jobs_held(dsn, aqueue.schema) as holder:
            first = asyncio.create_task(aqueue.enqueue("q", {"n": 0}))
            while not blocked_backends(reader, aqueue.schema):
                await asyncio.sleep(0.01)
            rest = [asyncio.create_task(aqueue.enqueue("q", {"n": n})) for n in range(1, 151)]
            while waiting(aqueue) < 150:
                await asyncio.sleep(0.01)
            holder.commit()
        ids = [await first, *[await t for t in rest]]
        written = job_rows(reader, aqueue.schema)
    assert ids == sorted(ids) == [r[0] for r in written], "ids in the order the callers came"
    sizes: dict[int, int] = {}
    for _, xid, _ in written:
        sizes[xid] = sizes.get(xid, 0) + 1
    assert sorted(sizes.values()) == [1, 50, SHARED_ROUND_JOBS]


class Deep(dict[str, Any]):
    """A payload nested past what json's encoder recurses into (RecursionError)."""

    def __init__(self, depth: int) -> None:
        inner: dict[str, Any] = {}
        for _ in range(depth):
            inner = {"a": inner}
        super().__init__(a=inner)

    def __repr__(self) -> str:
        return "Deep()"


def test_a_payload_that_cannot_be_encoded_fails_only_its_own_caller(
    queue: Queue, dsn: str
) -> None:
    """A payload json cannot encode (nested too deep: RecursionError, not a ValueError) is
    its caller's fault alone: it is encoded before its job joins a round (which counts its
    bytes), so the round of the others goes in whole."""
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as reader:
        rest = ({"n": 1}, Deep(100_000), {"n": 2})
        with callers.queued(dsn, reader, {"n": 0}, *rest, behind=2) as holder:
            holder.commit()
        outcomes = callers.join()
        written = job_rows(reader, queue.schema)
    assert isinstance(outcomes.pop("Deep()"), RecursionError)
    assert all(isinstance(v, int) for v in outcomes.values()), outcomes
    assert sorted(r[2]["n"] for r in written) == [0, 1, 2]
    assert written[1][1] == written[2][1], "the two others shared a round"


async def test_a_shared_round_out_of_lock_time_fails_its_callers(
    aqueue: AsyncQueue, dsn: str
) -> None:
    """A round that ran out of lock_timeout failed for all its jobs alike: its callers raise,
    as a lone enqueue would, and none is sent again alone to wait out the timeout once more
    (100 callers would wait 100 timeouts). The lock is let go once a caller has raised: a job
    sent again alone would then be in."""
    await aqueue.conn.execute("SET lock_timeout = '300ms'")
    with psycopg.connect(dsn, autocommit=True) as reader:
        with jobs_held(dsn, aqueue.schema) as holder:
            async with aqueue._turn:  # the first caller leads, and waits for it with the rest
                tasks = [asyncio.create_task(aqueue.enqueue("q", {"n": n})) for n in range(5)]
                while waiting(aqueue) < 5:
                    await asyncio.sleep(0.01)
            while not any(t.done() for t in tasks):
                await asyncio.sleep(0.005)
            holder.commit()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert job_rows(reader, aqueue.schema) == []
    assert all(isinstance(v, psycopg.errors.LockNotAvailable) for v in outcomes), outcomes


def test_a_round_that_committed_is_never_sent_again(queue: Queue, dsn: str) -> None:
    """A round whose answer does not match its jobs after it committed (here a trigger of the
    operator's skipping one row) fails its callers; none of its jobs is sent again, which
    would write it twice."""
    jobs = sql.Identifier(queue.schema, "jobs")
    skip = sql.Identifier(queue.schema, "skip_marked")
    queue.conn.execute(
        sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql SET search_path = ''"
            " AS $$ BEGIN IF NEW.payload ? 'skip' THEN RETURN NULL; END IF; RETURN NEW; END $$"
        ).format(skip)
    )
    queue.conn.execute(
        sql.SQL("CREATE TRIGGER skip_marked BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()")
        .format(jobs, skip)
    )
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as reader:
        rest = ({"n": 1}, {"n": 2, "skip": True}, {"n": 3})
        with callers.queued(dsn, reader, {"n": 0}, *rest) as holder:
            holder.commit()
        outcomes = callers.join()
        written = job_rows(reader, queue.schema)
    assert isinstance(outcomes.pop(repr({"n": 0})), int)
    assert all(isinstance(v, PgqError) for v in outcomes.values()), outcomes
    assert sorted(r[2]["n"] for r in written) == [0, 1, 3], "each job written once"


def test_close_fails_the_callers_waiting_and_opens_no_connection(dsn: str, schema: str) -> None:
    """close() from another thread while a round is in flight and callers wait behind it: the
    round's caller raises (its connection is gone: whether it committed is unknown), those
    waiting raise too, at once, and none reopens the connection `close` closed (it would
    stay open, owned by nobody); later calls raise as well."""
    queue = Queue.connect(dsn, schema)
    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as reader:
        with callers.queued(dsn, reader, {"n": 0}, *({"n": n} for n in range(1, 4))) as holder:
            queue.close()
            holder.commit()
            outcomes = callers.join()
        assert all(isinstance(v, psycopg.OperationalError) for v in outcomes.values()), outcomes
        assert queue.conn.closed, "close() left no connection open"
        with pytest.raises(psycopg.OperationalError):
            queue.enqueue("q", {"after": "close"})
        assert queue.conn.closed
        written = [r[2] for r in job_rows(reader, schema)]
    assert written in ([], [{"n": 0}]), "only the round in flight may have committed"


def test_an_async_queue_shared_by_event_loops_in_threads_wakes_each_caller(
    dsn: str, schema: str
) -> None:
    """Tasks on different event loops (each in a thread of its own) sharing one AsyncQueue:
    a round's leader on one loop answers, or hands the lead to, a caller waiting on another,
    and that caller wakes (an asyncio.Event set from another loop's thread woke nobody)."""
    aqueue = asyncio.run(AsyncQueue.connect(dsn, schema))
    outcomes: dict[int, Any] = {}
    threads = on_loops_of_their_own(lambda n: aqueue.enqueue("q", {"n": n}), 3, outcomes)
    try:
        with psycopg.connect(dsn, autocommit=True) as reader:
            with jobs_held(dsn, schema) as holder:
                threads[0].start()
                until(lambda: blocked_backends(reader, schema) != [], "the first round to wait")
                threads[1].start()
                threads[2].start()
                until(lambda: waiting(aqueue) == 2, "2 jobs waiting")
                holder.commit()
                for t in threads:
                    t.join(30)
                    assert not t.is_alive(), "a caller on another loop was never woken"
            written = job_rows(reader, schema)
    finally:
        asyncio.run(aqueue.close())
    assert sorted(outcomes.values()) == [r[0] for r in written], outcomes
    xmins = {r[2]["n"]: r[1] for r in written}
    assert xmins[1] == xmins[2] != xmins[0], "the two that waited shared a round"


async def test_a_round_carries_at_most_its_bytes_of_payloads(aqueue: AsyncQueue, dsn: str) -> None:
    """Five payloads of 0.4 SHARED_ROUND_BYTES each go in rounds of two, two and one: a
    round's statement stays far from the server's limits (a jsonb of 256 MB, a message of
    1 GB, past which it would fail, or drop the connection, for every caller in it)."""
    big = "x" * int(SHARED_ROUND_BYTES * 0.4)
    async with aqueue._turn:  # the first caller leads, and waits for it with the rest
        tasks = [asyncio.create_task(aqueue.enqueue("q", {"n": n, "b": big})) for n in range(5)]
        while waiting(aqueue) < 5:
            await asyncio.sleep(0.01)
    ids = await asyncio.gather(*tasks)
    with psycopg.connect(dsn, autocommit=True) as reader:
        written = job_rows(reader, aqueue.schema)
    assert ids == [r[0] for r in written]
    assert [r[2]["n"] for r in written] == list(range(5))
    xmins = [r[1] for r in written]
    assert xmins[0] == xmins[1] != xmins[2] == xmins[3] != xmins[4], xmins


def test_a_shared_round_keeps_each_jobs_options_and_wakes_as_each_alone(queue: Queue) -> None:
    """Each job of a round has its own queue, run_at or delay, priority, max_attempts and
    backoff; it answers the queue to wake as it would alone: under `edge` a due job whose
    queue had no due job before the round, under `always` any due job, never a later one."""
    queue.enqueue("busy", {"before": True})
    at = datetime.now(UTC) + timedelta(hours=2)
    options = [  # queue, payload, run_at, delay, max_attempts, priority, backoff base, cap
        ("idle", {"n": 0}, None, None, 5, 0, None, None),
        ("busy", {"n": 1}, None, None, 3, 7, 1.5, 60.0),
        ("idle", {"n": 2}, at, None, 5, -2, None, None),
        ("later", {"n": 3}, None, timedelta(hours=1), 1, 0, None, 9.0),
        ("idle", {"n": 4}, None, None, 2, 1, None, None),
    ]
    jobs = [ops.enqueue_job(*o, alone=True) for o in options]
    wakes = {}
    for mode in ("edge", "always"):
        queue.set_notify(mode)
        wakes[mode] = [w for _, w in queue.run(ops.enqueue_shared(jobs))]
    assert wakes == {
        "edge": ["idle", None, None, None, "idle"],  # sent once per queue (`_notify`)
        "always": ["idle", "busy", None, None, "idle"],
    }
    read = sql.SQL(
        "SELECT queue, payload, max_attempts, priority, backoff_base, backoff_cap,"
        " run_at - now() > interval '50 minutes', run_at - now() > interval '110 minutes'"
        " FROM {}.jobs WHERE payload ? 'n' ORDER BY id"
    ).format(sql.Identifier(queue.schema))
    rows = queue.conn.execute(read).fetchall()
    want = [
        (o[0], o[1], o[4], o[5], o[6], o[7], o[2] is not None or o[3] is not None, o[2] is not None)
        for o in options
    ]
    assert rows == want * 2


def test_a_caller_interrupted_as_it_is_handed_the_lead_passes_it_on(
    queue: Queue, dsn: str
) -> None:
    """An interrupt (KeyboardInterrupt, or a tracing hook raising) landing in a caller just as
    it wakes to lead the next round, after its wait returned: its job, still waiting, is
    dropped and the lead passes on; the next caller leads (none waits for good)."""
    woken = threading.Event()
    interrupted = threading.Event()

    def on_line(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and woken.is_set() and not interrupted.is_set():
            interrupted.set()
            raise KeyboardInterrupt
        return on_line

    def on_wait(frame: Any, event: str, arg: Any) -> Any:
        if event == "return":
            woken.set()
        return on_wait

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is threading.Event.wait.__code__:
            return on_wait
        if frame.f_code is Queue._enqueue_shared.__code__:
            return on_line
        return None

    outcomes: dict[str, Any] = {}

    def interrupted_caller() -> None:
        sys.settrace(tracer)
        try:
            outcomes["interrupted"] = queue.enqueue("q", {"n": "interrupted"})
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcomes["interrupted"] = exc
        finally:
            sys.settrace(None)

    callers = Callers(queue)
    with psycopg.connect(dsn, autocommit=True) as reader:
        with jobs_held(dsn, queue.schema) as holder:
            callers.start({"n": 0})
            until(lambda: blocked_backends(reader, queue.schema) != [], "the first round to wait")
            thread = threading.Thread(target=interrupted_caller, daemon=True)
            thread.start()
            until(lambda: waiting(queue) == 1, "the interrupted caller to wait first")
            callers.start({"n": 1})
            until(lambda: waiting(queue) == 2, "another caller to wait behind it")
            holder.commit()
            thread.join(30)
            outcomes.update(callers.join())
        assert isinstance(outcomes.pop("interrupted"), KeyboardInterrupt)
        assert all(isinstance(v, int) for v in outcomes.values()), outcomes
        assert isinstance(queue.enqueue("q", {"n": 2}), int), "the queue still enqueues"
        written = [r[2]["n"] for r in job_rows(reader, queue.schema)]
    assert written == [0, 1, 2], "the interrupted job was dropped, never sent"


async def test_close_from_another_task_fails_the_tasks_waiting(dsn: str, schema: str) -> None:
    """`AsyncQueue.close()` from another task while a round waits on the server and tasks
    wait behind it: every one raises, none reopens the connection, later calls raise."""
    aqueue = await AsyncQueue.connect(dsn, schema)
    with psycopg.connect(dsn, autocommit=True) as reader:
        with jobs_held(dsn, schema) as holder:
            first = asyncio.create_task(aqueue.enqueue("q", {"n": 0}))
            while not blocked_backends(reader, schema):
                await asyncio.sleep(0.01)
            rest = [asyncio.create_task(aqueue.enqueue("q", {"n": n})) for n in range(1, 4)]
            while waiting(aqueue) < 3:
                await asyncio.sleep(0.01)
            await aqueue.close()
            holder.commit()
            outcomes = await asyncio.wait_for(
                asyncio.gather(first, *rest, return_exceptions=True), 30
            )
        assert all(isinstance(v, psycopg.OperationalError) for v in outcomes), outcomes
        assert aqueue.conn.closed
        with pytest.raises(psycopg.OperationalError):
            await aqueue.enqueue("q", {"after": "close"})
        written = [r[2] for r in job_rows(reader, schema)]
    assert written in ([], [{"n": 0}]), "only the round in flight may have committed"


def test_an_async_queue_shared_by_event_loops_in_threads_takes_turns(
    dsn: str, schema: str
) -> None:
    """Tasks on different event loops (each in a thread of its own) taking turns on one
    AsyncQueue's connection: one waiting for the turn that a task on another loop holds wakes
    when that one ends (an asyncio.Lock released from another loop's thread woke nobody)."""
    aqueue = asyncio.run(AsyncQueue.connect(dsn, schema))
    outcomes: dict[int, Any] = {}
    threads = on_loops_of_their_own(
        lambda n: aqueue.enqueue_many([JobSpec("q", {"n": n})] * 2), 3, outcomes
    )
    try:
        with psycopg.connect(dsn, autocommit=True) as reader:
            with jobs_held(dsn, schema) as holder:
                threads[0].start()
                until(lambda: blocked_backends(reader, schema) != [], "the first call to wait")
                threads[1].start()
                threads[2].start()
                until(lambda: len(aqueue._turn._waiting) == 2, "2 calls waiting for the turn")
                holder.commit()
                for t in threads:
                    t.join(30)
                    assert not t.is_alive(), "a caller on another loop never got its turn"
            written = job_rows(reader, schema)
    finally:
        asyncio.run(aqueue.close())
    assert sorted(i for ids in outcomes.values() for i in ids) == [r[0] for r in written], outcomes
    assert len(written) == 6
