"""The wake-up after an enqueue that was a transaction of its own, sent off the enqueue's path.

`Queue.enqueue` / `AsyncQueue.enqueue` on an autocommit connection learn from their INSERT
which queue to wake (under `always`, or `edge` at an edge). They hand it to the process's
`Notifier` for that server and schema, and return. The notifier's thread sends, on a
connection of its own, one NOTIFY per queue marked since its last send: every marked queue is
notified after the mark (so after the enqueue's commit), and enqueues that commit while a send
is under way share the next one. A notification is a hint (workers poll too); a notifier that
is not connected yet, or cannot reach the server, hands the NOTIFY back to the enqueue's own
connection (`mark` answers False), as pgq did before there was a notifier.

One notifier per (server, schema) per process, shared by every queue; a forked child makes its
own and never touches its parent's: not its connection (closing it there would end the
parent's session), nor its locks (a thread of the parent may have held one at the fork).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from . import ops, session
from .config import connect_options, pooled
from .defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT
from .queue_common import channel

log = logging.getLogger("pgq")

#: Seconds a notifier that failed to send leaves the NOTIFY to each enqueue's own connection.
DOWN_SECONDS = 5.0
#: Least seconds between the starts of two rounds (at most 500 NOTIFY statements a second).
ROUND_GAP_SECONDS = 0.002
#: A mark within this many seconds of the last one (or while a round waits or runs) is
#: shared; one after a quieter spell is sent by the enqueue itself, at once.
BUSY_GAP = 0.002
#: Seconds after which a round still waiting for the server is stuck (a network or server that
#: stopped answering; a round takes well under a millisecond): marks meanwhile are left to
#: the enqueues, as while the notifier is down.
STUCK_SECONDS = 1.0
#: Seconds without a mark after which a notifier closes its connection (the next mark reopens).
IDLE_SECONDS = 30.0
#: The longest the process's exit, or the close of the last queue using a notifier, waits for
#: marked queues to be sent.
EXIT_FLUSH_SECONDS = 2.0
#: Its connection's application_name: `pgq notifier <schema>`.
APPLICATION_NAME = "pgq notifier"


class Notifier:
    """Sends a NOTIFY for each queue marked, once per round, after the mark."""

    def __init__(self, conninfo: str, schema: str, *, background: bool = True):
        """`background`: a thread sends each round, and a mark is taken only once its
        connection is open; without, `send_pending` does (tests)."""
        self._conninfo = conninfo
        self.schema = schema
        self._background = background
        #: a forked child's copy (set by the fork hook): inert, see the module
        self._forked = False
        self._cond = threading.Condition()
        self._pending: dict[str, None] = {}
        self._sending = False
        #: when the round under way (`_sending`) counts as stuck
        self._stuck_at = 0.0
        self._down_until = 0.0
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        #: its connection is open (as far as it knows): marks are taken
        self._ready = False
        #: held while the connection is opened, used or closed: a round and a close never meet
        self._io = threading.Lock()
        #: the queues that marked and have not closed: the last to close closes the connection
        self._users: weakref.WeakSet[Any] = weakref.WeakSet()
        #: NOTIFY statements sent (each for one or more queues): for tests and tuning
        self.rounds = 0
        self._last_round = 0.0
        self._last_mark = 0.0

    def mark(self, queue: str, user: Any = None) -> bool:
        """Have `queue` notified soon, after this call. False when the caller must send its
        NOTIFY itself: the notifier is down, not connected yet (it connects meanwhile), or the
        mark comes after a quiet spell (nothing to share it with: the caller's own NOTIFY
        wakes a worker soonest), or a round has waited for the server longer than
        STUCK_SECONDS. `user`: the caller's queue, until it `leave`s."""
        if self._forked:  # a forked child's copy: its thread, locks and socket are the parent's
            return False
        with self._cond:
            now = time.monotonic()
            if now < self._down_until or (self._sending and now > self._stuck_at):
                return False
            if user is not None:
                self._users.add(user)
            if self._background:
                quiet = not (self._pending or self._sending) and now - self._last_mark > BUSY_GAP
                self._last_mark = now
                if self._thread is None and not self._start():
                    return False
                if not self._ready:
                    self._cond.notify_all()  # a waiting thread whose connection was closed
                    return False
                if quiet:  # nothing to share: the enqueue's own NOTIFY is the soonest
                    return False
            self._pending[queue] = None
            self._cond.notify_all()
        return True

    def _start(self) -> bool:
        thread = threading.Thread(target=self._loop, name=f"pgq notifier {self.schema}")
        thread.daemon = True
        try:
            thread.start()
        except RuntimeError:  # no new thread (the interpreter is exiting)
            return False
        self._thread = thread
        return True

    def flush(self, timeout: float) -> bool:
        """Wait until every queue marked so far has been sent (or given up): False on timeout,
        and at once in a forked child for what the parent had marked."""
        if self._forked:
            return not (self._pending or self._sending)
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._sending:
                left = deadline - time.monotonic()
                if left <= 0 or (self._thread is None and not self._sending):
                    return not (self._pending or self._sending)
                self._cond.wait(left)
        return True

    def leave(self, user: Any, timeout: float = EXIT_FLUSH_SECONDS) -> None:
        """`user` is closing: once no queue uses the notifier, what it marked is sent (bounded
        by `timeout`) and the connection closed (a later mark opens it again). Nothing in a
        forked child: the connection is the parent's."""
        if self._forked:
            return
        with self._cond:
            self._users.discard(user)
            if len(self._users):
                return
        self.flush(timeout)
        if self._io.acquire(timeout=timeout):  # a round stuck on the server is not waited for
            try:
                self._close()
            finally:
                self._io.release()

    def send_pending(self) -> None:
        """One round: a NOTIFY for every queue marked since the last round."""
        with self._cond:
            queues = list(self._pending)
            self._pending.clear()
            self._sending = bool(queues)
            self._stuck_at = time.monotonic() + STUCK_SECONDS
        try:
            if queues:
                with self._io:
                    self._send(queues)
        finally:
            with self._cond:
                self._sending = False
                self._cond.notify_all()

    def _connect(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(
                self._conninfo,
                autocommit=True,
                application_name=f"{APPLICATION_NAME} {self.schema}",
                **connect_options(self._conninfo),
            )
            try:
                if not pooled():  # a round waits for no lock or server for ever
                    limits = ops.session_limits(
                        DEFAULT_STATEMENT_TIMEOUT, DEFAULT_LOCK_TIMEOUT, force=False
                    )
                    session.run(conn, self.schema, limits)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        self._ready = True
        return self._conn

    def _send(self, queues: list[str]) -> None:
        last: Exception | None = None
        for _ in range(2):  # a connection that broke since the last round: reconnect once
            try:
                round_ = ops.notify_queues(channel(self.schema), queues)
                session.run(self._connect(), self.schema, round_)
                self.rounds += 1
                return
            except Exception as exc:  # noqa: BLE001 - any failure: hand the NOTIFYs back
                last = exc
                self._close()
        self._down(last)

    def _down(self, exc: Exception | None) -> None:
        with self._cond:
            self._down_until = time.monotonic() + DOWN_SECONDS
        log.warning(
            "pgq: the notifier could not send wake-ups (%s); each enqueue sends its own for "
            "the next %.0f s",
            type(exc).__name__,
            DOWN_SECONDS,
        )

    def _warm(self) -> bool:
        """Open the connection (the thread's first step, and after a close)."""
        with self._io:
            try:
                self._connect()
            except Exception as exc:  # noqa: BLE001 - any failure: enqueues send their own
                self._close()
                self._down(exc)
                return False
        return True

    def _loop(self) -> None:
        while True:
            if not self._ready and not self._warm():
                with self._cond:
                    self._thread = None
                return
            with self._cond:
                idle = False
                while self._ready and not self._pending:
                    if not self._cond.wait(IDLE_SECONDS) and not self._pending:
                        idle = True
                        self._thread = None
                        break
            if idle:  # no connection kept; the next mark starts anew
                with self._io:
                    self._close()
                return
            # a round right after the last one waits out the gap: under load more marks share
            # it; a mark after a quiet spell goes at once
            wait = self._last_round + ROUND_GAP_SECONDS - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self.send_pending()
            self._last_round = time.monotonic()

    def _close(self) -> None:
        self._ready = False
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # already broken: nothing to close cleanly
                conn.close()

    def close(self) -> None:
        """Close the connection (a notifier made outside the registry, in tests); not the
        parent's, in a forked child."""
        if self._forked:
            return
        with self._io:
            self._close()


_lock = threading.Lock()
_notifiers: dict[tuple[str, str], Notifier] = {}
_conninfos: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
#: a forked child's inherited notifiers: kept, never closed (their sockets are the parent's)
_inherited: list[Notifier] = []


def conninfo_of(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> str:
    """The options `conn` was opened with but its application_name (password included: kept
    in memory only, never logged); remembered per connection. Call it under `_lock`."""
    known = _conninfos.get(conn)
    if known is None:
        options = {
            o.keyword.decode(): o.val.decode()
            for o in conn.pgconn.info
            if o.val is not None and o.val != b"" and o.keyword != b"application_name"
        }
        known = _conninfos[conn] = make_conninfo(**options)
    return known


def notifier_for(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], schema: str
) -> Notifier:
    """The process's notifier for the server `conn` reached and `schema`."""
    with _lock:
        key = (conninfo_of(conn), schema)
        found = _notifiers.get(key)
        if found is None:
            found = _notifiers[key] = Notifier(key[0], schema)
        return found


def _flush_all() -> None:
    deadline = time.monotonic() + EXIT_FLUSH_SECONDS
    for notifier in list(_notifiers.values()):
        notifier.flush(max(0.0, deadline - time.monotonic()))


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    for notifier in _notifiers.values():
        notifier._forked = True
    _inherited.extend(_notifiers.values())
    _notifiers.clear()
    _conninfos.clear()


atexit.register(_flush_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
