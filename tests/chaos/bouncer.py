"""A PgBouncer in transaction mode in front of a server, for the fleet (`fleet.py`).

It listens on a Unix socket only, in a private temporary directory (0700, socket 0600), and
trusts whoever reaches that socket: the fleet's own processes. So a server that takes a
password (the embedded one does) stays as private behind the pool as it is without it. The
server's password goes into the config file (0600, deleted at the end) and nowhere else.

As root it runs in a user namespace (`unshare --user`): PgBouncer refuses to run as root.
`PGQ_PGBOUNCER` names the binary when it is not `pgbouncer` on PATH or /usr/sbin/pgbouncer."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgq_core import PgqError

#: The pool a deployment in front of this server would run, and why:
#: - default_pool_size 8: server connections per database and user. The server has 2 cores;
#:   pgq's statements are short, but a handler's transaction (effect + completion) keeps its
#:   server connection across client round trips, so about 4 per core keep both cores busy
#:   without queueing work inside PostgreSQL;
#: - reserve_pool_size 2 after 3 s: a client that waited 3 s gets one of 2 more (a frozen
#:   client holding a server connection mid-transaction must not stall everyone);
#: - max_db_connections 10: the hard cap on the server (8 + 2);
#: - idle_transaction_timeout 30 s: a client idle inside a transaction for longer than a lease
#:   (a stopped or hung process) loses its server connection, so its transaction rolls back and
#:   its row locks go (the reaper skips locked rows);
#: - query_wait_timeout 120 s (PgBouncer's default): a client waiting that long for a server
#:   connection gets an error instead of waiting forever;
#: - max_client_conn 1000: each worker holds 2 pooled clients plus one per handler thread that
#:   opens its own (up to its concurrency).
POOL_SETTINGS: dict[str, Any] = {
    "pool_mode": "transaction",
    "default_pool_size": 8,
    "reserve_pool_size": 2,
    "reserve_pool_timeout": 3,
    "max_db_connections": 10,
    "idle_transaction_timeout": 30,
    "query_wait_timeout": 120,
    "max_client_conn": 1000,
    "server_idle_timeout": 600,
    "server_lifetime": 3600,
}
DATABASE = "pgq"
PORT = 6432
#: Numbers and names to read from `SHOW POOLS` / `SHOW STATS` (the admin console speaks only
#: the simple query protocol: client-side binding cursors).
SHOW_POOLS = "SHOW POOLS"
SHOW_STATS = "SHOW STATS"


def executable() -> str:
    """The pgbouncer binary, or PgqError saying how to get it."""
    given = os.environ.get("PGQ_PGBOUNCER")
    found = given if given else shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not (os.path.isfile(found) and os.access(found, os.X_OK)):
        raise PgqError(
            f"pgbouncer not found ({'PGQ_PGBOUNCER=' + given if given else 'not on PATH'}): "
            "the fleet runs its workers through PgBouncer (Debian: apt-get install pgbouncer)"
        )
    return found


def version(exe: str) -> str:
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    return (done.stdout.splitlines() or ["?"])[0].strip()


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Bouncer:
    """A running PgBouncer: the DSN clients use (no password in it), its admin DSN, settings."""

    dsn: str
    admin_dsn: str
    settings: dict[str, Any]
    version: str
    log: Path

    def show(self, command: str) -> list[dict[str, Any]]:
        """Rows of an admin console command (SHOW POOLS, SHOW STATS), as dicts."""
        with psycopg.connect(
            self.admin_dsn, autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as conn:
            cur = conn.execute(command)
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@contextmanager
def pgbouncer(
    server_dsn: str, settings: dict[str, Any] | None = None, exe: str | None = None
) -> Iterator[Bouncer]:
    """Start PgBouncer in front of `server_dsn`; stopped and its directory deleted on exit."""
    exe = exe or executable()
    conf = dict(POOL_SETTINGS if settings is None else settings)
    server = conninfo_to_dict(server_dsn)
    user = str(server.get("user") or os.environ.get("PGUSER") or "postgres")
    target = {k: server[k] for k in ("host", "port", "dbname", "user", "password") if server.get(k)}
    target.setdefault("host", "/var/run/postgresql")
    target.setdefault("user", user)
    home = Path(tempfile.mkdtemp(prefix="pgq-bouncer-"))  # 0700
    try:
        (home / "users.txt").write_text(f'"{user}" ""\n')
        ini = home / "pgbouncer.ini"
        ini.touch(mode=0o600)
        lines = [
            "[databases]",
            f"{DATABASE} = " + " ".join(f"{k}={_quote(str(v))}" for k, v in target.items()),
            "",
            "[pgbouncer]",
            "listen_addr =",
            f"listen_port = {PORT}",
            f"unix_socket_dir = {home}",
            "unix_socket_mode = 0600",
            "auth_type = trust",
            f"auth_file = {home / 'users.txt'}",
            f"admin_users = {user}",
            "ignore_startup_parameters = extra_float_digits",
            f"logfile = {home / 'pgbouncer.log'}",
            f"pidfile = {home / 'pgbouncer.pid'}",
            *(f"{k} = {v}" for k, v in conf.items()),
        ]
        ini.write_text("\n".join(lines) + "\n")
        argv = [exe, str(ini)]
        if os.geteuid() == 0:
            argv = ["unshare", "--user", *argv]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        common: dict[str, str | int] = {
            "host": str(home), "port": PORT, "user": user, "connect_timeout": 10,
        }
        bouncer = Bouncer(
            dsn=make_conninfo("", dbname=DATABASE, **common),
            admin_dsn=make_conninfo("", dbname="pgbouncer", **common),
            settings=conf,
            version=version(exe),
            log=home / "pgbouncer.log",
        )
        try:
            _wait_ready(bouncer, proc)
            yield bouncer
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _wait_ready(bouncer: Bouncer, proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(bouncer.dsn, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                log = bouncer.log.read_text() if bouncer.log.exists() else ""
                last = (log.strip().splitlines() or [str(exc).strip()])[-1]
                raise PgqError(f"pgbouncer did not start: {last}") from None
            time.sleep(0.1)
