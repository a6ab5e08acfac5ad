"""How fast pgq's statements alone can go: no worker runtime, no handler, no Python per job
beyond the driver, against the baseline's SQL on the same server in the same run.

python benchmarks/statement_ceiling.py DSN [--jobs N] [--levels 1,4,10,50] [--producers 16]

Drain, for each C (the same resources `pgq bench --same-resources` gives both sides):
  baseline    C threads in one process, one connection each: claim LIMIT 10, one UPDATE per job
  pgq         one connection looping `settle_complete_and_claim` with limit C: what one
              `pgq worker --concurrency C` process would do if its own work cost nothing
  -history    the same statement without its history CTE (no `claimed`/`completed` rows)
  -trigger    the same statement with the jobs table's triggers disabled (no done counter)
  -both       neither
  decoupled   the protocol's other shape, as River runs it: claims (`claim`, limit = free
              slots, a slot freed as soon as its job ends) on one connection, completions
              (`complete`, batched: whatever ended meanwhile) on a second, each in its own thread
Enqueue, --producers threads each committing one job per statement:
  baseline    the plain INSERT
  pgq         `enqueue_one` (the job and its `enqueued` history row; notify off)
  -history    `enqueue_one` without its history CTE; -trigger, -both as above
  bare table  the baseline's plain INSERT into pgq's table, triggers off: the table alone

The variants are measurements only: they show what each of pgq's guarantees costs on this
server, never a mode pgq runs in. The ratio is pgq / baseline in the same round; each figure is
the median of --rounds rounds. Run it on a quiet machine; it drops the schemas it makes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import statistics
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgq_bench import (
    BASELINE_CLAIM,
    BASELINE_COMPLETE,
    BASELINE_ENQUEUE,
    baseline_connection,
    load_average,
    machine,
    setup_baseline,
)
from pgq_core import JobSpec, Queue
from pgq_core.migrate import migrate
from pgq_core.queries import query

BASELINE_SCHEMA = "ceiling_baseline"
PGQ_SCHEMA = "ceiling_pgq"
LEASE = timedelta(seconds=30)
VARIANTS = ("pgq", "-history", "-trigger", "-both", "decoupled")


def without_history(text: str) -> str:
    """`text` without its `history AS (...)` CTE: the CTE before it closes where the next
    top-level line starting with ')' does."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith("), history AS ("):
            skipping = True
            continue
        if skipping and line.startswith(")"):
            skipping = False
        if not skipping:
            out.append(line)
    return "\n".join(out)


def statement(name: str, history: bool) -> bytes:
    text = query(name, PGQ_SCHEMA).as_string(None)
    return (text if history else without_history(text)).encode()


def reset(admin: psycopg.Connection[Any], dsn: str, jobs: int, trigger: bool) -> None:
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(PGQ_SCHEMA)))
    migrate(admin, PGQ_SCHEMA)
    if jobs:
        with Queue.connect(dsn, PGQ_SCHEMA) as q:
            q.enqueue_many([JobSpec("q", {"n": n}) for n in range(jobs)])
        admin.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(PGQ_SCHEMA)))
    if not trigger:
        admin.execute(
            sql.SQL("ALTER TABLE {}.jobs DISABLE TRIGGER USER").format(sql.Identifier(PGQ_SCHEMA))
        )


def baseline_reset(admin: psycopg.Connection[Any], dsn: str, jobs: int) -> None:
    schema = sql.Identifier(BASELINE_SCHEMA)
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(schema))
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
    setup_baseline(dsn, BASELINE_SCHEMA)
    if jobs:
        with baseline_connection(dsn, BASELINE_SCHEMA) as conn, conn.transaction():
            for n in range(jobs):
                conn.execute(BASELINE_ENQUEUE, {"queue": "q", "payload": Jsonb({"n": n})})
        admin.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(BASELINE_SCHEMA)))


def timed(threads: list[threading.Thread]) -> float:
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def baseline_drain(dsn: str, jobs: int, c: int) -> float:
    conns = [baseline_connection(dsn, BASELINE_SCHEMA) for _ in range(c)]

    def drain(conn: psycopg.Connection[Any]) -> None:
        while rows := conn.execute(BASELINE_CLAIM, {"queue": "q", "limit": 10}).fetchall():
            for row in rows:
                conn.execute(BASELINE_COMPLETE, {"id": row[0], "fence": row[2]})

    seconds = timed([threading.Thread(target=drain, args=(conn,)) for conn in conns])
    for conn in conns:
        conn.close()
    return jobs / seconds


def pgq_drain(dsn: str, jobs: int, c: int, history: bool) -> float:
    text = statement("settle_complete_and_claim", history)
    conn = psycopg.connect(dsn, autocommit=True)

    def drain() -> None:
        ids: list[int] = []
        fences: list[int] = []
        while True:
            params = {
                "ids": ids,
                "fences": fences,
                "results": [None] * len(ids),
                "queue": "q",
                "limit": c,
                "lease": LEASE,
                "worker": "ceiling",
            }
            rows = conn.execute(text, params).fetchall()
            claimed = [r for r in rows if r[0] == "claimed"]
            if not claimed and not ids:
                return
            ids, fences = [r[1] for r in claimed], [r[2] for r in claimed]

    seconds = timed([threading.Thread(target=drain)])
    conn.close()
    check_drained(dsn, jobs, history)
    return jobs / seconds


def check_drained(dsn: str, jobs: int, history: bool) -> None:
    """Every job done and, with `history`, each with its `completed` row at its last fence."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE status = 'done'),"
                " count(*) FILTER (WHERE status = 'done' AND EXISTS (SELECT 1 FROM {s}.job_events e"
                "  WHERE e.job_id = j.id AND e.fence = j.fence AND e.event = 'completed'))"
                " FROM {s}.jobs j"
            ).format(s=sql.Identifier(PGQ_SCHEMA))
        ).fetchone()
    assert row is not None, "no count"
    done, recorded = row
    if done != jobs or (history and recorded != jobs):
        raise SystemExit(f"drained {done} of {jobs}, {recorded} with their completion recorded")


def decoupled_drain(dsn: str, jobs: int, c: int) -> float:
    claim = statement("claim", True)
    complete = statement("complete", True)
    ended: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    slots = threading.Semaphore(c)

    def claimer() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                slots.acquire()
                free = 1
                while slots.acquire(blocking=False):
                    free += 1
                params = {"queue": "q", "limit": free, "lease": LEASE, "worker": "ceiling"}
                rows = conn.execute(claim, params).fetchall()
                for row in rows:
                    ended.put((row[0], row[3]))  # the no-op handler ends at once
                for _ in range(free):
                    slots.release()
                if not rows:
                    ended.put(None)
                    return

    def completer() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                batch = [ended.get()]
                with contextlib.suppress(queue.Empty):
                    while True:
                        batch.append(ended.get_nowait())
                done = [b for b in batch if b is not None]
                if done:
                    params = {
                        "ids": [i for i, _ in done],
                        "fences": [f for _, f in done],
                        "results": [None] * len(done),
                        "worker": "ceiling",
                    }
                    conn.execute(complete, params).fetchall()
                if len(done) < len(batch):
                    return

    seconds = timed([threading.Thread(target=claimer), threading.Thread(target=completer)])
    check_drained(dsn, jobs, history=True)
    return jobs / seconds


def produce(
    dsn: str,
    jobs: int,
    producers: int,
    one: Callable[[psycopg.Connection[Any], int], object],
    schema: str,
) -> float:
    conns = [baseline_connection(dsn, schema) for _ in range(producers)]
    share = jobs // producers

    def run(conn: psycopg.Connection[Any]) -> None:
        for n in range(share):
            one(conn, n)

    seconds = timed([threading.Thread(target=run, args=(conn,)) for conn in conns])
    for conn in conns:
        conn.close()
    return share * producers / seconds


def drain_level(
    dsn: str, admin: psycopg.Connection[Any], jobs: int, c: int, rounds: int
) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"baseline": [], **{v: [] for v in VARIANTS}}
    for _ in range(rounds):
        baseline_reset(admin, dsn, jobs)
        rates["baseline"].append(baseline_drain(dsn, jobs, c))
        for variant in VARIANTS:
            reset(admin, dsn, jobs, trigger=variant not in ("-trigger", "-both"))
            if variant == "decoupled":
                rates[variant].append(decoupled_drain(dsn, jobs, c))
                continue
            history = variant not in ("-history", "-both")
            rates[variant].append(pgq_drain(dsn, jobs, c, history))
    medians = {side: statistics.median(r) for side, r in rates.items()}
    return {
        "concurrency": c,
        "rate": medians,
        "ratio": {v: medians[v] / medians["baseline"] for v in VARIANTS},
    }


ENQUEUE_SIDES = ("pgq", "-history", "-trigger", "-both", "bare table")
#: One job into pgq's table as the baseline inserts one: no history, triggers off (`bare table`).
BARE_INSERT = "INSERT INTO {}.jobs (queue, payload) VALUES (%(queue)s, %(payload)s)"


def enqueue_level(
    dsn: str, admin: psycopg.Connection[Any], jobs: int, producers: int, rounds: int
) -> dict[str, Any]:
    rates: dict[str, list[float]] = {side: [] for side in ("baseline", *ENQUEUE_SIDES)}
    for _ in range(rounds):
        baseline_reset(admin, dsn, 0)
        rates["baseline"].append(
            produce(
                dsn,
                jobs,
                producers,
                lambda conn, n: conn.execute(
                    BASELINE_ENQUEUE, {"queue": "q", "payload": Jsonb({"n": n})}
                ),
                BASELINE_SCHEMA,
            )
        )
        for side in ENQUEUE_SIDES:
            reset(admin, dsn, 0, trigger=side in ("pgq", "-history"))
            admin.execute(
                sql.SQL("UPDATE {}.settings SET value = 'off' WHERE name = 'notify'").format(
                    sql.Identifier(PGQ_SCHEMA)
                )
            )
            if side == "bare table":
                text = sql.SQL(BARE_INSERT).format(sql.Identifier(PGQ_SCHEMA)).as_bytes(None)
            else:
                text = statement("enqueue_one", history=side in ("pgq", "-trigger"))

            def one(conn: psycopg.Connection[Any], n: int, text: bytes = text) -> None:
                params = {"queue": "q", "payload": Jsonb({"n": n})}
                if text.startswith(b"WITH"):
                    params.update(
                        run_at=None, delay=None, max_attempts=5, priority=0, backoff_base=None,
                        backoff_cap=None,
                    )
                conn.execute(text, params)

            rates[side].append(produce(dsn, jobs, producers, one, PGQ_SCHEMA))
    medians = {side: statistics.median(r) for side, r in rates.items()}
    return {
        "producers": producers,
        "rate": medians,
        "ratio": {side: medians[side] / medians["baseline"] for side in ENQUEUE_SIDES},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--levels", default="1,4,10,50")
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    levels = [int(c) for c in args.levels.split(",") if c]
    result: dict[str, Any] = {
        "jobs": args.jobs,
        "rounds": args.rounds,
        "drain": [],
        "enqueue": None,
    }
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        result["server"] = admin.info.parameter_status("server_version")
        result["machine"] = {**machine(), "load_at_start": load_average()}
        try:
            for c in levels:
                level = drain_level(args.dsn, admin, args.jobs, c, args.rounds)
                result["drain"].append(level)
                if not args.json:
                    print(
                        f"drain C={c:<3} baseline {level['rate']['baseline']:7,.0f} jobs/s   "
                        + "   ".join(
                            f"{v} {level['rate'][v]:7,.0f} ({level['ratio'][v]:.2f}x)"
                            for v in VARIANTS
                        ),
                        flush=True,
                    )
            if args.producers:
                level = enqueue_level(args.dsn, admin, args.jobs, args.producers, args.rounds)
                result["enqueue"] = level
                if not args.json:
                    print(
                        f"enqueue, {args.producers} producers: "
                        f"baseline {level['rate']['baseline']:7,.0f} jobs/s   "
                        + "   ".join(
                            f"{s} {level['rate'][s]:7,.0f} ({level['ratio'][s]:.2f}x)"
                            for s in ENQUEUE_SIDES
                        )
                    )
        finally:
            for schema in (BASELINE_SCHEMA, PGQ_SCHEMA):
                admin.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
    result["machine"]["load_at_end"] = load_average()
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
