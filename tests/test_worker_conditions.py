"""The worker under the database's own conditions, on a real PostgreSQL: a settle-and-claim
slower than the lease, a server short of connections, a pooler nobody announced, a role that
may not claim, and handlers that leave the process in a strange state.

Each test states the promise it checks: no job runs more than once per real attempt, and an
attempt is spent only on the job's own fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from test_worker import TIMEOUT, make_worker, status_counts
from test_worker_faults import ReaperThread, claims

from pgq_core import JobSpec, Queue
from pgq_core.worker import JobContext

TESTS = Path(__file__).resolve().parent
SETTLE_SECONDS = 1.5


@pytest.mark.slow
async def test_a_settle_and_claim_slower_than_the_lease_hands_out_whole_leases(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A completion slower than the 1 s lease (here a trigger; in the issue a 100 MB result):
    the jobs claimed in the same statement still get their whole lease, so each runs once."""
    ident = sql.Identifier(schema)
    queue.conn.execute(
        sql.SQL(
            "CREATE FUNCTION {0}.slow_done() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN PERFORM pg_sleep({1}); RETURN NEW; END $$;"
            " CREATE TRIGGER slow_done BEFORE UPDATE ON {0}.jobs FOR EACH ROW"
            " WHEN (NEW.status = 'done') EXECUTE FUNCTION {0}.slow_done()"
        ).format(ident, sql.Literal(SETTLE_SECONDS))
    )
    ids = queue.enqueue_many([JobSpec("q", {"n": i}) for i in range(3)])
    ran: Counter[int] = Counter()

    async def handler(ctx: JobContext) -> None:
        ran[ctx.id] += 1

    worker = make_worker(
        dsn, schema, handler, concurrency=1, lease=timedelta(seconds=1), burst=True
    )
    with ReaperThread(dsn, schema, interval=0.1) as reaper:
        await asyncio.wait_for(worker.run(), TIMEOUT)
    assert status_counts(queue) == {"done": 3}
    assert ran == dict.fromkeys(ids, 1)
    assert reaper.reaped == []
    assert [claims(queue, i) for i in ids] == [1, 1, 1]


@pytest.fixture
def select_only_dsn(dsn: str, schema: str) -> Iterator[str]:
    """A role that may read the queue's tables and write nothing."""
    role, password = f"pgq_sel_{secrets.token_hex(4)}", secrets.token_hex(8)
    names = {"r": sql.Identifier(role), "s": sql.Identifier(schema)}
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(  # a password: the embedded server takes no login without one
            sql.SQL("CREATE ROLE {r} LOGIN PASSWORD {p}").format(p=sql.Literal(password), **names)
        )
        try:
            admin.execute(
                sql.SQL(
                    "GRANT USAGE ON SCHEMA {s} TO {r};"
                    " GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r}"
                ).format(**names)
            )
            yield make_conninfo(dsn, user=role, password=password)
        finally:
            admin.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(**names))


@pytest.mark.slow
def test_burst_that_may_not_claim_exits_non_zero_and_says_why(
    queue: Queue, schema: str, select_only_dsn: str
) -> None:
    job_id = queue.enqueue("q", {})
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
    )
    env.pop("PGQ_DSN", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pgq_cli",
            "--dsn",
            select_only_dsn,
            "--schema",
            schema,
            "worker",
            "q",
            "--handler",
            "handlers_for_tests:noop",
            "--burst",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "drained (burst)" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "pgq: error: stopped before the queues drained: claiming from q refused (permission denied"
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert queue.job(job_id).status == "ready"


def cli_worker(dsn: str, schema: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """`pgq worker ARGS` as a process of its own (handlers from tests/), logging to `log`."""
    env = dict(os.environ, PGQ_DSN=dsn, PGQ_SCHEMA=schema)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pgq_cli", "--dsn", dsn, "--schema", schema, "worker", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=TESTS,
        )


def exited(pid: int) -> bool:
    """The process is gone, or a zombie (it exited; its parent has not waited for it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def killed_at_the_end(pids: list[int]) -> Iterator[None]:
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("handler", ["fork_exit", "fork_exit_async"])
def test_a_handlers_forked_child_that_calls_sys_exit_exits(
    dsn: str, schema: str, queue: Queue, tmp_path: Path, handler: str
) -> None:
    job_id = queue.enqueue("q", {"code": 3})
    proc = cli_worker(
        dsn,
        schema,
        tmp_path / "worker.log",
        "q",
        "--handler",
        f"handlers_for_tests:{handler}",
        "--burst",
        "--poll-interval",
        "0.1s",
    )
    assert proc.wait(60) == 0, (tmp_path / "worker.log").read_text()
    child = int(queue.job(job_id).result["child"])
    with killed_at_the_end([child]):
        wait_until(lambda: exited(child), 10, "the forked child to exit")
    assert queue.job(job_id).status == "done"
    assert claims(queue, job_id) == 1


@pytest.mark.slow
def test_sigterm_to_a_handlers_forked_child_ends_the_child_not_the_worker(
    dsn: str, schema: str, queue: Queue, tmp_path: Path
) -> None:
    """The child inherits the worker's signal handling: before, SIGTERM left it running and
    reached the parent's event loop through their shared wake-up socket, stopping the worker."""
    log = tmp_path / "worker.log"
    job_id = queue.enqueue("q", {"child_sleep": 30})
    proc = cli_worker(
        dsn,
        schema,
        log,
        "q",
        "--handler",
        "handlers_for_tests:fork_exit",
        "--poll-interval",
        "0.1s",
    )
    try:
        wait_until(lambda: queue.job(job_id).status == "done", 30, "the job done")
        child = int(queue.job(job_id).result["child"])
        with killed_at_the_end([child]):
            os.kill(child, signal.SIGTERM)
            wait_until(lambda: exited(child), 10, "the child to end on SIGTERM")
        time.sleep(0.5)
        assert proc.poll() is None, log.read_text()
        assert "received SIGTERM" not in log.read_text()
    finally:
        proc.terminate()
        proc.wait(30)
    assert "received SIGTERM" in log.read_text()


@pytest.mark.slow
def test_a_handler_that_closes_fds_0_to_2_does_not_send_log_lines_to_the_server(
    dsn: str, schema: str, queue: Queue, tmp_path: Path
) -> None:
    """The handler closes stdin, stdout and stderr and ends the worker's connections: the
    sockets it opens again must not take fds 0-2, and its log lines still reach its log."""
    log = tmp_path / "worker.log"
    ids = queue.enqueue_many([JobSpec("q", {"close": True}), JobSpec("q", {})])
    proc = cli_worker(
        dsn,
        schema,
        log,
        "q",
        "--handler",
        "handlers_for_tests:close_stdio",
        "--concurrency",
        "1",
        "--poll-interval",
        "0.1s",
    )
    try:
        wait_until(lambda: status_counts(queue) == {"done": 2}, 30, "both jobs done")
        wait_until(
            lambda: "database reachable again" in log.read_text(),
            10,
            "the reconnect logged in the worker's log",
        )
    finally:
        proc.terminate()
        code = proc.wait(30)
    text = log.read_text()
    assert code == 0, text
    assert "stopped: 2 done, 0 failed, 0 lost" in text
    assert [claims(queue, i) for i in ids] == [1, 1]
