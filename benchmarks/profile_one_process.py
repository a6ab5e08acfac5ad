"""Where one process's drain goes: statement execution against everything else, per job.

python benchmarks/profile_one_process.py DSN [JOBS] [CONCURRENCY] [sync|async]

DSN must reach a superuser on a throwaway server started with
`-c shared_preload_libraries=pg_stat_statements`. For the baseline (C threads of the baseline's SQL)
and for one `pgq worker --concurrency C --burst` process it prints jobs/s, wall time per job
and each statement's execution time per job: what is left of the wall time is commits, round
trips and the client's own work. The statistics are server-wide; run on a quiet server.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgq_bench import (
    BASELINE_CLAIM,
    BASELINE_COMPLETE,
    BASELINE_ENQUEUE,
    baseline_connection,
    setup_baseline,
)
from pgq_core import JobSpec, Queue
from pgq_core.migrate import migrate

TOP = """
SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
  FROM pg_stat_statements WHERE calls > 10 ORDER BY total_exec_time DESC LIMIT 5
"""
RESET = "SELECT pg_stat_statements_reset()"


def report(admin: psycopg.Connection[Any], label: str, jobs: int, seconds: float) -> None:
    rows = admin.execute(TOP).fetchall()
    executing = sum(r[1] for r in rows) * 1000 / jobs
    print(
        f"== {label}: {jobs / seconds:,.0f} jobs/s, {seconds / jobs * 1e6:.0f} us/job wall, "
        f"{executing:.0f} us/job executing statements"
    )
    for calls, total, text in rows:
        per_call, per_job = total / calls * 1000, total * 1000 / jobs
        print(f"   {calls:7d} calls {per_call:7.0f} us/call {per_job:6.0f} us/job  {text}")


def baseline_side(dsn: str, admin: psycopg.Connection[Any], jobs: int, c: int) -> None:
    admin.execute("DROP SCHEMA IF EXISTS profile_baseline CASCADE")
    admin.execute("CREATE SCHEMA profile_baseline")
    setup_baseline(dsn, "profile_baseline")
    conn = baseline_connection(dsn, "profile_baseline")
    with conn.transaction():
        for n in range(jobs):
            conn.execute(BASELINE_ENQUEUE, {"queue": "q", "payload": Jsonb({"n": n})})
    admin.execute("VACUUM ANALYZE profile_baseline.jobs")

    def drain() -> None:
        own = baseline_connection(dsn, "profile_baseline")
        while rows := own.execute(BASELINE_CLAIM, {"queue": "q", "limit": 10}).fetchall():
            for row in rows:
                own.execute(BASELINE_COMPLETE, {"id": row[0], "fence": row[2]})

    admin.execute(RESET)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=drain) for _ in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report(admin, f"baseline, {c} thread(s)", jobs, time.perf_counter() - t0)


def pgq_side(dsn: str, admin: psycopg.Connection[Any], jobs: int, c: int, handler: str) -> None:
    admin.execute("DROP SCHEMA IF EXISTS profile_pgq CASCADE")
    migrate(admin, "profile_pgq")
    with Queue.connect(dsn, "profile_pgq") as q:
        q.enqueue_many([JobSpec("q", {"n": n}) for n in range(jobs)])
    admin.execute("VACUUM ANALYZE profile_pgq.jobs")
    admin.execute(RESET)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pgq_cli",
            "--dsn",
            dsn,
            "--schema",
            "profile_pgq",
            "worker",
            "q",
            "--concurrency",
            str(c),
            "--burst",
            "--handler",
            f"pgq_bench.handlers:noop_{handler}",
            "--log-level",
            "warning",
        ],
        check=True,
    )
    span = admin.execute(
        sql.SQL(
            "SELECT extract(epoch FROM max(finished_at) - min(claimed_at)) FROM {}.jobs"
        ).format(sql.Identifier("profile_pgq"))
    ).fetchone()
    assert span is not None
    report(admin, f"pgq worker, concurrency {c}, {handler} handler", jobs, float(span[0]))


def main() -> None:
    dsn = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    c = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    handler = sys.argv[4] if len(sys.argv) > 4 else "async"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        baseline_side(dsn, admin, jobs, c)
        pgq_side(dsn, admin, jobs, c, handler)


if __name__ == "__main__":
    main()
