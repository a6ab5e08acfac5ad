"""The peer side of `pgq bench --same-resources --peers`: PgQueuer at equal resources.

One `python -m pgq_bench.pgqueuer_side` subprocess per run (`pgqueuer_side.py` says how it
drives PgQueuer), as pgq's side is one `pgq worker` subprocess: C consumers in one process.
Its jobs are enqueued first (unmeasured, one batch) in a throwaway schema holding PgQueuer's
own tables. Timed like pgq: *drain* by the server's clock from PgQueuer's own log, the first
`picked` row to the last `successful` one (each row's `created` is its transaction's start);
*wall* from starting the process to its exit. Every job must be logged `successful` and gone
from the queue table, or the run fails.

PgQueuer and asyncpg come with the `bench` extra (`pip install 'pgq-fence[bench]'`); without
them this side is skipped with one line, and the rest of the run goes on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import psycopg
from psycopg import sql

from pgq_core import PgqError

from .common import CONNECT_TIMEOUT, payload
from .dbwork import DbWork

#: What the side needs installed; and what its versions line names (uvloop: PgQueuer's loop).
PEER_MODULES = ("pgqueuer", "asyncpg")
VERSIONED = (*PEER_MODULES, "uvloop")
PEER_NAME = "pgqueuer"
#: PgQueuer's default `batch_size` (QueueManager.run), also what its own benchmark uses.
PEER_BATCH = 10
PROCESS_TIMEOUT = 1800.0
OUTPUT_TAIL = 5
#: The bench's bookkeeping on PgQueuer's tables: jobs logged successful, jobs enqueued, jobs
#: still in the queue table, and the drain's span by the server clock.
PEER_TALLY = """
SELECT count(*) FILTER (WHERE status = 'successful'),
       count(*) FILTER (WHERE status = 'queued'),
       (SELECT count(*) FROM {s}.pgqueuer),
       extract(epoch FROM max(created) FILTER (WHERE status = 'successful')
                        - min(created) FILTER (WHERE status = 'picked'))
  FROM {s}.pgqueuer_log"""


def missing_peer() -> str | None:
    """Why the PgQueuer side cannot run here, in one line; None when it can."""
    for name in PEER_MODULES:
        if importlib.util.find_spec(name) is None:
            return (
                f"PgQueuer side skipped: {name} is not installed "
                "(pip install 'pgq-fence[bench]' installs PgQueuer and asyncpg)"
            )
    return None


def peer_versions() -> dict[str, str]:
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "?"
    return versions


def fill_peer(dsn: str, schema: str, jobs: int, payload_bytes: int) -> None:
    """PgQueuer's schema and N jobs (payload: the same JSON text pgq's jobs carry, as bytes)."""
    from .pgqueuer_side import install_and_fill, run_loop

    payloads = [json.dumps(payload(payload_bytes, n)).encode() for n in range(jobs)]

    async def fill() -> float:
        await install_and_fill(dsn, schema, payloads)
        return 0.0

    run_loop(fill())
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}.pgqueuer").format(sql.Identifier(schema)))


def peer_command(schema: str, consumers: int, batch: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pgq_bench.pgqueuer_side",
        "--schema",
        schema,
        "--consumers",
        str(consumers),
        "--batch",
        str(batch),
    ]


def drain_peer(
    dsn: str, schema: str, consumers: int, jobs: int, meter: DbWork | None = None
) -> dict[str, Any]:
    """One PgQueuer process with C consumers drains the queue and exits; its figures (the same
    keys as a `same_resources.Run`'s)."""
    command = peer_command(schema, consumers, PEER_BATCH)
    env = {**os.environ, "PGQ_DSN": dsn}
    metered = meter.read() if meter else None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        try:
            exited = subprocess.run(
                command, env=env, stdout=out, stderr=err, timeout=PROCESS_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            raise PgqError(
                f"PgQueuer ({consumers} consumers) still running after "
                f"{PROCESS_TIMEOUT:.0f}s; killed"
            ) from None
        wall = time.perf_counter() - t0
        db_work = meter.per_job(metered, jobs) if meter and metered else None
        out.seek(0)
        err.seek(0)
        lines = out.read().decode(errors="replace").strip().splitlines()
        if exited.returncode != 0 or not lines:
            tail = err.read().decode(errors="replace").strip().splitlines()[-OUTPUT_TAIL:]
            raise PgqError(
                f"PgQueuer ({consumers} consumers) exited with {exited.returncode}: "
                f"{' | '.join(tail) or 'no output'}"
            )
    own = json.loads(lines[-1])
    with psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
        row = conn.execute(sql.SQL(PEER_TALLY).format(s=sql.Identifier(schema))).fetchone()
    assert row is not None
    done, enqueued, left, span = int(row[0]), int(row[1]), int(row[2]), float(row[3] or 0.0)
    if done != jobs or enqueued != jobs or left:
        raise PgqError(
            f"PgQueuer at concurrency {consumers}: {done} of {enqueued} jobs logged successful, "
            f"{left} left in its queue table, expected all {jobs} done"
        )
    return {
        "side": PEER_NAME,
        "concurrency": consumers,
        "jobs": jobs,
        "done": done,
        "drain_seconds": span,
        "wall_seconds": wall,
        "drain_rate": jobs / span if span > 0 else 0.0,
        "wall_rate": jobs / wall if wall > 0 else 0.0,
        "consumers": consumers,
        "processes": 1,
        "claim": PEER_BATCH,
        "loop": own["loop"],
        "client_seconds": own["seconds"],
        "command": " ".join(["python", *command[1:]]),
        "timed_by": "server clock: first 'picked' to last 'successful' row of pgqueuer_log",
        **({"db_work": db_work} if db_work else {}),
    }
