"""The worker's states (worker/state.py) alone, without a database: every edge of the diagram
is legal and every other one raises, and each kind of event moves each state where the
diagram says."""

from __future__ import annotations

import itertools
import logging

import pytest

from pgq_core.worker.state import EDGES, STRICT_ENV, IllegalTransition, Lifecycle, State

S = State
STOPPING = {S.DRAINING, S.DRAINING_DISCONNECTED, S.REFUSED, S.REFUSED_DISCONNECTED, S.DRAINED}


def at(state: State, held: int = 0) -> Lifecycle:
    life = Lifecycle("w", 30.0, lambda: held)
    life.state = state
    return life


#: in a fixed order: xdist's workers must collect the same tests
DRAWN = [(a, b) for a in State for b in State if b in EDGES[a]]


@pytest.mark.parametrize(("old", "new"), DRAWN)
def test_every_drawn_edge_is_taken(old: State, new: State) -> None:
    life = at(old)
    life.transition(new, "test")
    assert life.state is new


UNDRAWN = [(a, b) for a, b in itertools.product(State, State) if a is not b and b not in EDGES[a]]


@pytest.mark.parametrize(("old", "new"), UNDRAWN)
def test_every_other_edge_raises(old: State, new: State) -> None:
    life = at(old)
    with pytest.raises(IllegalTransition, match=f"{old.value} -> {new.value}"):
        life.transition(new, "test")
    assert life.state is old


def test_outside_the_tests_an_illegal_edge_is_logged_and_taken(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(STRICT_ENV)
    life = at(S.STOPPED)
    with caplog.at_level(logging.ERROR, "pgq.worker"):
        life.transition(S.RUNNING, "test")
    assert life.state is S.RUNNING
    assert "worker w: illegal transition stopped -> running (test)" in caplog.text


def test_the_undrawn_edges_are_the_ones_expected() -> None:
    """Nothing leaves stopped, nothing returns to starting, and drained only stops."""
    assert EDGES[S.STOPPED] == frozenset()
    assert all(S.STARTING not in targets for targets in EDGES.values())
    assert EDGES[S.DRAINED] == {S.STOPPED}
    assert all(S.STOPPED in EDGES[s] for s in State if s is not S.STOPPED)
    assert len(UNDRAWN) == 9 * 8 - sum(len(t) for t in EDGES.values())


def test_each_transition_is_logged_at_debug_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    life = at(S.RUNNING)
    with caplog.at_level(logging.DEBUG, "pgq.worker"):
        life.transition(S.DISCONNECTED, "connection lost: reset")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "worker w: running -> disconnected (connection lost: reset)")
    ]


def test_derived_properties_and_the_five_reported_words() -> None:
    assert {s for s in State if s.stopping} == STOPPING
    assert {s for s in State if s.disconnected} == {
        S.DISCONNECTED, S.DRAINING_DISCONNECTED, S.REFUSED_DISCONNECTED
    }
    assert {s for s in State if s.refused} == {S.REFUSED, S.REFUSED_DISCONNECTED}
    assert {s.reported for s in State} == {
        "starting", "running", "draining", "disconnected", "stopped"
    }
    assert all(s.reported == "disconnected" for s in State if s.disconnected)


# -- the events ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [(S.RUNNING, S.DISCONNECTED), (S.DRAINING, S.DRAINING_DISCONNECTED),
     (S.REFUSED, S.REFUSED_DISCONNECTED), (S.STARTING, S.STARTING), (S.DRAINED, S.DRAINED)],
)
def test_a_lost_connection_and_its_return(old: State, new: State) -> None:
    life = at(old)
    life.link_lost("reset", 10.0)
    assert life.state is new and life.down_since == 10.0
    life.link_back(12.0)
    assert life.state is old and life.down_since is None


@pytest.mark.parametrize(
    ("old", "new"),
    [(S.RUNNING, S.DRAINING), (S.DISCONNECTED, S.DRAINING_DISCONNECTED),
     (S.STARTING, S.DRAINING)],
)
def test_a_stop_drains_connected_or_not(old: State, new: State) -> None:
    life = at(old)
    life.stop(immediately=False, now=100.0)
    assert life.state is new and life.grace_deadline == 130.0
    life.stop(immediately=True, now=101.0)
    assert life.state is new and life.grace_deadline == 101.0, "a second stop, now"


def test_a_stop_after_run_or_once_drained_changes_nothing() -> None:
    for state in (S.STOPPED, S.DRAINED, S.REFUSED):
        life = at(state)
        life.stop(immediately=False, now=100.0)
        assert life.state is state and life.grace_deadline == 0.0


def test_disconnected_while_draining_drains_on_when_the_connection_is_back() -> None:
    life = at(S.RUNNING, held=3)
    life.stop(immediately=False, now=0.0)
    life.link_lost("reset", 1.0)
    assert life.state is S.DRAINING_DISCONNECTED and life.state.stopping
    assert life.state.reported == "disconnected"
    life.link_back(2.0)
    assert life.state is S.DRAINING and life.grace_deadline == 30.0


@pytest.mark.parametrize(
    ("old", "new"),
    [(S.RUNNING, S.REFUSED), (S.DRAINING, S.REFUSED), (S.DISCONNECTED, S.REFUSED_DISCONNECTED),
     (S.DRAINING_DISCONNECTED, S.REFUSED_DISCONNECTED)],
)
def test_a_refusal_is_kept_once_and_stops_the_worker(old: State, new: State) -> None:
    life = at(old)
    assert life.refuse("claiming from q refused (no)", 5.0)
    assert life.state is new and life.refusal == "claiming from q refused (no)"
    assert not life.refuse("again", 6.0) and life.refusal == "claiming from q refused (no)"
    assert life.grace_deadline == (35.0 if not old.stopping else 0.0)


def test_a_stop_asked_while_starting_is_said_once_started(
    caplog: pytest.LogCaptureFixture,
) -> None:
    life = at(S.STARTING, held=0)
    with caplog.at_level(logging.INFO, "pgq.worker"):
        life.stop(immediately=True, now=5.0)
        assert "stopping" not in caplog.text
        life.started(now=6.0)
    assert life.state is S.DRAINING
    assert caplog.messages == ["worker w stopping: no new claims, 0 running job(s)"]
    fresh = at(S.STARTING)
    fresh.started(now=6.0)
    assert fresh.state is S.RUNNING
