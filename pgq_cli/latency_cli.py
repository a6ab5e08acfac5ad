"""`pgq latency`: wait and run-time percentiles per queue, from the done jobs of the jobs table.

Wait is due to claimed (claimed_at - run_at, the last attempt's), run is claimed to done
(finished_at - claimed_at); done jobs only (a dead job's finished_at is when it was given up,
not when a handler returned). Over the last 5 minutes and the last `--since` (default 1h),
at most `ops.LATENCY_CAP` jobs per queue and window, the most recently finished: a window that
holds more shows its count as `20,000+` and its percentiles are those of the most recent.

Invariants: no SQL here (the statement is `latency` in pgq_core/sql/observer.sql, reached
through `Queue`);
queue names are printed through `output.text`; `--json` prints the values exactly, seconds as
floats and null for a window without jobs.
"""

from __future__ import annotations

from datetime import timedelta

import click
from rich.table import Table
from rich.text import Text

from pgq_core.defaults import LATENCY_CAP
from pgq_core.durations import short_duration
from pgq_core.models import LatencyWindow

from . import output
from .options import INT4_MAX, duration, queue_option
from .output import echo_json, say_read_from, with_read_from
from .session import settings

#: queues a human table shows at most (by name); --limit changes it
DEFAULT_LIMIT = 50
#: the most cells a queue name takes in the table
NAME_CELLS = 40
DASH = "—"


def seconds_text(value: float | None) -> str:
    """A latency as the dashboard prints it (`short_duration`: 12ms, 1.2s, 4m05s, 2h03m); `—`
    without jobs."""
    return DASH if value is None else short_duration(value)


def jobs_text(window: LatencyWindow) -> str:
    return f"{window.jobs:,}+" if window.capped else f"{window.jobs:,}"


def _since(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    parsed = duration(ctx, param, value)
    assert parsed is not None
    if parsed <= timedelta(0):
        raise click.BadParameter("must be longer than 0", ctx, param)
    return parsed


@click.command("latency")
@click.option(
    "--queue", "queue_name", callback=queue_option, help="Only this queue (any name, even unseen)."
)
@click.option(
    "--since",
    default="1h",
    show_default=True,
    callback=_since,
    help="The longer window, e.g. 15m, 1h, 1d (the shorter is the last 5 minutes).",
)
@click.option(
    "--limit",
    "-n",
    default=DEFAULT_LIMIT,
    show_default=True,
    type=click.IntRange(1, INT4_MAX),
    help="At most this many queues, by name.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def latency_command(
    ctx: click.Context, queue_name: str | None, since: timedelta, limit: int, as_json: bool
) -> None:
    """Wait and run-time p50/p95/p99 per queue over 5m and --since, from done jobs.

    Wait is due to claimed (claimed_at - run_at), run time claimed to done (finished_at -
    claimed_at). Per queue and window, at most the 20,000 most recently finished done jobs are
    read: a window holding more shows `20,000+` jobs (`"capped": true` in JSON) and the
    percentiles of those. Dead jobs are left out: their finish is when they were given up, not
    when a handler returned. `—` (null): no done job in the window."""
    queues = None if queue_name is None else [queue_name]
    group = settings(ctx)
    with group.reader() as q:
        report = q.latency(since, queues, limit)
        role = group.read_from(q)
    if as_json:
        echo_json(with_read_from(report.to_dict(), role))
        return
    say_read_from(role)
    title = output.text(f"pgq latency · {group.read_display()}")
    table = Table(
        title=title,
        caption=(
            f"done jobs · wait: due→claimed · run: claimed→done · at most {LATENCY_CAP:,} per "
            "queue and window, the most recent (N+: capped)"
        ),
    )
    table.add_column("queue")
    table.add_column("window", no_wrap=True)
    table.add_column("jobs", justify="right", no_wrap=True)
    for col in ("wait\np50", "wait\np95", "wait\np99", "run\np50", "run\np95", "run\np99"):
        table.add_column(col, justify="right", no_wrap=True)
    for entry in report.queues:
        name = output.text(entry.queue)
        if name.cell_len > NAME_CELLS:
            name.truncate(NAME_CELLS, overflow="ellipsis")
        for i, (label, w) in enumerate(entry.windows.items()):
            table.add_row(
                name if i == 0 else Text(""),
                label,
                jobs_text(w),
                seconds_text(w.wait.p50),
                seconds_text(w.wait.p95),
                seconds_text(w.wait.p99),
                seconds_text(w.run.p50),
                seconds_text(w.run.p95),
                seconds_text(w.run.p99),
            )
    console = output.console()
    if not report.queues:
        console.print("no done jobs yet: latency is measured on completed jobs")
        return
    console.print(table)
    for entry in report.queues:
        skewed = [(label, w) for label, w in entry.windows.items() if w.skewed]
        if skewed:
            label, w = skewed[-1]
            console.print(
                f"clock skew: {output.plural(w.skewed, 'done job')} of queue "
                f"{output.escaped(entry.queue)} ({label}) had a negative wait or run, down to "
                f"-{w.skew_seconds:,.1f}s, counted as 0: the clocks that wrote its times "
                "disagree",
                highlight=False,
            )
    if report.total > len(report.queues):
        more = report.total - len(report.queues)
        console.print(
            f"{output.plural(more, 'more queue')} not shown (--limit {limit}; --queue Q for one)"
        )

