"""Shared rounds: concurrent one-job enqueues on one queue's own connection go in one
statement, a transaction of their own (group commit).

Callers of `Queue.enqueue` / `AsyncQueue.enqueue` sharing a queue (threads, or tasks) `join`
its `Rounds` with their job. With no round led, the caller leads: it takes the connection
and, in one statement, enqueues every job waiting by then (`take`), then hands the lead to
the first job that came meanwhile (`done`). The others wait for their answer (`Ticket`).

Invariants:
- A job is committed when its call returns, as if enqueued alone: only the transaction is
  shared, on the connection the caller asked for, so with the same session and role.
- At most one round is led at a time; a round never waits for more jobs to come (a lone
  enqueue goes at once), and takes at most `limit` jobs, of at most `budget` bytes together
  but for the leader's own (jobs come in order: one that does not fit leads the next).
- A job is in one round at most. A round that failed for a reason one of its jobs may be
  the cause of (a bad value, a refused queue) sent nothing that committed: each of its jobs is
  then enqueued alone by its own caller (`Ticket.alone`), so one job's fault is its own.
  A round whose outcome is unknown (its connection broke, or it was cancelled) fails every
  one of its jobs with that error, as a lost connection fails a lone enqueue.

No I/O and no waiting here: the queue brings the connection and the wake-up (an
`asyncio.Event` or a `threading.Event`, as `wake`). A forked child starts with no round led
and no job waiting: the callers of the parent's are not in it.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

W = TypeVar("W")
#: A round's answer for one job: its new id, and the queue to notify after the commit.
Answer = tuple[int, "str | None"]


@dataclass(eq=False)
class Ticket(Generic[W]):
    """One caller's job in the rounds: `job` (what the queue enqueues); `wake`, made when it
    waits (a caller that leads at once needs none), is set when it is answered, failed, made
    to go alone, or made to lead."""

    job: Any
    #: its bytes in a round's statement (its payload)
    size: int = 0
    wake: W | None = None
    answer: Answer | None = None
    failure: BaseException | None = None
    #: enqueue it alone: its round sent nothing that committed, for a reason it may be
    alone: bool = False
    #: lead the next round
    lead: bool = False

    @property
    def settled(self) -> bool:
        return self.answer is not None or self.failure is not None or self.alone


@dataclass(eq=False)
class Rounds(Generic[W]):
    """The jobs waiting on one queue's connection, and whether a round is led."""

    #: a new wake-up for a job that waits (an Event), and how it is set
    make: Callable[[], W]
    wake: Callable[[W], None]
    #: jobs per round, at most
    limit: int = 1000
    #: bytes per round (the jobs' `size`), at most, but for the leader's own job
    budget: int = 1 << 62
    _waiting: list[Ticket[W]] = field(default_factory=list)
    _led: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        _every.add(self)

    def join(self, ticket: Ticket[W]) -> bool:
        """Queue `ticket`; True when its caller leads now (no round is led)."""
        with self._lock:
            if self._led:
                ticket.wake = self.make()
                self._waiting.append(ticket)
                return False
            self._waiting.append(ticket)
            ticket.lead = self._led = True  # in this order: `leave` passes a lead it holds
            return True

    def take(self, leader: Ticket[W]) -> list[Ticket[W]]:
        """The leader's round: the jobs waiting, in the order they came (the leader's first),
        at most `limit` and `budget`; [] when `leader` is not waiting (it was taken already)."""
        with self._lock:
            if leader not in self._waiting:
                return []
            n, size = 0, 0
            for ticket in self._waiting[: self.limit]:
                size += ticket.size
                if n and size > self.budget:
                    break
                n += 1
            taken, self._waiting = self._waiting[:n], self._waiting[n:]
            return taken

    def done(self, leader: Ticket[W]) -> None:
        """The leader's round is over (or it gave up before one: then its job is dropped if
        still waiting): the first waiting job leads next, else no round is led."""
        with self._lock:
            if leader in self._waiting:
                self._waiting.remove(leader)
            leader.lead = False
            if not self._waiting:
                self._led = False
                return
            nxt = self._waiting[0]
            nxt.lead = True
        self._set(nxt)

    def leave(self, ticket: Ticket[W]) -> bool:
        """A caller is done with the rounds, answered or stopped (cancelled, interrupted) at
        any point: True when its job was still waiting, and is now dropped (nothing was
        sent); False when a round took it (its outcome is that round's). A caller holding
        the lead (to lead, or having led) passes it on."""
        with self._lock:
            waiting = ticket in self._waiting
            if waiting:
                self._waiting.remove(ticket)
            lead = ticket.lead
        if lead:
            self.done(ticket)
        return waiting

    def settle(self, taken: list[Ticket[W]], answers: list[Answer]) -> None:
        """Each taken job's answer, in order; each woken but the leader's."""
        for ticket, answer in zip(taken, answers, strict=True):
            ticket.answer = answer
            self._wake_follower(ticket)

    def fail(self, taken: list[Ticket[W]], failure: BaseException | None) -> None:
        """The round failed: with `failure`, every job fails with it (the outcome is unknown);
        with None, each job goes alone (nothing committed)."""
        for ticket in taken:
            if ticket.settled:
                continue
            if failure is None:
                ticket.alone = True
            else:
                ticket.failure = failure
            self._wake_follower(ticket)

    def _wake_follower(self, ticket: Ticket[W]) -> None:
        if not ticket.lead:
            self._set(ticket)

    def _set(self, ticket: Ticket[W]) -> None:
        if ticket.wake is not None:
            self.wake(ticket.wake)


#: Every live `Rounds`, for a forked child to start afresh.
_every: weakref.WeakSet[Rounds[Any]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for rounds in list(_every):
        rounds._lock = threading.Lock()  # a parent's thread may have held it at the fork
        rounds._waiting = []
        rounds._led = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
