"""The CLI at 80 columns: `pgq jobs` and `pgq workers` keep the end of a worker id (its pid
and suffix tell workers apart; they printed `vm:4…` and `build-…`), and durations print as the
dashboard prints them."""

from __future__ import annotations

from click.testing import CliRunner
from support import ENV

from pgq_cli.cli import main
from pgq_core import Queue, ops
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


def test_the_cli_and_the_dashboard_print_a_duration_alike() -> None:
    """The p95 wait (`pgq latency`, the queues table), the oldest due job (`pgq stats`, the
    queues table), a transaction's age and a lock wait (`pgq health`, the Health view)."""
    from pgq_cli.latency_cli import seconds_text
    from pgq_tui import humanize
    from pgq_tui.widgets.queues_table import wait_p95

    for seconds in (0.0123, 1.25, 37.4, 615.4, 8040.0):
        shown = humanize.duration(seconds)
        assert seconds_text(seconds) == shown == wait_p95(seconds).plain


def test_pgq_workers_at_80_columns_keeps_each_workers_end(
    dsn: str, schema: str, queue: Queue
) -> None:
    for suffix in ("a1b2c3", "d4e5f6"):
        worker = f"build-machine-07.eu-west-1.example.com:4242:{suffix}"
        queue.run(
            ops.worker_beat(
                worker, "build-machine-07", 4242, ["emails", "reports", "thumbnails"], 8,
                "0.1.0", 60, (1, 1234, 5),
            )
        )
    runner = CliRunner(env={**ENV, "COLUMNS": "80"})
    done = runner.invoke(main, ["--dsn", dsn, "--schema", schema, "workers"])
    assert done.exit_code == 0, done.output
    assert "…com:4242:a1b2c3" in done.output and "…com:4242:d4e5f6" in done.output
    assert max(len(line) for line in done.output.splitlines()) <= 80
    assert done.output.rstrip().endswith("┘")  # the whole table: no column cut off the edge
