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
import shutil
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
from support import (
    TIMEOUT,
    OwnServer,
    ReaperThread,
    claims,
    make_worker,
    running,
    server_root,
    status_counts,
    until,
)

from pgq_core import JobSpec, Queue, config, migrate
from pgq_core.worker import JobContext, link
from pgq_core.worker.renewal import RenewalGate

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
    assert last.startswith("pgq: error: stopped before the queues drained: "), done.stderr
    assert "refused (permission denied for table jobs)" in last, done.stderr
    assert "Traceback" not in done.stderr
    assert queue.job(job_id).status == "ready"


def cli_worker(
    dsn: str, schema: str, log: Path, *args: str, unset: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """`pgq worker ARGS` as a process of its own (handlers from tests/), logging to `log`;
    `unset`: environment variables it must not see."""
    env = dict(os.environ, PGQ_DSN=dsn, PGQ_SCHEMA=schema)
    for name in unset:
        env.pop(name, None)
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


# -- claiming only while leases can be renewed ---------------------------------------------------


def test_the_gate_opens_on_the_first_renewal_and_says_nothing_about_the_first_connect() -> None:
    gate = RenewalGate(interval=1.0, grace=1.0)
    assert not gate.may_claim(0.0)
    assert gate.note(0.0) is None
    gate.renewed(sent_at=0.5)
    assert gate.may_claim(0.6)
    assert gate.note(0.6) is None


def test_no_heartbeat_connection_stops_claims_once_and_a_renewal_resumes_them() -> None:
    gate = RenewalGate(interval=1.0, grace=1.0)
    gate.failed("too many clients already", connected=False)
    assert gate.why_not(0.0) == "no heartbeat connection (too many clients already)"
    note = gate.note(0.0)
    assert note is not None and "not claiming" in note and "too many clients" in note
    assert gate.note(5.0) is None  # said once
    gate.renewed(sent_at=6.0)
    assert gate.may_claim(6.1)
    assert gate.note(6.1) == "heartbeats succeed again; claiming resumes"
    assert gate.note(6.2) is None


def test_a_renewal_later_than_interval_plus_grace_stops_claims_counted_from_its_sending() -> None:
    gate = RenewalGate(interval=1.0, grace=0.5)
    gate.renewed(sent_at=10.0)
    gate.failed("canceling statement due to statement timeout", connected=True)
    assert gate.may_claim(11.5)
    assert gate.why_not(11.6) == (
        "no heartbeat has succeeded for 1.6s (canceling statement due to statement timeout)"
    )
    gate.renewed(sent_at=9.0)  # a reply to an older round trip does not move the clock back
    assert not gate.may_claim(11.6)
    gate.renewed(sent_at=11.7)
    assert gate.may_claim(11.8)


def test_a_refused_renewal_is_a_refusal_until_one_succeeds() -> None:
    gate = RenewalGate(interval=1.0, grace=1.0)
    gate.failed("permission denied for table jobs", connected=True, refused=True)
    assert gate.refusal(0.0) == "permission denied for table jobs"
    gate.renewed(sent_at=1.0)
    assert gate.refusal(1.1) is None
    gate.failed("canceling statement due to statement timeout", connected=True)
    assert gate.refusal(5.0) is None


def test_a_lost_connection_stops_claims_at_once() -> None:
    gate = RenewalGate(interval=1.0, grace=1.0)
    gate.renewed(sent_at=0.0)
    gate.failed("server closed the connection unexpectedly", connected=False)
    assert not gate.may_claim(0.1)


@pytest.fixture
def scarce_server(dsn: str) -> Iterator[tuple[str, str]]:
    """A DSN that gets only SCARCE_CONNECTIONS connections, and a schema for it: a throwaway
    server with that max_connections (none reserved), or, on PGQ_TEST_DSN's shared server, a
    role with that CONNECTION LIMIT (the same 'too many connections', SQLSTATE 53300)."""
    if os.environ.get("PGQ_TEST_DSN"):
        role = f"pgq_few_{secrets.token_hex(4)}"
        names = {"r": sql.Identifier(role), "s": sql.Identifier(role)}
        with psycopg.connect(dsn, autocommit=True) as admin:
            database = admin.info.dbname
            admin.execute(
                sql.SQL(
                    "CREATE ROLE {r} LOGIN CONNECTION LIMIT {n};"
                    " CREATE SCHEMA {s} AUTHORIZATION {r}; GRANT CREATE ON DATABASE {d} TO {r}"
                ).format(n=sql.Literal(SCARCE_CONNECTIONS), d=sql.Identifier(database), **names)
            )
            try:
                yield make_conninfo(dsn, user=role), role
            finally:
                admin.execute(
                    sql.SQL("DROP SCHEMA {s} CASCADE; DROP OWNED BY {r}; DROP ROLE {r}").format(
                        **names
                    )
                )
        return
    root = server_root("pgqc")
    server = OwnServer(root)
    with (server.pgdata / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"max_connections = {SCARCE_CONNECTIONS}\nsuperuser_reserved_connections = 0\n")
    server.start()
    try:
        yield server.dsn, "pgq"
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


SCARCE_CONNECTIONS = 14
SCARCE_WORKERS = 8


@pytest.mark.slow
async def test_workers_beyond_the_servers_connections_claim_only_what_they_can_renew(
    scarce_server: tuple[str, str],
) -> None:
    """The issue's 70 workers on 60 connections, scaled down: 8 workers (3 connections each
    when they get them) on a server of 14, jobs longer than the lease. A worker left without
    a heartbeat connection claims nothing, so every job is claimed once and run once."""
    scarce, schema = scarce_server
    with psycopg.connect(scarce, autocommit=True) as conn:
        migrate(conn, schema)
    ran: Counter[int] = Counter()

    async def handler(ctx: JobContext) -> None:
        ran[ctx.id] += 1
        await asyncio.sleep(3.0)

    with Queue.connect(scarce, schema) as queue:
        ids = queue.enqueue_many([JobSpec("q", {"n": i}) for i in range(12)])
        workers = [
            make_worker(
                scarce,
                schema,
                handler,
                concurrency=2,
                lease=timedelta(seconds=2),
                poll_interval=0.2,
            )
            for _ in range(SCARCE_WORKERS)
        ]
        tasks = [asyncio.create_task(w.run()) for w in workers]
        try:
            deadline = time.monotonic() + 40
            while {"ready", "running"} & status_counts(queue).keys():
                if time.monotonic() > deadline:
                    pytest.fail(f"no progress in 40 s: {status_counts(queue)}")
                await asyncio.sleep(0.2)
            assert status_counts(queue) == {"done": len(ids)}
        finally:
            for w in workers:
                w.stop(immediately=True)
            results = await asyncio.gather(*tasks, return_exceptions=True)
        history = {i: [e.event for e in queue.history(i)] for i in ids}
    unavailable = [r for r in results if isinstance(r, Exception)]
    assert all("database unavailable" in str(r) for r in unavailable), unavailable
    assert len(unavailable) < SCARCE_WORKERS
    assert history == {i: ["enqueued", "claimed", "completed"] for i in ids}
    assert ran == dict.fromkeys(ids, 1)


# -- a pooler nobody announced ------------------------------------------------------------------


@pytest.mark.slow
def test_workers_through_an_unannounced_pgbouncer_drain_every_job_once(
    bouncer: str,
    dsn: str,
    schema: str,
    queue: Queue,
    tmp_path: Path,
) -> None:
    """Workers pointed at a transaction-mode PgBouncer without --pooled: they find the pooler
    themselves, say so once, and run every job once (before: prepared statements collided on
    shared server sessions, jobs failed or were reaped with an attempt counted)."""
    total = 3000
    ids = queue.enqueue_many([JobSpec("pb", {"n": i}) for i in range(total)])
    logs = [tmp_path / f"worker-{n}.log" for n in range(3)]
    procs = []
    try:
        procs = [
            cli_worker(
                bouncer,
                schema,
                log,
                "pb",
                "--handler",
                "handlers_for_tests:noop",
                "--concurrency",
                "8",
                "--lease",
                "5s",
                "--poll-interval",
                "0.1s",
                unset=("PGQ_POOLED", "PGQ_LISTEN_DSN"),
            )
            for log in logs
        ]
        wait_until(lambda: status_counts(queue) == {"done": total}, 120, "every job done")
    finally:
        for proc in procs:
            proc.terminate()
        codes = [proc.wait(30) for proc in procs]
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0, 0], texts
    for text in texts:
        assert text.count("goes through a pooler") == 1, text
        assert "--pooled" in text
        for bad in ('prepared statement "', "bind message", "Traceback", "ERROR"):
            assert bad not in text, text
    events = Counter(
        e
        for (e,) in queue.conn.execute(
            sql.SQL("SELECT event FROM {}.job_history WHERE job_id = ANY(%s)").format(
                sql.Identifier(schema)
            ),
            [ids],
        ).fetchall()
    )
    assert events == {"enqueued": total, "claimed": total, "completed": total}


@pytest.fixture
def undetected_pooler(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pooler's process ids pass as the server's (as some poolers' would): only its errors
    tell. The process-wide pooled mode a test turns on is forgotten after it."""
    monkeypatch.delenv("PGQ_POOLED", raising=False)
    monkeypatch.delenv("PGQ_LISTEN_DSN", raising=False)
    monkeypatch.setattr(link, "detect_pooler", lambda conn: None)

    async def none(conn: object) -> None:
        return None

    monkeypatch.setattr(link, "adetect_pooler", none)
    config.forget_pooler()
    try:
        yield
    finally:
        config.forget_pooler()


@pytest.mark.slow
async def test_a_poolers_errors_switch_the_worker_to_pooled_mode_and_cost_no_attempt(
    bouncer: str,
    schema: str,
    queue: Queue,
    undetected_pooler: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Prepared statements that do not exist or already exist on the pooler's shared server
    sessions are the connection's fault: the statement is retried on a session that prepares
    nothing, no job fails or is reaped, and pooled mode is said once."""
    caplog.set_level("INFO")
    total = 2000
    ids = queue.enqueue_many([JobSpec("q", {"n": i}) for i in range(total)])

    async def handler(ctx: JobContext) -> None:
        await asyncio.sleep(0.05)  # long enough for heartbeats to be prepared statements too

    workers = [
        make_worker(bouncer, schema, handler, concurrency=8, lease=timedelta(seconds=2))
        for _ in range(3)
    ]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        deadline = time.monotonic() + 60
        while status_counts(queue) != {"done": total}:
            if time.monotonic() > deadline:
                pytest.fail(f"not drained in 60 s: {status_counts(queue)}")
            await asyncio.sleep(0.2)
    finally:
        for w in workers:
            w.stop(immediately=True)
        await asyncio.gather(*tasks)
    events = Counter(
        e
        for (e,) in queue.conn.execute(
            sql.SQL("SELECT event FROM {}.job_history WHERE job_id = ANY(%s)").format(
                sql.Identifier(schema)
            ),
            [ids],
        ).fetchall()
    )
    assert events == {"enqueued": total, "claimed": total, "completed": total}
    assert sum(w.snapshot().failed for w in workers) == 0
    assert config.pooled()
    assert caplog.text.count("goes through a pooler") == 1, caplog.text


async def test_a_permission_denied_settlement_is_retried_not_charged_to_the_job(
    dsn: str, schema: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's role loses UPDATE on the jobs table while a handler runs (an operator's
    slip): the completion is refused for the grant, not for the job. It is retried, and once
    the grant is back the job completes on its first attempt (before: it was failed with
    'completion refused by the database: permission denied', an attempt spent)."""
    role, password = f"pgq_rw_{secrets.token_hex(4)}", secrets.token_hex(8)
    names = {"r": sql.Identifier(role), "s": sql.Identifier(schema)}
    job_id = queue.enqueue("q", {})
    finish = asyncio.Event()

    async def handler(ctx: JobContext) -> None:
        await finish.wait()

    caplog.set_level("INFO", logger="pgq.worker")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(  # a password: the embedded server takes no login without one
            sql.SQL("CREATE ROLE {r} LOGIN PASSWORD {p}").format(p=sql.Literal(password), **names)
        )
        try:
            admin.execute(
                sql.SQL(
                    "GRANT USAGE ON SCHEMA {s} TO {r};"
                    " GRANT ALL ON ALL TABLES IN SCHEMA {s} TO {r};"
                    " GRANT ALL ON ALL SEQUENCES IN SCHEMA {s} TO {r};"
                    " GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r}"
                ).format(**names)
            )
            worker = make_worker(
                make_conninfo(dsn, user=role, password=password),
                schema,
                handler,
                lease=timedelta(seconds=6),
            )
            async with running(worker):
                await until(lambda: worker.snapshot().running, what="the job running")
                admin.execute(
                    sql.SQL("REVOKE UPDATE ON ALL TABLES IN SCHEMA {s} FROM {r}").format(**names)
                )
                finish.set()
                await until(
                    lambda: "permission denied" in caplog.text, what="the refused completion"
                )
                await asyncio.sleep(0.5)
                admin.execute(
                    sql.SQL("GRANT UPDATE ON ALL TABLES IN SCHEMA {s} TO {r}").format(**names)
                )
                await until(lambda: worker.snapshot().done == 1, what="the completion")
        finally:
            admin.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(**names))
    job = queue.job(job_id)
    assert (job.status, job.attempts) == ("done", 1)
    assert [e.event for e in queue.history(job_id)] == ["enqueued", "claimed", "completed"]
    assert worker.snapshot().failed == 0


@pytest.mark.slow
def test_the_cli_through_an_unannounced_pgbouncer_says_so_once_and_works(
    bouncer: str,
    schema: str,
    queue: Queue,
) -> None:
    ids = queue.enqueue_many([JobSpec("ops", {"n": i}) for i in range(12)])
    queue.kill(ids)
    env = {k: v for k, v in os.environ.items() if k not in ("PGQ_POOLED", "PGQ_LISTEN_DSN")}
    env.update(PGQ_DSN=bouncer, PGQ_SCHEMA=schema)
    for args in (["requeue", *map(str, ids)], ["kill", *map(str, ids)], ["stats"]):
        done = subprocess.run(
            [sys.executable, "-m", "pgq_cli", *args],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("pgq: warning: "), done.stderr
        assert "goes through a pooler" in lines[0] and "--pooled" in lines[0]
    assert queue.stats()[0].dead == 12
