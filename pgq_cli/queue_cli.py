"""Queue control: `pgq pause`, `resume`, `limit` and the per-queue counts of `pgq stats`.

Invariants: no SQL here (every statement is reached through `Queue`); queue names from the
database are printed through `printable`; `--json` prints values exactly.
"""

from __future__ import annotations

import re

import click
from rich.table import Table
from rich.text import Text

from pgq_core.config import check_new_queue_name
from pgq_core.durations import short_duration
from pgq_core.text import keep_end, printable

from . import output
from .options import INT4_MAX, new_queue_option, queue_option
from .output import echo_json, say_read_from, when, with_read_from
from .session import settings

#: the most cells a queue name takes in a table; a longer one is cut with an ellipsis
NAME_CELLS = 40


def _queue_arg(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A queue name a job can have (`options.queue_option`): any queue can be resumed."""
    name = queue_option(ctx, param, value)
    assert name is not None
    return name


def _new_queue_arg(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A queue name as `pgq enqueue` takes it (`options.new_queue_option`)."""
    name = new_queue_option(ctx, param, value)
    assert name is not None
    return name


# ---------------------------------------------------------------------------- queue control


@click.command("pause")
@click.argument("queue_name", metavar="QUEUE", callback=_new_queue_arg)
@click.option("--reason", help="Why, recorded with who paused it and when.")
@click.option("--json", "as_json", is_flag=True, help="Print the queue's settings as JSON.")
@click.pass_context
def pause_command(ctx: click.Context, queue_name: str, reason: str | None, as_json: bool) -> None:
    """Stop QUEUE's workers from claiming (running jobs finish); `pgq resume` undoes it."""
    if reason is not None and "\x00" in reason:
        raise click.BadParameter("reason must not contain NUL", param_hint="'--reason'")
    with settings(ctx).queue() as q:
        known = q.has_jobs(queue_name)
        at = q.pause(queue_name, reason)
    if as_json:
        echo_json(
            {
                "queue": queue_name,
                "paused": True,
                "paused_at": at,
                "reason": reason,
                "has_jobs": known,
            }
        )
        return
    why = f" ({printable(reason)})" if reason else ""
    if known:
        click.echo(f"paused queue {printable(queue_name)}{why}: its workers claim nothing now")
    else:
        click.echo(
            f"paused queue {printable(queue_name)}{why} (no jobs yet): jobs enqueued on it "
            "wait until it is resumed"
        )


@click.command("resume")
@click.argument("queue_name", metavar="QUEUE", callback=_queue_arg)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_context
def resume_command(ctx: click.Context, queue_name: str, as_json: bool) -> None:
    """Let QUEUE's workers claim again, and wake them (the queue's notification)."""
    with settings(ctx).queue() as q:
        was = q.resume(queue_name)
    if as_json:
        echo_json({"queue": queue_name, "paused": False, "was_paused_at": was})
        return
    name = printable(queue_name)
    if was is None:
        click.echo(f"queue {name} was not paused; its workers were woken anyway")
    else:
        click.echo(f"resumed queue {name} (paused since {when(was)}); workers woken")


#: What `pgq limit` takes: a limit of 0 would run nothing, which is what `pgq pause` is for.
_LIMIT_RANGE = f"want 1 to {INT4_MAX} or `none`"


def _limit_value(ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    if value.strip().lower() == "none":
        return None
    try:
        number = int(value)
    except ValueError:
        raise click.BadParameter(
            f"want a number or `none`, got {value[:40]!r}", ctx, param
        ) from None
    if number == 0:
        raise click.BadParameter(
            "0 would run nothing: to stop the queue use `pgq pause QUEUE` (it records who "
            "and why, and `pgq resume` undoes it)",
            ctx,
            param,
        )
    if not 1 <= number <= INT4_MAX:
        raise click.BadParameter(f"{_LIMIT_RANGE}, got {number}", ctx, param)
    return number


class _NegativeNumberArgument(click.Command):
    """`pgq limit mail -1`: the number reaches the argument's range check (a clear usage
    error) instead of reading as an unknown option named `-1`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for arg in args:
            if arg == "--":
                break
            if re.fullmatch(r"-\d+", arg):
                raise click.BadParameter(f"{_LIMIT_RANGE}, got {arg}", ctx, param_hint="'N|none'")
        return super().parse_args(ctx, args)


@click.command("limit", cls=_NegativeNumberArgument)
@click.argument("queue_name", metavar="QUEUE", callback=_queue_arg)
@click.argument("max_running", metavar="N|none", callback=_limit_value)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_context
def limit_command(
    ctx: click.Context, queue_name: str, max_running: int | None, as_json: bool
) -> None:
    """At most N jobs of QUEUE run at once, across all workers (`none`: no limit). N is 1 or
    more: to run none, `pgq pause QUEUE`."""
    if max_running is not None:  # set only on a name enqueue takes; any queue's is removed
        try:
            check_new_queue_name(queue_name)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'QUEUE'") from None
    with settings(ctx).queue() as q:
        known = q.has_jobs(queue_name)
        before = q.set_limit(queue_name, max_running)
    if as_json:
        echo_json(
            {"queue": queue_name, "limit": max_running, "limit_before": before, "has_jobs": known}
        )
        return
    name = printable(queue_name) + ("" if known else " (no jobs yet)")
    was = "no limit" if before is None else f"{before}"
    if max_running is None:
        click.echo(f"queue {name}: no limit on running jobs (was {was})")
    else:
        click.echo(f"queue {name}: at most {max_running} running at once (was {was})")


@click.command("stats")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON array (with each queue's `pgq latency` figures under `latency`).",
)
@click.pass_context
def stats_command(ctx: click.Context, as_json: bool) -> None:
    """Ready, scheduled, waiting, running, expiring, dead and done jobs per queue."""
    group = settings(ctx)
    with group.reader() as q:
        rows = q.stats()
        # per queue, a key of its own: wait and run percentiles (`pgq latency`), 5m and 1h
        latency = q.latency(queues=[r.queue for r in rows]) if as_json else None
        role = group.read_from(q)
    if latency is not None:
        by_queue = {entry.queue: entry.to_dict() for entry in latency.queues}
        rows_json = [{**r.to_dict(), "latency": by_queue[r.queue]} for r in rows]
        echo_json(with_read_from(rows_json, role))
        return
    say_read_from(role)
    table = Table(title=output.text(f"pgq · {group.read_display()}"))
    columns = ("queue", "ready", "scheduled", "waiting", "running", "expiring", "dead", "done")
    for col in (*columns, "oldest due"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for r in rows:
        oldest = "" if r.oldest_due_seconds is None else short_duration(r.oldest_due_seconds)
        name = output.text(r.queue)
        if name.cell_len > NAME_CELLS:  # one long name must not push the counts off the screen
            name.truncate(NAME_CELLS, overflow="ellipsis")
        if r.paused:
            name.append(" (paused)", style="yellow")
        if r.limit is not None:
            name.append(f" (limit {r.limit})", style="dim")
        table.add_row(
            name,
            str(r.ready),
            str(r.scheduled),
            str(r.waiting),
            str(r.running),
            str(r.expiring),
            str(r.dead),
            str(r.done),
            oldest,
        )
    output.console().print(table)


#: cells of `pgq workers`' worker column at least, and what the other columns take at 80
WORKER_CELLS = 16
OTHER_WORKER_CELLS = 64


@click.command("workers")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def workers_command(ctx: click.Context, as_json: bool) -> None:
    """The live workers: queues, concurrency, jobs running, done and failed, last beat.

    Each worker beats its row every few seconds; one that stops beating drops out by itself."""
    with settings(ctx).queue() as q:
        rows = q.workers()
    if as_json:
        echo_json([r.to_dict() for r in rows])
        return
    if not rows:
        output.console().print("no live workers")
        return
    table = Table(title=output.text(f"workers · {settings(ctx).target().display}"))
    # the worker column keeps each id's end (pid and suffix tell workers apart), cut at its
    # start; below 100 columns the version goes first
    width = output.console().width
    cells = max(WORKER_CELLS, width - OTHER_WORKER_CELLS)
    columns = ["worker", "queues", "conc", "run", "done", "fail", "up", "beat"]
    if width >= 100:
        columns.append("version")
    for col in columns:
        table.add_column(
            col,
            justify="left" if col in ("worker", "queues", "version") else "right",
            no_wrap=col != "queues",
            min_width=min(cells, max(len(r.id) for r in rows)) if col == "worker" else None,
        )
    for r in rows:
        cells_of_row: list[str | Text] = [
            output.text(keep_end(printable(r.id), cells)),
            output.text(",".join(r.queues)),
            str(r.concurrency),
            str(r.running),
            f"{r.done:,}",
            f"{r.failed:,}",
            short_duration(r.up_seconds),
            f"{short_duration(r.beat_seconds)} ago",
            output.text(r.version),
        ]
        table.add_row(*cells_of_row[: len(columns)])
    output.console().print(table)
