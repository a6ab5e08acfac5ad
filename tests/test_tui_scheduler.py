"""The dashboard's poll scheduler on a fake clock: no database, no Textual."""

from __future__ import annotations

from pgq_tui.scheduler import PollScheduler


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_read_runs_once_at_a_time() -> None:
    clock = FakeClock()
    scheduler = PollScheduler(clock)
    assert scheduler.start("leases")
    assert scheduler.running("leases")
    assert not scheduler.start("leases")
    assert not scheduler.end("leases")
    assert not scheduler.running("leases")
    assert scheduler.start("leases")


def test_reads_by_other_names_do_not_wait_on_each_other() -> None:
    scheduler = PollScheduler(FakeClock())
    assert scheduler.start("poll")
    assert scheduler.start("errors")
    assert scheduler.start("health")
    assert scheduler.running("poll") and scheduler.running("errors")
    scheduler.end("errors")
    assert scheduler.running("health") and not scheduler.running("errors")


def test_an_ask_with_again_during_a_read_is_owed_once() -> None:
    scheduler = PollScheduler(FakeClock())
    assert scheduler.start("poll", again=True)
    assert not scheduler.start("poll", again=True)
    assert not scheduler.start("poll", again=True)
    assert scheduler.end("poll")  # owed: the caller asks again
    assert scheduler.start("poll", again=True)
    assert not scheduler.end("poll")  # paid by the run that started


def test_an_ask_without_again_during_a_read_is_dropped() -> None:
    scheduler = PollScheduler(FakeClock())
    assert scheduler.start("latency")
    assert not scheduler.start("latency")
    assert not scheduler.end("latency")


def test_the_debt_is_paid_when_the_read_ends_even_if_not_restarted() -> None:
    scheduler = PollScheduler(FakeClock())
    scheduler.start("poll")
    scheduler.start("poll", again=True)
    assert scheduler.end("poll")
    scheduler.start("poll")
    assert not scheduler.end("poll")


def test_a_gap_counts_from_the_last_start_not_the_end() -> None:
    clock = FakeClock()
    scheduler = PollScheduler(clock)
    assert scheduler.start("primary", 2.0)
    clock.now += 1.5
    scheduler.end("primary")
    assert not scheduler.start("primary", 2.0)
    clock.now += 0.49
    assert not scheduler.start("primary", 2.0)
    clock.now += 0.01
    assert scheduler.start("primary", 2.0)


def test_a_refused_start_does_not_move_the_gap_on() -> None:
    clock = FakeClock()
    scheduler = PollScheduler(clock)
    scheduler.start("errors", 5.0)
    scheduler.end("errors")
    clock.now += 4.0
    assert not scheduler.start("errors", 5.0)
    clock.now += 1.0
    assert scheduler.start("errors", 5.0)


def test_a_zero_gap_forces_a_read_not_in_flight() -> None:
    clock = FakeClock()
    scheduler = PollScheduler(clock)
    scheduler.start("health", 5.0)
    assert not scheduler.start("health", 0.0)  # in flight: forcing does not overlap
    scheduler.end("health")
    assert scheduler.start("health", 0.0)


def test_wait_is_what_is_left_of_the_gap_since_the_last_start() -> None:
    clock = FakeClock()
    scheduler = PollScheduler(clock)
    assert scheduler.wait("poll", 0.05) == 0.0  # never started
    scheduler.start("poll")
    assert abs(scheduler.wait("poll", 0.05) - 0.05) < 1e-9
    clock.now += 0.03
    assert abs(scheduler.wait("poll", 0.05) - 0.02) < 1e-9
    clock.now += 1.0
    assert scheduler.wait("poll", 0.05) == 0.0
