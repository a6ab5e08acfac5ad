"""EXPLAIN (ANALYZE) of one `complete_and_claim` settling and claiming N jobs, on a quiet queue.

python benchmarks/explain_claim.py DSN [N]

Fills a throwaway schema with 20,000 ready jobs, claims N, and explains the statement that
settles those N and claims N more, rolled back (the third of three tries is printed, warm).
"""

from __future__ import annotations

import sys
from datetime import timedelta

from psycopg import sql

from pgq_bench import throwaway_schema
from pgq_core import JobSpec, Queue, ops
from pgq_core.queries import query

QUEUE = "bench"
READY_JOBS = 20_000


def main(dsn: str, claim: int) -> None:
    with throwaway_schema(dsn, "bench_explain") as schema, Queue.connect(dsn, schema) as q:
        q.enqueue_many(JobSpec(QUEUE, {"n": n, "pad": "x" * 100}) for n in range(READY_JOBS))
        q.conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(schema)))
        plan: list[str] = []
        for _ in range(3):
            held = [(j.id, j.fence) for j in q.claim(QUEUE, claim, worker="w")]
            op = ops.complete_and_claim(held, QUEUE, claim, timedelta(seconds=30), "w")
            statement = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + query(op.name, schema)
            with q.conn.transaction(force_rollback=True):
                plan = [str(r[0]) for r in q.conn.execute(statement, op.params).fetchall()]
            q.complete_many(held, worker="w")
        print("\n".join(plan))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 50)
