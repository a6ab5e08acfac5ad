"""The worker's parts that need no database, alone and fast: claim fairness, idle backoff,
flush policy, backoff, error classification, error texts, and the runner's outcomes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from pgq_core.models import Job
from pgq_core.session import is_transient
from pgq_core.text import ERROR_TEXT_LIMIT, describe_exception, printable, storable
from pgq_core.worker import JobContext
from pgq_core.worker.policy import (
    PREFETCH_CAP,
    Backoff,
    ClaimRound,
    FlushPolicy,
    PrefetchPolicy,
)
from pgq_core.worker.runner import Runner, is_async


def no_jitter(low: float, high: float) -> float:
    return high


# -- ClaimRound ---------------------------------------------------------------------------------


def test_queues_take_turns_and_a_queue_with_jobs_goes_to_the_back() -> None:
    claims = ClaimRound(["a", "b", "c"], poll_interval=1.0, max_interval=10.0, rand=no_jitter)
    assert claims.next_queue() == "a"
    claims.claimed("a", 5, now=0.0)
    assert claims.next_queue() == "b"
    claims.claimed("b", 1, now=0.0)
    assert claims.next_queue() == "c"
    claims.claimed("c", 0, now=0.0)  # empty: out of this round
    assert claims.next_queue() == "a"
    claims.claimed("a", 0, now=0.0)
    assert claims.next_queue() == "b"


def test_each_round_starts_one_queue_later() -> None:
    claims = ClaimRound(["a", "b"], poll_interval=1.0, max_interval=10.0, rand=no_jitter)
    firsts = []
    for _ in range(4):
        firsts.append(claims.next_queue())
        for _ in claims.queues:
            claims.claimed(claims.next_queue(), 0, now=0.0)
    assert firsts == ["a", "b", "a", "b"]


def test_an_empty_round_idles_until_the_poll_and_backs_off_to_the_cap() -> None:
    claims = ClaimRound(["a"], poll_interval=1.0, max_interval=4.0, rand=no_jitter)
    delays = []
    now = 0.0
    for _ in range(5):
        claims.next_queue()
        claims.claimed("a", 0, now=now)
        assert not claims.due(now)
        delays.append(claims.next_poll - now)
        now = claims.next_poll
        assert claims.due(now)
    assert delays == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_notification_ends_the_idle_and_jobs_reset_the_backoff() -> None:
    claims = ClaimRound(["a"], poll_interval=1.0, max_interval=8.0, rand=no_jitter)
    for now in (0.0, 10.0, 20.0):
        claims.next_queue()
        claims.claimed("a", 0, now=now)
    assert claims.idle_delay == 8.0
    assert not claims.due(20.5)
    claims.notified()
    assert claims.due(20.5)
    claims.next_queue()
    claims.claimed("a", 3, now=20.5)
    assert claims.idle_delay == 1.0 and claims.due(20.5)


def test_a_round_that_found_jobs_polls_again_after_one_interval() -> None:
    claims = ClaimRound(["a", "b"], poll_interval=1.0, max_interval=8.0, rand=no_jitter)
    claims.next_queue()
    claims.claimed("a", 2, now=0.0)
    claims.claimed(claims.next_queue(), 0, now=0.0)
    claims.claimed(claims.next_queue(), 0, now=0.0)
    assert not claims.maybe_more and claims.next_poll == 1.0 and not claims.mid_round


# -- FlushPolicy and Backoff --------------------------------------------------------------------


def test_flush_when_all_held_finished_the_batch_is_full_or_the_oldest_waited() -> None:
    flush = FlushPolicy(delay=0.005, max_batch=100)
    assert not flush.due(pending=0, held=3, oldest=0.0, now=9.0, stopping=True)
    assert flush.due(pending=3, held=3, oldest=0.0, now=0.0, stopping=False)
    assert not flush.due(pending=2, held=3, oldest=0.0, now=0.001, stopping=False)
    assert flush.due(pending=2, held=3, oldest=0.0, now=0.005, stopping=False)
    assert flush.due(pending=100, held=500, oldest=0.0, now=0.0, stopping=False)
    assert flush.due(pending=1, held=500, oldest=0.0, now=0.0, stopping=True)


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff(first=0.1, cap=1.0, rand=no_jitter)
    assert [round(backoff.next(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next() == 0.1


def test_jittered_backoff_stays_in_bounds() -> None:
    backoff = Backoff(first=0.5, cap=2.0, jitter=0.2)
    for _ in range(50):
        assert 0.4 <= backoff.next() <= 2.0


# -- PrefetchPolicy -----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def timed(policy: PrefetchPolicy, clock: Clock, *, run: float, step: float) -> None:
    began = clock.now
    clock.now += run
    policy.handler_ended(began)
    began = clock.now
    clock.now += step
    policy.step_ended(began)


def test_no_buffer_before_a_handler_ended_and_a_step_was_timed() -> None:
    clock = Clock()
    policy = PrefetchPolicy(4, clock=clock)
    assert policy.size() == 0
    policy.step_ended(clock.now - 0.001)
    assert policy.size() == 0
    policy.handler_ended(clock.now - 0.0001)
    assert policy.size() > 0


def test_short_handlers_fill_what_the_slots_get_through_in_two_round_trips() -> None:
    clock = Clock()
    policy = PrefetchPolicy(2, clock=clock)
    timed(policy, clock, run=0.001, step=0.002)
    assert policy.size() == 8  # 2 slots * 2 round trips * 2 ms / 1 ms
    noop = PrefetchPolicy(10, clock=clock)
    timed(noop, clock, run=0.0, step=0.001)
    assert noop.size() == noop.cap == PREFETCH_CAP == 1000


def test_long_handlers_get_no_buffer() -> None:
    clock = Clock()
    policy = PrefetchPolicy(10, clock=clock)
    timed(policy, clock, run=0.5, step=0.002)
    assert policy.size() == 0


def test_slots_all_held_by_a_slow_youngest_handler_shrink_the_buffer_before_it_ends() -> None:
    clock = Clock()
    policy = PrefetchPolicy(1, clock=clock)
    timed(policy, clock, run=0.0001, step=0.001)
    assert policy.size() == 20
    assert policy.size(youngest_running=clock.now) == 20
    assert policy.size(youngest_running=clock.now - 0.0005) == 4
    assert policy.size(youngest_running=clock.now - 1.0) == 0


def test_the_estimates_follow_the_handlers_as_they_change() -> None:
    clock = Clock()
    policy = PrefetchPolicy(1, clock=clock)
    timed(policy, clock, run=0.0001, step=0.001)
    assert policy.size() == 20
    for _ in range(30):
        timed(policy, clock, run=0.1, step=0.001)
    assert policy.size() == 0
    for _ in range(80):
        timed(policy, clock, run=0.0001, step=0.001)
    assert policy.size() in (19, 20)


def test_an_operators_prefetch_is_kept_as_given() -> None:
    clock = Clock()
    off, fixed = PrefetchPolicy(4, fixed=0, clock=clock), PrefetchPolicy(4, fixed=7, clock=clock)
    for policy in (off, fixed):
        timed(policy, clock, run=0.0, step=0.01)
    assert (off.size(), fixed.size()) == (0, 7)
    for policy in (off, fixed):
        timed(policy, clock, run=60.0, step=0.01)
    assert (off.size(), fixed.size()) == (0, 7)


# -- what a failed statement means ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("sqlstate", "transient"),
    [
        ("40001", True),  # serialization failure
        ("40P01", True),  # deadlock
        ("55P03", True),  # lock timeout
        ("57014", True),  # statement timeout
        ("53300", True),  # too many connections
        ("08006", True),  # connection failure
        ("22P05", False),  # untranslatable character
        ("22021", False),  # invalid byte sequence (NUL)
        ("23505", False),  # unique violation
        ("P0001", False),  # raised by a trigger
        ("42703", False),  # undefined column
    ],
)
def test_error_classes(sqlstate: str, transient: bool) -> None:
    assert is_transient(sqlstate) is transient


# -- error texts --------------------------------------------------------------------------------


def test_storable_removes_what_postgresql_refuses_and_caps_the_length() -> None:
    assert storable("a\x00b") == "ab"
    assert storable("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    long = storable("y" * 100_000)
    assert len(long) == ERROR_TEXT_LIMIT and long.endswith("[... cut, 100000 characters in all]")
    assert storable("short") == "short"


def test_describe_exception_never_raises() -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise RecursionError

    class NotText(Exception):
        def __str__(self) -> Any:
            return 42

    assert describe_exception(Hostile()) == "Hostile (unprintable)"
    assert describe_exception(ValueError()) == "ValueError"
    assert describe_exception(ValueError("x\x00y")) == "ValueError: xy"
    with pytest.raises(TypeError):
        str(NotText())
    assert describe_exception(NotText()) == "NotText (unprintable)"


def test_printable_shows_control_characters_as_visible_escapes() -> None:
    assert printable("a\x1b]0;title\x07b") == "a\\x1b]0;title\\x07b"
    assert printable("\x1b[2J\x1b[6n") == "\\x1b[2J\\x1b[6n"
    assert printable("line\nnext\tcol") == "line\\x0anext\\x09col"
    assert printable("line\nnext\tcol", multiline=True) == "line\nnext\tcol"
    assert printable("\u202eevil") == "\\u202eevil"
    assert printable("plain [b]text[/b]") == "plain [b]text[/b]"


# -- the runner: every ending is one outcome -----------------------------------------------------


def ctx(job_id: int = 1) -> JobContext:
    job = Job(job_id, "q", {}, 1, 1, 5, datetime.now(UTC))
    return JobContext(job, "w", "pgq")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError


def sync_endings() -> list[tuple[Any, str, str | None]]:
    def ok(c: JobContext) -> int:
        return 1

    def boom(c: JobContext) -> None:
        raise RuntimeError("boom")

    def kbi(c: JobContext) -> None:
        raise KeyboardInterrupt

    def futures_cancel(c: JobContext) -> None:
        raise concurrent.futures.CancelledError

    def exit_(c: JobContext) -> None:
        raise SystemExit(2)

    def unprintable(c: JobContext) -> None:
        raise Unprintable

    suffix = " (raised by the handler, not a worker cancel)"
    return [
        (ok, "returned", None),
        (boom, "raised", "RuntimeError: boom"),
        (kbi, "raised", "KeyboardInterrupt"),
        (futures_cancel, "raised", "CancelledError" + suffix),
        (exit_, "raised", "SystemExit: 2"),
        (unprintable, "raised", "Unprintable (unprintable)"),
    ]


@pytest.mark.parametrize(("handler", "kind", "error"), sync_endings())
async def test_every_ending_of_a_sync_handler_is_one_outcome(
    handler: Any, kind: str, error: str | None
) -> None:
    runner = Runner(handler, 1, "t", lambda: None)
    assert not is_async(handler)
    outcome = await runner.run(ctx(), timeout=None)
    runner.shutdown()
    assert (outcome.kind, outcome.error) == (kind, error)


async def test_every_ending_of_an_async_handler_is_one_outcome() -> None:
    async def self_cancel(c: JobContext) -> None:
        raise asyncio.CancelledError

    async def kbi(c: JobContext) -> None:
        raise KeyboardInterrupt

    async def sleepy(c: JobContext) -> None:
        await asyncio.sleep(3600)

    for handler, kind, error in [
        (self_cancel, "raised", "CancelledError (raised by the handler, not a worker cancel)"),
        (kbi, "raised", "KeyboardInterrupt"),
        (sleepy, "timed_out", "timed out after 0.05 s"),
    ]:
        runner = Runner(handler, 1, "t", lambda: None)
        outcome = await runner.run(ctx(), timeout=0.05)
        assert (outcome.kind, outcome.error) == (kind, error)


async def test_a_cancel_the_runner_made_reads_as_cancelled_and_frees_the_slot() -> None:
    freed = asyncio.Event()
    started = asyncio.Event()

    async def sleepy(c: JobContext) -> None:
        started.set()
        await asyncio.sleep(3600)

    runner = Runner(sleepy, 1, "t", freed.set)
    job = ctx()
    task = asyncio.create_task(runner.run(job, timeout=None))
    await started.wait()
    runner.abandon(job)
    assert job.lost
    assert (await task).kind == "cancelled"
    await asyncio.wait_for(freed.wait(), 5)
    assert runner.abandoned == 0


@pytest.mark.parametrize("plain", [True, False])
async def test_the_last_start_is_the_youngest_handlers(plain: bool) -> None:
    """What the prefetch policy reads while every slot is busy, kept as handlers begin (not
    searched for among the held jobs on every step)."""

    def sync_noop(c: JobContext) -> None:
        return None

    async def async_noop(c: JobContext) -> None:
        return None

    runner = Runner(sync_noop if plain else async_noop, 2, "t", lambda: None)
    assert runner.last_began is None
    first, second = ctx(), ctx()
    await runner.run(first, timeout=None)
    assert runner.last_began == first._began > 0
    await runner.run(second, timeout=None)
    assert runner.last_began == second._began >= first._began
    runner.shutdown()


async def test_an_abandoned_thread_keeps_its_slot_until_it_returns() -> None:
    release = threading.Event()
    freed = asyncio.Event()

    def stuck(c: JobContext) -> None:
        release.wait(30)

    runner = Runner(stuck, 1, "t", freed.set)
    outcome = await runner.run(ctx(), timeout=0.05)
    assert outcome.kind == "timed_out"
    assert runner.abandoned == 1 and runner.still_running() == 1
    release.set()
    await asyncio.wait_for(freed.wait(), 5)
    assert runner.abandoned == 0
    runner.shutdown()


@pytest.mark.parametrize("plain", [True, False])
async def test_fds_0_to_2_are_checked_on_the_loop_once_per_turn_of_endings(
    plain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check of fds 0-2 is three system calls: made in a handler's thread it gave up the GIL
    three times per job. It runs on the event loop, once for the handlers that ended in a turn,
    before the next turn."""
    import pgq_core.worker.runner as runner_module

    checks: list[str] = []
    def check() -> None:
        checks.append(threading.current_thread().name)

    monkeypatch.setattr(runner_module, "restore_standard_fds", check)

    def sync_noop(c: JobContext) -> None:
        return None

    async def async_noop(c: JobContext) -> None:
        return None

    runner = Runner(sync_noop if plain else async_noop, 3, "t", lambda: None)
    outcomes = await asyncio.gather(*(runner.run(ctx(), timeout=None) for _ in range(3)))
    assert [o.kind for o in outcomes] == ["returned"] * 3
    await asyncio.sleep(0)
    assert checks and set(checks) == {threading.current_thread().name}
    if not plain:  # three tasks that never await end in one turn
        assert len(checks) == 1
    assert len(checks) <= 3
    runner.shutdown()


def test_a_busy_row_is_tried_again_soon_then_less_often() -> None:
    """A competing claim's row lock lasts one statement: retry in 5 ms; an operator's lock may
    last minutes: back off to `busy_delay`."""
    flush = FlushPolicy(delay=0.005, max_batch=100, busy_delay=0.2)
    assert [flush.busy_wait(n) for n in range(1, 8)] == [0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.2]
    assert flush.busy_wait(1000) == 0.2
