"""Latency percentiles per queue (`Queue.latency`, `pgq latency`, `pgq stats --json`, the
exporter): wait (due to claimed) and run (claimed to done) p50/p95/p99 of done jobs over the
last 5 minutes and the last hour, at most `ops.LATENCY_CAP` jobs per queue, the most recent.

Timings are set by SQL on rows the tests create, so every expected figure is computed here the
way PostgreSQL's percentile_cont does (linear interpolation between the two nearest rows)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql
from support import Pgq, error_line, ok

from pgq_core import Queue, ops
from pgq_core.exporter import QueueCollector

QUANTILES = (0.5, 0.95, 0.99)


def finished(
    queue: Queue,
    name: str,
    ago: float,
    waits: Sequence[float],
    runs: Sequence[float],
    status: str = "done",
) -> None:
    """One job per (wait, run) pair on queue `name`, finished `ago` seconds ago (the i-th one
    i ms earlier, so each has its own finished_at), claimed `run` before that and due `wait`
    before the claim."""
    queue.conn.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (queue, payload, status, run_at, claimed_at, finished_at)"
            " SELECT %(queue)s, jsonb_build_object(), %(status)s,"
            "        f - make_interval(secs => t.r) - make_interval(secs => t.w),"
            "        f - make_interval(secs => t.r), f"
            "   FROM unnest(%(waits)s::float8[], %(runs)s::float8[]) WITH ORDINALITY"
            "        AS t(w, r, i),"
            "        LATERAL (SELECT now() - make_interval(secs => %(ago)s)"
            "                        - t.i * interval '1 millisecond' AS f) x"
        ).format(sql.Identifier(queue.schema)),
        {"queue": name, "status": status, "waits": list(waits), "runs": list(runs), "ago": ago},
    )


def cont(values: Sequence[float], p: float) -> float | None:
    """percentile_cont as PostgreSQL computes it (float8, linear interpolation)."""
    if not values:
        return None
    ordered = sorted(values)
    position = p * (len(ordered) - 1)
    lo, hi = math.floor(position), math.ceil(position)
    if lo == hi:
        return ordered[lo]
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


def expected(seconds: float, waits: Sequence[float], runs: Sequence[float]) -> dict[str, Any]:
    """A window as `LatencyWindow.to_dict` gives it."""
    return {
        "seconds": seconds,
        "jobs": len(waits),
        "capped": False,
        "wait": {f"p{round(p * 100)}": cont(waits, p) for p in QUANTILES},
        "run": {f"p{round(p * 100)}": cont(runs, p) for p in QUANTILES},
        "skewed": 0,
        "skew_seconds": 0.0,
    }


# quarter seconds: exact in float8 and in an interval's microseconds, so figures compare exactly
RECENT_WAITS = [0.25 * i for i in range(1, 41)]  # 0.25 .. 10 s
RECENT_RUNS = [0.5 * (i % 7) for i in range(1, 41)]
OLDER_WAITS = [30.0, 60.0, 90.0, 120.0]
OLDER_RUNS = [1.0, 2.0, 3.0, 4.0]


def mixed(queue: Queue) -> None:
    """`a`: 40 done 1 minute ago, 4 done 20 minutes ago, 3 done 2 hours ago (outside both
    windows), and dead, ready and running jobs that must not count; `b`: 2 done 20 minutes ago."""
    finished(queue, "a", 60, RECENT_WAITS, RECENT_RUNS)
    finished(queue, "a", 20 * 60, OLDER_WAITS, OLDER_RUNS)
    finished(queue, "a", 2 * 3600, [500.0] * 3, [500.0] * 3)
    finished(queue, "a", 60, [999.0] * 5, [999.0] * 5, status="dead")
    queue.enqueue("a", {})
    queue.enqueue("a", {})
    queue.claim("a", 1, timedelta(minutes=5), "w")
    finished(queue, "b", 20 * 60, [4.0, 8.0], [0.5, 1.5])


def test_percentiles_of_known_timings_per_window(queue: Queue) -> None:
    mixed(queue)
    report = queue.latency()
    assert report.windows == ("5m", "1h")
    assert report.cap == ops.LATENCY_CAP
    assert [q.queue for q in report.queues] == ["a", "b"]
    assert report.total == 2
    a, b = (q.to_dict() for q in report.queues)
    assert a["5m"] == expected(300.0, RECENT_WAITS, RECENT_RUNS)
    assert a["1h"] == expected(
        3600.0, RECENT_WAITS + OLDER_WAITS, RECENT_RUNS + OLDER_RUNS
    )
    # b finished nothing in the last 5 minutes: no figures, not zeros
    assert b["5m"] == expected(300.0, [], [])
    assert b["5m"]["wait"] == {"p50": None, "p95": None, "p99": None}
    assert b["1h"] == expected(3600.0, [4.0, 8.0], [0.5, 1.5])
    assert b["1h"]["wait"]["p50"] == 6.0  # by hand: halfway between 4 and 8


def test_a_longer_window_reaches_older_jobs_and_a_short_one_is_alone(queue: Queue) -> None:
    mixed(queue)
    three_hours = queue.latency(timedelta(hours=3), queues=["a"]).queues[0].to_dict()
    assert three_hours["3h"]["jobs"] == 40 + 4 + 3
    assert three_hours["3h"]["wait"]["p99"] == cont(RECENT_WAITS + OLDER_WAITS + [500.0] * 3, 0.99)
    short = queue.latency(timedelta(minutes=2))
    assert short.windows == ("2m",)
    assert short.queues[0].to_dict() == {"2m": expected(120.0, RECENT_WAITS, RECENT_RUNS)}


def test_queue_filter_and_an_unknown_queue(queue: Queue) -> None:
    mixed(queue)
    only = queue.latency(queues=["b", "nothing-here"])
    assert [q.queue for q in only.queues] == ["b", "nothing-here"]
    none = only.queues[1].to_dict()
    assert none == {"5m": expected(300.0, [], []), "1h": expected(3600.0, [], [])}
    limited = queue.latency(limit=1)
    assert ([q.queue for q in limited.queues], limited.total) == (["a"], 2)


def test_at_most_cap_jobs_per_queue_the_most_recent(queue: Queue) -> None:
    # 10 jobs finished 1 minute ago (waits 1..10 s, the i-th i ms earlier), 10 more 30 min ago
    finished(queue, "a", 60, [float(i) for i in range(1, 11)], [1.0] * 10)
    finished(queue, "a", 30 * 60, [100.0] * 10, [100.0] * 10)
    report = queue.run(ops.latency(cap=4))
    w = report.queues[0].windows
    assert (w["5m"].jobs, w["5m"].capped, w["1h"].jobs, w["1h"].capped) == (4, True, 4, True)
    # the 4 most recent are the first 4 (each later one finished a millisecond earlier)
    assert w["1h"].wait.p50 == cont([1.0, 2.0, 3.0, 4.0], 0.5)
    assert w["1h"].run.p99 == 1.0
    uncapped = queue.run(ops.latency(cap=20)).queues[0].windows
    assert (uncapped["5m"].jobs, uncapped["5m"].capped) == (10, False)
    assert (uncapped["1h"].jobs, uncapped["1h"].capped) == (20, True)


def test_bad_arguments_raise() -> None:
    for call in (
        lambda: ops.latency(timedelta(0)),
        lambda: ops.latency(cap=0),
        lambda: ops.latency(limit=-1),
    ):
        with pytest.raises(ValueError):
            call()


def test_reads_the_latency_index_only(own_database: str) -> None:
    """The plan the 100 ms target rests on: an index-only scan of jobs_latency_idx per queue,
    never the jobs heap by a sequential scan.

    An index-only scan needs the VACUUM to mark the new rows' pages all-visible, which another
    session's open snapshot in the same database prevents (CI's PG 15 run: four test processes
    on one server, and an Index Scan of jobs_done_idx was planned): a database of its own."""
    from pgq_core import migrate
    from pgq_core.queries import query

    with psycopg.connect(own_database, autocommit=True) as conn:
        migrate(conn, "pgq")
    with Queue.connect(own_database, "pgq") as queue:
        finished(queue, "a", 60, [1.0] * 3000, [1.0] * 3000)
        finished(queue, "a", 86400, [1.0] * 3000, [1.0] * 3000)
        queue.conn.execute("VACUUM ANALYZE pgq.jobs")
        op = ops.latency()
        plan = "\n".join(
            r[0]
            for r in queue.conn.execute(
                sql.SQL("EXPLAIN (COSTS OFF) ") + query(op.name, queue.schema), op.params
            ).fetchall()
        )
    assert "Index Only Scan Backward using jobs_latency_idx" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan


# ---------------------------------------------------------------------------- CLI


def test_pgq_latency_json_is_exact(pgq: Pgq, queue: Queue) -> None:
    mixed(queue)
    got = json.loads(ok(pgq("latency", "--json")))
    assert got == {
        "cap_per_queue": ops.LATENCY_CAP,
        "windows": ["5m", "1h"],
        "queues_in_all": 2,
        "queues": [
            {
                "queue": "a",
                "windows": {
                    "5m": expected(300.0, RECENT_WAITS, RECENT_RUNS),
                    "1h": expected(
                        3600.0, RECENT_WAITS + OLDER_WAITS, RECENT_RUNS + OLDER_RUNS
                    ),
                },
            },
            {
                "queue": "b",
                "windows": {
                    "5m": expected(300.0, [], []),
                    "1h": expected(3600.0, [4.0, 8.0], [0.5, 1.5]),
                },
            },
        ],
    }
    one = json.loads(ok(pgq("latency", "--json", "--queue", "b", "--since", "30m")))
    assert [q["queue"] for q in one["queues"]] == ["b"]
    assert one["windows"] == ["5m", "30m"]


def test_pgq_latency_table_shows_dashes_for_no_jobs(pgq: Pgq, queue: Queue) -> None:
    mixed(queue)
    out = ok(pgq("latency"))
    lines = out.splitlines()
    a_recent = next(line for line in lines if "│ a " in line)
    # wait p50 of 40 quarter seconds: 5.125 s; run p50: 1.5 s (as the dashboard prints them)
    assert "5m" in a_recent and "5.1s" in a_recent and "1.5s" in a_recent
    b_recent = next(line for line in lines if "│ b " in line)
    assert "5m" in b_recent and b_recent.count("—") == 6
    assert "at most 20,000" in out
    empty = ok(pgq("latency", "--queue", "idle"))
    assert "idle" in empty and empty.count("—") == 12


def test_pgq_latency_capped_and_more_queues(pgq: Pgq, queue: Queue) -> None:
    mixed(queue)
    out = ok(pgq("latency", "--limit", "1"))
    assert "│ a " in out and "│ b " not in out
    assert "1 more queue not shown" in out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--since", "0"), "longer than 0"),
        (("--since", "soon"), "not a duration"),
        (("--since", "-5m"), "--since"),
        (("--queue", ""), "empty"),
        (("--limit", "0"), "--limit"),
    ],
)
def test_pgq_latency_bad_input_is_one_line(pgq: Pgq, args: tuple[str, ...], fragment: str) -> None:
    error_line(pgq("latency", *args), 2, fragment)


def test_stats_json_keeps_its_keys_and_adds_latency(pgq: Pgq, queue: Queue) -> None:
    mixed(queue)
    queue.enqueue("fresh", {})
    rows = {r["queue"]: r for r in json.loads(ok(pgq("stats", "--json")))}
    assert list(rows["a"]) == [
        "queue", "ready", "scheduled", "running", "expiring", "dead", "done", "completed",
        "oldest_due_seconds", "paused", "limit", "paused_at", "paused_by", "pause_reason",
        "waiting", "latency",
    ]  # fmt: skip
    assert rows["a"]["latency"]["5m"] == expected(300.0, RECENT_WAITS, RECENT_RUNS)
    # a queue with no done job yet: every window present, figures null
    assert rows["fresh"]["latency"] == {
        "5m": expected(300.0, [], []),
        "1h": expected(3600.0, [], []),
    }


# ---------------------------------------------------------------------------- exporter


def test_exporter_exposes_latency_quantiles(dsn: str, queue: Queue) -> None:
    mixed(queue)

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(dsn, autocommit=True)

    collector = QueueCollector(connect, queue.schema)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        text = generate_latest(registry).decode()  # what /metrics serves
    finally:
        collector.close()
    got = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert got[("pgq_up", ())] == 1
    labels = (("quantile", "0.95"), ("queue", "a"), ("window", "5m"))
    assert got[("pgq_job_wait_seconds", labels)] == cont(RECENT_WAITS, 0.95)
    assert got[("pgq_job_run_seconds", labels)] == cont(RECENT_RUNS, 0.95)
    hour = (("quantile", "0.5"), ("queue", "b"), ("window", "1h"))
    assert got[("pgq_job_wait_seconds", hour)] == 6.0
    assert got[("pgq_job_latency_jobs", (("queue", "a"), ("window", "1h")))] == 44
    # b has no job in the last 5 minutes: a count of 0 and no quantile samples
    assert got[("pgq_job_latency_jobs", (("queue", "b"), ("window", "5m")))] == 0
    b_recent = (("quantile", "0.5"), ("queue", "b"), ("window", "5m"))
    assert ("pgq_job_wait_seconds", b_recent) not in got


def test_negative_durations_count_as_zero_and_the_skew_is_said(pgq: Pgq, queue: Queue) -> None:
    """Clocks that disagree (a wait of -20 s, a run of -5 s): the percentiles count them as 0
    (before: a wait p99 of -20 s, shown as -20000ms), and the window says how many jobs had one
    and the most negative, in JSON and in one line of the table."""
    waits, runs = [1.0, -20.0, 2.0, 3.0], [0.5, 1.0, -5.0, 2.0]
    finished(queue, "skew", 60, waits, runs)
    window = queue.latency(queues=["skew"]).queues[0].to_dict()["5m"]
    clamped = expected(300.0, [max(w, 0.0) for w in waits], [max(r, 0.0) for r in runs])
    assert window == {**clamped, "skewed": 2, "skew_seconds": 20.0}
    assert min(window["wait"].values()) >= 0 and min(window["run"].values()) >= 0
    human = ok(pgq("latency", "--queue", "skew"))
    assert "-20000" not in human and "-20s" not in human
    assert (
        "clock skew: 2 done jobs of queue skew (1h) had a negative wait or run, down to -20.0s,"
        " counted as 0" in " ".join(human.split())
    )
