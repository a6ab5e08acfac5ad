"""The worker's state as a type: where a `Worker` is in its life, and the legal edges.

Across: why nothing new is claimed (nothing, a stop was asked, a burst worker was refused);
down: the main statement connection lost, and back.

                          stop                      refused
    starting ──▶ running ──────────▶ draining ──────────────▶ refused
       │  connected │  ▲               │  ▲                    │  ▲
       │         lost  back          lost  back             lost  back
       │            ▼  │               ▼  │                    ▼  │
       │       disconnected ─stop─▶ draining,   ──refused──▶ refused,
       │                            disconnected             disconnected
       └──stop, asked before or while connecting──▶ draining

    running ──refused──▶ refused, and disconnected ──refused──▶ refused, disconnected:
        a burst worker's claim (or its leases' renewal) refused with no stop asked
    running, disconnected, draining, draining-disconnected ──burst: queues empty──▶ drained
    every state ──run() returns or raises──▶ stopped

- `stopping` (no new claims; running handlers get until `grace_deadline`, then go back):
  draining, refused and drained, connected or not. `disconnected`: the main connection is
  lost; `refused`: a burst worker stops before its queues drained, so `run()` raises.
- A stop asked before or while `run()` connects moves starting to draining; it is said once
  the worker has started.
- starting, drained and stopped do not follow the connection: a lost connection while
  starting fails `run()`, and a drained worker only winds down.
- `Worker.state` reports one of five words (the metrics' and the dashboard's): every
  disconnected state is "disconnected", refused is "draining", drained is "running".
- Every transition is logged at DEBUG with its reason. An edge not drawn here is a bug: it
  raises `IllegalTransition` when PGQ_STRICT_STATES=1 (the test suite sets it), else it is
  logged as an error and taken.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable

from ..text import printable

log = logging.getLogger("pgq.worker")

#: Set to 1 to raise on an illegal transition instead of logging it (the test suite does).
STRICT_ENV = "PGQ_STRICT_STATES"


class State(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DISCONNECTED = "disconnected"
    DRAINING = "draining"
    DRAINING_DISCONNECTED = "draining, disconnected"
    REFUSED = "refused"
    REFUSED_DISCONNECTED = "refused, disconnected"
    DRAINED = "drained"
    STOPPED = "stopped"

    @property
    def stopping(self) -> bool:
        """No new claims: a stop was asked, a burst worker was refused or is drained."""
        return self in _STOPPING

    @property
    def disconnected(self) -> bool:
        return self in _LOST.values()

    @property
    def refused(self) -> bool:
        return self in (State.REFUSED, State.REFUSED_DISCONNECTED)

    @property
    def reported(self) -> str:
        """The word `Worker.state` and the metrics report."""
        return _REPORTED.get(self, self.value)


S = State
_STOPPING = frozenset(
    {S.DRAINING, S.DRAINING_DISCONNECTED, S.REFUSED, S.REFUSED_DISCONNECTED, S.DRAINED}
)
#: the connection lost, and back
_LOST = {
    S.RUNNING: S.DISCONNECTED,
    S.DRAINING: S.DRAINING_DISCONNECTED,
    S.REFUSED: S.REFUSED_DISCONNECTED,
}
_BACK = {lost: up for up, lost in _LOST.items()}
_STOP = {S.STARTING: S.DRAINING, S.RUNNING: S.DRAINING, S.DISCONNECTED: S.DRAINING_DISCONNECTED}
_REFUSE = {
    S.RUNNING: S.REFUSED,
    S.DRAINING: S.REFUSED,
    S.DISCONNECTED: S.REFUSED_DISCONNECTED,
    S.DRAINING_DISCONNECTED: S.REFUSED_DISCONNECTED,
}
_REPORTED = {
    S.DRAINING_DISCONNECTED: "disconnected",
    S.REFUSED: "draining",
    S.REFUSED_DISCONNECTED: "disconnected",
    S.DRAINED: "running",
}

#: Every legal edge: the diagram above.
EDGES: dict[State, frozenset[State]] = {
    S.STARTING: frozenset({S.RUNNING, S.DRAINING, S.STOPPED}),
    S.RUNNING: frozenset({S.DISCONNECTED, S.DRAINING, S.REFUSED, S.DRAINED, S.STOPPED}),
    S.DISCONNECTED: frozenset(
        {S.RUNNING, S.DRAINING_DISCONNECTED, S.REFUSED_DISCONNECTED, S.DRAINED, S.STOPPED}
    ),
    S.DRAINING: frozenset({S.DRAINING_DISCONNECTED, S.REFUSED, S.DRAINED, S.STOPPED}),
    S.DRAINING_DISCONNECTED: frozenset(
        {S.DRAINING, S.REFUSED_DISCONNECTED, S.DRAINED, S.STOPPED}
    ),
    S.REFUSED: frozenset({S.REFUSED_DISCONNECTED, S.STOPPED}),
    S.REFUSED_DISCONNECTED: frozenset({S.REFUSED, S.STOPPED}),
    S.DRAINED: frozenset({S.STOPPED}),
    S.STOPPED: frozenset(),
}


class IllegalTransition(AssertionError):
    """A transition the diagram does not draw: a bug in the worker."""


class Lifecycle:
    """The state of worker `worker_id` and the data its stop carries; `held()` counts the
    jobs it holds, for its lines."""

    def __init__(self, worker_id: str, grace: float, held: Callable[[], int]) -> None:
        self._worker_id = worker_id
        self._grace = grace
        self._held = held
        self.state = State.STARTING
        #: once stopping, running handlers are handed back from this time (time.monotonic())
        self.grace_deadline = 0.0
        #: why a burst worker stopped before its queues drained (`run()` raises it)
        self.refusal: str | None = None
        #: when the main connection was lost (time.monotonic()); None while it is up
        self.down_since: float | None = None

    def transition(self, new: State, reason: str) -> None:
        """Move to `new` along a drawn edge (the same state: nothing)."""
        old = self.state
        if new is old:
            return
        if new not in EDGES[old]:
            message = f"worker {self._worker_id}: illegal transition {old.value} -> {new.value}"
            if os.environ.get(STRICT_ENV) == "1":
                raise IllegalTransition(f"{message} ({reason})")
            log.error("%s (%s)", message, printable(reason))
        log.debug(
            "worker %s: %s -> %s (%s)", self._worker_id, old.value, new.value, printable(reason)
        )
        self.state = new

    def started(self, now: float) -> None:
        """`run()` connected: running, or the stop asked meanwhile is said now."""
        if self.state is State.STARTING:
            self.transition(State.RUNNING, "connected")
        elif self.state.stopping:
            self._say_stopping(immediately=self.grace_deadline <= now)

    def stop(self, immediately: bool, now: float) -> None:
        """A stop asked: no new claims, running handlers get `grace` seconds (none with
        `immediately`, or on a second ask that is). After `run()` it does nothing."""
        state = self.state
        if state is State.STOPPED:
            return
        if not state.stopping:
            self.grace_deadline = now if immediately else now + self._grace
            self.transition(_STOP[state], "stop asked")
            if state is not State.STARTING:
                self._say_stopping(immediately)
        elif immediately and self.grace_deadline > now:
            self.grace_deadline = now
            log.info(
                "worker %s stopping now: handing back %d job(s)", self._worker_id, self._held()
            )

    def refuse(self, why: str, now: float) -> bool:
        """A burst worker cannot claim: it stops (its held jobs finish or go back) and `run()`
        raises. Said once; returns whether this is the first refusal."""
        state = self.state
        if state.refused:
            return False
        self.refusal = why
        log.error(
            "worker %s: %s; stopping (burst), the queues are not drained",
            self._worker_id,
            printable(why),
        )
        if not state.stopping:
            self.grace_deadline = now + self._grace
        self.transition(_REFUSE.get(state, S.REFUSED), why)
        if not state.stopping:
            self._say_stopping(immediately=False)
        return True

    def drained(self) -> None:
        """A burst worker's claim found its queues empty with nothing held or in flight."""
        self.transition(State.DRAINED, "burst: the queues are empty")

    def link_lost(self, reason: str, now: float) -> None:
        self.down_since = now
        self.transition(_LOST.get(self.state, self.state), f"connection lost: {reason}")
        log.warning(
            "worker %s: database unavailable (%s); holding %d job(s), retrying with backoff",
            self._worker_id,
            printable(reason),
            self._held(),
        )

    def link_back(self, now: float) -> None:
        since = self.down_since or now
        self.down_since = None
        self.transition(_BACK.get(self.state, self.state), "connection back")
        log.info(
            "worker %s: database reachable again after %.1fs; checking %d held job(s)",
            self._worker_id,
            now - since,
            self._held(),
        )

    def _say_stopping(self, immediately: bool) -> None:
        log.info(
            "worker %s stopping: no new claims, %d running job(s)%s",
            self._worker_id,
            self._held(),
            "" if immediately else f", grace {self._grace:g}s",
        )
