"""Shared rounds under process faults: producer processes of 16 threads sharing one queue,
SIGKILLed, SIGSTOPped and facing a server that crashes and restarts (`pg_ctl stop -m
immediate`). Whatever happens, every enqueue that returned an id has its job in the table
(nothing acknowledged is lost), no job is in it twice (a round of unknown outcome is never
sent again behind its callers' backs), and rounds were shared."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from support import OwnServer

from pgq_core import migrate

PRODUCER = """
import sys, threading, time
import psycopg
from pgq_core import Queue
dsn, schema, start, log_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
THREADS = 16
queue = None
while queue is None:
    try:
        queue = Queue.connect(dsn, schema)
    except psycopg.Error:
        time.sleep(0.1)

def produce(t):
    with open(f"{log_dir}/{start}-{t}.log", "a", buffering=1) as log:
        n = start + t
        while True:
            try:
                job_id = queue.enqueue("c", {"n": n})
                log.write(f"ok {n} {job_id}\\n")  # written once the call returned: committed
            except psycopg.Error as exc:
                log.write(f"err {n} {type(exc).__name__}\\n")  # outcome unknown
                time.sleep(0.05)
            n += THREADS

for t in range(THREADS):
    threading.Thread(target=produce, args=(t,), daemon=True).start()
threading.Event().wait()
"""


def producer(server: OwnServer, start: int, logs: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", PRODUCER, server.dsn, "pgq", str(start), str(logs)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def jobs(server: OwnServer) -> list[tuple[int, int, int]]:
    """(id, n, writing transaction) of every job."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, (payload->>'n')::bigint, xmin::text::bigint FROM {}.jobs").format(
                sql.Identifier("pgq")
            )
        ).fetchall()
    return [(int(r[0]), int(r[1]), int(r[2])) for r in rows]


def count(server: OwnServer) -> int:
    for _ in range(100):
        try:
            return len(jobs(server))
        except psycopg.OperationalError:
            time.sleep(0.1)
    raise AssertionError("the server did not come back")


def grow(server: OwnServer, by: int) -> None:
    """Wait until `by` more jobs are in (the producers are making progress)."""
    target = count(server) + by
    deadline = time.monotonic() + 60
    while count(server) < target:
        assert time.monotonic() < deadline, "the producers made no progress"
        time.sleep(0.05)


@pytest.mark.slow
def test_shared_rounds_lose_nothing_acknowledged_and_write_nothing_twice(
    own_server: OwnServer, tmp_path: Path
) -> None:
    with psycopg.connect(own_server.dsn, autocommit=True) as conn:
        migrate(conn, "pgq")
    logs = tmp_path / "logs"
    logs.mkdir()
    first = producer(own_server, 0, logs)
    second = producer(own_server, 10_000_000, logs)
    third: subprocess.Popen[bytes] | None = None
    try:
        grow(own_server, 2000)
        first.send_signal(signal.SIGKILL)  # mid-round, its callers' outcomes unknown
        grow(own_server, 1000)
        second.send_signal(signal.SIGSTOP)  # a producer paused mid-round, then resumed
        third = producer(own_server, 20_000_000, logs)
        grow(own_server, 1000)
        second.send_signal(signal.SIGCONT)
        own_server.stop("immediate")  # the server crashes under them, and comes back
        own_server.start()
        grow(own_server, 2000)
        own_server.stop("fast")
        own_server.start()
        grow(own_server, 2000)
    finally:
        for proc in (first, second, third):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(30)
    rows = jobs(own_server)
    by_n = {n: job_id for job_id, n, _ in rows}
    assert len(by_n) == len(rows), "no job was written twice"
    acknowledged: dict[int, int] = {}
    failed = 0
    for path in logs.iterdir():
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) == 3 and words[0] == "ok":
                acknowledged[int(words[1])] = int(words[2])
            elif len(words) == 3 and words[0] == "err":
                failed += 1
    assert acknowledged, "the producers enqueued"
    lost = {n: i for n, i in acknowledged.items() if by_n.get(n) != i}
    assert not lost, f"acknowledged jobs missing or under another id: {list(lost.items())[:5]}"
    assert failed, "the faults reached some callers"
    transactions = {xid for _, _, xid in rows}
    assert len(transactions) < len(rows) / 2, "rounds were shared"
