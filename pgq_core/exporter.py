"""The standalone Prometheus exporter (`pgq metrics`): a custom collector that reads the queue
through `Queue` on every scrape.

Invariants:
- Every figure is read at scrape time (nothing cached between scrapes) through the named
  statements of sql/observer.sql, on one connection whose statements are bounded by a statement
  timeout; scrapes are serialized (one at a time on that connection).
- A failed scrape never raises into the HTTP server: a database error or a pgq one (the
  schema not migrated yet) reports `pgq_up 0` (and only that, besides the scrape duration)
  with one log line, drops the connection and reconnects on the next scrape.
- Not imported by `pgq_core` itself, so only the commands that export load prometheus_client.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg

from .extras import MissingExtra

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ModuleNotFoundError as exc:
    raise MissingExtra("pgq_core.exporter", "metrics") from exc

from . import ops
from .config import first_line, pooled, scrub
from .errors import PgqError
from .queue import Queue
from .text import printable

log = logging.getLogger("pgq.metrics")
log.addHandler(logging.NullHandler())

#: The per-queue status gauges, in the order `pgq stats` shows them.
STATUSES = ("ready", "scheduled", "running", "expiring", "dead", "done")
DEFAULT_SCRAPE_TIMEOUT = timedelta(seconds=5)
LOCK_TIMEOUT = timedelta(seconds=1)


class QueueCollector(Collector):
    """Reads `schema` on each `collect()`; `connect` opens an autocommit connection."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        schema: str,
        *,
        timeout: timedelta = DEFAULT_SCRAPE_TIMEOUT,
        expiring_within: timedelta = timedelta(seconds=10),
        dsn: str | None = None,
        stuck_factor: float = ops.STUCK_FACTOR,
        stuck_floor: timedelta = ops.STUCK_FLOOR,
        reader: bool = False,
    ) -> None:
        ops.check_stuck(stuck_factor, stuck_floor)
        #: `connect` reaches a server read through --read-dsn: its sessions are read-only
        self.reader = reader
        self._connect = connect
        self.stuck_factor = stuck_factor
        self.stuck_floor = stuck_floor
        self.schema = schema
        self.timeout = timeout
        self.expiring_within = expiring_within
        self._dsn = dsn
        self._queue: Queue | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._queue is not None:
            with contextlib.suppress(psycopg.Error):
                self._queue.conn.close()
            self._queue = None

    def _open(self) -> Queue:
        if self._queue is None or self._queue.conn.closed:
            conn = self._connect()
            queue = Queue(conn, self.schema, owns=True)
            if pooled():  # session settings would leak to the pooler's other clients
                self._queue = queue
                return queue
            try:
                queue.run(ops.session_limits(self.timeout, LOCK_TIMEOUT, force=True))
                if self.reader:
                    queue.run(ops.read_only_session())
            except BaseException:
                conn.close()
                raise
            self._queue = queue
        return self._queue

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        with self._lock:
            try:
                metrics = list(self._read(self._open()))
                up = 1.0
            except (psycopg.Error, PgqError) as exc:
                log.warning(
                    "scrape failed: %s", printable(scrub(first_line(str(exc)), self._dsn))
                )
                self._drop()
                metrics, up = [], 0.0
        yield from metrics
        yield _gauge("pgq_up", "1 if the last scrape read the database, else 0", up)
        yield _gauge(
            "pgq_scrape_duration_seconds",
            "Time this scrape spent reading the database",
            time.monotonic() - started,
        )

    def _read(self, q: Queue) -> Iterator[Metric]:
        role = q.server_role()
        yield _gauge(
            "pgq_server_standby",
            "1 if the server these figures were read from is a standby in recovery "
            "(--read-dsn), else 0",
            1.0 if role.standby else 0.0,
        )
        if role.standby and role.lag_seconds is not None:
            yield _gauge(
                "pgq_replica_lag_seconds",
                "Seconds the standby read is behind its primary (0 once replay has caught up "
                "with what it received; grows while it receives nothing)",
                role.lag_seconds,
            )
        stats = q.stats(self.expiring_within)
        jobs = GaugeMetricFamily(
            "pgq_jobs",
            "Jobs per queue and status (ready: due now; scheduled: ready, due later; "
            "expiring: running with under the expiring window left, a subset of running)",
            labels=["queue", "status"],
        )
        oldest = GaugeMetricFamily(
            "pgq_oldest_due_age_seconds",
            "Age of the oldest due ready job per queue (0 when none is due)",
            labels=["queue"],
        )
        completed = CounterMetricFamily(
            "pgq_jobs_completed",
            "Jobs ever completed per queue (never lowered by prune)",
            labels=["queue"],
        )
        for s in stats:
            values = (s.ready, s.scheduled, s.running, s.expiring, s.dead, s.done)
            for status, value in zip(STATUSES, values, strict=True):
                jobs.add_metric([s.queue, status], value)
            oldest.add_metric([s.queue], s.oldest_due_seconds or 0.0)
            completed.add_metric([s.queue], s.completed)
        yield from (jobs, oldest, completed)
        yield from _latency(q.latency(queues=[s.queue for s in stats]))

        holding = GaugeMetricFamily(
            "pgq_workers_holding_jobs",
            "Distinct workers holding running jobs, per queue",
            labels=["queue"],
        )
        expired = GaugeMetricFamily(
            "pgq_expired_leases",
            "Running jobs whose lease has expired (the reaper has not returned them yet)",
            labels=["queue"],
        )
        for lease in q.lease_summary():
            holding.add_metric([lease.queue], lease.workers)
            expired.add_metric([lease.queue], lease.expired)
        yield from (holding, expired)
        yield _stuck(
            q.stuck_counts(self.stuck_factor, self.stuck_floor),
            [s.queue for s in stats],
            self.stuck_factor,
            self.stuck_floor,
        )

        activity = q.activity()
        yield _gauge(
            "pgq_workers_connected",
            "pgq worker processes connected to this database (pg_stat_activity "
            "application_name 'pgq main <id>'), whatever their schema",
            activity.workers_connected,
        )
        yield _gauge(
            "pgq_xmin_horizon_age_seconds",
            "Seconds since the oldest transaction still holding back the xmin horizon began "
            "(pg_stat_activity.backend_xmin; 0 when none)",
            activity.xmin_horizon_seconds,
        )
        yield _gauge(
            "pgq_xmin_horizon_age_xids",
            "Age in transaction ids of the oldest backend_xmin in pg_stat_activity",
            activity.xmin_horizon_xids,
        )

        table = GaugeMetricFamily(
            "pgq_table_bytes", "Heap and TOAST bytes of the queue's tables", labels=["table"]
        )
        index = GaugeMetricFamily(
            "pgq_index_bytes", "Index bytes of the queue's tables", labels=["table"]
        )
        dead = GaugeMetricFamily(
            "pgq_dead_tuples",
            "Dead tuples of the queue's tables (statistics estimate)",
            labels=["table"],
        )
        for size in q.table_sizes():
            table.add_metric([size.table], size.table_bytes)
            index.add_metric([size.table], size.index_bytes)
            dead.add_metric([size.table], size.dead_tuples)
        yield from (table, index, dead)


def _latency(report: ops.LatencyReport) -> Iterator[Metric]:
    """Wait and run percentiles per queue and window (`Queue.latency`) as gauges with a
    quantile label, like a summary's; a window without done jobs has no quantile samples
    (no value to report), only its job count, 0."""
    wait = GaugeMetricFamily(
        "pgq_job_wait_seconds",
        "Seconds from due (run_at) to claimed of the queue's done jobs finished in the window, "
        f"at the quantile (at most {report.cap} per queue and window, the most recent)",
        labels=["queue", "window", "quantile"],
    )
    run = GaugeMetricFamily(
        "pgq_job_run_seconds",
        "Seconds from claimed to done of the queue's done jobs finished in the window, at the "
        f"quantile (at most {report.cap} per queue and window, the most recent)",
        labels=["queue", "window", "quantile"],
    )
    jobs = GaugeMetricFamily(
        "pgq_job_latency_jobs",
        f"Done jobs the latency quantiles of the queue and window are over (at most {report.cap})",
        labels=["queue", "window"],
    )
    for entry in report.queues:
        for label, window in entry.windows.items():
            jobs.add_metric([entry.queue, label], window.jobs)
            for family, pct in ((wait, window.wait), (run, window.run)):
                for quantile, value in (("0.5", pct.p50), ("0.95", pct.p95), ("0.99", pct.p99)):
                    if value is not None:
                        family.add_metric([entry.queue, label, quantile], value)
    yield from (wait, run, jobs)


def _stuck(
    counts: dict[str, int], queues: list[str], factor: float, floor: timedelta
) -> GaugeMetricFamily:
    """Stuck jobs per queue (`Queue.stuck_counts`): 0 for every other queue `stats` lists, so
    an alert on `> 0` sees a queue recover."""
    stuck = GaugeMetricFamily(
        "pgq_jobs_stuck",
        f"Running jobs with a live lease (their worker heartbeats) running past {factor:g}x "
        f"their queue's p99 run time (done jobs of the last hour) and past "
        f"{floor.total_seconds():g}s",
        labels=["queue"],
    )
    for queue in sorted({*queues, *counts}):
        stuck.add_metric([queue], counts.get(queue, 0))
    return stuck


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
