"""Browsing and acting on jobs: `pgq jobs`, `show`, `requeue`, `kill`, `delete` and `errors`,
over one filter grammar.

The filter options reach each command as one typed `FilterOptions` (gathered by
`takes_filter`). `jobs`, `requeue` and `kill` keep a plain form (job ids, `--queue Q --dead`,
`--all-queues --dead`, `--queue/--status/--limit`) with its own exact output; any filter option
makes them filtered commands, as is `delete`. Each verb is one function choosing between them.

Invariants: no SQL here (every statement is a named one in pgq_core/sql/*.sql, reached
through `Queue`); every database text printed for humans passes through `output`; `--json`
prints values exactly; bad filter input is one `pgq: error:` line with exit 2; a real bulk run
changes rows in bounded batches.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import click
import psycopg
from rich.highlighter import JSONHighlighter
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from pgq_core import JobDetail, JobNotFound, Queue, jsontext, ops
from pgq_core.defaults import BULK_BATCH
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
from pgq_core.models import ErrorGroup, JobLink, JobRow, PayloadPreview, progress_text
from pgq_core.text import first_line, keep_end, printable

from . import output
from .failures import fail
from .options import (
    INT4,
    INT4_MAX,
    JOB_ID,
    DocstringCommand,
    bad_parameter,
    duration,
    queue_option,
    unique,
)
from .output import echo_json, say_read_from, when, with_read_from
from .session import settings

#: Characters of a payload `pgq show` prints unless --full.
SHOW_CHARS = 64 * 1024
VERBS = {"requeue": "requeued", "kill": "killed", "delete": "deleted"}


# ---------------------------------------------------------------------------- the filter


def _payload(ctx: click.Context, param: click.Parameter, value: Sequence[str]) -> Any:
    with bad_parameter(ctx, param):
        return tuple(parse_payload_match(v) for v in value)


def _age(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    if value is None:
        return None
    with bad_parameter(ctx, param):
        return parse_age(value, f"--{(param.name or '').replace('_', '-')}")


def _group(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    with bad_parameter(ctx, param):
        return parse_error_group(value)


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


@dataclass(frozen=True)
class FilterOptions:
    """The filter grammar's options as given (`queue_name` from the command's own --queue when
    the grammar's is left out); `narrowing`: any beyond queue and status was given."""

    queue_name: str | None
    statuses: tuple[str, ...]
    error: str | None
    payload: tuple[PayloadMatch, ...]
    older_than: timedelta | None
    newer_than: timedelta | None
    error_group: str | None

    @property
    def narrowing(self) -> bool:
        return bool(self.payload) or any(
            value is not None
            for value in (self.error, self.older_than, self.newer_than, self.error_group)
        )

    def job_filter(self, *more_statuses: str) -> JobFilter:
        """The `JobFilter` these options describe (statuses each once); a usage error if they
        contradict each other."""
        try:
            return JobFilter(
                queue=self.queue_name,
                statuses=tuple(dict.fromkeys((*self.statuses, *more_statuses))),
                error=self.error,
                payload=self.payload,
                older_than=self.older_than,
                newer_than=self.newer_than,
                error_group=self.error_group,
            )
        except FilterError as exc:
            raise click.UsageError(str(exc)) from None


def takes_filter(command: Callable[..., None]) -> Callable[..., None]:
    """Gathers the options of `_filter_params` (and the command's own --queue) into one
    `filters: FilterOptions` before `command` runs."""

    @functools.wraps(command)
    def gathered(*args: Any, **kw: Any) -> None:
        filters = FilterOptions(
            queue_name=kw.pop("queue_name"),
            statuses=tuple(kw.pop("status")),
            error=kw.pop("error"),
            payload=tuple(kw.pop("payload")),
            older_than=kw.pop("older_than"),
            newer_than=kw.pop("newer_than"),
            error_group=kw.pop("error_group"),
        )
        command(*args, filters=filters, **kw)

    return gathered


def _one_scope(queue_name: str | None, all_queues: bool) -> None:
    """`--queue Q` and `--all-queues` each say which queues: refuse both at once."""
    if queue_name is not None and all_queues:
        raise click.UsageError("give --queue or --all-queues, not both")


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
                    f"would {action} {output.plural(matching, 'job')} "
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
        f"{VERBS[action]} {output.plural(len(changed), 'job')} matching: {printable(text)} "
        f"(in {batches:,} batch{'' if batches == 1 else 'es'})"
    )
    if changed:
        click.echo(f"  ids: {output.ids_text(changed)}")


# ---------------------------------------------------------------------------- the jobs table


#: cells of the worker column of `pgq jobs`: a longer id keeps its end (pid and suffix)
WORKER_CELLS = 16


def jobs_table(rows: Sequence[JobRow]) -> Table:
    """Jobs as `pgq jobs` prints them, plain or filtered."""
    table = Table()
    for col in ("id", "queue", "status", "attempts", "fence", "run at", "worker", "last error"):
        table.add_column(
            col,
            justify="right" if col in ("id", "attempts", "fence") else "left",
            no_wrap=col in ("id", "status", "attempts", "fence", "run at", "worker"),
            min_width=WORKER_CELLS if col == "worker" else None,
        )
    for r in rows:
        error = first_line(r.last_error, r.last_error_truncated, 60)
        table.add_row(
            str(r.id),
            output.escaped(r.queue),
            r.status,
            f"{r.attempts}/{r.max_attempts}",
            str(r.fence),
            when(r.run_at),
            output.escaped(keep_end(r.worker or "", WORKER_CELLS)),
            output.escaped(error),
        )
    return table


# ---------------------------------------------------------------------------- show


@click.command("show")
@click.argument("job_id", type=JOB_ID)
@click.option("--full", is_flag=True, help="Print the whole payload (default: its first 64 kB).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (history included).")
@click.pass_context
def show_command(ctx: click.Context, job_id: int, full: bool, as_json: bool) -> None:
    """Every column of one job, its payload and its fence history.

    Only the first part of a large payload is fetched and printed, with its size, unless --full
    (--json always holds the whole job)."""
    group = settings(ctx)
    with group.reader() as q:
        role = group.read_from(q)
        if as_json:
            output.exact_json(q.conn)
            echo_json(with_read_from(q.job(job_id).to_dict(), role))
            return
        chars = 2**31 - 1 if full else SHOW_CHARS
        try:
            found = q.run(ops.job_preview(job_id, chars))
        except psycopg.errors.InsufficientPrivilege:  # pgq's observer role reads no payload
            found = q.run(ops.job_preview(job_id, chars, readable=False))
        if found is None:
            raise JobNotFound(job_id)
        detail, preview = found
        detail.history.extend(q.history(job_id))
        detail = q.with_links(detail)
    say_read_from(role)
    _print_detail(detail, preview)


def links_text(links: list[JobLink], total: int) -> str:
    """A job's parents or children on one line: `12 done (mail), 13 waiting (mail), ... and
    N more`; a deleted parent is `gone`."""
    shown = ", ".join(
        f"{link.id} {link.status or 'gone'}" + (f" ({link.queue})" if link.queue else "")
        for link in links
    )
    if total > len(links):
        shown += f", ... and {total - len(links)} more"
    return shown


def _payload_text(preview: PayloadPreview) -> Text:
    """Pretty and highlighted when whole and small; otherwise the JSON text as it is."""
    if not preview.complete:
        return output.text(preview.text, multiline=True)
    if len(preview.text) > SHOW_CHARS:
        return output.text(preview.text, multiline=True)
    try:
        pretty = jsontext.dumps(jsontext.loads(preview.text), indent=2, ensure_ascii=False)
    except (RecursionError, ValueError):  # plain SQL stored what Python cannot read
        pretty = preview.text
    if len(pretty) > 4 * SHOW_CHARS:  # deep nesting: indentation would dwarf the payload
        pretty = preview.text
    text = output.text(pretty, multiline=True)
    JSONHighlighter().highlight(text)
    return text


def _print_detail(d: JobDetail, preview: PayloadPreview) -> None:
    console = output.console()
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    lease = "" if d.lease_seconds is None else f"{d.lease_seconds:g}s"
    for label, value in (
        ("id", str(d.id)),
        ("queue", d.queue),
        ("status", d.status),
        ("attempts", f"{d.attempts} of {d.max_attempts}"),
        ("priority", str(d.priority)),
        ("fence", str(d.fence)),
        ("run at", when(d.run_at)),
        ("queued at", when(d.queued_at)),
        ("worker", d.worker or ""),
        ("claimed at", when(d.claimed_at)),
        ("lease", lease),
        ("lease until", when(d.lease_until)),
        ("finished at", when(d.finished_at)),
        ("unique key", d.unique_key or ""),
    ):
        fields.add_row(label, output.text(value))
    if d.parents_total:
        fields.add_row("waits for", output.text(links_text(d.parents, d.parents_total)))
    if d.children_total:
        fields.add_row("dependents", output.text(links_text(d.children, d.children_total)))
    if d.progress_done is not None:
        reported = f", reported {when(d.progress_at)}" if d.progress_at else ""
        fields.add_row("progress", progress_text(d.progress_done, d.progress_total) + reported)
        if d.progress_note:
            fields.add_row("progress note", output.text(d.progress_note))
    error = output.text(d.last_error, multiline=True)
    if d.last_error_truncated and d.last_error_bytes is not None:
        error.append(
            f" ... ({output.size(d.last_error_bytes)} in all; --full shows all)", style="dim"
        )
    fields.add_row("last error", error)
    if d.result is not None:
        shown = json.dumps(d.result, ensure_ascii=False)
        if len(shown) > SHOW_CHARS:
            shown = (
                shown[:SHOW_CHARS] + f" ... ({output.size(len(shown))} in all; --json shows all)"
            )
        fields.add_row("result", output.text(shown, multiline=True))
    console.print(fields)
    if not preview.readable:
        console.print(
            Text.assemble(
                ("payload", "bold"),
                " (and result) not shown: this login may not read them (pgq's observer role)",
            )
        )
    elif preview.complete:
        console.print(Text("payload", style="bold"))
    else:
        console.print(
            Text.assemble(
                ("payload", "bold"),
                f" ({output.size(preview.size)} of JSON;"
                f" the first {output.size(len(preview.text))} shown, --full shows all)",
            )
        )
    if not preview.readable:
        pass
    elif len(preview.text) > SHOW_CHARS:
        console.file.flush()
        click.echo(printable(preview.text, multiline=True))
    else:
        console.print(_payload_text(preview))
    history = Table(title="fence history", title_justify="left")
    for col in ("at", "event", "fence", "worker", "detail"):
        history.add_column(col, justify="right" if col == "fence" else "left")
    for e in d.history:
        history.add_row(
            when(e.at),
            e.event,
            str(e.fence),
            output.text(e.worker),
            output.text(e.detail, multiline=True),
        )
    console.print(history)
    failed = [e for e in d.history if e.traceback]
    if failed:
        last = failed[-1]
        more = f"; --json has all {len(failed)}" if len(failed) > 1 else ""
        console.print(
            Text.assemble(
                ("traceback", "bold"), f" (attempt at fence {last.fence}, {last.event}{more})"
            )
        )
        console.print(output.text(last.traceback, multiline=True))


# ---------------------------------------------------------------------------- operators


def _statuses(q: Queue, ids: Sequence[int]) -> tuple[dict[int, str], list[int]]:
    """The current status of each id that exists, and the ids that do not."""
    found: dict[int, str] = {}
    missing: list[int] = []
    for job_id in ids:
        try:
            found[job_id] = q.job(job_id).status
        except JobNotFound:
            missing.append(job_id)
    return found, missing


def _require_jobs(q: Queue, ids: Sequence[int]) -> None:
    """Exits with one error line, before anything changes, if any id names no job."""
    _, missing = _statuses(q, ids)
    if missing:
        label = "job id" if len(missing) == 1 else "job ids"
        fail(f"no {label} {output.ids_text(missing)}; nothing was changed")


def _left_alone(q: Queue, ids: Sequence[int], changed: Sequence[int]) -> dict[int, str]:
    """Status of each id the operation did not change (`gone` if pruned meanwhile)."""
    applied = set(changed)
    found, missing = _statuses(q, [i for i in ids if i not in applied])
    return found | dict.fromkeys(missing, "gone")


def _report(verb: str, done: list[int], skipped: dict[int, str], why: str, as_json: bool) -> None:
    if as_json:
        echo_json({verb: done, f"not_{verb}": [{"id": i, "status": s} for i, s in skipped.items()]})
        return
    if done:
        click.echo(f"{verb} {output.plural(len(done), 'job')}: {output.ids_text(done)}")
    else:
        click.echo(f"{verb} no jobs")
    if skipped:
        listed = ", ".join(f"{i} ({s})" for i, s in list(skipped.items())[:20])
        more = f", … ({len(skipped) - 20} more)" if len(skipped) > 20 else ""
        click.echo(f"not {verb} ({why}): {listed}{more}")


# ---------------------------------------------------------------------------- jobs


@click.command(
    "jobs",
    params=[
        *_filter_params(queue=True, status=True),
        click.Option(
            ["--limit", "-n", "limit"],
            type=INT4,
            default=50,
            show_default=True,
            help="At most this many jobs, newest first.",
        ),
        click.Option(["--json", "as_json"], is_flag=True, help="Print a JSON array."),
    ],
    help="List jobs matching a filter, newest first (payloads are shown by `pgq show`).",
)
@click.pass_context
@takes_filter
def jobs_command(
    ctx: click.Context, /, *, filters: FilterOptions, limit: int, as_json: bool
) -> None:
    statuses = filters.statuses
    plain = not filters.narrowing and len(statuses) <= 1 and "failed" not in statuses
    # plain: at most one queue and one status, no filter (`Queue.jobs`)
    where = None if plain else filters.job_filter()
    group = settings(ctx)
    with group.reader() as q:
        if where is None:
            rows = q.jobs(filters.queue_name, statuses[0] if statuses else None, limit)
        else:
            rows = q.jobs_matching(where, limit)
        role = group.read_from(q)
    if as_json:
        echo_json(with_read_from([r.to_dict() for r in rows], role))
        return
    say_read_from(role)
    if rows:
        output.console().print(jobs_table(rows))
    elif where is None:
        click.echo("no jobs")
    else:
        click.echo(f"no jobs matching: {printable(where.describe())}")


# ---------------------------------------------------------------------------- requeue, kill, delete


def _filter_given(filters: FilterOptions, dry_run: bool) -> bool:
    """True when an option only a filtered `requeue` or `kill` has was given (even empty, so
    that it is checked)."""
    return filters.narrowing or bool(filters.statuses) or dry_run


@click.command(
    "requeue",
    params=[
        click.Argument(["job_ids"], nargs=-1, type=JOB_ID, metavar="[JOB_ID]..."),
        click.Option(
            ["--queue", "-q", "queue_name"],
            callback=queue_option,
            help="Requeue the dead jobs of this queue.",
        ),
        click.Option(["--all-queues"], is_flag=True, help="Requeue the dead jobs of every queue."),
        click.Option(
            ["--dead"], is_flag=True, help="Required with --queue/--all-queues: what to requeue."
        ),
        click.Option(
            ["--json", "as_json"], is_flag=True, help="Print what was (not) requeued as JSON."
        ),
        *_filter_params(queue=False, status=True),
        *_bulk_params(),
    ],
    help="Dead jobs back to ready with fresh attempts: by id, every dead job of a queue "
    "(--queue Q --dead, --all-queues --dead), or the dead jobs matching a filter.",
)
@click.pass_context
@takes_filter
def requeue_command(
    ctx: click.Context,
    /,
    *,
    job_ids: tuple[int, ...],
    filters: FilterOptions,
    all_queues: bool,
    dead: bool,
    as_json: bool,
    dry_run: bool,
    batch: int,
) -> None:
    """By id, every dead job of a queue (or of all) in batches of `batch` (each its own
    statement and commit, each batch's progress on stderr), or the jobs a filter matches."""
    by_filter = _filter_given(filters, dry_run)
    queue_name = filters.queue_name
    by_queue = queue_name is not None or all_queues
    if job_ids and (by_filter or by_queue):
        raise click.UsageError(
            "give job ids or a filter, not both"
            if by_filter
            else "give job ids or --queue/--all-queues, not both"
        )
    _one_scope(queue_name, all_queues)
    if by_filter:
        where = filters.job_filter(*(("dead",) if dead else ()))
        _run_bulk(
            ctx,
            "requeue",
            where,
            all_queues=all_queues,
            dry_run=dry_run,
            batch=batch,
            as_json=as_json,
        )
        return
    if by_queue and not dead:
        raise click.UsageError("--queue/--all-queues need --dead (only dead jobs are requeued)")
    if not job_ids and not by_queue:
        raise click.UsageError("give job ids, or --queue Q --dead, or --all-queues --dead")

    with settings(ctx).queue() as q:
        if by_queue:
            requeued, key_held, parent_dead = _requeue_dead(q, queue_name, batch)
            if as_json:
                held = "dead: a ready or running job holds its unique key"
                echo_json(
                    {
                        "requeued": requeued,
                        "not_requeued": [{"id": i, "status": held} for i in key_held]
                        + [
                            {"id": i, "status": orphan_text(*parent)}
                            for i, parent in parent_dead.items()
                        ],
                    }
                )
            else:
                where_text = "every queue" if all_queues else f"queue {printable(queue_name or '')}"
                click.echo(f"requeued {output.plural(len(requeued), 'dead job')} of {where_text}")
                if key_held:
                    click.echo(
                        f"left dead (a ready or running job holds their unique key): "
                        f"{output.ids_text(key_held)}"
                    )
                if parent_dead:
                    click.echo(
                        f"left dead (a parent is dead or deleted; requeue it to run both): "
                        f"{output.ids_text(list(parent_dead))}"
                    )
            return
        ids = unique(job_ids)
        _require_jobs(q, ids)
        requeued, key_held, parent_dead = q.requeue_report(ids)
        skipped = _left_alone(q, ids, requeued)
    for job_id in key_held:
        if skipped.get(job_id) == "dead":
            skipped[job_id] = "dead: a ready or running job holds its unique key"
    for job_id, parent in parent_dead.items():
        if skipped.get(job_id) == "dead":
            skipped[job_id] = orphan_text(*parent)
    reasons = ["not dead"]
    if key_held:
        reasons.append("unique key held")
    if parent_dead:
        reasons.append("parent dead or gone")
    _report("requeued", requeued, skipped, ", or ".join(reasons), as_json)


def _requeue_dead(q: Queue, queue_name: str | None, batch: int) -> ops.RequeueReport:
    """Every dead job of the queue (of all when None) back, a batch at a time: a line on
    stderr after each batch, so a long requeue shows it moves (and what is already done)."""

    def reported() -> Iterator[ops.RequeueReport]:
        so_far = 0
        for n, report in enumerate(q.requeue_dead_batches(queue_name, batch), 1):
            so_far += len(report[0])
            line = f"batch {n:,}: requeued {output.plural(so_far, 'dead job')} so far"
            click.echo(line, err=True)
            yield report

    return ops.summed(reported())


def orphan_text(parent: int, state: str) -> str:
    """Why a requeue left a job dead whose parent is dead, or gone before it was done."""
    if state == "gone":
        return f"dead: its parent {parent} was deleted before it was done; it can never run"
    return f"dead: its parent {parent} is dead; requeue {parent} to run both in order"


@click.command(
    "kill",
    params=[
        click.Argument(["job_ids"], nargs=-1, type=JOB_ID, metavar="[JOB_ID]..."),
        click.Option(
            ["--reason"],
            default="killed by operator",
            show_default=True,
            help="Recorded as last_error.",
        ),
        click.Option(
            ["--json", "as_json"], is_flag=True, help="Print what was (not) killed as JSON."
        ),
        *_filter_params(queue=True, status=True),
        click.Option(["--all-queues", "all_queues"], is_flag=True, help="Every queue."),
        *_bulk_params(),
    ],
    help="Ready or running jobs to dead (fence + 1: a worker still running one loses its "
    "lease): by id, or those matching a filter.",
)
@click.pass_context
@takes_filter
def kill_command(
    ctx: click.Context,
    /,
    *,
    job_ids: tuple[int, ...],
    reason: str,
    as_json: bool,
    filters: FilterOptions,
    all_queues: bool,
    dry_run: bool,
    batch: int,
) -> None:
    """By id (a worker still running one loses its lease), or the jobs a filter matches."""
    by_filter = _filter_given(filters, dry_run) or filters.queue_name is not None or all_queues
    if not by_filter and not job_ids:
        raise click.UsageError("Missing argument 'JOB_ID...' (or give a filter)")
    if by_filter and job_ids:
        raise click.UsageError("give job ids or a filter, not both")
    _one_scope(filters.queue_name, all_queues)
    if not reason.strip():
        raise click.BadParameter("reason must not be empty", param_hint="'--reason'")
    if by_filter:
        _run_bulk(
            ctx,
            "kill",
            filters.job_filter(),
            all_queues=all_queues,
            dry_run=dry_run,
            batch=batch,
            as_json=as_json,
            reason=reason,
        )
        return
    ids = unique(job_ids)
    with settings(ctx).queue() as q:
        _require_jobs(q, ids)
        killed = q.kill(ids, reason)
        skipped = _left_alone(q, ids, killed)
    _report("killed", killed, skipped, "already finished", as_json)


@click.pass_context
@takes_filter
def _delete(
    ctx: click.Context,
    /,
    *,
    filters: FilterOptions,
    all_queues: bool,
    dry_run: bool,
    batch: int,
    as_json: bool,
) -> None:
    _one_scope(filters.queue_name, all_queues)
    _run_bulk(
        ctx,
        "delete",
        filters.job_filter(),
        all_queues=all_queues,
        dry_run=dry_run,
        batch=batch,
        as_json=as_json,
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


@click.command("errors", cls=DocstringCommand)
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
    group = settings(ctx)
    with group.reader() as q:
        groups = q.errors(queue_name, since, limit)
        role = group.read_from(q)
    if as_json:
        echo_json(with_read_from([g.to_dict() for g in groups], role))
        return
    say_read_from(role)
    if not groups:
        click.echo("no failed or dead jobs with an error")
        return
    _print_errors(groups)


def _print_errors(groups: Sequence[ErrorGroup]) -> None:
    console = output.console()
    table = Table()
    for col in ("group", "dead", "failed", "first seen", "last seen", "queues", "error"):
        table.add_column(col, justify="right" if col in ("dead", "failed") else "left")
    for g in groups:
        table.add_row(
            output.escaped(g.group),
            str(g.dead),
            str(g.failed),
            when(g.first_seen),
            when(g.last_seen),
            output.escaped(", ".join(g.queues)),
            output.escaped(g.pattern),
        )
    console.print(table)
    for g in groups:
        console.print(f"[bold]{output.escaped(g.group)}[/bold] example job {g.example_id}:")
        for line in printable(g.example_error, multiline=True).splitlines() or [""]:
            console.print("  " + escape(line), highlight=False)
        if g.example_error_truncated:
            console.print(
                f"  [dim]... (cut: {g.example_error_bytes:,} bytes in all;"
                f" pgq show {g.example_id} --full)[/dim]",
                highlight=False,
            )
