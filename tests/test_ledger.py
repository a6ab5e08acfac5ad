"""The ledger (pgq_core/worker/ledger.py) against the invariants its header states: no
database, no event loop, its clock set by the test."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pgq_core.models import Job
from pgq_core.worker.context import JobContext
from pgq_core.worker.ledger import (
    BUFFER_RETRY,
    LEFT_TO_LEASE_MARGIN,
    Held,
    Ledger,
    StepResult,
)
from pgq_core.worker.runner import RETURNED, Outcome

LEASE = 30.0
FAILED = Outcome("raised", "boom")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Book:
    """A ledger with a test clock that records what it tracked and released."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.tracked: list[tuple[int, int]] = []
        self.released: list[int] = []
        self.ledger = Ledger(
            LEASE,
            lambda times: 0.2 * times,
            self.clock,
            on_hold=lambda i, f: self.tracked.append((i, f)),
            on_release=self.released.append,
        )

    def claim(self, job_id: int, fence: int = 1, max_attempts: int = 5) -> Held:
        job = Job(job_id, "q", {}, fence, 1, max_attempts, datetime.now(UTC))
        held = Held(job, JobContext(job, "w", "pgq"))
        self.ledger.hold(held)
        return held

    def start(self, held: Held) -> Held:
        """A handler takes it from the buffer (as the dispatcher does)."""
        self.ledger.buffer.remove(held)
        held.ctx._began = self.clock.now
        return held

    def places(self, held: Held) -> list[str]:
        """Where a held job is: exactly one place while held, none after."""
        found = []
        if held in self.ledger.buffer:
            found.append("buffer")
        if held in self.ledger.pending:
            found.append("pending")
        if self.ledger.holds(held) and held.outcome is None and held.ctx._began:
            found.append("running")
        return found


@pytest.fixture
def book() -> Book:
    return Book()


def test_a_claimed_job_is_held_in_the_buffer_then_running_then_pending(book: Book) -> None:
    held = book.claim(1, fence=7)
    assert book.tracked == [(1, 7)]
    assert book.places(held) == ["buffer"]
    assert book.ledger.unfinished() == [held] and book.ledger.running() == []
    book.start(held)
    assert book.places(held) == ["running"]
    assert book.ledger.running() == [held]
    book.ledger.finished(held, RETURNED)
    assert book.places(held) == ["pending"]
    assert book.ledger.unfinished() == [] and book.ledger.running() == []
    assert book.ledger.due(book.clock.now) == [held]


def test_a_settled_job_leaves_once_and_is_counted_once(book: Book) -> None:
    ok, bad = book.start(book.claim(1)), book.start(book.claim(2))
    book.ledger.finished(ok, RETURNED)
    book.ledger.finished(bad, FAILED)
    batch = book.ledger.due(book.clock.now)
    book.ledger.take(batch)
    assert book.ledger.pending == []
    recorded = book.ledger.record(StepResult(done=[ok], failed=[bad]))
    assert recorded.failed == [bad]
    assert (book.ledger.done, book.ledger.failed) == (1, 1)
    assert book.ledger.held == {} and sorted(book.released) == [1, 2]
    # the same settlement reported again (a retried step) counts nothing and releases nothing
    book.ledger.record(StepResult(done=[ok], failed=[bad]))
    assert (book.ledger.done, book.ledger.failed) == (1, 1)
    assert sorted(book.released) == [1, 2]


def test_a_job_lost_first_is_not_counted_done_when_its_completion_comes_back(
    book: Book,
) -> None:
    held = book.start(book.claim(1))
    assert book.ledger.lose(held)
    assert not book.ledger.lose(held), "lost twice"
    book.ledger.record(StepResult(done=[held]))
    assert (book.ledger.done, book.ledger.lost) == (0, 1)
    assert book.released == [1]


def test_losing_takes_a_job_out_of_the_buffer_and_out_of_pending(book: Book) -> None:
    buffered = book.claim(1)
    finished = book.start(book.claim(2))
    book.ledger.finished(finished, RETURNED)
    assert book.ledger.lose(buffered) and book.ledger.lose(finished)
    assert list(book.ledger.buffer) == [] and book.ledger.pending == []
    assert book.places(buffered) == [] and book.places(finished) == []
    assert book.ledger.lost == 2 and book.ledger.held == {}


def test_the_heartbeat_loses_only_unfinished_jobs_at_their_fence(book: Book) -> None:
    running = book.start(book.claim(1, fence=3))
    finished = book.start(book.claim(2, fence=4))
    book.ledger.finished(finished, RETURNED)
    buffered = book.claim(3, fence=5)
    found = book.ledger.lost_by_heartbeat([(1, 3), (2, 4), (3, 9), (99, 1)])
    assert found == [running]  # a finished job is left to its settlement; fence 9 is not ours
    assert book.ledger.lost_by_heartbeat([(3, 5)]) == [buffered]


def test_a_busy_settlement_waits_longer_each_time_and_goes_back_to_the_front(
    book: Book,
) -> None:
    first, second = book.start(book.claim(1)), book.start(book.claim(2))
    book.ledger.finished(first, RETURNED)
    book.ledger.take([first])
    book.ledger.finished(second, RETURNED)
    recorded = book.ledger.record(StepResult(busy=[first]))
    assert recorded.busy == [first] and first.busy == 1
    assert book.ledger.pending == [first, second]  # requeued ahead of the later one
    now = book.clock.now
    assert first.not_before == pytest.approx(now + 0.2)
    assert book.ledger.due(now) == [second]
    assert book.ledger.due(now + 0.2) == [first, second]
    book.ledger.take([first])
    book.ledger.record(StepResult(busy=[first]))
    assert first.busy == 2 and first.not_before == pytest.approx(now + 0.4)
    assert book.ledger.held.keys() == {1, 2}, "a busy job stays held"


def test_a_requeued_settlement_is_never_pending_twice_nor_after_it_left(book: Book) -> None:
    a, b = book.start(book.claim(1)), book.start(book.claim(2))
    book.ledger.finished(a, RETURNED)
    book.ledger.finished(b, RETURNED)
    book.ledger.requeue([a], uncertain=True)  # still pending: not added again
    assert book.ledger.pending == [a, b]
    book.ledger.take([a, b])
    book.ledger.lose(b)
    book.ledger.requeue([a, b], uncertain=True)
    assert book.ledger.pending == [a]
    assert a.uncertain and not b.uncertain
    book.ledger.take([a])
    book.ledger.requeue([a], uncertain=False)
    assert a.uncertain, "once uncertain, a later plain retry does not clear it"


def test_the_oldest_pending_settlement_sets_when_the_flush_is_due(book: Book) -> None:
    a, b = book.start(book.claim(1)), book.start(book.claim(2))
    book.ledger.finished(a, RETURNED)
    started = book.clock.now
    book.clock.now += 1.0
    book.ledger.finished(b, RETURNED)
    assert book.ledger.first_pending_at == started
    book.ledger.take([a, b])
    book.ledger.requeue([b], uncertain=False)
    assert book.ledger.first_pending_at == started + 1.0


def test_a_refused_settlement_is_left_to_its_lease_and_stays_ours_until_after_it(
    book: Book,
) -> None:
    held = book.start(book.claim(1))
    other = book.claim(2)
    book.ledger.finished(held, FAILED)
    book.ledger.take([held])
    recorded = book.ledger.record(StepResult(refused=[held]))
    assert recorded.refused == [held]
    assert not book.ledger.holds(held) and book.ledger.failed == 0
    assert sorted(book.ledger.ours()) == [1, 2]  # the orphan check must not take it back
    book.clock.now += 2 * LEASE + LEFT_TO_LEASE_MARGIN - 1
    assert sorted(book.ledger.ours()) == [1, 2]
    book.clock.now += 2
    assert book.ledger.ours() == [other.job.id]


def test_room_counts_held_jobs_against_the_limit(book: Book) -> None:
    for i in range(3):
        book.claim(i)
    assert book.ledger.room(limit=4, settling=0) == 1
    assert book.ledger.room(limit=4, settling=2) == 3
    assert book.ledger.room(limit=3, settling=0) == 0


def test_jobs_taken_back_from_the_threads_return_to_the_front_of_the_buffer(
    book: Book,
) -> None:
    a, b, c = book.claim(1), book.claim(2), book.claim(3)
    book.ledger.buffer.popleft()
    book.ledger.buffer.popleft()  # a and b handed to threads, not started
    book.ledger.put_back([1, 2])
    assert list(book.ledger.buffer) == [a, b, c]
    book.ledger.put_back([])
    assert list(book.ledger.buffer) == [a, b, c]


def test_on_stop_buffered_jobs_are_returned_but_busy_ones_stay_and_are_retried_later(
    book: Book,
) -> None:
    a, b = book.claim(1), book.claim(2)
    waiting = list(book.ledger.buffer)
    book.ledger.returned(waiting, busy=[2])
    assert list(book.ledger.buffer) == [b] and book.ledger.held.keys() == {2}
    assert book.released == [1]
    assert book.ledger.buffer_retry_at == pytest.approx(book.clock.now + BUFFER_RETRY)
    book.ledger.lose(b)  # lost meanwhile: the next hand-back does not release it again
    book.ledger.returned([b], busy=[])
    assert book.released == [1, 2] and book.ledger.lost == 1
    assert a.outcome is None


def test_only_unfinished_jobs_are_handed_back(book: Book) -> None:
    buffered = book.claim(1)
    running = book.start(book.claim(2))
    buffered_too = book.claim(3)
    finished = book.start(book.claim(4))
    book.ledger.finished(finished, RETURNED)
    remaining = book.ledger.unfinished()
    assert set(remaining) == {buffered, running, buffered_too}
    left = book.ledger.handed_back(remaining, busy=[2])
    assert left == [running]
    book.ledger.prune_buffer()
    assert list(book.ledger.buffer) == []
    assert book.ledger.held.keys() == {2, 4}
    assert book.ledger.pending == [finished]


def test_settlements_come_due_after_the_flush_delay_or_when_a_busy_hold_off_ends(
    book: Book,
) -> None:
    assert book.ledger.settle_deadlines(book.clock.now, 0.005) == []
    a, b = book.start(book.claim(1)), book.start(book.claim(2))
    book.ledger.finished(a, RETURNED)
    book.ledger.finished(b, RETURNED)
    began = book.ledger.first_pending_at
    assert book.ledger.settle_deadlines(book.clock.now, 0.005) == [began + 0.005]
    book.ledger.take([a, b])
    book.ledger.record(StepResult(busy=[a, b]))  # both held off: no flush deadline
    now = book.clock.now
    assert book.ledger.settle_deadlines(now, 0.005) == [now + 0.2]
    assert book.ledger.counts == (0, 0, 0)


def test_a_failure_settled_with_its_jobs_next_claim_counts_once(book: Book) -> None:
    """A retry due at once is claimed by the step that records the failure: the new claim is
    held before the step is recorded; the failure still counts (and is said) once."""
    first = book.start(book.claim(1, fence=1))
    book.ledger.finished(first, FAILED)
    book.ledger.take(book.ledger.due(book.clock.now))
    again = book.claim(1, fence=2)  # claimed by the same step
    recorded = book.ledger.record(StepResult(failed=[first]))
    assert recorded.failed == [first] and book.ledger.failed == 1
    assert book.ledger.holds(again) and book.released == []
    book.ledger.record(StepResult(failed=[first]))  # reported again: nothing more
    assert book.ledger.failed == 1 and book.ledger.holds(again)
