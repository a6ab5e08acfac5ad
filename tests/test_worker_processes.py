"""The worker as real processes against a real PostgreSQL: SIGKILL chaos, SIGSTOP past the
lease, a server restart, SIGTERM, a crash loop, an operator kill, and the command line."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import OwnServer

from pgq_core import JobSpec, Queue, migrate

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
TIMEOUT = 60.0


def wait_for(condition: Callable[[], Any], timeout: float = TIMEOUT, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or condition}")
        time.sleep(0.05)


def worker_argv(dsn: str, schema: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "pgq_cli", "--dsn", dsn, "--schema", schema, "worker", *args]


class Workers:
    """Worker processes of one test; each logs to its own file; all are killed at the end."""

    def __init__(self, dsn: str, schema: str, logs: Path) -> None:
        self.dsn, self.schema, self.logs = dsn, schema, logs
        self.procs: list[subprocess.Popen[bytes]] = []
        logs.mkdir(exist_ok=True)

    def start(self, *args: str, cwd: Path = TESTS) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PGQ_DSN=self.dsn, PGQ_SCHEMA=self.schema)
        if cwd == TESTS:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
        log = (self.logs / f"worker-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen(
            worker_argv(self.dsn, self.schema, *args),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )
        proc.log_path = Path(log.name)  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    @staticmethod
    def log(proc: subprocess.Popen[bytes]) -> str:
        return Path(proc.log_path).read_text()  # type: ignore[attr-defined]

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)


@pytest.fixture
def workers(dsn: str, schema: str, tmp_path: Path) -> Iterator[Workers]:
    group = Workers(dsn, schema, tmp_path / "logs")
    try:
        yield group
    finally:
        group.stop_all()


def q(schema: str, text: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def scalar(queue: Queue, text: str, *params: Any) -> Any:
    row = queue.conn.execute(q(queue.schema, text), params).fetchone()
    assert row is not None
    return row[0]


def create_effects(queue: Queue) -> None:
    queue.conn.execute(
        q(queue.schema, "CREATE TABLE {s}.effects (job_id bigint PRIMARY KEY, worker text, "
          "fence bigint NOT NULL)")
    )


def held_by(queue: Queue, proc: subprocess.Popen[bytes]) -> int:
    """Running jobs claimed by the worker process `proc` (worker ids hold the pid)."""
    return int(
        scalar(
            queue,
            "SELECT count(*) FROM {s}.jobs WHERE status = 'running' AND worker LIKE %s",
            f"%:{proc.pid}:%",
        )
    )


def kill_at_random(
    queue: Queue,
    workers: Workers,
    pool: list[subprocess.Popen[bytes]],
    args: tuple[str, ...],
    rng: random.Random,
    *,
    most: int,
    until: Callable[[], bool],
    pause: tuple[float, float],
) -> int:
    """SIGKILL a random worker of `pool` that holds jobs, start a new one in its place, pause,
    and again, up to `most` times or until `until()`; returns how many were killed."""
    kills = 0
    while kills < most and not until():
        victims = [p for p in pool if p.poll() is None and held_by(queue, p) > 0]
        if not victims:
            time.sleep(0.05)
            continue
        victim = rng.choice(victims)
        victim.kill()
        victim.wait(10)
        pool[pool.index(victim)] = workers.start(*args)
        kills += 1
        time.sleep(rng.uniform(*pause))
    return kills


def test_sigkill_chaos_every_job_done_once_with_its_fence(
    queue: Queue, workers: Workers
) -> None:
    create_effects(queue)
    rng = random.Random(7)
    total = 1200
    queue.enqueue_many(
        [JobSpec("chaos", {"sleep": rng.uniform(0.005, 0.04)}, max_attempts=100)
         for _ in range(total)]
    )
    args = ("chaos", "--handler", "handlers_for_tests:fenced", "--concurrency", "8",
            "--lease", "2s", "--poll-interval", "0.2s")
    pool = [workers.start(*args) for _ in range(4)]

    def done() -> int:
        return int(scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status = 'done'"))

    kills = kill_at_random(
        queue, workers, pool, args, rng, most=6, until=lambda: done() >= total * 0.8,
        pause=(0.1, 0.4),
    )
    assert kills >= 3, "the drain ended before the chaos could start"

    wait_for(lambda: done() == total, timeout=180, what="every job done")
    for proc in pool:
        assert proc.poll() is None, workers.log(proc)
        proc.terminate()
    for proc in pool:
        assert proc.wait(30) == 0, workers.log(proc)

    assert scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status <> 'done'") == 0
    # One effect per job, written by the claim that completed it: same fence as the job.
    assert scalar(queue, "SELECT count(*) FROM {s}.effects") == total
    assert scalar(
        queue,
        "SELECT count(*) FROM {s}.effects e JOIN {s}.jobs j ON j.id = e.job_id "
        "WHERE e.fence = j.fence",
    ) == total
    completed = "SELECT count(*) FROM {s}.job_events ev JOIN {s}.jobs j ON j.id = ev.job_id "
    assert scalar(queue, completed + "WHERE ev.event = 'completed'") == total
    assert scalar(queue, completed + "WHERE ev.event = 'completed' AND ev.fence = j.fence") == total
    # The kills interrupted running jobs, which were then claimed again with a new fence.
    assert scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE fence > 1") > 0


def test_sigkill_chaos_with_hostile_error_texts(queue: Queue, workers: Workers) -> None:
    """Handlers raise errors holding NUL bytes, lone surrogates and 10 MB texts while workers
    are SIGKILLed: every job ends done or dead, and no completed job ran again."""
    create_effects(queue)
    queue.conn.execute(q(queue.schema, "CREATE TABLE {s}.runs (job_id bigint, fence bigint)"))
    rng = random.Random(11)
    kinds = ["ok", "ok", "ok", "nul", "surrogate", "huge"]
    specs = [
        JobSpec("chaos", {"sleep": rng.uniform(0.005, 0.03), "kind": kinds[i % len(kinds)]},
                max_attempts=4)
        for i in range(360)
    ]
    queue.enqueue_many(specs)
    args = ("chaos", "--handler", "handlers_for_tests:hostile", "--concurrency", "6",
            "--lease", "2s", "--poll-interval", "0.2s")
    pool = [workers.start(*args) for _ in range(3)]

    def settled() -> int:
        return int(scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status IN ('done', 'dead')"))

    kills = kill_at_random(
        queue, workers, pool, args, rng, most=4, until=lambda: settled() >= len(specs) * 0.7,
        pause=(0.2, 0.5),
    )
    assert kills >= 2, "the drain ended before the chaos could start"
    # Failed jobs retry after backoff (1 s, 2 s, 4 s): give them time to reach dead.
    wait_for(lambda: settled() == len(specs), timeout=180, what="every job done or dead")
    for proc in pool:
        assert proc.poll() is None, workers.log(proc)
        proc.terminate()
    for proc in pool:
        assert proc.wait(30) == 0, workers.log(proc)

    ok = len([s for s in specs if s.payload["kind"] == "ok"])
    assert scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status = 'done'") == ok
    assert scalar(queue, "SELECT count(*) FROM {s}.effects") == ok
    # A done job never ran after the claim that completed it, and completed exactly once.
    assert scalar(
        queue,
        "SELECT count(*) FROM {s}.runs r JOIN {s}.jobs j ON j.id = r.job_id "
        "WHERE j.status = 'done' AND r.fence > j.fence",
    ) == 0
    assert scalar(
        queue,
        "SELECT count(*) FROM (SELECT job_id FROM {s}.job_events WHERE event = 'completed' "
        "GROUP BY job_id HAVING count(*) > 1) x",
    ) == 0
    dead = queue.conn.execute(
        q(queue.schema, "SELECT payload->>'kind', last_error FROM {s}.jobs WHERE status = 'dead'")
    ).fetchall()
    assert len(dead) == len(specs) - ok
    expected = {"nul": "ValueError: badbyte", "surrogate": "ValueError: lone \ufffd surrogate"}
    for kind, error in dead:
        if error.startswith("lease expired"):
            continue  # its last attempt was the one a SIGKILL interrupted
        if kind == "huge":
            assert len(error) == 8192 and error.endswith("characters in all]"), error[-60:]
        else:
            assert error == expected[kind]


def test_sigstop_past_the_lease_then_sigcont_writes_are_rejected(
    queue: Queue, workers: Workers
) -> None:
    create_effects(queue)
    job_id = queue.enqueue("stop", {"sleep": 2.5}, max_attempts=10)
    args = ("stop", "--handler", "handlers_for_tests:fenced", "--concurrency", "1",
            "--lease", "1s", "--poll-interval", "0.2s")
    a = workers.start(*args)
    a_id = wait_for(
        lambda: (j := queue.job(job_id)).status == "running" and j.worker, what="A claims"
    )
    a.send_signal(signal.SIGSTOP)
    b = workers.start(*args)
    wait_for(lambda: queue.job(job_id).status == "done", what="B completes the job")
    job = queue.job(job_id)
    assert job.fence == 2 and job.worker != a_id
    b_id = job.worker

    a.send_signal(signal.SIGCONT)
    wait_for(
        lambda: any(e.event == "stale" for e in queue.job(job_id).history),
        what="A's late write rejected",
    )
    wait_for(lambda: "lease lost" in workers.log(a), what="A gives the job up")
    assert a.poll() is None, workers.log(a)

    history = [(e.event, e.fence, e.worker) for e in queue.job(job_id).history]
    assert history[:2] == [("enqueued", 0, None), ("claimed", 1, a_id)]
    assert ("claimed", 2, b_id) in history and ("completed", 2, b_id) in history
    assert history.index(("claimed", 2, b_id)) < history.index(("completed", 2, b_id))
    stale = [h for h in history if h[0] == "stale"]
    assert stale and all(s[1:] == (1, a_id) for s in stale)
    assert [e for e in history if e[0] == "completed"] == [("completed", 2, b_id)]
    effect = queue.conn.execute(q(queue.schema, "SELECT worker, fence FROM {s}.effects")).fetchall()
    assert effect == [(b_id, 2)]

    # A goes on working.
    after = queue.enqueue("stop", {"sleep": 0})
    wait_for(lambda: queue.job(after).status == "done", what="next job done")
    for proc in (a, b):
        proc.terminate()
        assert proc.wait(30) == 0


def test_sigterm_finishes_running_jobs_or_hands_them_back(
    queue: Queue, workers: Workers
) -> None:
    quick = queue.enqueue_many([JobSpec("term", {"sleep": 0.5}) for _ in range(6)])
    stuck = queue.enqueue_many([JobSpec("term", {"sleep": 120}) for _ in range(2)])
    proc = workers.start("term", "--handler", "handlers_for_tests:sleepy", "--concurrency", "8",
                         "--grace", "2s")
    wait_for(lambda: held_by(queue, proc) == 8, what="8 jobs running")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.log(proc)

    assert scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status = 'running'") == 0
    assert all(queue.job(i).status == "done" for i in quick)
    for job_id in stuck:
        job = queue.job(job_id)
        assert (job.status, job.attempts) == ("ready", 0)
        assert job.history[-1].event == "released"
    log = workers.log(proc)
    assert "received SIGTERM" in log and "handed back 2 job(s)" in log


def test_sigterm_hands_a_full_buffer_back_at_once_without_its_attempts(
    queue: Queue, workers: Workers
) -> None:
    slow = queue.enqueue("buffered", {"sleep": 1.5})
    buffered = queue.enqueue_many([JobSpec("buffered", {"sleep": 0}) for _ in range(5)])
    proc = workers.start("buffered", "--handler", "handlers_for_tests:sleepy",
                         "--concurrency", "1", "--prefetch", "5", "--grace", "30s")
    wait_for(lambda: held_by(queue, proc) == 6, what="1 job running and 5 buffered")
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: all(queue.job(i).status == "ready" for i in buffered),
             what="the buffer handed back while the running job finishes")
    assert proc.poll() is None and queue.job(slow).status == "running"
    assert proc.wait(30) == 0, workers.log(proc)
    assert queue.job(slow).status == "done"
    for job_id in buffered:
        job = queue.job(job_id)
        assert (job.status, job.attempts) == ("ready", 0)
        assert [e.event for e in job.history] == ["enqueued", "claimed", "released"]
    assert "handed back 5 buffered job(s)" in workers.log(proc)


def test_sigkill_with_a_full_buffer_loses_nothing(queue: Queue, workers: Workers) -> None:
    """The buffer dies with its process: its jobs' leases run out, the reaper of another
    worker returns them, and each job's effect is written once, by its last fence."""
    create_effects(queue)
    ids = queue.enqueue_many(
        [JobSpec("buffered", {"sleep": 30}), *(JobSpec("buffered", {}) for _ in range(5))]
    )
    victim = workers.start("buffered", "--handler", "handlers_for_tests:fenced",
                           "--concurrency", "1", "--prefetch", "5", "--lease", "1s")
    wait_for(lambda: held_by(queue, victim) == 6, what="1 job running and 5 buffered")
    victim.kill()
    victim.wait(10)
    queue.conn.execute(q(queue.schema, "UPDATE {s}.jobs SET payload = %s::jsonb WHERE id = %s"),
                       ("{}", ids[0]))  # the slow job runs quickly for the next worker
    heir = workers.start("buffered", "--handler", "handlers_for_tests:fenced",
                         "--concurrency", "2", "--lease", "1s", "--poll-interval", "0.2s")
    wait_for(lambda: all(queue.job(i).status == "done" for i in ids), what="every job done")
    heir.terminate()
    assert heir.wait(30) == 0, workers.log(heir)
    for job_id in ids:
        job = queue.job(job_id)
        assert (job.status, job.fence, job.attempts) == ("done", 2, 2), job_id
        assert [e.event for e in job.history] == [
            "enqueued", "claimed", "reaped", "claimed", "completed"
        ]
    assert scalar(queue, "SELECT count(*) FROM {s}.effects e JOIN {s}.jobs j "
                         "ON j.id = e.job_id AND e.fence = j.fence") == 6


def test_second_signal_stops_at_once(queue: Queue, workers: Workers) -> None:
    stuck = queue.enqueue("term", {"sleep": 120})
    proc = workers.start("term", "--handler", "handlers_for_tests:sleepy", "--grace", "10m")
    wait_for(lambda: held_by(queue, proc) == 1, what="job running")
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "received SIGINT" in workers.log(proc), what="first signal seen")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0, workers.log(proc)
    assert queue.job(stuck).status == "ready"


def test_a_job_that_crashes_its_worker_ends_dead(queue: Queue, workers: Workers) -> None:
    job_id = queue.enqueue("crash", {}, max_attempts=3)
    args = ("crash", "--handler", "handlers_for_tests:crash", "--lease", "1s",
            "--poll-interval", "0.2s")
    crashes = 0
    proc = workers.start(*args)
    deadline = time.monotonic() + 120
    while queue.job(job_id).status != "dead":
        assert time.monotonic() < deadline, "the crashing job never ended dead"
        if proc.poll() is not None:
            assert proc.returncode == 3, workers.log(proc)
            crashes += 1
            assert crashes <= 3, "the job ran more often than max_attempts"
            proc = workers.start(*args)
        time.sleep(0.05)
    job = queue.job(job_id)
    assert crashes == 3
    assert (job.attempts, job.last_error) == (3, "lease expired on attempt 3 of 3")
    assert [e.event for e in job.history].count("claimed") == 3
    assert proc.poll() is None  # the worker that reaped it is alive and idle
    proc.terminate()
    assert proc.wait(30) == 0


def test_operator_kill_stops_the_handler_within_one_heartbeat(
    queue: Queue, workers: Workers
) -> None:
    queue.conn.execute(
        q(queue.schema, "CREATE TABLE {s}.observed (job_id bigint, at timestamptz "
          "DEFAULT clock_timestamp())")
    )
    job_id = queue.enqueue("kill", {})
    proc = workers.start("kill", "--handler", "handlers_for_tests:until_lost", "--lease", "3s")
    wait_for(lambda: held_by(queue, proc) == 1, what="job running")
    assert queue.kill([job_id]) == [job_id]
    wait_for(lambda: scalar(queue, "SELECT count(*) FROM {s}.observed") == 1,
             what="handler told")
    killed_at = next(e.at for e in queue.job(job_id).history if e.event == "killed")
    seen_at = scalar(queue, "SELECT at FROM {s}.observed")
    # Heartbeats run every lease / 3 = 1 s; the lease itself (3 s) was never waited out.
    assert (seen_at - killed_at).total_seconds() < 3
    job = queue.job(job_id)
    assert job.status == "dead"
    assert job.history[-1].event == "stale"
    assert job.history[-1].detail == "heartbeat rejected: stale fence"
    assert proc.poll() is None
    proc.terminate()
    assert proc.wait(30) == 0


def test_cli_burst_drains_and_exits_zero(queue: Queue, workers: Workers) -> None:
    queue.enqueue_many([JobSpec("burst", {}) for _ in range(200)])
    proc = workers.start("burst", "--handler", "handlers_for_tests:noop", "--burst")
    assert proc.wait(60) == 0, workers.log(proc)
    assert scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status = 'done'") == 200
    log = workers.log(proc)
    assert "queues drained (burst)" in log and "200 done" in log
    assert len(log.strip().splitlines()) <= 4, log  # quiet: state changes only


def test_cli_handler_module_from_the_current_directory(
    queue: Queue, workers: Workers, tmp_path: Path
) -> None:
    here = tmp_path / "app"
    here.mkdir()
    (here / "app_jobs.py").write_text("def handle(ctx):\n    assert ctx.payload == {'n': 1}\n")
    job_id = queue.enqueue("here", {"n": 1})
    proc = workers.start("here", "--handler", "app_jobs:handle", "--burst", cwd=here)
    assert proc.wait(60) == 0, workers.log(proc)
    assert queue.job(job_id).status == "done"


def test_sigterm_while_the_handler_module_imports_stops_cleanly(
    queue: Queue, workers: Workers, tmp_path: Path
) -> None:
    """A worker told to stop while it is still starting (a supervisor's SIGTERM right after a
    restart) stops as it would later: exit 0, nothing claimed; it died with -15 before."""
    here = tmp_path / "app"
    here.mkdir()
    importing = tmp_path / "importing"
    (here / "slow_jobs.py").write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(importing)!r}).touch()\n"
        "time.sleep(1.5)\n"
        "def handle(ctx):\n    pass\n"
    )
    job_id = queue.enqueue("slow-start", {})
    proc = workers.start("slow-start", "--handler", "slow_jobs:handle", cwd=here)
    wait_for(importing.exists, what="the handler module importing")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.log(proc)
    assert "received SIGTERM" in workers.log(proc)
    assert (queue.job(job_id).status, queue.job(job_id).attempts) == ("ready", 0)


def test_cli_worker_id_names_its_claims(queue: Queue, workers: Workers) -> None:
    job_id = queue.enqueue("named", {})
    proc = workers.start("named", "--handler", "handlers_for_tests:noop", "--burst",
                         "--worker-id", "web-3.pgq:1")
    assert proc.wait(60) == 0, workers.log(proc)
    job = queue.job(job_id)
    assert (job.status, job.worker) == ("done", "web-3.pgq:1")
    assert [e.worker for e in job.history if e.event in ("claimed", "completed")] == [
        "web-3.pgq:1", "web-3.pgq:1"
    ]
    assert "worker web-3.pgq:1 started" in workers.log(proc)


def test_restart_under_the_same_id_leaves_the_killed_claim_to_its_lease(
    queue: Queue, workers: Workers
) -> None:
    """A supervisor restarts a SIGKILLed worker in place, same --worker-id: the new process
    does not hand back the jobs its predecessor held (it cannot tell them from a live twin's);
    they come back when their leases expire, the attempt counted, and it runs them again."""
    create_effects(queue)
    job_id = queue.enqueue("same", {"sleep": 1.5}, max_attempts=5)
    args = ("same", "--handler", "handlers_for_tests:fenced", "--lease", "1s",
            "--poll-interval", "0.2s", "--worker-id", "node-1")
    first = workers.start(*args)
    wait_for(lambda: queue.job(job_id).status == "running", what="first claim")
    first.kill()
    first.wait(10)
    second = workers.start(*args)
    wait_for(lambda: queue.job(job_id).status == "done", what="done after the restart")
    job = queue.job(job_id)
    assert (job.fence, job.attempts, job.worker) == (2, 2, "node-1")
    events = [(e.event, e.fence, e.worker) for e in job.history]
    assert events[:2] == [("enqueued", 0, None), ("claimed", 1, "node-1")]
    assert ("reaped", 1, "node-1") in events
    assert events[-2:] == [("claimed", 2, "node-1"), ("completed", 2, "node-1")]
    assert not [e for e in events if e[0] == "released"], events
    assert queue.conn.execute(
        q(queue.schema, "SELECT job_id, worker, fence FROM {s}.effects")
    ).fetchall() == [(job_id, "node-1", 2)]
    second.terminate()
    assert second.wait(30) == 0, workers.log(second)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("q", "--handler", "handlers_for_tests:noop", "--worker-id", "a b"), "--worker-id"),
        (("q", "--handler", "handlers_for_tests:noop", "--worker-id", "x\x1b[2J"), "x\\x1b"),
        (("q", "--handler", "nope"), "pgq: error: invalid handler 'nope'"),
        (("q", "--handler", "no_such_mod:f"), "pgq: error: cannot import handler module"),
        (("q", "--handler", "handlers_for_tests:noop", "--lease", "soon"), "not a duration"),
        (("q", "--handler", "handlers_for_tests:noop", "--concurrency", "0"), "concurrency"),
        (("q", "--handler", "handlers_for_tests:noop", "--prefetch", "-1"), "--prefetch"),
    ],
)
def test_cli_bad_input_is_one_line(
    dsn: str, schema: str, workers: Workers, args: tuple[str, ...], message: str
) -> None:
    proc = workers.start(*args)
    assert proc.wait(60) != 0
    out = workers.log(proc)
    assert message in out and "Traceback" not in out


# -- a server of our own, to stop and start under a running worker ------------------------


def test_worker_survives_a_server_restart_and_drains(
    own_server: OwnServer, tmp_path: Path
) -> None:
    schema = "pgq"
    with psycopg.connect(own_server.dsn, autocommit=True) as conn:
        migrate(conn, schema)
    group = Workers(own_server.dsn, schema, tmp_path / "logs")
    try:
        with Queue.connect(own_server.dsn, schema) as queue:
            queue.enqueue_many([JobSpec("r", {"sleep": 0.02}) for _ in range(300)])
        proc = group.start("r", "--handler", "handlers_for_tests:sleepy", "--concurrency", "4",
                           "--lease", "2s", "--poll-interval", "0.2s")

        def done() -> int:
            with Queue.connect(own_server.dsn, schema) as queue:
                return int(scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status = 'done'"))

        wait_for(lambda: done() >= 20, what="some jobs done")
        own_server.stop("fast")
        wait_for(lambda: "database unavailable" in group.log(proc), what="worker notices")
        assert proc.poll() is None, group.log(proc)
        own_server.start()
        wait_for(lambda: done() == 300, what="queue drained after restart")
        with Queue.connect(own_server.dsn, schema) as queue:
            more = queue.enqueue("r", {"sleep": 0})
            wait_for(lambda: queue.job(more).status == "done", what="new job after restart")
            assert scalar(queue, "SELECT count(*) FROM {s}.jobs WHERE status <> 'done'") == 0
        proc.terminate()
        assert proc.wait(30) == 0, group.log(proc)
        log = group.log(proc)
        assert log.count("database unavailable") == 1, log
        assert log.count("database reachable again") == 1, log
        assert "Traceback" not in log
    finally:
        group.stop_all()
