"""Workflows across real `pgq worker` processes, one SIGKILLed mid-run: every dependent runs
after all its parents, each job completes once (its effect written once, under its fence),
none is left waiting. Two queues, so both completion paths count parents off: the `fenced`
handler completes in its own transaction (`complete`), the no-op through the worker's
settle statement (`settle_complete_and_claim`)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from pgq_core import JobSpec, Queue

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent


class Workers:
    """`pgq worker` processes of one test, each logging to its own file; killed at the end."""

    def __init__(self, dsn: str, schema: str, logs: Path) -> None:
        self.dsn, self.schema, self.logs = dsn, schema, logs
        self.procs: list[subprocess.Popen[bytes]] = []
        logs.mkdir(exist_ok=True)

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PGQ_DSN=self.dsn, PGQ_SCHEMA=self.schema)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
        log = (self.logs / f"worker-{len(self.procs)}.log").open("wb")
        argv = [sys.executable, "-m", "pgq_cli", "--dsn", self.dsn, "--schema", self.schema,
                "worker", *args]
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=TESTS)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def workers(dsn: str, schema: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(dsn, schema, tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


def scalar(queue: Queue, text: str) -> Any:
    row = queue.conn.execute(sql.SQL(text).format(s=sql.Identifier(queue.schema))).fetchone()
    assert row is not None
    return row[0]


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_dependents_run_once_after_their_parents_across_sigkilled_workers(
    queue: Queue, workers: Workers
) -> None:
    queue.conn.execute(
        sql.SQL(
            "CREATE TABLE {}.effects (job_id bigint PRIMARY KEY, worker text, "
            "fence bigint NOT NULL)"
        ).format(sql.Identifier(queue.schema))
    )
    rng = random.Random(23)

    def spec(n: int, after: list[int]) -> JobSpec:
        name = "wf_fenced" if n % 2 else "wf_plain"
        return JobSpec(name, {"sleep": rng.uniform(0.005, 0.03)}, max_attempts=100,
                       depends_on=after)

    # 60 chains of four (alternating queues), then 12 fan-ins of five chain ends each
    ends: list[int] = []
    for _ in range(60):
        parent: list[int] = []
        for n in range(4):
            parent = [queue.enqueue_many([spec(n + rng.randrange(2), parent)])[0]]
        ends.extend(parent)
    for start in range(0, len(ends), 5):
        queue.enqueue_many([spec(rng.randrange(2), ends[start : start + 5])])
    total = 60 * 4 + 12
    fenced = ("wf_fenced", "--handler", "handlers_for_tests:fenced", "--concurrency", "6",
              "--lease", "2s", "--poll-interval", "0.2s")
    plain = ("wf_plain", "--handler", "handlers_for_tests:noop", "--concurrency", "6",
             "--lease", "2s", "--poll-interval", "0.2s")
    pool = [workers.start(*fenced), workers.start(*fenced), workers.start(*plain),
            workers.start(*plain)]

    def done() -> int:
        return int(scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status = 'done'"))

    kills = 0
    while kills < 4 and done() < total * 0.7:
        victims = [
            (i, p) for i, p in enumerate(pool)
            if p.poll() is None and scalar(
                queue,
                "SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND worker LIKE "
                + "'%:" + str(p.pid) + ":%'",
            ) > 0
        ]
        if not victims:
            time.sleep(0.05)
            continue
        i, victim = rng.choice(victims)
        victim.kill()
        victim.wait(10)
        pool[i] = workers.start(*(fenced if i < 2 else plain))
        kills += 1
        time.sleep(rng.uniform(0.2, 0.5))
    assert kills >= 2, "the drain ended before the chaos could start"

    wait_for(lambda: done() == total, 180, "every job done")
    assert scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status <> 'done'") == 0
    # each job completed once, by the attempt whose fence it has
    assert scalar(
        queue,
        "SELECT count(*) FROM {s}.job_events e JOIN {s}.jobs j ON j.id = e.job_id "
        "WHERE e.event = 'completed' AND e.fence = j.fence",
    ) == total
    assert scalar(queue, "SELECT count(*) FROM {s}.job_events WHERE event = 'completed'") == total
    fenced_jobs = scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE queue = 'wf_fenced'")
    assert scalar(
        queue,
        "SELECT count(*) FROM {s}.effects e JOIN {s}.jobs j ON j.id = e.job_id "
        "WHERE e.fence = j.fence",
    ) == fenced_jobs > 0
    # every dependent was claimed (its last attempt) after each parent finished, and made
    # ready exactly once
    assert scalar(
        queue,
        "SELECT count(*) FROM {s}.job_deps d JOIN {s}.jobs c ON c.id = d.child "
        "JOIN {s}.jobs p ON p.id = d.parent WHERE c.claimed_at < p.finished_at",
    ) == 0
    dependents = scalar(queue, "SELECT count(DISTINCT child) FROM {s}.job_deps")
    assert dependents == total - 60
    assert scalar(
        queue, "SELECT count(*) FROM {s}.job_events WHERE event = 'unblocked'"
    ) == dependents
    assert scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE fence > 1") > 0
