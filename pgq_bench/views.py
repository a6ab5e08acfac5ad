"""`pgq bench --stats-scale --queues N | --big-errors N`: do the human views stay bounded?

Two fixtures, written by plain SQL as an operator (or a hostile tenant) could write them:
many queues (each with ready, dead and done jobs), and many dead jobs whose `last_error` is
about `error_bytes` long (half of them one long first line, half a long traceback). Then it
measures what an operator runs on them: `pgq jobs --status dead --limit 1000` and `pgq errors`
(peak RSS of the process, bytes printed, seconds), and a headless dashboard in a process of its
own (time to the first drawn queues table, idle CPU share and RSS, seconds to quit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

from .common import load_average, machine, server_version, throwaway_schema

QUEUES_FIXTURE = """
INSERT INTO {s}.jobs (queue, payload, status, run_at, attempts, fence, last_error, queued_at,
                      worker, claimed_at, finished_at)
SELECT format('queue-%%s', lpad(q::text, 5, '0')), jsonb_build_object('n', k), st.status,
       now() - interval '1 minute', st.attempts, st.attempts,
       CASE st.status WHEN 'dead' THEN 'TimeoutError: call ' || q || ' took 30s' END,
       now() - interval '2 minutes',
       CASE WHEN st.status <> 'ready' THEN 'bench-fixture' END,
       CASE WHEN st.status <> 'ready' THEN now() - interval '90 seconds' END,
       CASE WHEN st.status <> 'ready' THEN now() - interval '80 seconds' END
  FROM generate_series(1, %(queues)s) q,
       (VALUES ('ready', 0, 1), ('ready', 0, 2), ('dead', 5, 3), ('done', 1, 4), ('done', 1, 5))
         AS st(status, attempts, k)
"""
BIG_ERRORS_FIXTURE = """
INSERT INTO {s}.jobs (queue, payload, status, run_at, attempts, fence, last_error, queued_at,
                      worker, claimed_at, finished_at)
SELECT 'big-errors', jsonb_build_object('n', g), 'dead', now() - interval '1 hour', 5, 5,
       CASE WHEN g %% 2 = 0
         THEN 'RuntimeError: job ' || g || ' failed: ' || repeat('x', %(bytes)s)
         ELSE 'ValueError: record ' || g || E' is bad\n'
              || repeat(E'  File "handler.py", line 42, in run\n', %(bytes)s / 37)
       END,
       now() - interval '2 hours', 'bench-fixture', now() - interval '1 hour',
       now() - interval '1 hour' + g * interval '1 ms'
  FROM generate_series(%(first)s::int, %(last)s::int) g
"""
#: rows per INSERT of the big errors (a statement stays well under the statement timeout)
BIG_ERRORS_BATCH = 500
PROBE = Path(__file__).with_name("dashboard_probe.py")


@dataclass(frozen=True)
class ViewsOptions:
    queues: int
    big_errors: int
    error_bytes: int
    idle_seconds: float
    #: the Python that runs the CLI and the dashboard probe (another checkout's venv: before)
    python: str = sys.executable


def fill_queues(conn: psycopg.Connection[Any], schema: str, queues: int) -> None:
    conn.execute(sql.SQL(QUEUES_FIXTURE).format(s=sql.Identifier(schema)), {"queues": queues})


def fill_big_errors(conn: psycopg.Connection[Any], schema: str, count: int, size: int) -> None:
    statement = sql.SQL(BIG_ERRORS_FIXTURE).format(s=sql.Identifier(schema))
    for first in range(1, count + 1, BIG_ERRORS_BATCH):
        last = min(count, first + BIG_ERRORS_BATCH - 1)
        conn.execute(statement, {"first": first, "last": last, "bytes": size})


def run_cli(python: str, dsn: str, schema: str, argv: Sequence[str]) -> dict[str, Any]:
    """One `pgq` command in a process of its own: its peak RSS, the bytes it printed, seconds."""
    command = [python, "-m", "pgq_cli", "--dsn", dsn, "--schema", schema, *argv]
    env = {**os.environ, "COLUMNS": "160"}
    started = time.perf_counter()
    # cwd "/": `-m` puts the working directory first on the path, and a checkout there would
    # shadow the `python` given
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd="/"
    )
    assert proc.stdout is not None
    printed = 0
    while chunk := proc.stdout.read(1 << 16):
        printed += len(chunk)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "command": "pgq " + " ".join(argv),
        "exit": proc.returncode,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "bytes_printed": printed,
        "seconds": time.perf_counter() - started,
    }


def run_dashboard(
    python: str, dsn: str, schema: str, idle: float, view: str
) -> dict[str, Any]:
    """The dashboard probe (`dashboard_probe.py`) in a process of its own, and its figures."""
    started = time.perf_counter()
    done = subprocess.run(
        [python, str(PROBE), dsn, schema, str(idle), view],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=idle + 600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"view": view, "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    figures: dict[str, Any] = json.loads(lines[-1])
    figures["process_seconds"] = time.perf_counter() - started
    return figures


def measure(
    python: str,
    dsn: str,
    schema: str,
    idle: float,
    views: Sequence[str],
    say: Callable[[str], None],
) -> dict[str, Any]:
    out: dict[str, Any] = {"cli": [], "dashboard": []}
    for argv in (["jobs", "--status", "dead", "--limit", "1000"], ["errors"]):
        say(f"pgq {' '.join(argv)}")
        out["cli"].append(run_cli(python, dsn, schema, argv))
    for view in views:
        say(f"dashboard, {view} view, idle {idle:g}s")
        out["dashboard"].append(run_dashboard(python, dsn, schema, idle, view))
    return out


def run_views_scale(
    dsn: str, embedded: bool, opts: ViewsOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "params": {**asdict(opts), "python": opts.python},
        "machine": machine(),
        "scenarios": {},
    }
    scenarios = []
    if opts.queues:
        scenarios.append(("queues", opts.queues))
    if opts.big_errors:
        scenarios.append(("big_errors", opts.big_errors))
    for name, size in scenarios:
        with (
            throwaway_schema(dsn, f"bench_{name}") as schema,
            psycopg.connect(dsn, autocommit=True) as conn,
        ):
            result["server"] = {"version": server_version(conn), "embedded": embedded}
            t0 = time.perf_counter()
            if name == "queues":
                say(f"fill: {size:,} queues (2 ready, 1 dead, 2 done each)")
                fill_queues(conn, schema, size)
                views: tuple[str, ...] = ("leases",)
            else:
                say(f"fill: {size:,} dead jobs with a {opts.error_bytes:,}-byte last_error")
                fill_big_errors(conn, schema, size, opts.error_bytes)
                views = ("jobs", "errors")
            conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(schema)))
            scenario = {"size": size, "fill_seconds": time.perf_counter() - t0}
            scenario.update(measure(opts.python, dsn, schema, opts.idle_seconds, views, say))
            result["scenarios"][name] = scenario
    result["machine"]["load_at_end"] = load_average()
    return result


def _figure(value: Any, form: str) -> str:
    return "—" if value is None else format(value, form)


def print_views(result: dict[str, Any], console: Console) -> None:
    for name, scenario in result["scenarios"].items():
        what = "queues" if name == "queues" else "dead jobs with a big last_error"
        cli = Table(title=f"{scenario['size']:,} {what}: commands")
        for col in ("command", "exit", "peak RSS MB", "bytes printed", "seconds"):
            cli.add_column(col, justify="left" if col == "command" else "right")
        for run in scenario["cli"]:
            cli.add_row(
                run["command"],
                str(run["exit"]),
                f"{run['peak_rss_mb']:,.1f}",
                f"{run['bytes_printed']:,}",
                f"{run['seconds']:.2f}",
            )
        console.print(cli)
        board = Table(title=f"{scenario['size']:,} {what}: dashboard (headless, 160x45)")
        for col in (
            "view",
            "first draw s",
            "idle CPU %",
            "RSS MB",
            "peak RSS MB",
            "polls idle",
            "quit s",
            "connection",
        ):
            board.add_column(col, justify="left" if col in ("view", "connection") else "right")
        for run in scenario["dashboard"]:
            if "error" in run:
                board.add_row(run["view"], f"failed: {run['error']}")
                continue
            board.add_row(
                run["view"],
                _figure(run.get("first_draw_seconds"), ".2f"),
                _figure(run.get("idle_cpu_percent"), ".1f"),
                _figure(run.get("rss_mb"), ",.1f"),
                _figure(run.get("peak_rss_mb"), ",.1f"),
                str(run.get("polls_while_idle")),
                _figure(run.get("quit_seconds"), ".2f"),
                str(run.get("connection")),
            )
        console.print(board)
