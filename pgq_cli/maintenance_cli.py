"""Keeping the schema healthy: `pgq migrate`, `reap`, `prune`, `health` and `config`.

Invariants: reap and prune work in bounded batches (short transactions); readings past a
threshold are warnings, never a non-zero exit; `--json` prints values exactly.
"""

from __future__ import annotations

from datetime import timedelta

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pgq_core import migrate as run_migrate
from pgq_core.cluster import standby_refusal
from pgq_core.defaults import PRUNE_BATCH, REAP_BATCH, STUCK_FACTOR, STUCK_FLOOR, STUCK_MIN_DONE
from pgq_core.durations import short_duration
from pgq_core.models import Health, PruneReport, StrandedJobs, StuckJobs
from pgq_core.ops import NOTIFY_MODES
from pgq_core.text import printable

from . import output
from .failures import fail
from .options import INT4, DocstringCommand, FiniteFloatRange, duration
from .output import echo_json, say_read_from, when, with_read_from
from .session import settings

# ------------------------------------------------------------------------ schema, leases, history


@click.command("migrate")
@click.pass_context
def migrate_command(ctx: click.Context) -> None:
    """Create or upgrade the queue's schema (idempotent; safe from many processes at once)."""
    group = settings(ctx)
    target = group.target()
    with group.connect() as conn:
        applied = run_migrate(conn, target.schema)
    if applied:
        click.echo(f"schema {target.schema}: applied version(s) {', '.join(map(str, applied))}")
    else:
        click.echo(f"schema {target.schema}: up to date")


@click.command("reap")
@click.option("--json", "as_json", is_flag=True, help="Print the reaped jobs as JSON.")
@click.pass_context
def reap_command(ctx: click.Context, as_json: bool) -> None:
    """Expired leases back to ready (or dead at max attempts), in batches until none is left."""
    reaped: list[tuple[int, str]] = []
    with settings(ctx).queue() as q:
        while batch := q.reap(REAP_BATCH):
            reaped += batch
    if as_json:
        echo_json([{"id": i, "status": s} for i, s in reaped])
        return
    if not reaped:
        click.echo("no expired leases")
        return
    ready = [i for i, s in reaped if s == "ready"]
    dead = [i for i, s in reaped if s == "dead"]
    click.echo(f"reaped {output.plural(len(reaped), 'job')}")
    if ready:
        click.echo(f"  ready again: {output.ids_text(ready)}")
    if dead:
        click.echo(f"  dead (out of attempts): {output.ids_text(dead)}")


@click.command("prune", cls=DocstringCommand)
@click.option(
    "--older-than",
    required=True,
    callback=duration,
    help="Delete done jobs finished longer ago than this, e.g. 7d.",
)
@click.option(
    "--batch",
    type=INT4,
    default=PRUNE_BATCH,
    show_default=True,
    help="Rows deleted per statement (keeps each transaction short).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"deleted": N, "partitions_dropped": [...], "history_rows_kept": N, ...}.',
)
@click.pass_context
def prune_command(ctx: click.Context, older_than: timedelta, batch: int, as_json: bool) -> None:
    """Delete old done jobs and their history, in bounded batches; drop the days of history
    that lie entirely before the cutoff, keeping the history of jobs still present."""
    with settings(ctx).queue() as q, output.progress(total_hint=False) as progress:
        task = progress.add_task("pruning: 0 deleted")

        def show(report: PruneReport) -> None:
            dropped = len(report.partitions_dropped)
            progress.update(
                task,
                description=f"pruning: {report.deleted} deleted, "
                f"{output.plural(dropped, 'partition')} dropped",
            )

        report = q.prune_report(older_than, batch, show)
    if as_json:
        echo_json(report.to_dict())
        return
    click.echo(
        f"pruned {output.plural(report.deleted, 'done job')} older than {output.span(older_than)}"
    )
    if report.partitions_dropped:
        click.echo(
            f"dropped {output.plural(len(report.partitions_dropped), 'history partition')} "
            f"({', '.join(report.partitions_dropped)}), keeping "
            f"{output.plural(report.history_rows_kept, 'history row')} of jobs still present"
        )
    if report.partitions_locked:
        click.echo(
            f"left {output.plural(len(report.partitions_locked), 'history partition')} "
            f"for the next prune (busy: {', '.join(report.partitions_locked)})"
        )
    for day in report.days_not_created:
        click.echo(f"no history partition for {day} (its rows go to the default partition)")


# ---------------------------------------------------------------------------- health


@click.command("health", cls=DocstringCommand)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (with warnings).")
@click.option(
    "--stuck-factor",
    type=FiniteFloatRange(min=0, min_open=True, max=1_000_000),
    default=STUCK_FACTOR,
    show_default=True,
    help="A running job is stuck past this many times its queue's p99 run time (last hour).",
)
@click.option(
    "--stuck-floor",
    default=output.span(STUCK_FLOOR),
    show_default=True,
    callback=duration,
    help="...and never before running this long (alone when the queue has no p99).",
)
@click.pass_context
def health_command(
    ctx: click.Context, as_json: bool, stuck_factor: float, stuck_floor: timedelta
) -> None:
    """Table bloat and vacuum, the oldest transaction holding back vacuum, NOTIFY queue use,
    lock waits on jobs, and stuck jobs: running with their lease still renewed (the worker is
    alive) past --stuck-factor times their queue's p99 run time and past --stuck-floor (the
    longest running first, at most 100 listed). Readings past a threshold are warnings (the
    exit code stays 0)."""
    group = settings(ctx)
    with group.reader() as q:
        role = q.server_role()
        if role.standby and group.read_dsn is None:
            fail(standby_refusal(role))
        health = q.health(stuck_factor, stuck_floor)
    shown = role if group.read_dsn is not None else None
    if as_json:
        echo_json(with_read_from(health.to_dict(), shown))
        return
    say_read_from(shown)
    _print_health(health)


def _print_health(h: Health) -> None:
    console = output.console()
    table = Table(title="tables")
    for col in ("table", "live", "dead", "last vacuum", "last analyze", "table", "indexes"):
        table.add_column(col, justify="left" if col in ("table", "last vacuum") else "right")
    for t in h.tables:
        vacuum = max((v for v in (t.last_vacuum, t.last_autovacuum) if v), default=None)
        analyze = max((v for v in (t.last_analyze, t.last_autoanalyze) if v), default=None)
        table.add_row(
            output.escaped(t.table),
            f"{t.live_tuples:,}",
            f"{t.dead_tuples:,}",
            when(vacuum) or "never",
            when(analyze) or "never",
            output.megabytes(t.table_bytes),
            output.megabytes(t.index_bytes),
        )
    console.print(table)
    x = h.xmin
    if x is None:
        console.print("oldest transaction: none holds back vacuum")
    else:
        age = "" if x.age_seconds is None else short_duration(x.age_seconds)
        console.print(
            f"oldest transaction: pid {x.pid}, open {age}, {output.escaped(x.state)}, "
            f"user {output.escaped(x.user)}, app {output.escaped(x.application)}: "
            f"{output.escaped(x.query)}",
            highlight=False,
        )
    console.print(f"NOTIFY queue: {h.notify_usage:.1%} used", highlight=False)
    if not h.lock_waits:
        console.print("lock waits on jobs: none")
    for w in h.lock_waits:
        waited = "" if w.waited_seconds is None else short_duration(w.waited_seconds)
        by = ", ".join(map(str, w.blocked_by)) or "?"
        console.print(
            f"lock wait: pid {w.pid} {output.escaped(w.mode)} ({output.escaped(w.locktype)}) "
            f"for {waited}, "
            f"blocked by {by}: {output.escaped(w.query)}",
            highlight=False,
        )
    _print_stuck(console, h.stuck_jobs)
    _print_stranded(console, h.stranded)
    for warning in h.warnings:
        console.print(f"[yellow]warning:[/yellow] {output.escaped(warning)}", highlight=False)


def _print_stuck(console: Console, stuck: StuckJobs | None) -> None:
    if stuck is None:
        return
    rule = (
        f"running past {stuck.factor:g}x their queue's p99 run time (with fewer than "
        f"{STUCK_MIN_DONE} done jobs: its longest), its longest done run and "
        f"{stuck.floor_seconds:g}s, lease still renewed"
    )
    if not stuck.total:
        console.print(f"stuck jobs: none ({rule})", highlight=False)
        return
    shown = f", the {len(stuck.jobs):,} longest shown" if len(stuck.jobs) < stuck.total else ""
    console.print(f"stuck jobs: {stuck.total:,} ({rule}{shown})", highlight=False)
    table = Table()
    for col in ("job", "queue", "running for", "p99", "longest", "stuck past", "worker"):
        table.add_column(col, justify="left" if col in ("queue", "worker") else "right")
    for j in stuck.jobs:
        if j.p99_seconds is None:
            p99 = "no history"
        elif not j.trusted:
            p99 = f"({_seconds(j.p99_seconds)}, {j.done_jobs} jobs)"
        else:
            p99 = _seconds(j.p99_seconds)
        table.add_row(
            str(j.id),
            output.text(j.queue),
            _seconds(j.running_seconds),
            p99,
            "—" if j.longest_seconds is None else _seconds(j.longest_seconds),
            _seconds(j.threshold_seconds),
            output.text(j.worker),
        )
    console.print(table)
    for j in stuck.jobs[:10]:
        console.print(f"job {j.id}: {output.escaped(j.reason)}", highlight=False)


def _print_stranded(console: Console, stranded: StrandedJobs | None) -> None:
    if stranded is None:
        return
    if not stranded.total:
        console.print("stranded jobs: none (waiting on a dead or gone parent)")
        return
    listed = len(stranded.jobs)
    shown = f", the first {listed:,} shown" if listed < stranded.total else ""
    console.print(
        f"stranded jobs: {stranded.total:,} waiting on a dead or gone parent{shown}",
        highlight=False,
    )
    table = Table()
    for col in ("job", "queue", "why", "to run it"):
        table.add_column(col, justify="right" if col == "job" else "left")
    for j in stranded.jobs:
        fix = (
            f"pgq requeue {j.dead_parent}"
            if j.dead_parent is not None
            else f"pgq kill {j.id}, then enqueue it again"
        )
        table.add_row(str(j.id), output.text(j.queue), j.reason, fix)
    console.print(table)


def _seconds(value: float) -> str:
    return output.span(timedelta(seconds=round(value, 1) if value < 60 else round(value)))


# ---------------------------------------------------------------------------- settings


@click.group("config", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
@click.pass_context
def config_group(ctx: click.Context, as_json: bool) -> None:
    """Show the schema's settings, or change one (`pgq config notify edge`)."""
    if ctx.invoked_subcommand is not None:
        return
    with settings(ctx).queue() as q:
        values = q.settings()
    if as_json:
        echo_json(values)
        return
    console = output.console()
    for name, value in values.items():
        console.print(Text(f"{printable(name)} = {printable(value)}"))


@config_group.command("notify")
@click.argument("mode", type=click.Choice(NOTIFY_MODES), required=False)
@click.pass_context
def notify_command(ctx: click.Context, mode: str | None) -> None:
    """When the jobs trigger sends NOTIFY: always (every statement that makes jobs ready now),
    edge (only when a queue goes from nothing due to something due) or off (workers poll).
    Without MODE, print the current one."""
    with settings(ctx).queue() as q:
        value = q.set_notify(mode) if mode else q.settings().get("notify", "always")
    click.echo(f"notify = {printable(value)}")
