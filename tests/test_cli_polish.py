"""The CLI at 80 columns: `pgq jobs` keeps the end of a worker id (its pid and suffix tell
workers apart; it printed `vm:4…`), and durations print as the dashboard prints them."""

from __future__ import annotations

from click.testing import CliRunner
from support import ENV

from pgq_cli.cli import main
from pgq_core import Queue
from pgq_core.durations import short_duration
from pgq_core.text import keep_end


def test_keep_end() -> None:
    assert keep_end("short", 16) == "short"
    assert keep_end("demo-host.example.com:4242:a1b2c3", 16) == "…com:4242:a1b2c3"
    assert len(keep_end("x" * 40, 16)) == 16
    assert keep_end("abc", 1) == "…"


def test_pgq_jobs_at_80_columns_keeps_the_workers_end(dsn: str, schema: str, queue: Queue) -> None:
    queue.enqueue("q", {})
    queue.claim("q", 1, worker="build-machine-07.example.com:4242:a1b2c3")
    runner = CliRunner(env={**ENV, "COLUMNS": "80"})
    done = runner.invoke(main, ["--dsn", dsn, "--schema", schema, "jobs", "--queue", "q"])
    assert done.exit_code == 0, done.output
    assert "4242:a1b2c3" in done.output
    assert max(len(line) for line in done.output.splitlines()) <= 80


def test_durations_print_alike() -> None:
    assert [short_duration(s) for s in (0.85, 4.2, 37, 615.4, 8040, 273600)] == [
        "850ms", "4.2s", "37s", "10m15s", "2h14m", "3d04h"
    ]
