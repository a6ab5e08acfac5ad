"""A Patroni failover cluster on 127.0.0.1, owned by this process: one etcd, two PostgreSQL 15
nodes, free ports, a temporary directory.

Invariants:
- Every process of the cluster (etcd, each Patroni, each postgres and its children) runs with
  its working directory under `Cluster.base`; `close()` kills every such process and removes
  the directory, and a watchdog process does the same if this process dies without closing.
- This process is a child subreaper while the cluster runs, and reaps the postgres processes
  Patroni detaches: otherwise a killed postmaster stays a zombie that Patroni thinks alive.
- `kill_leader()` kills the leader's Patroni and every process of its server with SIGKILL, as
  a crashed machine would; nothing of it runs on afterwards.
- `restart_node(n)` returns once node n is a streaming replica caught up with the leader (in
  synchronous mode: the leader's synchronous standby), so the next failover can go back.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

#: The PostgreSQL the nodes run (Debian's postgresql-15), and Patroni with the system Python
#: that has its psycopg2 (Debian's `patroni` package), and etcd (`etcd-server`).
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PATRONI = Path("/usr/bin/patroni")
SYSTEM_PYTHON = Path("/usr/bin/python3")
ETCD = "etcd"
#: The OS user the nodes run as when this process is root (postgres refuses to run as root).
PG_OS_USER = "postgres"
SCOPE = "pgq-failover"
NODES = 2

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
#: Children of ours that this module reaps: what Patroni starts and may leave orphaned.
_REAPED_NAMES = frozenset(
    {"postgres", "pg_rewind", "pg_basebackup", "pg_ctl", "initdb", "pg_controldata"}
)

#: The watchdog: a process in its own session that waits for EOF on its stdin (this process's
#: end of the pipe closes when it exits, however it exits). Unless told "closed" first, it
#: kills every process working under the cluster's directory, then removes the directory.
_WATCHDOG = r"""
import os, shutil, signal, sys, time
base = sys.argv[1]
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
said = sys.stdin.read()
if "closed" in said:
    sys.exit(0)
def ours():
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cwd = os.readlink(f"/proc/{name}/cwd")
            except OSError:
                continue
            if cwd == base or cwd.startswith(base + "/"):
                found.append(int(name))
    return found
for _ in range(50):
    pids = ours()
    if not pids:
        break
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.1)
shutil.rmtree(base, ignore_errors=True)
"""


class ClusterError(RuntimeError):
    """The cluster did not reach the state asked for in time (the message says which)."""


def missing() -> str | None:
    """Why a cluster cannot start on this machine (one line), or None when it can."""
    if not shutil.which(ETCD):
        return "etcd is not installed (apt-get install etcd-server)"
    if not PATRONI.exists():
        return "patroni is not installed (apt-get install patroni)"
    if not SYSTEM_PYTHON.exists():
        return f"{SYSTEM_PYTHON} (Patroni's Python) is missing"
    if not (PG_BIN / "postgres").exists():
        return f"PostgreSQL 15 is not installed ({PG_BIN})"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(PG_OS_USER)
        except KeyError:
            return f"there is no {PG_OS_USER!r} OS user to run PostgreSQL as"
    if not sys.platform.startswith("linux"):
        return "the cluster needs Linux (a child subreaper, /proc)"
    return None


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports free on 127.0.0.1 now, below the ephemeral range: a client's
    outgoing connection can never take one while its node is down (the kernel picks those
    from the ephemeral range), so a node restarted on its port finds it free."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = list(range(max(1024, low - 12_000), low))
    random.shuffle(candidates)
    held: list[socket.socket] = []
    try:
        for port in candidates:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
            if len(held) == n:
                return [h.getsockname()[1] for h in held]
        raise ClusterError(f"fewer than {n} free ports below {low}")
    finally:
        for h in held:
            h.close()


def _prctl(option: int, value: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if option == _PR_GET_CHILD_SUBREAPER:
        out = ctypes.c_int(0)
        if libc.prctl(option, ctypes.byref(out), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_GET_CHILD_SUBREAPER) failed")
        return out.value
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl failed")
    return 0


def _stat(pid: int) -> tuple[str, str, int] | None:
    """(name, state, parent pid) of a process, from /proc; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    state, ppid = text[text.rindex(")") + 2 :].split()[:2]
    return name, state, int(ppid)


def _pids() -> Iterator[int]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def _children(parent: int) -> list[int]:
    return [pid for pid in _pids() if (st := _stat(pid)) is not None and st[2] == parent]


def _own_children() -> list[int]:
    """This process's children (adopted orphans included), from each thread's `children`
    list; a scan of every process where the kernel has no such list."""
    me = os.getpid()
    found: list[int] = []
    listed = False
    for task in Path(f"/proc/{me}/task").iterdir():
        try:
            found.extend(int(pid) for pid in (task / "children").read_text().split())
            listed = True
        except (OSError, ValueError):
            continue
    return found if listed else _children(me)


#: /dev/shm holds the cluster when it has this much room: etcd's and PostgreSQL's fsyncs cost
#: nothing there, so a busy disk cannot stall Patroni's leader key into a failover of its own.
SCRATCH_MIN_FREE = 2 << 30


def _scratch() -> str | None:
    """Where the cluster's directory goes: /dev/shm when it has room, else the temp dir."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if st.f_bavail * st.f_frsize >= SCRATCH_MIN_FREE else None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] != "Z"


def _http_status(url: str, timeout: float = 1.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


@dataclass
class Node:
    """One Patroni node: its ports, its directory, and its Patroni process while it runs."""

    index: int
    pg_port: int
    api_port: int
    home: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def postmaster(self) -> int | None:
        """The pid of its postmaster, from postmaster.pid, if that process is alive."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first)
        except (OSError, ValueError):
            return None
        st = _stat(pid)
        return pid if st is not None and st[0] == "postgres" and st[1] != "Z" else None


@dataclass(frozen=True)
class Promotion:
    """A failover seen from a client: which node took writes, when, on which timeline."""

    node: int
    seconds: float  # from the kill to the first connection that accepted writes
    at: float  # time.time() when that connection was made
    timeline: int


@dataclass
class Cluster:
    """One etcd and two Patroni nodes on 127.0.0.1; a context manager (start, close)."""

    synchronous: bool = False
    say: Callable[[str], None] = field(default=lambda message: None)
    ttl: int = 5
    loop_wait: int = 1
    retry_timeout: int = 2
    base: Path = field(init=False)
    nodes: list[Node] = field(init=False, default_factory=list)
    started_in: float = field(init=False, default=0.0)
    killed_at: float = field(init=False, default=0.0)
    killed: int | None = field(init=False, default=None)
    #: how the last node restarted rejoined: "pg_rewind", "a new base backup" or "streaming
    #: alone" (its WAL had not diverged)
    last_rejoin: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self._etcd: subprocess.Popen[bytes] | None = None
        self._etcd_port = 0
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._reaping = threading.Event()
        self._reaper: threading.Thread | None = None
        self._foreign: set[int] = set()
        self._was_subreaper = 0
        self._user: pwd.struct_passwd | None = None
        self._closed = False

    # ---- addresses
    @property
    def dsn(self) -> str:
        """The multi-host DSN clients use: whichever node takes writes."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def node_dsn(self, n: int) -> str:
        return self.nodes[n].dsn

    # ---- life cycle
    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, timeout: float = 90.0) -> None:
        """etcd, then node 0 as the leader, then node 1 as its replica (sync standby)."""
        reason = missing()
        if reason:
            raise ClusterError(reason)
        began = time.monotonic()
        self._foreign = set(_own_children())
        self._was_subreaper = _prctl(_PR_GET_CHILD_SUBREAPER)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        self._reaper = threading.Thread(target=self._reap_loop, daemon=True, name="pgq-reaper")
        self._reaper.start()
        self.base = Path(tempfile.mkdtemp(prefix="pgq-cluster-", dir=_scratch())).resolve()
        self._watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self.base)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if os.geteuid() == 0:
            self._user = pwd.getpwnam(PG_OS_USER)
            os.chown(self.base, self._user.pw_uid, self._user.pw_gid)
        ports = free_ports(2 + 2 * NODES)
        self._etcd_port = ports[0]
        self._start_etcd(ports[0], ports[1], began + timeout)
        for i in range(NODES):
            home = self.base / f"node{i}"
            home.mkdir()
            self._own(home)
            node = Node(i, pg_port=ports[2 + 2 * i], api_port=ports[3 + 2 * i], home=home)
            self.nodes.append(node)
            (home / "patroni.yml").write_text(json.dumps(self._config(node), indent=1))
            self._own(home / "patroni.yml")
        self._start_node(self.nodes[0])
        self._wait(
            lambda: self._writable(0) > 0,
            began + timeout,
            "node0 to bootstrap as leader",
            proc=self.nodes[0].proc,
            log=self.nodes[0].home / "patroni.log",
        )
        self._start_node(self.nodes[1])
        self._wait_replica(1, 0, began + timeout)
        self.started_in = time.monotonic() - began
        self.say(
            f"cluster up in {self.started_in:.1f}s: etcd :{self._etcd_port}, "
            + ", ".join(f"{n.name} :{n.pg_port}" for n in self.nodes)
            + (" (synchronous)" if self.synchronous else " (asynchronous)")
        )

    def close(self) -> None:
        """Kill every process of the cluster and remove its directory; idempotent."""
        if self._closed:
            return
        self._closed = True
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
        if self._etcd is not None and self._etcd.poll() is None:
            self._etcd.kill()
        if hasattr(self, "base"):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                left = self._processes()
                if not left:
                    break
                for pid in left:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.05)
        for proc in [*(n.proc for n in self.nodes), self._etcd]:
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        self._reap()
        self._reaping.set()
        if self._reaper is not None:
            self._reaper.join(5)
        with contextlib.suppress(OSError):
            _prctl(_PR_SET_CHILD_SUBREAPER, self._was_subreaper)
        if hasattr(self, "base"):
            shutil.rmtree(self.base, ignore_errors=True)
        if self._watchdog is not None:
            with contextlib.suppress(OSError, ValueError):
                assert self._watchdog.stdin is not None
                self._watchdog.stdin.write(b"closed")
                self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(10)

    # ---- what the tests and the bench do
    def leader(self) -> int | None:
        """The node Patroni runs as the primary holding the leader key, if any."""
        for node in self.nodes:
            running = node.proc is not None and node.proc.poll() is None
            if running and _http_status(f"{node.api}/primary") == 200:
                return node.index
        return None

    def kill_leader(self, lag: float = 0.0) -> int:
        """SIGKILL the leader's Patroni, then its postmaster and all the server's processes
        (stopped first, so none runs on while the others die); returns the node.

        `lag` > 0: the leader's WAL senders are stopped that many seconds before the crash, so
        the standby is that far behind when the leader dies (as over a slow link): what the
        leader commits meanwhile without waiting for the standby is lost in the failover."""
        n = self.leader()
        if n is None:
            raise ClusterError("no leader to kill")
        node = self.nodes[n]
        pm = node.postmaster()
        assert node.proc is not None
        if lag > 0 and pm is not None:
            senders = [pid for pid in _children(pm) if b"walsender" in _cmdline(pid)]
            for pid in senders:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            time.sleep(lag)
        victims = [pm, *_children(pm)] if pm is not None else []
        node.proc.send_signal(signal.SIGSTOP)
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        self.killed_at = time.monotonic()
        self.killed = n
        node.proc.kill()
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        node.proc.wait(10)
        self._wait(
            lambda: not self._processes(node.home),
            time.monotonic() + 10,
            f"{node.name}'s processes to die",
        )
        return n

    def wait_for_promotion(self, timeout: float = 60.0) -> Promotion:
        """Wait until the node other than the killed one accepts writes."""
        if self.killed is None:
            raise ClusterError("no node was killed")
        other = next(n.index for n in self.nodes if n.index != self.killed)
        deadline = time.monotonic() + timeout
        while True:
            tl = self._writable(other)
            if tl:
                now = time.monotonic()
                return Promotion(other, now - self.killed_at, time.time(), tl)
            if time.monotonic() > deadline:
                raise ClusterError(f"node{other} took no writes within {timeout:g}s of the kill")
            time.sleep(0.05)

    def restart_node(self, n: int, timeout: float = 90.0) -> float:
        """Start node n's Patroni again; returns the seconds until it is a caught-up replica
        of the leader (pg_rewind first if its timeline diverged)."""
        node = self.nodes[n]
        if node.proc is not None and node.proc.poll() is None:
            raise ClusterError(f"{node.name} is running")
        leader = self.leader()
        if leader is None or leader == n:
            raise ClusterError(f"no other leader for {node.name} to follow")
        log = node.home / "patroni.log"
        offset = log.stat().st_size if log.exists() else 0
        began = time.monotonic()
        self._start_node(node)
        self._wait_replica(n, leader, began + timeout)
        took = time.monotonic() - began
        with log.open("rb") as f:
            f.seek(offset)
            said = f.read().decode(errors="replace")
        if "Removing data directory" in said:
            self.last_rejoin = "a new base backup"
        elif "running pg_rewind" in said:
            self.last_rejoin = "pg_rewind"
        else:
            self.last_rejoin = "streaming alone"
        return took

    def timeline(self, n: int) -> int:
        """The timeline of node n's current WAL position (a primary's)."""
        with psycopg.connect(self.nodes[n].dsn, autocommit=True, connect_timeout=2) as conn:
            return self._timeline(conn)

    # ---- internals
    def _own(self, path: Path) -> None:
        if self._user is not None:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _env(self, home: Path) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}

    def _popen(self, argv: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            self._own(log)
            kwargs: dict[str, Any] = {}
            if self._user is not None:
                kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid,
                          "extra_groups": []}  # fmt: skip
            return subprocess.Popen(
                argv,
                cwd=cwd,
                env=self._env(cwd),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **kwargs,
            )

    def _start_etcd(self, client: int, peer: int, deadline: float) -> None:
        home = self.base / "etcd"
        home.mkdir()
        self._own(home)
        exe = shutil.which(ETCD)
        assert exe is not None
        self._etcd = self._popen(
            [exe, "--name", "etcd0", "--data-dir", str(home / "data"),
             "--listen-client-urls", f"http://127.0.0.1:{client}",
             "--advertise-client-urls", f"http://127.0.0.1:{client}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"etcd0=http://127.0.0.1:{peer}",
             "--initial-cluster-state", "new", "--log-level", "warn"],
            home, home / "etcd.log",
        )  # fmt: skip
        self._wait(
            lambda: _http_status(f"http://127.0.0.1:{client}/health") == 200,
            deadline,
            "etcd to answer /health",
            proc=self._etcd,
            log=home / "etcd.log",
        )

    def _config(self, node: Node) -> dict[str, Any]:
        """Patroni's configuration (JSON, which is YAML) for one node."""
        parameters: dict[str, Any] = {
            "wal_log_hints": "on",
            "wal_retrieve_retry_interval": "500ms",
            "max_connections": 200,
            "max_wal_senders": 10,
            "max_replication_slots": 10,
            "hot_standby": "on",
        }
        if self.synchronous:
            parameters["synchronous_commit"] = "on"
        return {
            "scope": SCOPE,
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{node.api_port}",
                "connect_address": f"127.0.0.1:{node.api_port}",
            },
            "etcd3": {"hosts": f"127.0.0.1:{self._etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": self.ttl,
                    "loop_wait": self.loop_wait,
                    "retry_timeout": self.retry_timeout,
                    # a replica is promoted however far behind (the scenario loses commits)
                    "maximum_lag_on_failover": 1 << 30,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": parameters,
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data_dir),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.home / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                    "rewind": {"username": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                "parameters": {
                    "unix_socket_directories": str(node.home),
                    "logging_collector": "on",
                    "log_directory": str(node.home / "pglog"),
                    "log_filename": "postgresql.log",
                    "log_line_prefix": "%m [%p] ",
                },
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True,
            },
        }

    def _start_node(self, node: Node) -> None:
        node.starts += 1
        node.proc = self._popen(
            [str(SYSTEM_PYTHON), str(PATRONI), str(node.home / "patroni.yml")],
            node.home,
            node.home / "patroni.log",
        )

    def _writable(self, n: int) -> int:
        """Node n's timeline if it accepts writes now, else 0."""
        try:
            with psycopg.connect(
                self.nodes[n].dsn,
                autocommit=True,
                connect_timeout=1,
                target_session_attrs="read-write",
            ) as conn:
                return self._timeline(conn)
        except psycopg.Error:
            return 0

    @staticmethod
    def _timeline(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()
        assert row is not None
        return int(str(row[0])[:8], 16)

    def _wait_replica(self, n: int, leader: int, deadline: float) -> None:
        """Node n streams from the leader, has flushed what the leader had written when it
        started streaming, and (synchronous mode) is the leader's synchronous standby."""
        node = self.nodes[n]
        what = f"{node.name} to stream from node{leader}" + (
            " as its synchronous standby" if self.synchronous else ""
        )
        self._wait(lambda: self._caught_up(n, leader), deadline, what, proc=node.proc,
                   log=node.home / "patroni.log")  # fmt: skip

    def _caught_up(self, n: int, leader: int) -> bool:
        node = self.nodes[n]
        if _http_status(f"{node.api}/replica") != 200:
            return False
        if self.synchronous and _http_status(f"{node.api}/sync") != 200:
            return False
        try:
            with psycopg.connect(self.nodes[leader].dsn, autocommit=True, connect_timeout=1) as c:
                row = c.execute(
                    "SELECT r.state, r.sync_state, r.flush_lsn >= pg_current_wal_lsn() "
                    "FROM pg_stat_replication r WHERE r.application_name = %s",
                    [node.name],
                ).fetchone()
        except psycopg.Error:
            return False
        if row is None or row[0] != "streaming":
            return False
        if self.synchronous and row[1] != "sync":
            return False
        return bool(row[2])

    def _wait(
        self,
        ready: Callable[[], bool],
        deadline: float,
        what: str,
        proc: subprocess.Popen[bytes] | None = None,
        log: Path | None = None,
    ) -> None:
        while not ready():
            if proc is not None and proc.poll() is not None:
                raise ClusterError(f"waiting for {what}: it exited ({proc.returncode})"
                                   + _tail(log))  # fmt: skip
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}" + _tail(log))
            time.sleep(0.1)

    def _processes(self, under: Path | None = None) -> list[int]:
        """Live processes whose working directory is under `under` (default: the cluster's)."""
        root = str(under or self.base)
        found = []
        for pid in _pids():
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if (cwd == root or cwd.startswith(root + "/")) and _alive(pid):
                found.append(pid)
        return found

    def _reap(self) -> None:
        """Reap zombie children Patroni left us (postgres and its tools), never another's."""
        for pid in _own_children():
            st = _stat(pid)
            if (
                st is not None
                and st[1] == "Z"
                and st[0] in _REAPED_NAMES
                and pid not in self._foreign
            ):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def _reap_loop(self) -> None:
        while not self._reaping.wait(0.1):
            self._reap()


def _tail(log: Path | None, lines: int = 12) -> str:
    if log is None:
        return ""
    try:
        text = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return "; last lines of " + log.name + ":\n" + "\n".join(text)
