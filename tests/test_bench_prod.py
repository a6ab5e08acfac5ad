"""`pgq bench --producers` and `pgq bench --soak` on the test server (tiny sizes), and the soak's
pass criteria and plot script."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from pgq_bench.baseline import BASELINE_ENQUEUE_BATCH, setup_baseline
from pgq_bench.common import BYTECODE_PACKAGES, installed_bytecode, throwaway_schema
from pgq_bench.soak import verdict
from pgq_cli.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _bench_schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench\\_%' "
            "OR nspname LIKE 'soak\\_%'"
        ).fetchall()
    return {r[0] for r in rows}


def test_the_bench_runs_pgq_from_bytecode_as_an_installed_pgq_does(tmp_path: Path) -> None:
    """`installed_bytecode` leaves a current .pyc beside every module of pgq's packages, which
    a process started with PYTHONDONTWRITEBYTECODE then loads instead of compiling again."""
    installed_bytecode()
    stale = []
    for name in BYTECODE_PACKAGES:
        package = ROOT / name
        for source in package.rglob("*.py"):
            cached = importlib.util.cache_from_source(str(source))
            if not Path(cached).exists() or Path(cached).stat().st_mtime < source.stat().st_mtime:
                stale.append(str(source.relative_to(ROOT)))
    assert stale == []


def run_file_side(module: str, args: list[str], env: dict[str, str]) -> list[str]:
    """Run a bench side's file process (`python -m module args`, with `env`); the modules of
    pgq_core and psycopg it loaded."""
    code = (
        "import runpy, sys\n"
        f"runpy.run_module({module!r}, run_name='__main__')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pgq_core', 'psycopg')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().replace("'", '"'))
    return loaded


def test_the_baseline_file_process_enqueues_each_line_with_the_batch_insert(
    dsn: str, tmp_path: Path
) -> None:
    """`baseline_file` (the baseline's side of `pgq enqueue --file`) writes one job per
    non-blank line, in batches, each line's JSON as jsonb reads it, and imports no pgq code."""
    lines = tmp_path / "jobs.jsonl"
    texts = [f'{{"n": {n}, "x": 1.10}}' for n in range(2500)]
    lines.write_text("\n".join(texts[:7]) + "\n\n  \n" + "\n".join(texts[7:]) + "\n")
    with throwaway_schema(dsn, "bench_file", pgq=False) as schema:
        setup_baseline(dsn, schema)
        env = {"BASELINE_DSN": dsn, "BASELINE_SCHEMA": schema,
               "BASELINE_STATEMENT": BASELINE_ENQUEUE_BATCH}  # fmt: skip
        loaded = run_file_side("pgq_bench.baseline_file", [str(lines), "filed"], env)
        assert "psycopg" in loaded, "it is psycopg's"
        assert [m for m in loaded if m.startswith("pgq_core")] == [], "it loads no pgq code"
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                sql.SQL("SELECT queue, payload::text FROM {}.jobs ORDER BY id").format(
                    sql.Identifier(schema)
                )
            ).fetchall()
    assert rows == [("filed", t) for t in texts]  # jsonb writes these back as they are


def test_the_pgqueuer_file_process_enqueues_each_line_with_its_batch_enqueue(
    dsn: str, tmp_path: Path
) -> None:
    """`pgqueuer_file` (PgQueuer's side of `pgq enqueue --file`) writes one job per non-blank
    line, in batches, each line's bytes as its payload, and imports neither psycopg nor pgq."""
    pytest.importorskip("pgqueuer", reason="the bench extra is not installed")
    import asyncio

    from pgq_bench import pgqueuer_side

    lines = tmp_path / "jobs.jsonl"
    texts = [f'{{"n": {n}}}' for n in range(2500)]
    lines.write_text("\n".join(texts[:7]) + "\n\n  \n" + "\n".join(texts[7:]) + "\n")
    with throwaway_schema(dsn, "bench_peer", pgq=False) as schema:
        asyncio.run(pgqueuer_side.install_and_fill(dsn, schema, []))
        env = {"PEER_CONNECT": json.dumps(pgqueuer_side.connect_params(dsn))}
        loaded = run_file_side("pgq_bench.pgqueuer_file", [str(lines), schema], env)
        assert loaded == [], "PgQueuer's process loads no psycopg and no pgq"
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                sql.SQL("SELECT entrypoint, payload FROM {} ORDER BY id").format(
                    sql.Identifier(schema, "pgqueuer")
                )
            ).fetchall()
    assert rows == [("bench", t.encode()) for t in texts]


@pytest.mark.slow
def test_producers_tiny_has_every_side_and_notify_counts(dsn: str) -> None:
    before = _bench_schemas(dsn)
    args = ["--dsn", dsn, "bench", "--producers", "4", "--jobs", "200", "--rounds", "1", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    sides = data["sides"]
    assert set(sides) == {
        "baseline", "pgq_always", "pgq_edge", "pgq_off", "pgq_shared_edge", "pgq_shared_always",
    }  # fmt: skip
    for side in sides.values():
        assert side["rate"] > 0 and side["p99_ms"] >= side["p50_ms"] > 0
    assert sides["baseline"]["ratio_to_baseline"] == 1
    # always: at least one, at most one per job (the process notifier shares them)
    assert 1 <= sides["pgq_always"]["notifications"] <= 200
    assert 1 <= sides["pgq_edge"]["notifications"] < 200
    assert sides["pgq_off"]["notifications"] == 0
    assert 1 <= sides["pgq_shared_always"]["notifications"] <= 200
    assert 0 <= sides["pgq_always"]["max_queue_usage"] < 1
    asynchronous = data["async_sides"]
    assert set(asynchronous) == {
        "baseline_async", "pgq_async_edge", "pgq_async_always", "pgq_async_shared_edge",
        "pgq_async_shared_always",
    }  # fmt: skip
    assert 1 <= asynchronous["pgq_async_always"]["notifications"] <= 200
    batches = data["batches"]["sides"]
    assert set(batches) == {
        "baseline_batch", "pgqueuer_batch", "pgq_enqueue_many", "pgq_enqueue_copy",
        "baseline_file", "pgqueuer_file", "pgq_enqueue_file", "pgq_copy_bulk",
    }  # fmt: skip
    assert all(b["rate"] > 0 for b in batches.values())
    assert batches["baseline_batch"]["ratio_to_baseline_batch"] == 1
    assert batches["baseline_file"]["ratio_to_baseline_file"] == 1
    assert batches["pgqueuer_file"]["ratio_to_pgqueuer_file"] == 1
    assert _bench_schemas(dsn) == before, "throwaway schemas are dropped"


@pytest.mark.slow
def test_soak_short_run_writes_samples_and_a_summary(dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "soak.jsonl"
    args = [
        "--dsn", dsn, "bench", "--soak", "16s", "--soak-sample", "4s", "--rate", "40",
        "--json-lines", str(out),
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    header, samples, summary = lines[0]["soak"], lines[1:-1], lines[-1]["summary"]
    assert header["rate"] == 40 and header["workers"] == 4
    assert len(samples) == 4 == summary["samples"]
    for s in samples:
        assert {"jobs", "job_events"} <= set(s["tables"])
        assert s["tables"]["jobs"]["table_bytes"] > 0
        assert "dead_tuples" in s["tables"]["jobs"]
    assert sum(s["claimed"] for s in samples) > 0.8 * summary["enqueued"]
    assert samples[-1]["claim_p99_ms"] is not None
    assert sum(s["pruned"] for s in samples) > 0, "prune runs every sample"
    assert summary["worker_exit_codes"] == [0, 0, 0, 0]
    assert set(summary["checks"]) >= {"jobs.table_bytes", "claim_p99_ms"}
    assert "soak" in result.output and "samples" in result.output


def _sample(size: int, p99: float) -> dict[str, Any]:
    tables = {t: {"table_bytes": size, "index_bytes": size // 2} for t in ("jobs", "job_events")}
    return {"tables": tables, "claim_p50_ms": p99 / 4, "claim_p99_ms": p99}


def test_verdict_flat_passes_and_growth_fails() -> None:
    flat = [_sample(1000 if i < 3 else 5000, 10) for i in range(9)]
    assert verdict(flat)["passed"] is True, "warm-up (first third) is not judged"
    growing = [_sample(1000 * (i + 1), 10) for i in range(9)]
    result = verdict(growing)
    assert result["passed"] is False and not result["checks"]["jobs.table_bytes"]["passed"]
    slower = [_sample(5000, 10 if i < 6 else 100) for i in range(9)]
    assert verdict(slower)["checks"]["claim_p99_ms"]["passed"] is False
    assert verdict(flat[:2])["passed"] is None


def test_soak_rejects_mixed_modes() -> None:
    result = CliRunner().invoke(main, ["bench", "--soak", "1m", "--producers", "4"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


def test_plot_script_makes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    lines = [{"soak": {"rate": 10}}]
    lines += [
        {**_sample(1000 + i, 5), "elapsed_s": 60.0 * i, "claim_p50_ms": 1.0,
         "done_p50_ms": 2.0, "done_p99_ms": 9.0,
         "tables": {t: {"table_bytes": 1000 + i, "index_bytes": 500, "dead_tuples": i}
                    for t in ("jobs", "job_events")}}
        for i in range(5)
    ]  # fmt: skip
    lines.append({"summary": {"passed": True}})
    src = tmp_path / "s.jsonl"
    src.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    png = tmp_path / "s.png"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plot_soak.py"), str(src), str(png)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
