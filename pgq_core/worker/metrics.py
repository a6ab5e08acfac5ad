"""The worker's own Prometheus metrics (`pgq worker --metrics-port N`), in its process.

The runtime makes two kinds of calls: `observe_step` after each settle-and-claim step (the time
of its statement and what it settled), and `attach(worker.snapshot)` once. Everything else is
read from the snapshot at scrape time, so the counters are the worker's own (`done`, `failed`,
`lost` exactly as `snapshot()` and the worker's log report them).

Invariants: observing never raises into the worker and never touches the database; each
`WorkerMetrics` has its own registry (several workers in one process never collide).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..extras import MissingExtra

try:
    from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ModuleNotFoundError as exc:
    raise MissingExtra("pgq_core.worker.metrics", "metrics") from exc

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from .snapshot import WorkerSnapshot

#: Every state a worker can report; the state gauge has one series per state, 1 for the current.
STATES = ("starting", "running", "draining", "disconnected", "stopped")
#: Step statement latency buckets (seconds): sub-millisecond to the statement timeout.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def step_kind(claimed: bool, settled: int) -> str:
    """'claim' (claimed only), 'settle' (settled only) or 'settle_and_claim' (one statement)."""
    if claimed and settled:
        return "settle_and_claim"
    return "claim" if claimed else "settle"


class _SnapshotCollector(Collector):
    def __init__(self) -> None:
        self.snapshot: Callable[[], WorkerSnapshot] | None = None

    def collect(self) -> Iterator[Metric]:
        if self.snapshot is None:
            return
        snap = self.snapshot()
        labels = {"worker": snap.id}
        jobs = CounterMetricFamily(
            "pgq_worker_jobs",
            "Jobs this worker settled, by outcome: done (completion committed), failed "
            "(retry or dead), lost (a write matched no row: its lease was gone)",
            labels=["worker", "outcome"],
        )
        for outcome, value in (("done", snap.done), ("failed", snap.failed), ("lost", snap.lost)):
            jobs.add_metric([snap.id, outcome], value)
        yield jobs
        slots = CounterMetricFamily(
            "pgq_worker_schedule_slots",
            "Schedule slots this worker's scheduler enqueued, and missed slots it skipped "
            "(passed over for a later one; each skip is also a warning line)",
            labels=["worker", "outcome"],
        )
        for outcome, value in (("enqueued", snap.slots_enqueued), ("skipped", snap.slots_skipped)):
            slots.add_metric([snap.id, outcome], value)
        yield slots
        state = GaugeMetricFamily(
            "pgq_worker_state", "1 for the worker's current state", labels=["worker", "state"]
        )
        for name in STATES:
            state.add_metric([snap.id, name], 1.0 if snap.state == name else 0.0)
        yield state
        for name, doc, value in (
            (
                "pgq_worker_held_jobs",
                "Jobs this worker holds now (running or buffered)",
                len(snap.running) + snap.buffered,
            ),
            ("pgq_worker_concurrency", "Most jobs this worker runs at once", snap.concurrency),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=list(labels))
            gauge.add_metric(list(labels.values()), value)
            yield gauge


class WorkerMetrics:
    """A worker's metrics on a registry of their own; `serve()` exposes them over HTTP."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._snapshot = _SnapshotCollector()
        self.registry.register(self._snapshot)
        self._worker = "?"
        self._steps = Histogram(
            "pgq_worker_step_seconds",
            "Time of each settle/claim step's statement round trip, by what it did",
            ["worker", "kind"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._dead = Counter(
            "pgq_worker_dead_jobs",
            "Failed jobs this worker sent to dead (their last attempt)",
            ["worker"],
            registry=self.registry,
        )
        self._claimed = Counter(
            "pgq_worker_claimed_jobs",
            "Jobs this worker claimed",
            ["worker"],
            registry=self.registry,
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def attach(self, snapshot: Callable[[], WorkerSnapshot], worker_id: str) -> None:
        """Read counters, state and held jobs from `snapshot` at scrape time."""
        self._snapshot.snapshot = snapshot
        self._worker = worker_id

    def observe_step(
        self, seconds: float, claimed: int, settled: int, dead: int, *, claiming: bool
    ) -> None:
        """One step: its statement took `seconds`, claimed `claimed` jobs (it asked to claim
        when `claiming`), settled `settled` (done or failed), `dead` of them went dead."""
        kind = step_kind(claiming, settled)
        self._steps.labels(self._worker, kind).observe(seconds)
        if claimed:
            self._claimed.labels(self._worker).inc(claimed)
        if dead:
            self._dead.labels(self._worker).inc(dead)

    def serve(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve /metrics on `addr:port` (port 0: any free port) from a daemon thread;
        returns the port bound."""
        server, thread = start_http_server(port, addr, registry=self.registry)
        self._server, self._thread = server, thread
        return int(server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
