"""Each queue's p95 wait (due to claimed, of its done jobs over the last 5 minutes), as read
by `AsyncQueue.latency` every `LATENCY_REFRESH` seconds, kept in time buckets for a sparkline.

Imports no Textual. A read lands in the bucket of its time: two reads in one bucket keep the
later (so a frozen clock keeps one value per queue, and renders stay the same)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from pgq_core import LatencyReport

#: seconds between two latency reads (and the width of a sparkline bucket)
LATENCY_REFRESH = 10.0
#: buckets a sparkline shows: two minutes of reads
LATENCY_BUCKETS = 12


class LatencyTrend:
    """p95 wait per queue: the latest, and one value per bucket of `bucket_seconds`."""

    def __init__(
        self, bucket_seconds: float = LATENCY_REFRESH, buckets: int = LATENCY_BUCKETS
    ) -> None:
        self.bucket_seconds = bucket_seconds
        self.size = buckets
        #: queue -> (bucket index, p95 wait or None), oldest first
        self._series: dict[str, deque[tuple[int, float | None]]] = {}
        #: the label of the window the figures are of (`5m`), once read
        self.window = ""

    def observe(self, report: LatencyReport, at: float) -> None:
        """The p95 wait of each queue's shortest window; queues not in `report` keep theirs."""
        bucket = int(at // self.bucket_seconds)
        self.window = report.windows[0] if report.windows else ""
        for entry in report.queues:
            windows = list(entry.windows.values())
            value = windows[0].wait.p95 if windows else None
            series = self._series.setdefault(entry.queue, deque(maxlen=self.size))
            if series and series[-1][0] == bucket:
                series[-1] = (bucket, value)
            else:
                series.append((bucket, value))

    def keep(self, queues: Iterable[str]) -> None:
        """Forget every other queue (gone from the window the dashboard shows)."""
        kept = set(queues)
        for queue in [q for q in self._series if q not in kept]:
            del self._series[queue]

    def p95(self, queue: str) -> float | None:
        """The latest read's p95 wait, or None (not read yet, or no done job in the window)."""
        series = self._series.get(queue)
        return series[-1][1] if series else None

    def known(self, queue: str) -> bool:
        return queue in self._series

    def series(self, queue: str, now: float) -> list[float]:
        """p95 wait in each of the last `size` buckets, oldest first (0 where none was read)."""
        values = [0.0] * self.size
        newest = int(now // self.bucket_seconds)
        for index, value in self._series.get(queue, ()):
            slot = self.size - 1 - (newest - index)
            if 0 <= slot < self.size and value is not None:
                values[slot] = value
        return values
