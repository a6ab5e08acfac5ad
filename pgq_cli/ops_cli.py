"""Operating queues from the command line: pause, resume and limit a queue; list, requeue, kill
and delete jobs over one filter grammar; error groups; database health.

`install(main)` adds these commands to the `pgq` group. `jobs`, `requeue` and `kill` replace
the plain ones with filter-aware versions that hand the plain forms (job ids, `--queue Q
--dead`, `--all-queues --dead`, `--queue/--status/--limit`) to the original commands
unchanged, so those keep their exact behaviour and output.

Invariants: no SQL here (every statement is a named one in pgq_core/queries.sql, reached
through `Queue`); every database text printed for humans passes through `printable` (and
`rich.markup.escape` where Rich renders markup); `--json` prints values exactly; bad filter
input is one `pgq: error:` line with exit 2; a real bulk run changes rows in bounded batches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pgq_core.config import check_new_queue_name
from pgq_core.filters import (
    ACTION_STATUSES,
    FILTER_STATUSES,
    FilterError,
    JobFilter,
    PayloadMatch,
    parse_age,
    parse_error_group,
    parse_payload_match,
)
from pgq_core.models import ErrorGroup, Health, JobRow
from pgq_core.ops import BULK_BATCH
from pgq_core.text import first_line, printable

from .context import duration, echo_json, new_queue_option, queue_option, settings, when

INT4_MAX = 2**31 - 1
#: Options that make `jobs`, `requeue` or `kill` a filtered command (the rest are the plain
#: commands' own).
FILTER_ONLY = ("error", "payload", "older_than", "newer_than", "error_group", "dry_run")
VERBS = {"requeue": "requeued", "kill": "killed", "delete": "deleted"}


def _p(text: str | None) -> str:
    """Database text for a Rich renderable: control characters visible, markup escaped."""
    return escape(printable(text or ""))


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _ids_text(ids: Sequence[int], limit: int = 20) -> str:
    shown = ", ".join(map(str, ids[:limit]))
    return shown + (f", … ({len(ids) - limit:,} more)" if len(ids) > limit else "")


def _console() -> Console:
    return Console(soft_wrap=False)


def _queue_arg(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A queue name a job can have (`context.queue_option`): any queue can be resumed."""
    name = queue_option(ctx, param, value)
    assert name is not None
    return name


def _new_queue_arg(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A queue name as `pgq enqueue` takes it (`context.new_queue_option`)."""
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


# ---------------------------------------------------------------------------- the filter


def _payload(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> Any:
    try:
        return tuple(parse_payload_match(v) for v in value)
    except FilterError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _age(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_age(value, f"--{(param.name or '').replace('_', '-')}")
    except FilterError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _group(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return parse_error_group(value)
    except FilterError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _filter_params(*, queue: bool, status: bool) -> list[click.Parameter]:
    """The filter grammar's options (`--queue` and `--status` when the command lacks them)."""
    found: list[click.Parameter] = []
    if queue:
        found.append(click.Option(["--queue", "-q", "queue_name"], help="Only this queue."))
    if status:
        found.append(
            click.Option(
                ["--status", "-s", "status"],
                type=click.Choice(FILTER_STATUSES),
                multiple=True,
                help="Only jobs in this status (repeatable); failed = ready with an error.",
            )
        )
    found += [
        click.Option(
            ["--error", "error"],
            metavar="TEXT",
            help="last_error contains TEXT (case-insensitive).",
        ),
        click.Option(
            ["--payload", "payload"],
            metavar="PATH=VALUE",
            multiple=True,
            callback=_payload,
            help="Payload at dotted PATH equals VALUE (as JSON if it parses, else as text); "
            "repeatable.",
        ),
        click.Option(
            ["--older-than", "older_than"],
            callback=_age,
            help="Finished (done/dead) or queued (ready/running) longer ago than this, e.g. 7d.",
        ),
        click.Option(
            ["--newer-than", "newer_than"],
            callback=_age,
            help="Finished (done/dead) or queued (ready/running) within this, e.g. 1h.",
        ),
        click.Option(
            ["--error-group", "error_group"],
            metavar="GROUP",
            callback=_group,
            help="Failed or dead jobs of this error group (as `pgq errors` shows it).",
        ),
    ]
    return found


def _bulk_params() -> list[click.Parameter]:
    return [
        click.Option(
            ["--dry-run", "dry_run"],
            is_flag=True,
            help="Print how many jobs match and change nothing.",
        ),
        click.Option(
            ["--batch", "batch"],
            type=click.IntRange(1, 100_000),
            default=BULK_BATCH,
            show_default=True,
            help="Jobs changed per statement (keeps each transaction short).",
        ),
    ]


def _filter_of(kw: dict[str, Any]) -> JobFilter:
    """The filter a command's options describe (see `_filter_params`)."""
    return _build_filter(
        kw["queue_name"],
        kw["status"],
        kw["error"],
        kw["payload"],
        kw["older_than"],
        kw["newer_than"],
        kw["error_group"],
    )


def _build_filter(
    queue_name: str | None,
    statuses: Sequence[str],
    error: str | None,
    payload: Sequence[PayloadMatch],
    older_than: timedelta | None,
    newer_than: timedelta | None,
    error_group: str | None,
) -> JobFilter:
    try:
        return JobFilter(
            queue=queue_name,
            statuses=tuple(dict.fromkeys(statuses)),
            error=error,
            payload=tuple(payload),
            older_than=older_than,
            newer_than=newer_than,
            error_group=error_group,
        )
    except FilterError as exc:
        raise click.UsageError(str(exc)) from None


def _narrows(f: JobFilter) -> bool:
    """True when the filter names more than statuses: a real bulk run needs it (or
    --all-queues), so that a bare `pgq kill --status ready` cannot empty every queue."""
    return any((f.queue is not None, f.error, f.payload, f.older_than, f.newer_than, f.error_group))


def _run_bulk(
    ctx: click.Context,
    action: str,
    where: JobFilter,
    *,
    all_queues: bool,
    dry_run: bool,
    batch: int,
    as_json: bool,
    reason: str = "killed by operator",
) -> None:
    """Count (dry run) or change, in batches, the jobs `where` matches that `action` may
    change; print the outcome."""
    try:
        narrowed = where.for_action(action)
    except FilterError as exc:
        raise click.UsageError(str(exc)) from None
    if not dry_run and not all_queues and not _narrows(where):
        raise click.UsageError(
            f"{action} over a filter needs --queue Q, another filter or --all-queues"
        )
    text = where.describe()
    with settings(ctx).queue() as q:
        if dry_run:
            matching = q.count_matching(narrowed)
            if as_json:
                echo_json({"action": action, "filter": text, "dry_run": True, "matching": matching})
            else:
                click.echo(
                    f"would {action} {_plural(matching, 'job')} "
                    f"({', '.join(ACTION_STATUSES[action])} only) matching: {printable(text)}"
                    " (dry run: nothing changed)"
                )
            return
        changed: list[int] = []
        batches = 0
        for ids in q.bulk_batches(action, where, batch, reason):
            changed += ids
            batches += 1
    if as_json:
        echo_json({"action": action, "filter": text, "dry_run": False, VERBS[action]: changed})
        return
    click.echo(
        f"{VERBS[action]} {_plural(len(changed), 'job')} matching: {printable(text)} "
        f"(in {batches:,} batch{'' if batches == 1 else 'es'})"
    )
    if changed:
        click.echo(f"  ids: {_ids_text(changed)}")


# ---------------------------------------------------------------------------- jobs


def jobs_table(rows: Sequence[JobRow]) -> Table:
    """Jobs as `pgq jobs` prints them, plain or filtered."""
    table = Table()
    for col in ("id", "queue", "status", "attempts", "fence", "run at", "worker", "last error"):
        table.add_column(
            col,
            justify="right" if col in ("id", "attempts", "fence") else "left",
            no_wrap=col in ("id", "status", "attempts", "fence", "run at"),
        )
    for r in rows:
        error = first_line(r.last_error, r.last_error_truncated, 60)
        table.add_row(
            str(r.id),
            _p(r.queue),
            r.status,
            f"{r.attempts}/{r.max_attempts}",
            str(r.fence),
            when(r.run_at),
            _p(r.worker),
            _p(error),
        )
    return table


def _make_jobs(plain: click.Command) -> click.Command:
    """`pgq jobs` over the filter grammar; the plain form goes to the original command."""

    @click.pass_context
    def callback(ctx: click.Context, /, **kw: Any) -> None:
        statuses: tuple[str, ...] = kw["status"]
        is_plain = not _filter_given({**kw, "status": ()}) and len(statuses) <= 1
        is_plain = is_plain and "failed" not in statuses
        if is_plain:
            ctx.invoke(
                plain,
                queue_name=kw["queue_name"],
                status=statuses[0] if statuses else None,
                limit=kw["limit"],
                as_json=kw["as_json"],
            )
            return
        where = _build_filter(
            kw["queue_name"],
            statuses,
            kw["error"],
            kw["payload"],
            kw["older_than"],
            kw["newer_than"],
            kw["error_group"],
        )
        with settings(ctx).queue() as q:
            rows = q.jobs_matching(where, kw["limit"])
        if kw["as_json"]:
            echo_json([r.to_dict() for r in rows])
        elif not rows:
            click.echo(f"no jobs matching: {printable(where.describe())}")
        else:
            _console().print(jobs_table(rows))

    return click.Command(
        "jobs",
        callback=callback,
        params=[
            *_filter_params(queue=True, status=True),
            click.Option(
                ["--limit", "-n", "limit"],
                type=click.IntRange(1, INT4_MAX),
                default=50,
                show_default=True,
                help="At most this many jobs, newest first.",
            ),
            click.Option(["--json", "as_json"], is_flag=True, help="Print a JSON array."),
        ],
        help="List jobs matching a filter, newest first (payloads are shown by `pgq show`).",
    )


# ---------------------------------------------------------------------------- requeue, kill, delete


def _filter_given(kw: dict[str, Any]) -> bool:
    """True when any filter-only option was given (even empty, so it is checked)."""
    return any(kw.get(k) not in (None, False, ()) for k in (*FILTER_ONLY, "status"))


def _make_requeue(plain: click.Command) -> click.Command:
    """`pgq requeue` over the filter grammar; ids, `--queue Q --dead` and `--all-queues
    --dead` without other filters go to the original command."""
    plain_names = [p.name for p in plain.params]

    @click.pass_context
    def callback(ctx: click.Context, /, **kw: Any) -> None:
        if not _filter_given(kw):
            ctx.invoke(plain, **{k: kw[k] for k in plain_names if k is not None})
            return
        if kw["job_ids"]:
            raise click.UsageError("give job ids or a filter, not both")
        if kw["queue_name"] is not None and kw["all_queues"]:
            raise click.UsageError("give --queue or --all-queues, not both")
        statuses = tuple(kw["status"]) + (("dead",) if kw["dead"] else ())
        where = _build_filter(
            kw["queue_name"],
            statuses,
            kw["error"],
            kw["payload"],
            kw["older_than"],
            kw["newer_than"],
            kw["error_group"],
        )
        _run_bulk(
            ctx,
            "requeue",
            where,
            all_queues=kw["all_queues"],
            dry_run=kw["dry_run"],
            batch=kw["batch"],
            as_json=kw["as_json"],
        )

    return click.Command(
        "requeue",
        callback=callback,
        params=[*plain.params, *_filter_params(queue=False, status=True), *_bulk_params()],
        help="Dead jobs back to ready with fresh attempts: by id, every dead job of a queue "
        "(--queue Q --dead, --all-queues --dead), or the dead jobs matching a filter.",
    )


def _make_kill(plain: click.Command) -> click.Command:
    """`pgq kill` over the filter grammar; job ids go to the original command."""

    @click.pass_context
    def callback(ctx: click.Context, /, **kw: Any) -> None:
        by_filter = _filter_given(kw) or kw["queue_name"] is not None or kw["all_queues"]
        if not by_filter:
            if not kw["job_ids"]:
                raise click.UsageError("Missing argument 'JOB_ID...' (or give a filter)")
            ctx.invoke(plain, job_ids=kw["job_ids"], reason=kw["reason"], as_json=kw["as_json"])
            return
        if kw["job_ids"]:
            raise click.UsageError("give job ids or a filter, not both")
        if kw["queue_name"] is not None and kw["all_queues"]:
            raise click.UsageError("give --queue or --all-queues, not both")
        if not kw["reason"].strip():
            raise click.BadParameter("reason must not be empty", param_hint="'--reason'")
        where = _filter_of(kw)
        _run_bulk(
            ctx,
            "kill",
            where,
            all_queues=kw["all_queues"],
            dry_run=kw["dry_run"],
            batch=kw["batch"],
            as_json=kw["as_json"],
            reason=kw["reason"],
        )

    job_ids = next(p for p in plain.params if p.name == "job_ids")
    ids = click.Argument(["job_ids"], nargs=-1, type=job_ids.type, metavar="[JOB_ID]...")
    rest = [p for p in plain.params if p.name != "job_ids"]
    return click.Command(
        "kill",
        callback=callback,
        params=[
            ids,
            *rest,
            *_filter_params(queue=True, status=True),
            click.Option(["--all-queues", "all_queues"], is_flag=True, help="Every queue."),
            *_bulk_params(),
        ],
        help="Ready or running jobs to dead (fence + 1: a worker still running one loses its "
        "lease): by id, or those matching a filter.",
    )


@click.pass_context
def _delete(ctx: click.Context, /, **kw: Any) -> None:
    if kw["queue_name"] is not None and kw["all_queues"]:
        raise click.UsageError("give --queue or --all-queues, not both")
    where = _filter_of(kw)
    _run_bulk(
        ctx,
        "delete",
        where,
        all_queues=kw["all_queues"],
        dry_run=kw["dry_run"],
        batch=kw["batch"],
        as_json=kw["as_json"],
    )


delete_command = click.Command(
    "delete",
    callback=_delete,
    params=[
        *_filter_params(queue=True, status=True),
        click.Option(["--all-queues", "all_queues"], is_flag=True, help="Every queue."),
        *_bulk_params(),
        click.Option(["--json", "as_json"], is_flag=True, help="Print the outcome as JSON."),
    ],
    help="Delete dead and done jobs matching a filter, with their history, in batches.",
)


# ---------------------------------------------------------------------------- errors


@click.command("errors")
@click.option("--queue", "-q", "queue_name", help="Only this queue.")
@click.option("--since", callback=duration, help="Only errors seen within this, e.g. 1h.")
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(1, INT4_MAX),
    default=50,
    show_default=True,
    help="At most this many groups, largest first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def errors_command(
    ctx: click.Context,
    queue_name: str | None,
    since: timedelta | None,
    limit: int,
    as_json: bool,
) -> None:
    """Failed and dead jobs grouped by their error with ids, numbers, quoted values and URLs
    normalized; act on a group with `pgq requeue/kill --error-group GROUP`."""
    if queue_name is not None and "\x00" in queue_name:
        raise click.BadParameter("queue name must not contain NUL", param_hint="'--queue'")
    with settings(ctx).queue() as q:
        groups = q.errors(queue_name, since, limit)
    if as_json:
        echo_json([g.to_dict() for g in groups])
        return
    if not groups:
        click.echo("no failed or dead jobs with an error")
        return
    _print_errors(groups)


def _print_errors(groups: Sequence[ErrorGroup]) -> None:
    console = _console()
    table = Table()
    for col in ("group", "dead", "failed", "first seen", "last seen", "queues", "error"):
        table.add_column(col, justify="right" if col in ("dead", "failed") else "left")
    for g in groups:
        table.add_row(
            _p(g.group),
            str(g.dead),
            str(g.failed),
            when(g.first_seen),
            when(g.last_seen),
            _p(", ".join(g.queues)),
            _p(g.pattern),
        )
    console.print(table)
    for g in groups:
        console.print(f"[bold]{_p(g.group)}[/bold] example job {g.example_id}:")
        for line in printable(g.example_error, multiline=True).splitlines() or [""]:
            console.print("  " + escape(line), highlight=False)
        if g.example_error_truncated:
            console.print(
                f"  [dim]... (cut: {g.example_error_bytes:,} bytes in all;"
                f" pgq show {g.example_id} --full)[/dim]",
                highlight=False,
            )


# ---------------------------------------------------------------------------- health


def _mb(count: int) -> str:
    return f"{count / 2**20:,.1f} MB"


@click.command("health")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (with warnings).")
@click.pass_context
def health_command(ctx: click.Context, as_json: bool) -> None:
    """Table bloat and vacuum, the oldest transaction holding back vacuum, NOTIFY queue use,
    lock waits on jobs; readings past a threshold are warnings (the exit code stays 0)."""
    with settings(ctx).queue() as q:
        health = q.health()
    if as_json:
        echo_json(health.to_dict())
        return
    _print_health(health)


def _print_health(h: Health) -> None:
    console = _console()
    table = Table(title="tables")
    for col in ("table", "live", "dead", "last vacuum", "last analyze", "table", "indexes"):
        table.add_column(col, justify="left" if col in ("table", "last vacuum") else "right")
    for t in h.tables:
        vacuum = max((v for v in (t.last_vacuum, t.last_autovacuum) if v), default=None)
        analyze = max((v for v in (t.last_analyze, t.last_autoanalyze) if v), default=None)
        table.add_row(
            _p(t.table),
            f"{t.live_tuples:,}",
            f"{t.dead_tuples:,}",
            when(vacuum) or "never",
            when(analyze) or "never",
            _mb(t.table_bytes),
            _mb(t.index_bytes),
        )
    console.print(table)
    x = h.xmin
    if x is None:
        console.print("oldest transaction: none holds back vacuum")
    else:
        age = "" if x.age_seconds is None else f"{x.age_seconds:,.1f}s"
        console.print(
            f"oldest transaction: pid {x.pid}, open {age}, {_p(x.state)}, "
            f"user {_p(x.user)}, app {_p(x.application)}: {_p(x.query)}",
            highlight=False,
        )
    console.print(f"NOTIFY queue: {h.notify_usage:.1%} used", highlight=False)
    if not h.lock_waits:
        console.print("lock waits on jobs: none")
    for w in h.lock_waits:
        waited = "" if w.waited_seconds is None else f"{w.waited_seconds:,.1f}s"
        by = ", ".join(map(str, w.blocked_by)) or "?"
        console.print(
            f"lock wait: pid {w.pid} {_p(w.mode)} ({_p(w.locktype)}) for {waited}, "
            f"blocked by {by}: {_p(w.query)}",
            highlight=False,
        )
    for warning in h.warnings:
        console.print(f"[yellow]warning:[/yellow] {_p(warning)}", highlight=False)


# ---------------------------------------------------------------------------- registration


def install(group: click.Group) -> None:
    """Add the queue-operations commands to `group`, wrapping its plain jobs/requeue/kill."""
    wrappers: dict[str, Callable[[click.Command], click.Command]] = {
        "jobs": _make_jobs,
        "requeue": _make_requeue,
        "kill": _make_kill,
    }
    for name, wrap in wrappers.items():
        group.add_command(wrap(group.commands[name]), name)
    for command in (
        pause_command,
        resume_command,
        limit_command,
        delete_command,
        errors_command,
        health_command,
    ):
        group.add_command(command)
