"""The shared rounds' policy (pgq_core/rounds.py), without a database: who leads, what a
round takes, how the lead passes on, and what a failed round leaves each caller."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from pgq_core.rounds import Rounds, Ticket


class Wake:
    def __init__(self) -> None:
        self.woken = 0


def woke(wake: Wake) -> None:
    wake.woken += 1


def ticket(job: object = None) -> Ticket[Wake]:
    return Ticket(job)


def test_the_first_caller_leads_and_the_rest_wait() -> None:
    rounds: Rounds[Wake] = Rounds(Wake, woke)
    first, second, third = ticket(1), ticket(2), ticket(3)
    assert rounds.join(first) is True and first.lead
    assert rounds.join(second) is False and not second.lead
    assert rounds.join(third) is False
    assert rounds.take(first) == [first, second, third]
    assert rounds.take(first) == []  # taken once


def test_the_lead_passes_to_the_first_job_that_came_during_the_round() -> None:
    rounds: Rounds[Wake] = Rounds(Wake, woke)
    first = ticket(1)
    rounds.join(first)
    assert rounds.take(first) == [first]
    later, last = ticket(2), ticket(3)
    rounds.join(later)
    rounds.join(last)
    rounds.settle([first], [(10, None)])
    assert first.wake is None, "the leader never waited: it has no wake-up"
    rounds.done(first)
    assert later.lead and later.wake.woken == 1 and not last.lead and last.wake.woken == 0
    assert rounds.take(later) == [later, last]
    rounds.done(later)
    again = ticket(4)
    assert rounds.join(again) is True, "no round is led once nobody waits"


def test_settle_answers_in_order_and_wakes_each_follower() -> None:
    rounds: Rounds[Wake] = Rounds(Wake, woke)
    lead, a, b = ticket(), ticket(), ticket()
    for t in (lead, a, b):
        rounds.join(t)
    taken = rounds.take(lead)
    rounds.settle(taken, [(1, "q"), (2, None), (3, "q")])
    assert [t.answer for t in taken] == [(1, "q"), (2, None), (3, "q")]
    assert taken[0].wake is None and [t.wake.woken for t in taken[1:] if t.wake] == [1, 1]
    assert all(t.settled for t in taken)


def test_a_round_takes_at_most_its_limit_the_leader_first() -> None:
    rounds: Rounds[Wake] = Rounds(Wake, woke, limit=2)
    lead, a, b = ticket(), ticket(), ticket()
    for t in (lead, a, b):
        rounds.join(t)
    assert rounds.take(lead) == [lead, a]
    rounds.done(lead)
    assert b.lead and rounds.take(b) == [b]


def test_a_round_takes_jobs_while_their_bytes_fit_its_budget_the_leaders_always() -> None:
    rounds: Rounds[Wake] = Rounds(Wake, woke, budget=10)
    big, a, b, c, d = (Ticket(None, size=n) for n in (12, 4, 5, 2, 20))
    for t in (big, a, b, c, d):
        rounds.join(t)
    assert rounds.take(big) == [big], "the leader's job goes though over the budget alone"
    rounds.done(big)
    assert rounds.take(a) == [a, b], "a, b, c would be 11 bytes"
    rounds.done(a)
    assert rounds.take(c) == [c], "c and d would be 22 bytes: d leads the next"
    rounds.done(c)
    assert d.lead and rounds.take(d) == [d]


def test_a_failed_round_sends_its_jobs_alone_or_fails_them_all() -> None:
    rounds: Rounds[Wake] = Rounds(Wake, woke)
    lead, a = ticket(), ticket()
    rounds.join(lead)
    rounds.join(a)
    taken = rounds.take(lead)
    rounds.fail(taken, None)  # nothing committed: each goes alone
    assert lead.alone and a.alone and a.wake.woken == 1 and lead.failure is None

    rounds.done(lead)
    lead, a = ticket(), ticket()
    rounds.join(lead)
    rounds.join(a)
    taken = rounds.take(lead)
    lost = ConnectionError("gone")
    rounds.fail(taken, lost)  # unknown outcome: every job fails with it
    assert lead.failure is lost and a.failure is lost and not a.alone


def test_a_caller_leaving_before_its_round_is_dropped_and_passes_the_lead() -> None:
    rounds: Rounds[Wake] = Rounds(Wake, woke)
    lead, a, b = ticket(1), ticket(2), ticket(3)
    for t in (lead, a, b):
        rounds.join(t)
    assert rounds.leave(a) is True, "still waiting: dropped, nothing sent"
    assert rounds.leave(lead) is True, "the leader gave up before taking its round"
    assert b.lead and b.wake.woken == 1
    assert rounds.take(b) == [b]
    assert rounds.leave(b) is False, "taken: its outcome is the round's"


def test_threads_joining_at_once_get_one_leader_and_every_job_once() -> None:
    rounds: Rounds[threading.Event] = Rounds(threading.Event, threading.Event.set, limit=7)
    tickets = [Ticket(n) for n in range(64)]
    leaders: list[int] = []
    start = threading.Barrier(len(tickets))

    def caller(t: Ticket[threading.Event]) -> None:
        start.wait()
        if not rounds.join(t):
            assert t.wake is not None and t.wake.wait(10)
        if t.lead:
            leaders.append(t.job)
            taken = rounds.take(t)
            rounds.settle(taken, [(job.job, None) for job in taken])
            rounds.done(t)

    threads = [threading.Thread(target=caller, args=(t,)) for t in tickets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert all(t.answer == (t.job, None) for t in tickets)
    assert 64 / 7 <= len(leaders) <= 64


@pytest.mark.parametrize("limit", [1, 3])
def test_every_waiting_job_is_led_in_turn(limit: int) -> None:
    rounds: Rounds[Wake] = Rounds(Wake, woke, limit=limit)
    tickets = [ticket(n) for n in range(7)]
    for t in tickets:
        rounds.join(t)
    leader = tickets[0]
    sizes = []
    while True:
        taken = rounds.take(leader)
        sizes.append(len(taken))
        rounds.settle(taken, [(0, None)] * len(taken))
        rounds.done(leader)
        nxt = [t for t in tickets if t.lead]
        if not nxt:
            break
        (leader,) = nxt
    assert all(t.settled for t in tickets)
    assert sizes == [min(limit, 7 - i) for i in range(0, 7, limit)]


FORKS = """
import os, sys, threading
from pgq_core.rounds import Rounds, Ticket
rounds = Rounds(threading.Event, threading.Event.set)
leader = Ticket(1)
assert rounds.join(leader)  # a round led when the process forks, a job waiting behind it
assert not rounds.join(Ticket(2))
rounds._lock.acquire()  # and its lock held, as by a parent's thread at the fork
pid = os.fork()
if pid == 0:
    fresh = Ticket(3)
    ok = rounds.join(fresh) and rounds.take(fresh) == [fresh]
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_starts_with_no_round_led() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKS], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
