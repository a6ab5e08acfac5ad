"""The process's notifier (pgq_core/notifier.py): wake-ups after autocommit enqueues, sent on a
connection of its own after the commit, one per queue per round, and never lost to a broken
notifier (the enqueue's own connection sends them then)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import pytest
from pgproxy import PgProxy

from pgq_core import AsyncQueue, Queue, listen_statement
from pgq_core import notifier as notifier_module
from pgq_core.notifier import APPLICATION_NAME, Notifier, conninfo_of, notifier_for


def listener(dsn: str, schema: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(listen_statement(schema))
    return conn


def heard(conn: psycopg.Connection[Any], wait: float) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=wait)]


def first(conn: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=10, stop_after=1)]


def test_one_round_notifies_each_marked_queue_once(dsn: str, schema: str, conn: Any) -> None:
    notifier = Notifier(conninfo_of(conn), schema, background=False)
    try:
        with listener(dsn, schema) as ears:
            for _ in range(50):
                assert notifier.mark("a")
            assert notifier.mark("b")
            assert heard(ears, 0.3) == [], "nothing is sent before the round"
            notifier.send_pending()
            assert sorted(heard(ears, 0.5)) == ["a", "b"]
            assert notifier.rounds == 1
            notifier.send_pending()  # nothing marked since: no statement
            assert notifier.rounds == 1
    finally:
        notifier.close()


def test_a_notifier_that_cannot_connect_hands_the_notify_back(
    dsn: str, schema: str, conn: Any
) -> None:
    unreachable = conninfo_of(conn) + " dbname=pgq_no_such_database"
    notifier = Notifier(unreachable, schema, background=False)
    assert notifier.mark("a")
    notifier.send_pending()  # fails, twice: down for a while
    assert notifier.rounds == 0
    assert not notifier.mark("a"), "down: the caller sends its own NOTIFY"


def test_a_killed_notifier_connection_is_replaced(dsn: str, schema: str, conn: Any) -> None:
    notifier = Notifier(conninfo_of(conn), schema, background=False)
    try:
        with listener(dsn, schema) as ears:
            assert notifier.mark("k")
            notifier.send_pending()
            assert first(ears) == ["k"]
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database()",
                [f"{APPLICATION_NAME} {schema}"],
            ).fetchall()
            assert killed and all(ok for (ok,) in killed)
            assert notifier.mark("k")
            notifier.send_pending()
            assert first(ears) == ["k"], "the round reconnects"
            assert notifier.rounds == 2
    finally:
        notifier.close()


def test_a_burst_from_many_threads_is_heard(
    queue: Queue, dsn: str
) -> None:
    queues = [
        Queue(psycopg.connect(dsn, autocommit=True), queue.schema, owns=True) for _ in range(4)
    ]
    notifier = notifier_for(queues[0].conn, queue.schema)
    try:
        queues[0].enqueue("c", {})  # the notifier connects: every later mark is its
        assert wait_for_sessions(queues[0].conn, queue.schema, 1) == 1
        before = notifier.rounds
        with listener(dsn, queue.schema) as ears:
            threads = [
                threading.Thread(target=lambda q=q: [q.enqueue("c", {}) for _ in range(50)])
                for q in queues
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert notifier.flush(10)
            got = heard(ears, 1.0)
            assert 1 <= len(got) <= 200 and set(got) == {"c"}
            # one per round, plus those the enqueues sent themselves after a quiet spell
            assert notifier.rounds - before <= len(got)
    finally:
        for q in queues:
            q.close()


async def test_async_enqueue_wakes_through_the_notifier(aqueue: AsyncQueue, dsn: str) -> None:
    with listener(dsn, aqueue.schema) as ears:
        await aqueue.enqueue("x", {})
        assert first(ears) == ["x"]


FORKS = """
import os, sys
import psycopg
from pgq_core import Queue
from pgq_core.notifier import notifier_for
dsn, schema = sys.argv[1], sys.argv[2]
with Queue(psycopg.connect(dsn, autocommit=True), schema, owns=True) as q:
    q.enqueue("parent", {})  # the parent's notifier and its thread exist before the fork
    assert notifier_for(q.conn, schema).flush(10)
    pid = os.fork()
    if pid == 0:  # the child: a connection of its own, the parent's left alone
        code = 1
        try:
            with Queue(psycopg.connect(dsn, autocommit=True), schema, owns=True) as c:
                c.enqueue("child", {})
                code = 0 if notifier_for(c.conn, schema).flush(10) else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    q.enqueue("after", {})
"""  # the process's exit flushes the parent's last NOTIFY (atexit)


def test_a_forked_child_notifies_through_its_own_notifier(queue: Queue, dsn: str) -> None:
    with listener(dsn, queue.schema) as ears:
        done = subprocess.run(
            [sys.executable, "-c", FORKS, dsn, queue.schema],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert heard(ears, 1.0) == ["parent", "child", "after"]


LEAVES = """
import os, sys, threading, time
import psycopg
from pgq_core import Queue
from pgq_core.notifier import notifier_for
dsn, schema, held = sys.argv[1], sys.argv[2], sys.argv[3] == "held"
conn = psycopg.connect(dsn, autocommit=True)
q = Queue(conn, schema)  # not its connection's owner: its close only leaves the notifier
q.enqueue("parent", {})  # the notifier connects beside the enqueue
notifier = notifier_for(conn, schema)
while notifier._conn is None:
    time.sleep(0.01)
with notifier._io:
    before = notifier._conn.info.backend_pid
taken, go = threading.Event(), threading.Event()
if held:  # the notifier's thread holds its lock at the fork, as it does in every round
    def hold():
        with notifier._cond:
            taken.set()
            go.wait()
    threading.Thread(target=hold, daemon=True).start()
    taken.wait()
pid = os.fork()
if pid == 0:  # the child closes the queue it inherited, the notifier's last user
    code = 1
    try:
        q.close()
        code = 0
    finally:
        os._exit(code)
go.set()
deadline = time.monotonic() + 20
while not (done := os.waitpid(pid, os.WNOHANG))[0]:
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        sys.exit("the child's close waited on a lock of the parent's thread")
    time.sleep(0.02)
assert os.WIFEXITED(done[1]) and os.WEXITSTATUS(done[1]) == 0, done
with notifier._io:  # the parent's session is untouched: the same backend answers
    assert notifier._conn.execute("SELECT pg_backend_pid()").fetchone()[0] == before
q.enqueue("after", {})
"""


@pytest.mark.parametrize("held", ["free", "held"])
def test_a_forked_child_closing_an_inherited_queue_leaves_the_notifier_alone(
    queue: Queue, dsn: str, held: str
) -> None:
    """The child's close of a queue made before the fork left the parent's notifier: it closed
    the parent's connection (ending its session on the server), or hung for good on a lock
    the parent's notifier thread held at the fork."""
    done = subprocess.run(
        [sys.executable, "-c", LEAVES, dsn, queue.schema, held],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("mode", ["edge", "off"])
def test_modes_that_send_nothing_mark_nothing(queue: Queue, dsn: str, mode: str) -> None:
    queue.set_notify(mode)
    queue.enqueue("m", {})  # edge: the first due job notifies
    assert notifier_for(queue.conn, queue.schema).flush(10)
    with listener(dsn, queue.schema) as ears:
        queue.enqueue("m", {})
        assert heard(ears, 0.5) == []


def notifier_sessions(conn: Any, schema: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = %s AND datname = current_database()",
        [f"{APPLICATION_NAME} {schema}"],
    ).fetchone()
    return int(row[0])


def wait_for_sessions(conn: Any, schema: str, n: int) -> int:
    for _ in range(100):
        if (count := notifier_sessions(conn, schema)) == n:
            return count
        time.sleep(0.05)
    return notifier_sessions(conn, schema)


def test_the_last_queue_to_close_sends_its_wake_ups_and_closes_the_connection(
    dsn: str, schema: str, conn: Any
) -> None:
    with listener(dsn, schema) as ears:
        one = Queue(psycopg.connect(dsn, autocommit=True), schema, owns=True)
        two = Queue(psycopg.connect(dsn, autocommit=True), schema, owns=True)
        one.enqueue("l", {})
        two.enqueue("l", {})
        assert wait_for_sessions(conn, schema, 1) == 1, "one notifier connection for both queues"
        one.close()
        assert notifier_sessions(conn, schema) == 1, "the other queue still uses it"
        two.enqueue("l", {})
        two.close()
        assert wait_for_sessions(conn, schema, 0) == 0
        assert set(heard(ears, 0.5)) == {"l"}
        again = Queue(psycopg.connect(dsn, autocommit=True), schema, owns=True)
        try:
            again.enqueue("l", {})
            assert first(ears) == ["l"], "a mark after the close reopens it"
        finally:
            again.close()


def test_an_idle_notifier_closes_its_connection(
    queue: Queue, dsn: str, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notifier_module, "IDLE_SECONDS", 0.3)
    with listener(dsn, queue.schema) as ears:
        queue.enqueue("i", {})
        assert first(ears) == ["i"]
        assert wait_for_sessions(conn, queue.schema, 0) == 0, "idle: no connection kept"
        queue.enqueue("i", {})
        assert first(ears) == ["i"], "the next mark starts it anew"


def test_a_mark_after_a_quiet_spell_is_left_to_the_enqueue(
    conn: Any, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notifier_module, "BUSY_GAP", 0.5)  # no scheduler hiccup spans it
    notifier = Notifier(conninfo_of(conn), schema)
    try:
        assert not notifier.mark("q"), "not connected yet: the enqueue sends its own"
        assert wait_for_sessions(conn, schema, 1) == 1
        time.sleep(0.6)
        assert not notifier.mark("q"), "quiet: nothing to share, the enqueue's NOTIFY is soonest"
        assert notifier.mark("q"), "a mark right after another is shared"
        assert notifier.flush(10)
    finally:
        notifier.close()


def test_a_round_is_bounded_and_a_stuck_one_does_not_hold_close(
    conn: Any, schema: str
) -> None:
    notifier = Notifier(conninfo_of(conn), schema, background=False)
    try:
        assert notifier.mark("b")
        notifier.send_pending()
        own = notifier._conn
        assert own is not None
        timeouts = own.execute(
            "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
        ).fetchone()
        assert timeouts is not None and "0" not in timeouts, "no round waits for ever"
        user = object.__new__(Queue)
        notifier._users.add(user)
        with notifier._io:  # a round stuck on the server holds the connection
            started = time.monotonic()
            notifier.leave(user, timeout=0.2)
            assert time.monotonic() - started < 5, "close gave up waiting for it"
        assert notifier._conn is own, "left for the stuck round to finish with"
    finally:
        notifier.close()


def test_while_a_round_is_stuck_marks_go_back_to_the_enqueues(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round waiting on a server that stopped answering (its replies held by a proxy; the
    statement itself ran) made every later mark count as shared, so no enqueue sent a NOTIFY
    until the round ended: with keepalives unable to tell, up to TCP's retransmission timeout.
    Past STUCK_SECONDS the enqueues send their own again."""
    monkeypatch.setattr(notifier_module, "STUCK_SECONDS", 0.3)
    monkeypatch.setattr(notifier_module, "BUSY_GAP", 60.0)  # every later mark is shared
    proxy = PgProxy(dsn)
    notifier = Notifier(proxy.dsn, schema)
    try:
        deadline = time.monotonic() + 10
        while not notifier.mark("s"):  # False until its connection is open
            assert time.monotonic() < deadline, "the notifier never connected"
            time.sleep(0.01)
        assert notifier.flush(10)
        with listener(dsn, schema) as ears:
            proxy.hold(f"{APPLICATION_NAME} {schema}")
            assert notifier.mark("s")
            assert first(ears) == ["s"], "the round's NOTIFY ran; its reply is held"
            deadline = time.monotonic() + 10
            while notifier.mark("t"):
                assert time.monotonic() < deadline, "marks still taken by a stuck round"
                time.sleep(0.05)
            proxy.release()
            assert notifier.flush(10)
            assert notifier.mark("u"), "the round ended: marks are shared again"
            assert notifier.flush(10)
            assert "u" in heard(ears, 0.5)
    finally:
        proxy.release()
        notifier.close()
        proxy.close()
