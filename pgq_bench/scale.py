"""`pgq bench --stats-scale`: do stats and leases stay cheap as done history grows?

Builds a large history directly with generate_series (fixture data, the bench's own setup
SQL: the jobs trigger keeps queue_counts right), then times the queue's own `stats`, `leases`
and `latency` (wait and run percentiles per queue over 5m and 1h: `--done-last-hour` of the
done jobs finished within the last hour, with varied timings), EXPLAINs them, times the
operator queries (filtered job listings, a dry run's count, error groups, database health),
measures table and index sizes, and prunes.

Fixture errors: every tenth ready job has failed once (attempts 1, an error), and dead jobs
carry one of a few error shapes with ids, numbers and URLs in them, so error groups have
real normalizing to do.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

from pgq_core import Queue, ops
from pgq_core.filters import JobFilter, parse_payload_match
from pgq_core.queries import query

from .common import load_average, machine, percentile, server_version, throwaway_schema

QUEUES = 4
PRUNE_OLDER_THAN = timedelta(days=7)
HISTORY_DAYS = 30

#: Fixture jobs: done ones spread over HISTORY_DAYS, then ready, running and dead ones.
FIXTURE_JOBS = """
INSERT INTO {s}.jobs (queue, payload, status, run_at, attempts, fence, lease_until, last_error,
                      queued_at, worker, claimed_at, lease_length, finished_at)
SELECT 'q' || (g %% {queues}), jsonb_build_object('n', g), %(status)s,
       t - interval '1 second',
       CASE %(status)s WHEN 'ready' THEN (g %% 10 = 0)::int WHEN 'dead' THEN 5 ELSE 1 END,
       CASE %(status)s WHEN 'ready' THEN (g %% 10 = 0)::int WHEN 'dead' THEN 5 ELSE 1 END,
       CASE %(status)s WHEN 'running' THEN now() + interval '1 hour' END,
       CASE WHEN %(status)s = 'dead' OR (%(status)s = 'ready' AND g %% 10 = 0) THEN
         CASE g %% 4
           WHEN 0 THEN 'TimeoutError: GET https://api.example.com/v1/orders/' || g
                       || ' took ' || (g %% 30) || '.5s'
           WHEN 1 THEN 'KeyError: ''customer_' || g || ''''
           WHEN 2 THEN 'ValueError: order 0x' || to_hex(g * 7919) || ' has ' || (g %% 7)
                       || ' lines, expected ' || (g %% 5)
           ELSE 'ConnectionError: [Errno 111] connect to 10.0.' || (g %% 256) || '.'
                || (g %% 100) || ':5432 refused'
         END
       END,
       t - interval '2 seconds',
       CASE WHEN %(status)s <> 'ready' THEN 'bench-fixture' END,
       CASE WHEN %(status)s <> 'ready' THEN t - interval '1 second' END,
       CASE %(status)s WHEN 'running' THEN interval '1 hour' END,
       CASE WHEN %(status)s IN ('done', 'dead') THEN t END
  FROM generate_series(1, %(n)s) g,
       LATERAL (SELECT now() - interval '1 day' * {days} * g / %(n)s AS t) ts
"""
#: Fixture jobs done within the last hour, evenly spread, newest first: waits of 0 to 9.99 s
#: (due to claimed) and runs of 0 to 1.997 s (claimed to done), varied job to job, as
#: `latency` reads them.
FIXTURE_RECENT = """
INSERT INTO {s}.jobs (queue, payload, status, run_at, attempts, fence, queued_at, worker,
                      claimed_at, finished_at)
SELECT 'q' || (g %% {queues}), jsonb_build_object('n', g), 'done', c - w, 1, 1, c - w,
       'bench-fixture', c, t
  FROM generate_series(1, %(n)s) g,
       LATERAL (SELECT now() - interval '1 hour' * g / (%(n)s + 1) AS t) ts,
       LATERAL (SELECT ts.t - (g * 7 %% 1000) * interval '2 milliseconds' AS c,
                       (g %% 1000) * interval '10 milliseconds' AS w) cw
"""
#: Fixture history: the rows each status would have written, one per attempt that ended (an
#: enqueue and a claim write none: migration 15).
FIXTURE_EVENTS = """
INSERT INTO {s}.job_events (job_id, at, event, fence, worker, claimed_at)
SELECT j.id, coalesce(j.finished_at, j.queued_at), e.event, e.fence, j.worker,
       coalesce(j.claimed_at, j.queued_at)
  FROM {s}.jobs j
  JOIN (VALUES ('done', 'completed', 1), ('dead', 'failed', 1), ('dead', 'failed', 2),
               ('dead', 'failed', 3), ('dead', 'failed', 4), ('dead', 'dead', 5))
       AS e(status, event, fence) ON e.status = j.status
"""
#: Fixture days: the history's daily partitions for the days the fixture history covers
#: (migration 9 makes today and the week ahead only).
FIXTURE_DAYS = """
SELECT count(*) FILTER (WHERE outcome = 'created')
  FROM {s}.job_events_add_partitions((now() AT TIME ZONE 'UTC')::date - {days} - 1,
                                     (now() AT TIME ZONE 'UTC')::date)
"""
#: A table and each of its indexes; a partitioned one (job_events) as the sum of its
#: partitions, and the number of its partitions.
SIZES = """
WITH leaves AS (
  SELECT c.oid AS rel, c.oid AS leaf FROM pg_class c
   WHERE c.oid = %(table)s::regclass AND c.relkind = 'r'
  UNION ALL
  SELECT %(table)s::regclass, t.relid FROM pg_partition_tree(%(table)s::regclass) t
   WHERE t.isleaf
)
SELECT c.relname, sum(pg_relation_size(l.leaf)), sum(pg_total_relation_size(l.leaf)), count(*)
  FROM leaves l JOIN pg_class c ON c.oid = l.rel
 GROUP BY c.relname
UNION ALL
SELECT ic.relname, coalesce(sum(pg_relation_size(coalesce(t.relid, ic.oid))), 0),
       coalesce(sum(pg_relation_size(coalesce(t.relid, ic.oid))), 0), count(*)
  FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
  LEFT JOIN LATERAL (SELECT relid FROM pg_partition_tree(ic.oid) WHERE isleaf) t ON true
 WHERE i.indrelid = %(table)s::regclass
 GROUP BY ic.relname
"""
VACUUM = "VACUUM {analyze}{s}.{t}"
TABLES = ("jobs", "job_events", "queue_counts")


@dataclass(frozen=True)
class ScaleOptions:
    done: int
    ready: int
    running: int
    dead: int
    repeat: int
    #: of `done`, how many finished within the last hour (the rest: spread over 30 days)
    done_last_hour: int = 0


def _timed(call: Callable[[], object], repeat: int) -> dict[str, float]:
    for _ in range(min(5, repeat)):
        call()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1000)
    return {
        "p50_ms": percentile(samples, 50),
        "p95_ms": percentile(samples, 95),
        "max_ms": max(samples),
        "calls": repeat,
    }


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _plan_nodes(child)
    return found


def explain(conn: psycopg.Connection[Any], schema: str, op: ops.Op[Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the queue's own statement: which tables it scans whole, and how much."""
    statement = query(op.name, schema)
    analyzed = conn.execute(
        sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + statement, op.params
    ).fetchone()
    assert analyzed is not None
    raw = analyzed[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    nodes = _plan_nodes(plan["Plan"])
    text = conn.execute(sql.SQL("EXPLAIN (COSTS OFF) ") + statement, op.params).fetchall()
    return {
        "seq_scans": sorted({n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan"}),
        "index_scans": sorted(
            {n.get("Index Name", "") for n in nodes if "Index" in n["Node Type"]} - {""}
        ),
        "seq_scan_of_jobs": any(
            n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs" for n in nodes
        ),
        "execution_ms": plan["Execution Time"],
        "shared_blocks": plan["Plan"].get("Shared Hit Blocks", 0)
        + plan["Plan"].get("Shared Read Blocks", 0),
        "plan": [r[0] for r in text],
    }


def sizes(conn: psycopg.Connection[Any], schema: str, done: int) -> dict[str, Any]:
    """Bytes per relation (tables: heap and total with indexes and TOAST; indexes: their own;
    a partitioned one: the sums over its partitions, and how many), and the same per million
    done jobs."""
    per_million = 1_000_000 / done if done else 0.0
    out: dict[str, Any] = {}
    for table in ("jobs", "job_events"):
        qualified = f"{schema}.{table}"
        for name, own, total, parts in conn.execute(SIZES, {"table": qualified}).fetchall():
            out[name] = {
                "bytes": int(own),
                "total_bytes": int(total),
                "mb_per_million_done": round(int(total) * per_million / 2**20, 1),
                "partitions": int(parts),
            }
    return out


def _vacuum(conn: psycopg.Connection[Any], schema: str, analyze: bool) -> None:
    for table in TABLES:
        conn.execute(
            sql.SQL(VACUUM).format(
                analyze=sql.SQL("ANALYZE " if analyze else ""),
                s=sql.Identifier(schema),
                t=sql.Identifier(table),
            )
        )


def _operator_calls(q: Queue) -> dict[str, Callable[[], object]]:
    """The operator queries of `pgq show` (a random job's history), `pgq jobs/requeue/kill/
    delete` (filters), `pgq errors` and `pgq health`, as an operator on call would run them."""
    dead_timeouts = JobFilter(queue="q1", statuses=("dead",), error="timeout")
    failed = JobFilter(queue="q2", statuses=("failed",))
    payload = JobFilter(queue="q3", statuses=("ready",), payload=(parse_payload_match("n=1003"),))
    old_done = JobFilter(statuses=("done",), older_than=timedelta(days=7))
    group = next(iter(q.errors(limit=1)), None)
    bounds = q.conn.execute(
        sql.SQL("SELECT coalesce(min(id), 0), coalesce(max(id), 0) FROM {}.jobs").format(
            sql.Identifier(q.schema)
        )
    ).fetchone()
    lo, hi = (int(bounds[0]), int(bounds[1])) if bounds else (0, 0)
    calls: dict[str, Callable[[], object]] = {
        "show (a job's history)": lambda: q.history(random.randint(lo, hi)),
        "jobs --queue --status dead --error": lambda: q.jobs_matching(dead_timeouts),
        "jobs --queue --status failed": lambda: q.jobs_matching(failed),
        "jobs --queue --status ready --payload": lambda: q.jobs_matching(payload),
        "jobs --status done --older-than 7d": lambda: q.jobs_matching(old_done),
        "requeue --queue --error --dry-run": lambda: q.count_matching(dead_timeouts, "requeue"),
        "errors": q.errors,
        "errors --since 1h": lambda: q.errors(since=timedelta(hours=1)),
        "health": q.health,
    }
    if group is not None:
        by_group = JobFilter(error_group=group.group)
        calls["jobs --error-group"] = lambda: q.jobs_matching(by_group)
        calls["kill --error-group --dry-run"] = lambda: q.count_matching(by_group, "kill")
    return calls


def fill_fixture(conn: psycopg.Connection[Any], schema: str, opts: ScaleOptions) -> None:
    """`opts`' jobs per status, spread over HISTORY_DAYS days of history, in `schema`."""
    statement = sql.SQL(FIXTURE_JOBS).format(
        s=sql.Identifier(schema), queues=sql.Literal(QUEUES), days=sql.Literal(HISTORY_DAYS)
    )
    conn.execute(
        sql.SQL(FIXTURE_DAYS).format(s=sql.Identifier(schema), days=sql.Literal(HISTORY_DAYS))
    )
    if opts.done_last_hour:
        conn.execute(
            sql.SQL(FIXTURE_RECENT).format(s=sql.Identifier(schema), queues=sql.Literal(QUEUES)),
            {"n": opts.done_last_hour},
        )
    for status, n in (
        ("done", opts.done - opts.done_last_hour),
        ("ready", opts.ready),
        ("running", opts.running),
        ("dead", opts.dead),
    ):
        if n:
            conn.execute(statement, {"status": status, "n": n})
    conn.execute(sql.SQL(FIXTURE_EVENTS).format(s=sql.Identifier(schema)))


def run_stats_scale(
    dsn: str, embedded: bool, opts: ScaleOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    result: dict[str, Any] = {"params": asdict(opts), "machine": machine()}
    with (
        throwaway_schema(dsn, "bench_scale") as schema,
        psycopg.connect(dsn, autocommit=True) as conn,
        Queue.connect(dsn, schema) as q,
    ):
        result["server"] = {"version": server_version(conn), "embedded": embedded}
        say(
            f"fill: {opts.done} done (with history; {opts.done_last_hour} in the last hour), "
            f"{opts.ready} ready, "
            f"{opts.running} running, {opts.dead} dead"
        )
        t0 = time.perf_counter()
        fill_fixture(conn, schema, opts)
        result["fill_seconds"] = time.perf_counter() - t0
        say("VACUUM ANALYZE")
        _vacuum(conn, schema, analyze=True)

        counted = {s.queue: s for s in q.stats()}
        result["counts"] = {
            "done": sum(s.done for s in counted.values()),
            "ready": sum(s.ready for s in counted.values()),
            "running": sum(s.running for s in counted.values()),
            "dead": sum(s.dead for s in counted.values()),
        }
        say(f"time stats() and leases(), {opts.repeat} calls each")
        result["stats"] = _timed(q.stats, opts.repeat)
        result["leases"] = _timed(q.leases, opts.repeat)
        say(f"time latency() (every queue, 5m and 1h), {opts.repeat} calls")
        result["latency"] = _timed(q.latency, opts.repeat)
        result["latency"]["cap_per_queue"] = ops.LATENCY_CAP
        result["latency"]["figures"] = q.latency().to_dict()
        result["explain"] = {
            "stats": explain(conn, schema, ops.stats()),
            "leases": explain(conn, schema, ops.leases()),
            "latency": explain(conn, schema, ops.latency()),
        }
        say(f"time the operator queries, {opts.repeat} calls each")
        result["operator"] = {
            name: _timed(call, opts.repeat) for name, call in _operator_calls(q).items()
        }
        result["sizes"] = sizes(conn, schema, opts.done)

        say(f"prune done jobs older than {PRUNE_OLDER_THAN.days} days, then VACUUM")
        t0 = time.perf_counter()
        report = q.prune_report(PRUNE_OLDER_THAN)
        prune_seconds = time.perf_counter() - t0
        pruned = report.deleted
        sizes_after_prune = sizes(conn, schema, opts.done)
        t0 = time.perf_counter()
        _vacuum(conn, schema, analyze=True)
        vacuum_seconds = time.perf_counter() - t0
        remaining = sum(s.done for s in q.stats())
        result["prune"] = {
            "older_than_days": PRUNE_OLDER_THAN.days,
            "deleted": pruned,
            "seconds": prune_seconds,
            "rows_per_second": pruned / prune_seconds if prune_seconds else None,
            "vacuum_seconds": vacuum_seconds,
            "done_left": remaining,
            "partitions_dropped": len(report.partitions_dropped),
            "history_rows_kept": report.history_rows_kept,
            "sizes_after_prune": sizes_after_prune,
            "sizes_after_vacuum": sizes(conn, schema, opts.done),
            "stats_after": _timed(q.stats, opts.repeat),
            "explain_stats_after": explain(conn, schema, ops.stats()),
        }
    result["machine"]["load_at_end"] = load_average()
    return result


def print_scale(result: dict[str, Any], console: Console) -> None:
    p, c = result["params"], result["counts"]
    head = Table(
        title=f"pgq bench --stats-scale · PostgreSQL {result['server']['version']} · "
        f"{c['done']:,} done, {c['ready']:,} ready, {c['running']:,} running, {c['dead']:,} dead"
    )
    for col in ("call", "p50 ms", "p95 ms", "max ms", "seq scan of jobs", "blocks"):
        head.add_column(col, justify="left" if col == "call" else "right")
    for name in ("stats", "leases", "latency"):
        timing, plan = result[name], result["explain"][name]
        head.add_row(
            f"{name}()",
            f"{timing['p50_ms']:.2f}",
            f"{timing['p95_ms']:.2f}",
            f"{timing['max_ms']:.2f}",
            "yes" if plan["seq_scan_of_jobs"] else "no",
            str(plan["shared_blocks"]),
        )
    after = result["prune"]["stats_after"]
    head.add_row(
        "stats() after prune",
        f"{after['p50_ms']:.2f}",
        f"{after['p95_ms']:.2f}",
        f"{after['max_ms']:.2f}",
        "",
        "",
    )
    console.print(head)

    operator = Table(title="operator queries (filters, errors, health)")
    for col in ("call", "p50 ms", "p95 ms", "max ms"):
        operator.add_column(col, justify="left" if col == "call" else "right")
    for name, timing in result.get("operator", {}).items():
        operator.add_row(
            name,
            f"{timing['p50_ms']:.2f}",
            f"{timing['p95_ms']:.2f}",
            f"{timing['max_ms']:.2f}",
        )
    console.print(operator)

    size_table = Table(title=f"sizes ({p['done']:,} done jobs)")
    for col in (
        "relation",
        "MB",
        "MB / million done",
        "MB after prune",
        "MB after prune + VACUUM",
    ):
        size_table.add_column(col, justify="left" if col == "relation" else "right")
    pruned_sizes = result["prune"]["sizes_after_prune"]
    after_sizes = result["prune"]["sizes_after_vacuum"]
    for name, s in result["sizes"].items():
        size_table.add_row(
            name,
            f"{s['total_bytes'] / 2**20:,.1f}",
            f"{s['mb_per_million_done']:,.1f}",
            f"{pruned_sizes[name]['total_bytes'] / 2**20:,.1f}",
            f"{after_sizes[name]['total_bytes'] / 2**20:,.1f}",
        )
    console.print(size_table)
    pr = result["prune"]
    console.print(
        f"prune (older than {pr['older_than_days']} days): {pr['deleted']:,} jobs in "
        f"{pr['seconds']:.1f}s ({pr['partitions_dropped']} history partitions dropped, "
        f"{pr['history_rows_kept']:,} rows kept), VACUUM {pr['vacuum_seconds']:.1f}s, "
        f"{pr['done_left']:,} done left"
    )
    console.print("stats plan:\n  " + "\n  ".join(result["explain"]["stats"]["plan"]))
    console.print(
        f"latency(): {p['done_last_hour']:,} of the done jobs finished in the last hour, over "
        f"{QUEUES} queues; at most {result['latency']['cap_per_queue']:,} read per queue "
        "(the most recent)"
    )
    console.print("latency plan:\n  " + "\n  ".join(result["explain"]["latency"]["plan"]))
