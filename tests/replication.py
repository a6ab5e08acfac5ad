"""A real primary and its streaming standby (`pg_basebackup -R`) on 127.0.0.1, made from the
embedded server's binaries: the `pair` fixture of the failover and replica-read tests."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from support import OwnServer, free_port, server_root

from pgq_core import migrate

SCHEMA = "pgq"


class Pair:
    """A primary and its streaming standby, each on its own port of 127.0.0.1; the primary a
    copy of `template`'s data directory (stopped), or a new one when there is none."""

    def __init__(self, root: Path, template: OwnServer | None = None) -> None:
        for name in ("a", "b"):
            (root / name).mkdir()
        self.primary = OwnServer(root / "a", port=free_port(), copy_of=template)
        self.primary.start()
        self.standby = OwnServer(root / "b", port=free_port(), standby_of=self.primary)
        self.standby.start()

    @property
    def dsn(self) -> str:
        """Both hosts, the writable one chosen by libpq (as a client of a cluster has it)."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in (self.primary, self.standby))
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def caught_up(self) -> None:
        """Returns once the standby has replayed everything the primary wrote so far."""
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_catalog.pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            lsn = row[0]
        deadline = time.monotonic() + 30
        with psycopg.connect(self.standby.dsn, autocommit=True) as conn:
            while True:
                behind = conn.execute(
                    "SELECT pg_catalog.pg_last_wal_replay_lsn() < %s::pg_lsn", [lsn]
                ).fetchone()
                if behind is not None and not behind[0]:
                    return
                assert time.monotonic() < deadline, "the standby never caught up"
                time.sleep(0.02)

    def fail_over(self) -> None:
        """The primary dies; the standby (started again if it was stopped) is promoted."""
        self.primary.stop("immediate")
        # already running: pg_ctl start says so and fails
        with contextlib.suppress(subprocess.CalledProcessError):
            self.standby.start()
        self.standby.promote()

    def stop(self) -> None:
        for server in (self.primary, self.standby):
            with contextlib.suppress(subprocess.CalledProcessError):  # stopped already
                server.stop("immediate")


def _prepare(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """The schema migrated, with an `effects` side table."""
    migrate(conn, SCHEMA)
    conn.execute(
        sql.SQL(
            "CREATE TABLE {}.effects (job_id bigint PRIMARY KEY, worker text,"
            " fence bigint NOT NULL)"
        ).format(sql.Identifier(SCHEMA))
    )


_template: OwnServer | None = None


def template() -> OwnServer:
    """A stopped primary, prepared (`_prepare`), that every pair of this process copies:
    initdb and migrating run once per process instead of once per test."""
    global _template
    if _template is None:
        root = server_root("pgqt")
        atexit.register(shutil.rmtree, root, True)  # if the session's end never came
        server = OwnServer(root)  # on its socket only
        server.start()
        try:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                _prepare(conn)
        finally:
            server.stop("fast")  # a clean shutdown: a copy starts without recovery
        _template = server
    return _template


def remove_template() -> None:
    """At the session's end (conftest): the template's directory goes (an xdist worker's exit
    does not always run atexit, and the directory is in memory)."""
    global _template
    if _template is not None:
        shutil.rmtree(_template.root, ignore_errors=True)
        _template = None


@contextlib.contextmanager
def running_pair() -> Iterator[Pair]:
    """A primary (its schema migrated, with an `effects` side table) and its standby, stopped
    and removed afterwards: what each module's `pair` fixture yields."""
    if os.environ.get("PGQ_TEST_DSN"):
        pytest.skip("PGQ_TEST_DSN is set: these tests make their own primary and standby from "
                    "the embedded server's binaries, and run with those only")
    source = template()
    root = server_root("pgqf")
    pair = Pair(root, source)
    try:
        yield pair
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)


def wait(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)
