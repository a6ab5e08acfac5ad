"""The worker's decisions that need no database: which queue to claim from next, how long to
idle, how many jobs to claim ahead, when to flush settlements, how long to back off. Each
takes the time as an argument (or a clock) so it is tested fast and exactly.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

Jitter = Callable[[float, float], float]
Clock = Callable[[], float]

#: The most jobs a worker claims ahead of its slots when it sizes its buffer itself: no-op jobs
#: drain fastest in steps of several hundred (a step's statement costs the server less per job
#: the more it carries); a buffered job then waits at most a few tens of milliseconds.
PREFETCH_CAP = 1000


class Backoff:
    """Delays that start at `first` and double up to `cap`; `reset()` starts over.

    Every delay lies in [first * (1 - jitter), cap]."""

    def __init__(
        self, first: float, cap: float, jitter: float = 0.2, rand: Jitter = random.uniform
    ) -> None:
        self.first = first
        self.cap = max(first, cap)
        self.jitter = jitter
        self._rand = rand
        self._current = first

    def next(self) -> float:
        delay = self._current * self._rand(1 - self.jitter, 1.0)
        self._current = min(self._current * 2, self.cap)
        return delay

    def reset(self) -> None:
        self._current = self.first


class ClaimRound:
    """Which queue to claim from next, and whether to claim now or idle.

    Invariants: queues take turns (each round starts one queue later, a queue that gave jobs
    goes to the back); a queue that gave nothing is skipped until the next round; once every
    queue of a round gave nothing the worker idles until `notified()` or the poll time, and the
    idle delay doubles (jittered) up to `max_interval` while the queues stay empty.
    """

    def __init__(
        self,
        queues: Sequence[str],
        poll_interval: float,
        max_interval: float,
        rand: Jitter = random.uniform,
    ) -> None:
        self.queues = tuple(queues)
        self.poll_interval = poll_interval
        self.max_interval = max(poll_interval, max_interval)
        self._rand = rand
        self._turn = -1
        self._round: list[str] = []
        self._round_got = 0
        self.maybe_more = True
        self.next_poll = 0.0
        self.idle_delay = poll_interval

    def next_queue(self) -> str:
        if not self._round:
            self._turn = (self._turn + 1) % len(self.queues)
            self._round = list(self.queues[self._turn :] + self.queues[: self._turn])
            self._round_got = 0
        return self._round[0]

    def due(self, now: float) -> bool:
        return self.maybe_more or now >= self.next_poll

    @property
    def mid_round(self) -> bool:
        """A round is under way, or it just ended with jobs found."""
        return bool(self._round) or self._round_got > 0

    def notified(self) -> None:
        self.maybe_more = True

    def claimed(self, queue: str, got: int, now: float) -> None:
        """Record that a claim from `queue` returned `got` jobs (fewer than asked may just be
        SKIP LOCKED passing rows that others hold)."""
        self._round_got += got
        if got:
            if self._round and self._round[0] == queue:
                self._round.append(self._round.pop(0))
            self.maybe_more = True
            self.idle_delay = self.poll_interval
            return
        if queue in self._round:
            self._round.remove(queue)
        if self._round:
            self.maybe_more = True
            return
        self.maybe_more = False
        if self._round_got:
            self.idle_delay = self.poll_interval
            self.next_poll = now + self.poll_interval
        else:
            self.next_poll = now + self.idle_delay * self._rand(0.8, 1.0)
            self.idle_delay = min(self.idle_delay * 2, self.max_interval)
        self._round_got = 0


class FlushPolicy:
    """When finished jobs are settled: at once when every held job has finished (nothing to
    batch with), when the batch is full, when the oldest has waited `delay`, or when stopping.
    A job whose row another session holds locked is tried again after `busy_wait(n)`: 5 ms at
    first (a competing claim's lock lasts one statement), doubling up to `busy_delay` while the
    lock stays (an operator's transaction).
    """

    def __init__(self, delay: float, max_batch: int, busy_delay: float = 0.2) -> None:
        self.delay = delay
        self.max_batch = max_batch
        self.busy_delay = busy_delay

    def busy_wait(self, times: int) -> float:
        """Seconds before a job found busy `times` times in a row is tried again."""
        return min(self.busy_delay, 0.005 * 2.0 ** min(times - 1, 16))

    def due(self, *, pending: int, held: int, oldest: float, now: float, stopping: bool) -> bool:
        if pending == 0:
            return False
        return (
            stopping or pending >= self.max_batch or pending >= held or now >= oldest + self.delay
        )


class PrefetchPolicy:
    """How many claimed jobs a worker keeps waiting for a free slot (its buffer).

    Invariants: `fixed` (an operator's `--prefetch N`; 0 turns the buffer off) is kept as
    given. Otherwise the buffer holds what the slots get through in `rounds` of the step's
    round trip at the handlers' observed pace, so a buffered job waits about that long: none
    until a handler has ended and a step has been timed, none once handlers take longer than
    `concurrency * rounds` round trips (long jobs: nothing waits behind them while another
    worker could run it), never more than `cap`. While every slot is busy, the youngest
    handler's time so far counts as a run time: when all slots are held by handlers slower than
    the estimate, the buffer shrinks before they end.
    """

    def __init__(
        self,
        concurrency: int,
        fixed: int | None = None,
        cap: int = PREFETCH_CAP,
        rounds: float = 2.0,
        weight: float = 0.2,
        clock: Clock = time.monotonic,
    ) -> None:
        self.concurrency = concurrency
        self.fixed = fixed
        self.cap = cap
        self.rounds = rounds
        self.weight = weight
        self._clock = clock
        self.run_time: float | None = None
        self.round_trip: float | None = None

    def _mean(self, mean: float | None, sample: float) -> float:
        return sample if mean is None else mean + self.weight * (sample - mean)

    def handler_ended(self, started: float) -> None:
        """A handler that began at `started` (by the clock) has ended."""
        self.run_time = self._mean(self.run_time, max(0.0, self._clock() - started))

    def step_ended(self, started: float) -> None:
        """A step (one round trip) that began at `started` has ended."""
        self.round_trip = self._mean(self.round_trip, max(0.0, self._clock() - started))

    def size(self, youngest_running: float | None = None) -> int:
        """Jobs to hold beyond the running ones; `youngest_running` is when the most recent
        handler began if every slot is busy (None while a slot is free)."""
        if self.fixed is not None:
            return self.fixed
        if self.run_time is None or self.round_trip is None:
            return 0
        run = self.run_time
        if youngest_running is not None:
            run = max(run, self._clock() - youngest_running)
        budget = self.concurrency * self.rounds * self.round_trip
        if run * self.cap <= budget:
            return self.cap
        return int(budget / run + 1e-9)
