"""The database a command works on: the group's options (`Settings`, on the click context),
the target found on first use, and bounded sessions on it.

Invariant: every connection a command opens is bounded (`config.connect_options`, and the
statement and lock timeouts of `session_limits`)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import click
import psycopg

from pgq_core import Queue, Target, find_target, ops
from pgq_core.config import connect_options, describe, pooled, schema_name
from pgq_core.defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT
from pgq_core.models import ServerRole
from pgq_core.session import detect_pooler

from .failures import one_line


@dataclass
class Settings:
    """Group options; the target is found (`pgq_core.find_target`: the embedded server
    started and migrated when no DSN is given) on first use."""

    dsn: str | None
    schema: str | None
    #: the operator's --statement-timeout (wins over the role's; 0: none); None: ours unless
    #: the role or database sets one
    statement_timeout: timedelta | None = None
    #: --read-dsn: where the read commands read (a standby); None: the target's DSN
    read_dsn: str | None = None
    _target: Target | None = field(default=None, repr=False)

    def target(self) -> Target:
        if self._target is None:
            self._target = find_target(self.dsn, self.schema)
        return self._target

    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit connection whose connect, statements and lock waits are bounded."""
        target = self.target()
        conn = psycopg.connect(target.dsn, autocommit=True, **connect_options(target.dsn))
        return self._bounded(conn, target.schema)

    def _bounded(self, conn: psycopg.Connection[Any], schema: str) -> psycopg.Connection[Any]:
        try:
            if (line := detect_pooler(conn)) is not None:
                click.echo(f"pgq: warning: {one_line(line)}", err=True)
            if pooled():  # a session setting would stay on a server session others get
                return conn
            Queue(conn, schema).run(
                ops.session_limits(
                    DEFAULT_STATEMENT_TIMEOUT
                    if self.statement_timeout is None
                    else self.statement_timeout,
                    DEFAULT_LOCK_TIMEOUT,
                    force=self.statement_timeout is not None,
                )
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def queue(self) -> Queue:
        return Queue(self.connect(), self.target().schema, owns=True)

    def reader(self) -> Queue:
        """Where a read command reads: the --read-dsn server (a read-only session that never
        asks for the writable host), else the target as `queue`."""
        if self.read_dsn is None:
            return self.queue()
        schema = schema_name(self.schema)
        conn = psycopg.connect(
            self.read_dsn, autocommit=True, **connect_options(self.read_dsn, reader=True)
        )
        conn = self._bounded(conn, schema)
        queue = Queue(conn, schema, owns=True)
        if not pooled():  # a session setting would stay on a server session others get
            try:
                queue.run(ops.read_only_session())
            except BaseException:
                queue.close()
                raise
        return queue

    def read_from(self, queue: Queue) -> ServerRole | None:
        """With --read-dsn, the server `queue` reads (standby or not, its lag); else None."""
        return queue.server_role() if self.read_dsn is not None else None

    def read_display(self) -> str:
        """The name of the server the read commands read (never its password)."""
        return describe(self.read_dsn) if self.read_dsn is not None else self.target().display


def settings(ctx: click.Context) -> Settings:
    obj = ctx.find_object(Settings)
    assert obj is not None
    return obj


def command_name(argv0: str | None = None) -> str:
    """How to run pgq again as this process was run, for a hint to copy: `pgq` when the shell
    finds this very program under that name; else the path it was run as (a virtualenv not on
    PATH), or `python -m pgq_cli` for a module run."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else argv0 or ""
    if not argv0 or os.path.basename(argv0) in ("__main__.py", "-m", "-c"):
        return f"{shlex.quote(sys.executable)} -m pgq_cli"
    found = shutil.which("pgq")
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return "pgq"
    return shlex.quote(argv0)
