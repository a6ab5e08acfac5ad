"""`pgq bench` on the test server (tiny sizes), and the batch settlement it relies on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from pgq_bench import busy_percent, cpu_ticks, read_result, steal_percent, with_baseline_names
from pgq_bench.baseline import LEGACY_NAMES
from pgq_cli.cli import main
from pgq_core import JobSpec, PgqError, Queue

SIDE_FIGURES = (
    "claim_size",
    "enqueue_rate",
    "drain_rate",
    "drain_seconds",
    "pickup_p50_ms",
    "pickup_p99_ms",
    "pickup_max_ms",
    "drain_xacts_per_job",
    "drain_wal_bytes_per_job",
    "drain_worker_cpu_us_per_job",
    "drain_machine_cpu_us_per_job",
    "enqueue_xacts_per_job",
    "enqueue_wal_bytes_per_job",
    "jobs",
    "done",
    "lost",
)
PHASE_FIGURES = ("jobs", "seconds", "rate", "xacts_per_job", "wal_bytes_per_job")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))


def _run_json(dsn: str, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["--dsn", dsn, "bench", *args, "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _bench_schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench\\_%'"
        ).fetchall()
    return {r[0] for r in rows}


@pytest.mark.slow
def test_bench_tiny_has_every_figure_and_drains_every_job(dsn: str) -> None:
    before = _bench_schemas(dsn)
    data = _run_json(
        dsn,
        "--jobs",
        "300",
        "--workers",
        "2",
        "--batch",
        "3",
        "--concurrency",
        "7",
        "--latency-samples",
        "5",
        "--payload-bytes",
        "20",
        "--rounds",
        "2",
    )
    claims = {"baseline": 3, "pgq_same_batch": 3, "pgq": 7}
    for side, claim in claims.items():
        figures = data[side]
        assert set(SIDE_FIGURES) <= set(figures), side
        assert figures["claim_size"] == claim, side
        assert figures["jobs"] == 300 and figures["done"] == 300, side
        assert figures["lost"] == 0, side
        assert figures["drain_rate"] > 0 and figures["enqueue_rate"] > 0, side
        assert figures["drain_wal_bytes_per_job"] > 0, side
        assert figures["drain_xacts_per_job"] > 0, side
        assert figures["drain_worker_cpu_us_per_job"] > 0, side
        assert figures["enqueue_xacts_per_job"] >= 0, side
        assert figures["enqueue_wal_bytes_per_job"] > 0, side
    # Pickup latency is measured for the baseline and pgq at its own claim size only.
    for side in ("baseline", "pgq"):
        assert 0 <= data[side]["pickup_p50_ms"] <= data[side]["pickup_p99_ms"], side
    assert data["pgq_same_batch"]["pickup_p50_ms"] is None
    # The baseline commits at least one transaction per job (its completion); pgq settles in
    # batches, so fewer than one, and fewer still with the larger claim.
    assert data["baseline"]["drain_xacts_per_job"] >= 1
    assert data["pgq_same_batch"]["drain_xacts_per_job"] < 1
    baseline_rate = data["baseline"]["drain_rate"]
    assert data["ratio"] == pytest.approx(data["pgq"]["drain_rate"] / baseline_rate)
    assert data["ratio_same_batch"] == pytest.approx(
        data["pgq_same_batch"]["drain_rate"] / baseline_rate
    )
    for name, phase in {**data["enqueue"], **data["drain"]}.items():
        assert set(PHASE_FIGURES) <= set(phase), name
        assert phase["rate"] > 0, name
    assert {k: ph["claim"] for k, ph in data["drain"].items()} == {
        "baseline": 3,
        "pgq_same_batch": 3,
        "pgq": 7,
        "pgq_no_trigger": 7,
        "pgq_no_history": 7,
    }
    assert data["enqueue"]["pgq_enqueue_per_job_listened"]["notifications_received"] > 0
    assert data["params"]["workers"] == 2
    assert (data["params"]["batch"], data["params"]["concurrency"]) == (3, 7)
    assert {k: len(v) for k, v in data["drain_rounds"].items()} == {
        "baseline": 2,
        "pgq_same_batch": 2,
        "pgq": 2,
        "no_trigger": 2,
        "no_history": 2,
    }
    assert data["machine"]["nproc"] >= 1
    assert len(data["machine"]["load_at_start"]) == len(data["machine"]["load_at_end"]) == 3
    assert data["server"]["version"]
    assert _bench_schemas(dsn) == before, "throwaway schemas must be dropped"


@pytest.mark.slow
def test_stats_scale_views_tiny(dsn: str) -> None:
    """--queues and --big-errors fill their fixtures, run `pgq jobs`, `pgq errors` and the
    dashboard in processes of their own, and print each figure."""
    before = _bench_schemas(dsn)
    data = _run_json(
        dsn, "--stats-scale", "--queues", "150", "--big-errors", "30", "--error-bytes",
        "200000", "--idle", "2",
    )  # fmt: skip
    queues, big = data["scenarios"]["queues"], data["scenarios"]["big_errors"]
    assert (queues["size"], big["size"]) == (150, 30)
    for scenario in (queues, big):
        assert [c["command"] for c in scenario["cli"]] == [
            "pgq jobs --status dead --limit 1000",
            "pgq errors",
        ]
        for run in scenario["cli"]:
            assert run["exit"] == 0 and run["peak_rss_mb"] > 0 and run["bytes_printed"] > 0
    assert big["cli"][1]["bytes_printed"] < 30 * 2000  # the examples are cut
    assert [d["view"] for d in big["dashboard"]] == ["jobs", "errors"]
    for run in queues["dashboard"] + big["dashboard"]:
        assert "error" not in run, run
        assert run["first_draw_seconds"] > 0 and run["idle_cpu_percent"] >= 0
        assert run["rss_mb"] > 0 and run["quit_seconds"] >= 0
    assert queues["dashboard"][0]["rows_in_queues_table"] == 100  # the window
    assert _bench_schemas(dsn) == before, "throwaway schemas must be dropped"


def test_views_options_belong_to_stats_scale(dsn: str) -> None:
    for args in (["--queues", "5"], ["--big-errors", "5"]):
        result = CliRunner().invoke(main, ["--dsn", dsn, "bench", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "options of --stats-scale" in result.output


def test_bench_help_names_both_claim_sizes() -> None:
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    assert "--batch" in result.output and "--concurrency" in result.output
    assert "baseline's LIMIT" in result.output
    assert "seed" not in result.output.lower()


@pytest.mark.slow
def test_stats_scale_tiny(dsn: str) -> None:
    before = _bench_schemas(dsn)
    data = _run_json(
        dsn,
        "--stats-scale",
        "--done",
        "3000",
        "--ready",
        "200",
        "--running",
        "30",
        "--dead",
        "20",
        "--repeat",
        "10",
    )
    assert data["counts"] == {"done": 3000, "ready": 200, "running": 30, "dead": 20}
    # a tenth of --done finished within the last hour: latency reads those, per queue
    assert data["params"]["done_last_hour"] == 300
    figures = data["latency"]["figures"]
    # (and the newest few of those spread over 30 days)
    assert 300 <= sum(q["windows"]["1h"]["jobs"] for q in figures["queues"]) < 320
    assert all(0 <= q["windows"]["1h"]["wait"]["p95"] <= 10 for q in figures["queues"])
    assert "jobs_latency_idx" in data["explain"]["latency"]["index_scans"]
    assert not data["explain"]["latency"]["seq_scan_of_jobs"]
    for call in ("stats", "leases", "latency"):
        timing = data[call]
        assert 0 < timing["p50_ms"] <= timing["p95_ms"] <= timing["max_ms"]
        assert timing["calls"] == 10
        assert data["explain"][call]["plan"]
    sizes = data["sizes"]
    assert {"jobs", "job_events", "jobs_pkey", "jobs_done_idx"} <= set(sizes)
    assert sizes["jobs"]["total_bytes"] >= sizes["jobs"]["bytes"] > 0
    prune = data["prune"]
    # Done jobs are spread evenly over 30 days: those older than 7 days go.
    assert 2000 < prune["deleted"] < 3000
    assert prune["done_left"] == 3000 - prune["deleted"]
    # The history of those 30 days is in daily partitions: the days before the cutoff are
    # dropped whole (rows of jobs still present kept), so job_events shrinks at once.
    assert sizes["job_events"]["partitions"] >= 39
    assert prune["partitions_dropped"] >= 22
    assert prune["history_rows_kept"] > 0
    assert (
        prune["sizes_after_prune"]["job_events"]["total_bytes"]
        < sizes["job_events"]["total_bytes"] / 2
    )
    assert _bench_schemas(dsn) == before


def test_done_last_hour_is_part_of_done() -> None:
    result = CliRunner().invoke(
        main, ["bench", "--stats-scale", "--done", "10", "--done-last-hour", "11"]
    )
    assert result.exit_code == 2, result.output
    assert "--done-last-hour must not exceed --done" in result.output
    assert "Traceback" not in result.output


def test_bench_rejects_bad_option() -> None:
    result = CliRunner().invoke(main, ["bench", "--workers", "0"])
    assert result.exit_code != 0
    assert "Traceback" not in result.output


def _history(conn: psycopg.Connection[Any], schema: str, job_id: int) -> list[tuple[str, int]]:
    rows = conn.execute(
        sql.SQL(
            "SELECT event, fence FROM {}.job_history WHERE job_id = %s ORDER BY phase, at, seq"
        ).format(sql.Identifier(schema)),
        [job_id],
    ).fetchall()
    return [(str(e), int(f)) for e, f in rows]


def _row(conn: psycopg.Connection[Any], schema: str, job_id: int) -> tuple[str, int]:
    row = conn.execute(
        sql.SQL("SELECT status, fence FROM {}.jobs WHERE id = %s").format(sql.Identifier(schema)),
        [job_id],
    ).fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


def test_complete_many_rejects_exactly_the_stale_members(
    queue: Queue, conn: psycopg.Connection[Any], schema: str
) -> None:
    ids = queue.enqueue_many(JobSpec("q", {"n": n}) for n in range(6))
    first = queue.claim("q", limit=6, worker="a")
    assert sorted(j.id for j in first) == ids and {j.fence for j in first} == {1}
    taken_over, killed = ids[0], ids[3]
    # taken_over: handed back and claimed again by b (fence 2); killed: operator kill (fence 2).
    assert queue.release_many([(taken_over, 1)], worker="a").applied == [taken_over]
    again = queue.claim("q", limit=1, worker="b")
    assert [(j.id, j.fence) for j in again] == [(taken_over, 2)]
    assert queue.kill([killed]) == [killed]

    batch = [(i, 1) for i in ids]
    settled = queue.complete_many(batch, worker="a")
    stale = [taken_over, killed]
    fresh = [i for i in ids if i not in stale]
    assert settled.applied == fresh
    assert settled.lost == stale

    for i in fresh:
        assert _row(conn, schema, i) == ("done", 1)
        assert ("completed", 1) in _history(conn, schema, i)
    assert _row(conn, schema, taken_over) == ("running", 2)
    assert _row(conn, schema, killed) == ("dead", 2)
    for i in stale:
        assert all(event != "completed" for event, _ in _history(conn, schema, i))

    # The holder of the fresh fence still completes it.
    assert queue.complete_many([(taken_over, 2)], worker="b").applied == [taken_over]
    assert _row(conn, schema, taken_over) == ("done", 2)
    assert ("completed", 2) in _history(conn, schema, taken_over)


SAME_RESOURCES_FIGURES = (
    "jobs",
    "done",
    "drain_seconds",
    "drain_rate",
    "wall_seconds",
    "wall_rate",
    "processes",
)


@pytest.mark.slow
def test_same_resources_tiny_has_every_level_and_drains_every_job(dsn: str) -> None:
    """Through the real CLI: the baseline's threads here, a real `pgq worker` process per pgq
    run."""
    before = _bench_schemas(dsn)
    data = _run_json(dsn, "--same-resources", "--jobs", "200", "--concurrency-levels", "1,4")
    assert data["mode"] == "same_resources"
    assert "one process and C-way concurrency" in data["resources"]
    assert data["params"]["jobs"] == 200
    assert data["params"]["handlers"] == ["sync", "async"]
    assert [level["concurrency"] for level in data["levels"]] == [1, 4]
    for level in data["levels"]:
        c = level["concurrency"]
        baseline = level["baseline"]
        runs = {"baseline": baseline, **{f"pgq_{k}": run for k, run in level["pgq"].items()}}
        assert set(runs) == {"baseline", "pgq_sync", "pgq_async"}, c
        for name, run in runs.items():
            assert set(SAME_RESOURCES_FIGURES) <= set(run), (c, name)
            assert run["jobs"] == run["done"] == 200, (c, name)
            assert run["processes"] == 1, (c, name)
            assert run["drain_rate"] > 0 and run["wall_rate"] > 0, (c, name)
            assert 0 < run["drain_seconds"] <= run["wall_seconds"], (c, name)
            assert 0 <= run["steal_percent"] <= 100, (c, name)  # Linux: /proc/stat
        assert baseline["threads"] == c and baseline["claim"] == 10
        assert baseline["completed"] == 200 and baseline["lost"] == 0
        for kind, run in level["pgq"].items():
            assert run["handler"] == kind and run["claim"] == c
            assert f"worker bench --concurrency {c} --burst" in run["command"]
            assert run["command"].endswith(f"pgq_bench.handlers:noop_{kind}")
            drain, wall = baseline["drain_rate"], baseline["wall_rate"]
            assert level["ratio"][kind] == pytest.approx(run["drain_rate"] / drain)
            assert level["ratio_wall"][kind] == pytest.approx(run["wall_rate"] / wall)
    assert _bench_schemas(dsn) == before, "throwaway schemas must be dropped"


@pytest.mark.slow
def test_same_resources_human_output_says_what_each_side_gets(dsn: str) -> None:
    result = CliRunner().invoke(
        main,
        [
            "--dsn",
            dsn,
            "bench",
            "--same-resources",
            "--jobs",
            "50",
            "--concurrency-levels",
            "2",
            "--handler",
            "async",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "both sides get one process and C-way concurrency" in result.output
    assert "pgq async" in result.output and "pgq sync" not in result.output
    assert "50/50" in result.output
    assert "steal" in result.output and "hypervisor" in result.output
    assert "baseline, 2 threads" in result.output and "seed" not in result.output.lower()


def test_same_resources_rejects_bad_levels_and_mixed_modes() -> None:
    for args in (
        ["--concurrency-levels", "1,x"],
        ["--concurrency-levels", "0"],
        ["--stats-scale"],
        ["--handler", "threads"],
    ):
        result = CliRunner().invoke(main, ["bench", "--same-resources", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output


def _bench_databases(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'bench\\_%'"
        ).fetchall()
    return {r[0] for r in rows}


DB_WORK_FIGURES = (
    "statement_us_per_job",
    "statements_per_job",
    "statement_wal_bytes_per_job",
    "wal_bytes_per_job",
)


def _check_db_work(data: dict[str, Any], runs: dict[str, dict[str, Any]]) -> None:
    """Every drain has its database work per job; statement figures all there or all missing
    (and then the run says why); the ratios are the sides' figures over the baseline's."""
    missing = data["db_work"]["statement_stats_missing"]
    for name, run in runs.items():
        work = run["db_work"]
        assert set(work) == set(DB_WORK_FIGURES), name
        assert work["wal_bytes_per_job"] > 0, name
        statements = [work[k] for k in DB_WORK_FIGURES[:3]]
        if missing:
            assert statements == [None, None, None], name
        else:
            assert all(v > 0 for v in statements), (name, statements)
    if not missing:
        # The baseline runs one UPDATE per job and one claim per ten: at least one statement each.
        assert runs["baseline"]["db_work"]["statements_per_job"] >= 1


@pytest.mark.slow
def test_same_resources_with_peers_and_db_work_tiny(dsn: str) -> None:
    """PgQueuer drains its own copy of the jobs in a process of its own, in the same run, and
    every drain's database work is metered in a throwaway database that is dropped after."""
    pytest.importorskip("pgqueuer", reason="the bench extra is not installed")
    data = _run_json(
        dsn,
        "--peers",
        "--db-work",
        "--jobs",
        "200",
        "--concurrency-levels",
        "2",
        "--handler",
        "async",
    )
    assert data["mode"] == "same_resources"
    assert data["params"]["peers"] is True and data["params"]["db_work"] is True
    assert data["peer"]["skipped"] is None
    assert data["peer"]["versions"]["pgqueuer"] != "?"
    assert "C QueueManagers each on its own asyncpg connection" in data["peer"]["resources"]
    [level] = data["levels"]
    peer, pgq = level["pgqueuer"], level["pgq"]["async"]
    assert set(SAME_RESOURCES_FIGURES) <= set(peer)
    assert peer["jobs"] == peer["done"] == 200
    assert (peer["processes"], peer["consumers"], peer["claim"]) == (1, 2, 10)
    assert 0 < peer["drain_seconds"] <= peer["wall_seconds"]
    assert peer["loop"] in ("uvloop", "asyncio")
    assert 0 <= peer["steal_percent"] <= 100
    assert level["ratio_peer"]["async"] == pytest.approx(pgq["drain_rate"] / peer["drain_rate"])
    assert level["ratio_peer_wall"]["async"] == pytest.approx(
        pgq["wall_rate"] / peer["wall_rate"]
    )
    runs = {"baseline": level["baseline"], "async": pgq, "pgqueuer": peer}
    _check_db_work(data, runs)
    for name in ("async", "pgqueuer"):
        ratio = level["db_work_ratio"][name]
        wal = runs[name]["db_work"]["wal_bytes_per_job"]
        assert ratio["wal_bytes_per_job"] == pytest.approx(
            wal / level["baseline"]["db_work"]["wal_bytes_per_job"]
        )
    # Every schema of the run lived in its throwaway database (named, as others' runs on a
    # shared server make theirs too), and that is gone.
    assert data["db_work"]["database"].startswith("bench_dbw_")
    assert data["db_work"]["database"] not in _bench_databases(dsn)


@pytest.mark.slow
def test_db_work_has_statement_time_on_the_bench_own_server() -> None:
    """Without --dsn the bench restarts its embedded server with pg_stat_statements loaded."""
    result = CliRunner(env={"PGQ_DSN": None}).invoke(
        main,
        ["bench", "--db-work", "--jobs", "100", "--concurrency-levels", "1", "--handler",
         "sync", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["server"]["embedded"] is True
    assert data["db_work"]["statement_stats_missing"] is None
    [level] = data["levels"]
    _check_db_work(data, {"baseline": level["baseline"], "sync": level["pgq"]["sync"]})
    assert "peer" not in data and "pgqueuer" not in level


@pytest.mark.slow
def test_peers_without_pgqueuer_is_one_line_and_the_run_goes_on(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgq_bench import peers

    monkeypatch.setattr(peers, "PEER_MODULES", ("pgq_bench_no_such_module",))
    args = ["--dsn", dsn, "bench", "--peers", "--jobs", "30", "--concurrency-levels", "1",
            "--handler", "async"]  # fmt: skip
    result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    note = "PgQueuer side skipped: pgq_bench_no_such_module is not installed"
    assert note in result.output
    assert "30/30" in result.output and "PgQueuer, 1 consumer" not in result.output
    data = _run_json(dsn, *args[3:])
    assert data["peer"]["skipped"].startswith(note)
    assert "pgqueuer" not in data["levels"][0] and "ratio_peer" not in data["levels"][0]


def test_peers_and_db_work_are_same_resources_runs() -> None:
    for args in (["--peers", "--stats-scale"], ["--db-work", "--producers", "2"]):
        result = CliRunner().invoke(main, ["bench", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "pick one" in result.output and "Traceback" not in result.output


PERCENTILE_FIGURES = ("n", "p50_ms", "p95_ms", "p99_ms", "max_ms")


@pytest.mark.slow
def test_pickup_tiny_has_idle_and_busy_figures(dsn: str) -> None:
    """A real `pgq worker` process whose handler records its start; every figure is there
    and ordered, and the throwaway schema is gone."""
    data = _run_json(
        dsn, "--pickup", "--latency-samples", "5", "--jobs", "40", "--concurrency", "2",
        "--handler", "async",
    )  # fmt: skip
    assert data["mode"] == "pickup"
    assert data["params"]["samples"] == 5 and data["params"]["busy_jobs"] == 40
    [(kind, run)] = data["runs"].items()
    assert kind == run["handler"] == "async" and run["concurrency"] == 2
    assert run["command"].endswith(
        "worker bench --concurrency 2 --handler pgq_bench.handlers:record_start_async"
    )
    figures = {
        "idle pickup": (run["idle"]["pickup"], 5),
        "idle claimed to start": (run["idle"]["claimed_to_start"], 5),
        "busy claimed to start": (run["busy"]["claimed_to_start"], 40),
    }
    for name, (fig, n) in figures.items():
        assert set(fig) == set(PERCENTILE_FIGURES), name
        assert fig["n"] == n, name
        assert fig["p50_ms"] <= fig["p95_ms"] <= fig["p99_ms"] <= fig["max_ms"], name
        assert fig["max_ms"] > 0, name
    # A job starts after its enqueue committed and after it was claimed (one clock here).
    assert run["idle"]["pickup"]["p50_ms"] > 0
    assert run["busy"]["jobs"] == 40 and run["busy"]["started_rate"] > 0
    assert run["schema"] not in _bench_schemas(dsn)


@pytest.mark.slow
def test_pickup_human_output_names_every_figure(dsn: str) -> None:
    args = ["--dsn", dsn, "bench", "--pickup", "--latency-samples", "3", "--jobs", "10",
            "--handler", "sync"]  # fmt: skip
    result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("idle: pickup", "idle: claimed to start", "busy: claimed to start", "sync"):
        assert text in result.output, text
    assert "async" not in result.output


def test_pickup_reads_the_starts_file_as_it_grows(tmp_path: Any) -> None:
    from pgq_bench.pickup import Starts

    path = tmp_path / "starts"
    starts = Starts(path)
    starts.poll()  # no file yet
    assert starts.seen == {}
    with open(path, "ab") as f:
        f.write(b"7 100.5\n8 101")
    starts.poll()
    assert starts.seen == {7: 100.5}
    with open(path, "ab") as f:
        f.write(b".25\n")
    starts.poll()
    assert starts.seen == {7: 100.5, 8: 101.25}
    with pytest.raises(PgqError, match="1 job"):
        starts.wait([7, 9], 0.01, lambda: None)


def test_pickup_is_a_run_of_its_own() -> None:
    result = CliRunner().invoke(main, ["bench", "--pickup", "--peers"])
    assert result.exit_code == 2, result.output
    assert "pick one" in result.output and "Traceback" not in result.output


def test_steal_is_the_share_of_cpu_time_the_hypervisor_gave_away() -> None:
    before = [100, 0, 50, 800, 0, 0, 0, 50]
    after = [500, 0, 150, 1200, 0, 0, 0, 150]  # 400 + 100 + 400 + 100 ticks: 100 stolen
    assert steal_percent(before, after) == 10.0
    assert busy_percent(before, after) == 50.0  # user 400 + system 100
    assert busy_percent(before, before) is None
    assert steal_percent(before, before) is None
    assert steal_percent(None, after) is None
    now = cpu_ticks()
    assert now is None or len(now) == 8


@pytest.mark.slow
def test_a_terminated_bench_stops_its_own_server(tmp_path: Path) -> None:
    """SIGTERM to `pgq bench` mid-run: the embedded server it started is stopped and its
    home deleted (before, the process died and left the server running)."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("PGQ_DSN", None)
    bench = subprocess.Popen(
        [sys.executable, "-m", "pgq_cli", "bench", "--producers", "2", "--jobs", "200000",
         "--rounds", "1", "--json"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        postmaster = 0
        while not postmaster and time.monotonic() < deadline and bench.poll() is None:
            for pid_file in tmp_path.glob("pgq-bench-*/**/postmaster.pid"):
                lines = pid_file.read_text().splitlines()
                # the server's own pid (initdb's bootstrap writes a negative one), once ready
                if len(lines) >= 8 and lines[7].strip() == "ready" and int(lines[0]) > 0:
                    postmaster = int(lines[0])
            time.sleep(0.2)
        assert postmaster, "the bench never started its server"
        time.sleep(2)  # the run is under way
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) != 0
    finally:
        if bench.poll() is None:
            bench.kill()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{postmaster}").exists():
        time.sleep(0.2)
    assert not Path(f"/proc/{postmaster}").exists(), "the bench's server is still running"
    assert not list(tmp_path.glob("pgq-bench-*")), "the bench's home is still there"


def _names(value: Any) -> set[str]:
    """Every key at any depth of `value`, and every side's `"side"`."""
    if isinstance(value, dict):
        sides = {v for k, v in value.items() if k == "side" and isinstance(v, str)}
        return set(value) | sides | {n for v in value.values() for n in _names(v)}
    if isinstance(value, list):
        return {n for v in value for n in _names(v)}
    return set()


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_committed_results_read_under_the_baseline_s_names(path: Path) -> None:
    """Results written before the rename read as today's; a failover or fleet run's `seed` is
    its random state and stays."""
    raw = json.loads(path.read_text())
    read = read_result(path)
    if "failover" in raw or "fleet" in raw:
        assert read == raw
        return
    assert _names(read) & set(LEGACY_NAMES) == set()
    old = _names(raw) & set(LEGACY_NAMES)
    assert {LEGACY_NAMES[n] for n in old} <= _names(read)
    assert with_baseline_names(read) == read, "today's names read unchanged"


def test_the_old_and_new_names_of_a_result_read_alike() -> None:
    new = {
        "baseline": {"claim_size": 10, "drain_rate": 100.0},
        "drain_rounds": {"baseline": [1.0, 2.0], "pgq": [3.0]},
        "enqueue": {"baseline_insert_per_job": {"rate": 5.0}},
        "params": {"baseline_limit": 10},
        "levels": [{"baseline": {"side": "baseline"}, "pgq": {"side": "pgq"}}],
        "sides": {"baseline_async": {"ratio_to_baseline": 1.0}},
        "batches": {"baseline_batch": {"ratio_to_baseline_batch": 1.0}},
    }
    old = json.loads(json.dumps(new).replace("baseline", "seed"))
    assert "baseline" not in json.dumps(old)
    assert with_baseline_names(old) == new
    assert with_baseline_names(new) == new
    fleet = {"fleet": {"seed": 7}, "drain": {"seed": None}}
    assert with_baseline_names(fleet) == fleet


def test_render_reads_a_result_written_before_the_rename() -> None:
    old = ROOT / "benchmarks" / "results" / "pg18-embedded.json"
    assert '"seed"' in old.read_text()
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "render.py"), str(old)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "| | baseline (LIMIT 10) |" in done.stdout
    assert "ratio (pgq drain / baseline drain)" in done.stdout
    assert "seed" not in done.stdout


def test_pgqueuer_batches_are_timed_without_their_connecting(dsn: str) -> None:
    """PgQueuer's batch side is timed as pgq's and the baseline's are, on a connection open
    already: its seconds are the enqueues', not its connecting's or its event loop's."""
    pytest.importorskip("pgqueuer", reason="the bench extra is not installed")
    import asyncio

    from pgq_bench import pgqueuer_side
    from pgq_bench.common import throwaway_schema

    payloads = [json.dumps({"n": n}).encode() for n in range(30)]
    with throwaway_schema(dsn, "bench_peer", pgq=False) as schema:
        asyncio.run(pgqueuer_side.install_and_fill(dsn, schema, []))
        t0 = time.perf_counter()
        seconds = asyncio.run(pgqueuer_side.enqueue_batches(dsn, schema, payloads, 10))
        whole = time.perf_counter() - t0
        with psycopg.connect(dsn) as conn:
            table = sql.Identifier(schema, "pgqueuer")
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
    assert row == (30,)
    assert 0 < seconds < whole
