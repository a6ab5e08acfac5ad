"""Throughput per queue, derived from `QueueStats.completed` (a monotonic counter) between polls."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class _Series:
    last_completed: int
    last_at: float
    #: (bucket index, jobs completed in that bucket), oldest first
    buckets: deque[tuple[int, float]] = field(default_factory=deque)


class Throughput:
    """Completions per second in fixed time buckets.

    The first observation of a queue is only a baseline; a counter that goes backwards (a
    recreated schema) restarts the baseline instead of producing a negative rate. A delta is
    spread evenly over the buckets between the two polls it spans.
    """

    def __init__(self, bucket_seconds: float = 5.0, buckets: int = 24) -> None:
        self.bucket_seconds = bucket_seconds
        self.size = buckets
        self._series: dict[str, _Series] = {}

    def observe(self, queue: str, completed: int, at: float) -> None:
        series = self._series.get(queue)
        if series is None or completed < series.last_completed or at <= series.last_at:
            if series is None or completed < series.last_completed:
                self._series[queue] = _Series(completed, at)
            return
        delta = completed - series.last_completed
        if delta:
            self._spread(series, delta, series.last_at, at)
        series.last_completed, series.last_at = completed, at
        oldest = self._bucket(at) - self.size
        while series.buckets and series.buckets[0][0] <= oldest:
            series.buckets.popleft()

    def _bucket(self, at: float) -> int:
        return int(at // self.bucket_seconds)

    def _spread(self, series: _Series, delta: int, start: float, end: float) -> None:
        span = end - start
        last = self._bucket(end)
        for index in range(max(self._bucket(start), last - self.size + 1), last + 1):
            lo = max(start, index * self.bucket_seconds)
            hi = min(end, (index + 1) * self.bucket_seconds)
            share = delta * (hi - lo) / span
            if share <= 0:
                continue
            if series.buckets and series.buckets[-1][0] == index:
                series.buckets[-1] = (index, series.buckets[-1][1] + share)
            else:
                series.buckets.append((index, share))

    def series(self, queue: str, now: float) -> list[float]:
        """Completions per second in each of the last `size` buckets, oldest first."""
        values = [0.0] * self.size
        series = self._series.get(queue)
        if series is None:
            return values
        newest = self._bucket(now)
        for index, jobs in series.buckets:
            slot = self.size - 1 - (newest - index)
            if 0 <= slot < self.size:
                values[slot] = jobs / self.bucket_seconds
        return values

    def rate(self, queue: str, now: float, window: float = 30.0) -> float:
        """Mean completions per second over the last `window` seconds of whole buckets."""
        n = max(1, int(window // self.bucket_seconds))
        recent = self.series(queue, now)[-n - 1 : -1]
        return sum(recent) / len(recent) if recent else 0.0
