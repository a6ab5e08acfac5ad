"""`pgq schedule`: periodic jobs (add, list, remove, run now).

Loaded only when run (see `LazyGroup.LAZY` in cli.py), so cron parsing is never imported by
`pgq --help`. Every running worker enqueues each due slot once; see pgq_core/worker/scheduler.py.
"""

from __future__ import annotations

import shlex
from typing import Any

import click
from rich.table import Table

from pgq_core import jsontext, ops
from pgq_core.cron import check_cron
from pgq_core.defaults import DEFAULT_MAX_ATTEMPTS
from pgq_core.errors import ScheduleExists
from pgq_core.text import printable

from . import output
from .enqueue_cli import parse_payload
from .failures import fail
from .group import PgqGroup
from .options import INT4, bad_parameter, new_queue_option
from .output import echo_json, when
from .session import settings

#: Schedules `schedule list` shows by default, and at most (a page each; --after for the next).
SCHEDULES_PAGE = 100
SCHEDULES_MAX = 10_000
#: Characters of a schedule's payload shown in `schedule list`.
PAYLOAD_CHARS = 60


def _name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    with bad_parameter(ctx, param):
        return ops.check_schedule_name(value)


def _cron(ctx: click.Context, param: click.Parameter, value: str) -> str:
    with bad_parameter(ctx, param):
        return check_cron(value)


def _payload(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return {}
    try:
        return parse_payload(value)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON ({exc})", ctx, param) from None


@click.group("schedule", cls=PgqGroup)
def schedule_group() -> None:
    """Periodic jobs: add, list, remove or run a cron schedule.

    Every running worker enqueues each due slot exactly once (no leader). Cron times are UTC;
    5 fields, or 6 with seconds first. Slots missed while no worker ran are skipped, except
    the latest, which is enqueued as soon as a worker runs.
    """


@schedule_group.command("add")
@click.argument("name", callback=_name)
@click.option("--queue", "-q", "queue_name", required=True, callback=new_queue_option)
@click.option("--cron", "cron", required=True, callback=_cron, help='e.g. "*/5 * * * *" (UTC).')
@click.option("--payload", callback=_payload, help="The job's payload as JSON (default {}).")
@click.option(
    "--max-attempts",
    type=INT4,
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help="Attempts before a slot's job is dead.",
)
@click.option("--replace", is_flag=True, help="Change the schedule if NAME exists.")
@click.pass_context
def add(
    ctx: click.Context,
    name: str,
    queue_name: str,
    cron: str,
    payload: Any,
    max_attempts: int,
    replace: bool,
) -> None:
    """Add schedule NAME: enqueue PAYLOAD on QUEUE at every slot of CRON."""
    with settings(ctx).queue() as q:
        try:
            q.add_schedule(
                name, queue_name, cron, payload, max_attempts=max_attempts, replace=replace
            )
        except ScheduleExists:
            fail(
                f"schedule {printable(name)} already exists: add --replace to change it (its "
                "last run is kept), or remove it first"
            )
        found = q.schedule(name)
    upcoming = f"; next run {when(found.next_slot)}" if found and found.next_slot else ""
    where = f"{printable(cron)} on {printable(queue_name)}"
    click.echo(f"schedule {printable(name)}: {where}{upcoming}")


@schedule_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option(
    "--limit",
    type=click.IntRange(1, SCHEDULES_MAX),
    default=SCHEDULES_PAGE,
    show_default=True,
    help="At most this many schedules, by name.",
)
@click.option("--after", metavar="NAME", help="Start after this schedule name (the next page).")
@click.pass_context
def list_(ctx: click.Context, as_json: bool, limit: int, after: str | None) -> None:
    """Schedules by name with their last and next run, a page at a time."""
    with settings(ctx).queue() as q:
        output.exact_json(q.conn)
        rows, total = q.schedules_page(after, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    if as_json:
        echo_json([s.to_dict() for s in rows])
        return
    if not rows:
        click.echo("no schedules" if not after else f"no schedules after {printable(after)}")
        return
    table = Table()
    for col in ("name", "queue", "cron", "last run", "next run", "attempts", "payload"):
        table.add_column(col, no_wrap=col in ("last run", "next run"))
    for s in rows:
        payload = jsontext.dumps(s.payload, ensure_ascii=False)
        if len(payload) > PAYLOAD_CHARS:
            payload = payload[: PAYLOAD_CHARS - 1] + "…"
        table.add_row(
            output.text(s.name),
            output.text(s.queue),
            output.text(s.cron),
            when(s.last_slot) or "never",
            when(s.next_slot),
            str(s.max_attempts),
            output.text(payload),
        )
    output.console().print(table)
    if more:
        last = shlex.quote(printable(rows[-1].name))
        click.echo(f"{len(rows)} of {total} schedules shown; the next page: --after {last}")


@schedule_group.command("remove")
@click.argument("name")
@click.pass_context
def remove(ctx: click.Context, name: str) -> None:
    """Remove schedule NAME (jobs it already enqueued stay)."""
    with settings(ctx).queue() as q:
        q.remove_schedule(name)
    click.echo(f"removed schedule {printable(name)}")


@schedule_group.command("run")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the new id as a JSON array.")
@click.pass_context
def run(ctx: click.Context, name: str, as_json: bool) -> None:
    """Enqueue schedule NAME's job now (its slots go on as before)."""
    with settings(ctx).queue() as q:
        job_id = q.run_schedule(name)
    if as_json:
        echo_json([job_id])
    else:
        click.echo(f"enqueued job {job_id} from schedule {printable(name)}")
