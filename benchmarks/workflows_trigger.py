"""What migration 18's trigger costs a job without dependencies: claim and complete, with the
trigger and without it, on one schema and one connection, in alternating passes.

PYTHONPATH=.:benchmarks python -c "import workflows_trigger as w; w.main(DSN, 30)"

Each pass enqueues 1,000 jobs and drains them by claims of 10 and `complete` of 10 (the API's
completion statement; the worker's settle statement goes through the same trigger test). The
passes alternate (and swap which side goes first each round), so a machine's load drifting
over the run falls on both sides. Prints each side's median and quartiles of microseconds per
job and how many pairs the side with the trigger won.
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import timedelta

from psycopg import sql

from pgq_bench import throwaway_schema
from pgq_core import JobSpec, Queue

JOBS = 1000
BATCH = 10
TRIGGER = (
    "CREATE TRIGGER jobs_settle_dependents AFTER UPDATE OF status ON {s}.jobs "
    "FOR EACH ROW WHEN (NEW.has_children AND OLD.status IS DISTINCT FROM NEW.status "
    "AND (NEW.status IN ('done', 'dead') OR OLD.status = 'dead')) "
    "EXECUTE FUNCTION {s}.jobs_settle_dependents()"
)


def drain(q: Queue) -> float:
    """Microseconds per job to enqueue nothing more and drain JOBS fresh jobs."""
    q.enqueue_many([JobSpec("ab", {}) for _ in range(JOBS)])
    start = time.perf_counter()
    while jobs := q.claim("ab", BATCH, timedelta(seconds=30), "w"):
        q.complete_many([(j.id, j.fence) for j in jobs], "w")
    return (time.perf_counter() - start) / JOBS * 1e6


def main(dsn: str, passes: int) -> None:
    times: dict[bool, list[float]] = {True: [], False: []}
    with throwaway_schema(dsn, "bench_wf") as schema, Queue.connect(dsn, schema) as q:
        s = sql.Identifier(schema)
        drop = sql.SQL("DROP TRIGGER jobs_settle_dependents ON {s}.jobs").format(s=s)
        add = sql.SQL(TRIGGER).format(s=s)
        drain(q)  # warm up: plans prepared, caches filled
        for n in range(passes):
            for with_trigger in (True, False) if n % 2 else (False, True):
                if not with_trigger:
                    q.conn.execute(drop)
                times[with_trigger].append(drain(q))
                if not with_trigger:
                    q.conn.execute(add)
    for side, label in ((True, "with the trigger"), (False, "without")):
        quartiles = statistics.quantiles(times[side], n=4)
        print(f"{label:>17}: median {quartiles[1]:.1f} us/job "
              f"(quartiles {quartiles[0]:.1f} .. {quartiles[2]:.1f})")
    won = sum(a < b for a, b in zip(times[True], times[False], strict=True))
    print(f"pairs where the side with the trigger was faster: {won} of {passes}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30)
