"""`pgq`: the command line over pgq_core (queue operations) and pgq_tui (the dashboard).

Every command reaches the database through pgq_core's `Queue`; none holds SQL. Commands that
print data take `--json`; bad input is one `pgq: error: ...` line (exit 2 for usage, 1 for
runtime failures), never a traceback.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import IO, Any

import click
import psycopg
from rich.console import Console
from rich.json import JSON
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from pgq_core import JobDetail, JobNotFound, JobSpec, Queue
from pgq_core import migrate as run_migrate
from pgq_core.models import STATUSES
from pgq_core.ops import DEFAULT_MAX_ATTEMPTS, PRUNE_BATCH, REAP_BATCH

from .context import PgqGroup, Settings, duration, echo_json, fail, settings, unique

#: Files with at least this many jobs get a progress bar (on a terminal).
PROGRESS_THRESHOLD = 5000
#: PostgreSQL's int and bigint ranges, so an out-of-range number is a usage error.
INT4 = click.IntRange(1, 2**31 - 1)
JOB_ID = click.IntRange(1, 2**63 - 1)
#: Jobs per `enqueue_many` call while a file is enqueued (all inside one transaction).
ENQUEUE_STEP = 5000


@click.group(cls=PgqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dsn",
    envvar="PGQ_DSN",
    help="PostgreSQL server to use (or PGQ_DSN). Default: the embedded server under PGQ_HOME.",
)
@click.option(
    "--schema",
    envvar="PGQ_SCHEMA",
    default=None,
    help="Schema of the queue (or PGQ_SCHEMA; default pgq).",
)
@click.version_option(package_name="pgq")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, schema: str | None) -> None:
    """A job queue in one PostgreSQL table, with leases, fencing tokens and a dashboard."""
    ctx.obj = Settings(dsn, schema)


# ---------------------------------------------------------------------------- parameter types



def _run_at(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """ISO 8601; a time without an offset is local time."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"not an ISO 8601 time: {value!r} (use e.g. 2030-01-31T09:00:00+00:00)", ctx, param
        ) from None
    return parsed if parsed.tzinfo else parsed.astimezone()


def _string_problem(value: Any) -> str | None:
    """Why jsonb would reject a string inside a parsed JSON value, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "jsonb cannot hold \\u0000"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "a string holds a lone UTF-16 surrogate"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:20]}")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def parse_payload(text: str) -> Any:
    """One JSON value as jsonb accepts it; ValueError with a one-line reason otherwise.

    Only a \\u escape can put NUL or a lone surrogate in a string, so only then is it walked.
    """
    try:
        value = _DECODER.decode(text.rstrip())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at column {exc.colno}") from None
    problem = _string_problem(value) if "\\u" in text else None
    if problem:
        raise ValueError(problem)
    return value


def read_payload_lines(stream: IO[bytes], name: str) -> list[Any]:
    """Every non-blank line of a JSON-lines stream; BadParameter naming the first bad line."""
    payloads: list[Any] = []
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            raise click.BadParameter(
                f"{name}: line {number} is not UTF-8 text; nothing was enqueued",
                param_hint="'--file'",
            ) from None
        if not line.strip():
            continue
        try:
            payloads.append(parse_payload(line))
        except ValueError as exc:
            raise click.BadParameter(
                f"{name}: line {number} is not valid JSON ({exc}); nothing was enqueued",
                param_hint="'--file'",
            ) from None
    return payloads


# ---------------------------------------------------------------------------- output helpers


def _console() -> Console:
    return Console(soft_wrap=False)


def _progress(total_hint: bool) -> Progress:
    """A progress display on stderr, only when stderr is a terminal (never in pipes or --json)."""
    err = Console(stderr=True)
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total_hint:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    return Progress(*columns, console=err, transient=True, disable=not err.is_terminal)


def _when(value: datetime | None) -> str:
    return "" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _span(value: timedelta) -> str:
    """A duration the way an operator writes it: 7d, 1h30m, 45s."""
    seconds = value.total_seconds()
    if 0 < seconds < 1:
        return f"{seconds * 1000:g}ms"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{int(count)}{unit}")
    if seconds or not parts:
        parts.append(f"{seconds:g}s")
    return "".join(parts)


def _ids_text(ids: Sequence[int], limit: int = 20) -> str:
    shown = ", ".join(map(str, ids[:limit]))
    return shown + (f", … ({len(ids) - limit} more)" if len(ids) > limit else "")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@contextmanager
def _queue(ctx: click.Context) -> Iterator[Queue]:
    with settings(ctx).queue() as q:
        yield q


# ---------------------------------------------------------------------------- schema and stats


@main.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the queue's schema (idempotent; safe from many processes at once)."""
    target = settings(ctx).target()
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        applied = run_migrate(conn, target.schema)
    if applied:
        click.echo(f"schema {target.schema}: applied version(s) {', '.join(map(str, applied))}")
    else:
        click.echo(f"schema {target.schema}: up to date")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Ready, scheduled, running, expiring, dead and done jobs per queue."""
    with _queue(ctx) as q:
        rows = q.stats()
    if as_json:
        echo_json([r.to_dict() for r in rows])
        return
    table = Table(title=f"pgq · {settings(ctx).target().display}")
    for col in ("queue", "ready", "scheduled", "running", "expiring", "dead", "done", "oldest due"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for r in rows:
        oldest = "" if r.oldest_due_seconds is None else f"{r.oldest_due_seconds:.1f}s"
        marks = (" [yellow](paused)[/yellow]" if r.paused else "") + (
            f" [dim](limit {r.limit})[/dim]" if r.limit is not None else ""
        )
        table.add_row(
            escape(r.queue) + marks,
            str(r.ready),
            str(r.scheduled),
            str(r.running),
            str(r.expiring),
            str(r.dead),
            str(r.done),
            oldest,
        )
    _console().print(table)


# ---------------------------------------------------------------------------- enqueue


@main.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("payload", metavar="[PAYLOAD_JSON]", required=False)
@click.option(
    "--file",
    "-f",
    "file",
    type=click.File("rb"),
    help="Enqueue one job per line of this JSON-lines file (- for stdin); all or nothing.",
)
@click.option("--delay", callback=duration, help="Due after this long, e.g. 30s, 5m, 1h.")
@click.option("--run-at", callback=_run_at, help="Due at this ISO 8601 time (no offset: local).")
@click.option(
    "--max-attempts",
    type=INT4,
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help="Attempts before the job is dead.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the new ids as a JSON array.")
@click.pass_context
def enqueue(
    ctx: click.Context,
    queue_name: str,
    payload: str | None,
    file: IO[bytes] | None,
    delay: timedelta | None,
    run_at: datetime | None,
    max_attempts: int,
    as_json: bool,
) -> None:
    """Add a job to QUEUE with PAYLOAD_JSON (default {}), or one job per line of --file."""
    if not queue_name.strip():
        raise click.BadParameter("queue name must not be empty", param_hint="'QUEUE'")
    if payload is not None and file is not None:
        raise click.UsageError("give PAYLOAD_JSON or --file, not both")
    if delay is not None and run_at is not None:
        raise click.UsageError("give --delay or --run-at, not both")

    if file is None:
        try:
            value = parse_payload(payload) if payload is not None else {}
        except ValueError as exc:
            raise click.BadParameter(
                f"not valid JSON ({exc})", param_hint="'PAYLOAD_JSON'"
            ) from None
        with _queue(ctx) as q:
            job_id = q.enqueue(
                queue_name, value, delay=delay, run_at=run_at, max_attempts=max_attempts
            )
        if as_json:
            echo_json([job_id])
        else:
            click.echo(f"enqueued job {job_id} on {queue_name}")
        return

    name = "stdin" if getattr(file, "name", "-") in ("-", "<stdin>") else str(file.name)
    payloads = read_payload_lines(file, name)
    specs = [
        JobSpec(queue_name, p, run_at=run_at, delay=delay, max_attempts=max_attempts)
        for p in payloads
    ]
    ids = _enqueue_all(ctx, specs)
    if as_json:
        echo_json(ids)
    elif ids:
        click.echo(f"enqueued {_plural(len(ids), 'job')} on {queue_name} (ids {ids[0]}..{ids[-1]})")
    else:
        click.echo(f"{name}: no jobs (only blank lines); nothing enqueued")


def _enqueue_all(ctx: click.Context, specs: list[JobSpec]) -> list[int]:
    """All specs in one transaction: a failure part-way leaves nothing enqueued."""
    ids: list[int] = []
    if not specs:
        return ids
    with _queue(ctx) as q, _progress(total_hint=True) as progress:
        task = progress.add_task(
            "enqueueing", total=len(specs), visible=len(specs) >= PROGRESS_THRESHOLD
        )
        with q.conn.transaction():
            for start in range(0, len(specs), ENQUEUE_STEP):
                step = specs[start : start + ENQUEUE_STEP]
                ids += q.enqueue_many(step)
                progress.advance(task, len(step))
    return ids


# ---------------------------------------------------------------------------- browsing


@main.command()
@click.option("--queue", "-q", "queue_name", help="Only this queue.")
@click.option("--status", "-s", type=click.Choice(STATUSES), help="Only jobs in this status.")
@click.option(
    "--limit",
    "-n",
    type=INT4,
    default=50,
    show_default=True,
    help="At most this many jobs, newest first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def jobs(
    ctx: click.Context, queue_name: str | None, status: str | None, limit: int, as_json: bool
) -> None:
    """List jobs, newest first (payloads are shown by `pgq show`)."""
    with _queue(ctx) as q:
        rows = q.jobs(queue_name, status, limit)
    if as_json:
        echo_json([r.to_dict() for r in rows])
        return
    if not rows:
        click.echo("no jobs")
        return
    table = Table()
    for col in ("id", "queue", "status", "attempts", "fence", "run at", "worker", "last error"):
        table.add_column(
            col,
            justify="right" if col in ("id", "attempts", "fence") else "left",
            no_wrap=col in ("id", "status", "attempts", "fence", "run at"),
        )
    for r in rows:
        error = (r.last_error or "").splitlines()[0][:60] if r.last_error else ""
        table.add_row(
            str(r.id),
            escape(r.queue),
            r.status,
            f"{r.attempts}/{r.max_attempts}",
            str(r.fence),
            _when(r.run_at),
            escape(r.worker or ""),
            escape(error),
        )
    _console().print(table)


@main.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (history included).")
@click.pass_context
def show(ctx: click.Context, job_id: int, as_json: bool) -> None:
    """Every column of one job, its payload and its fence history."""
    with _queue(ctx) as q:
        detail = q.job(job_id)
    if as_json:
        echo_json(detail.to_dict())
        return
    _print_detail(detail)


def _print_detail(d: JobDetail) -> None:
    console = _console()
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    lease = "" if d.lease_seconds is None else f"{d.lease_seconds:g}s"
    for label, value in (
        ("id", str(d.id)),
        ("queue", d.queue),
        ("status", d.status),
        ("attempts", f"{d.attempts} of {d.max_attempts}"),
        ("fence", str(d.fence)),
        ("run at", _when(d.run_at)),
        ("queued at", _when(d.queued_at)),
        ("worker", d.worker or ""),
        ("claimed at", _when(d.claimed_at)),
        ("lease", lease),
        ("lease until", _when(d.lease_until)),
        ("finished at", _when(d.finished_at)),
        ("last error", d.last_error or ""),
    ):
        fields.add_row(label, escape(value))
    console.print(fields)
    console.print("[bold]payload[/bold]")
    console.print(JSON(json.dumps(d.payload)))
    history = Table(title="fence history", title_justify="left")
    for col in ("at", "event", "fence", "worker", "detail"):
        history.add_column(col, justify="right" if col == "fence" else "left")
    for e in d.history:
        history.add_row(
            _when(e.at), e.event, str(e.fence), escape(e.worker or ""), escape(e.detail or "")
        )
    console.print(history)


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
        fail(f"no {label} {_ids_text(missing)}; nothing was changed")


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
        click.echo(f"{verb} {_plural(len(done), 'job')}: {_ids_text(done)}")
    else:
        click.echo(f"{verb} no jobs")
    if skipped:
        listed = ", ".join(f"{i} ({s})" for i, s in list(skipped.items())[:20])
        more = f", … ({len(skipped) - 20} more)" if len(skipped) > 20 else ""
        click.echo(f"not {verb} ({why}): {listed}{more}")


@main.command()
@click.argument("job_ids", nargs=-1, type=JOB_ID, metavar="[JOB_ID]...")
@click.option("--queue", "-q", "queue_name", help="Requeue the dead jobs of this queue.")
@click.option("--all-queues", is_flag=True, help="Requeue the dead jobs of every queue.")
@click.option("--dead", is_flag=True, help="Required with --queue/--all-queues: what to requeue.")
@click.option("--json", "as_json", is_flag=True, help="Print what was (not) requeued as JSON.")
@click.pass_context
def requeue(
    ctx: click.Context,
    job_ids: tuple[int, ...],
    queue_name: str | None,
    all_queues: bool,
    dead: bool,
    as_json: bool,
) -> None:
    """Dead jobs back to ready with fresh attempts: by id, or every dead job of a queue."""
    by_queue = queue_name is not None or all_queues
    if job_ids and by_queue:
        raise click.UsageError("give job ids or --queue/--all-queues, not both")
    if queue_name is not None and all_queues:
        raise click.UsageError("give --queue or --all-queues, not both")
    if by_queue and not dead:
        raise click.UsageError("--queue/--all-queues need --dead (only dead jobs are requeued)")
    if not job_ids and not by_queue:
        raise click.UsageError("give job ids, or --queue Q --dead, or --all-queues --dead")

    with _queue(ctx) as q:
        if by_queue:
            requeued = q.requeue_dead(queue_name)
            if as_json:
                echo_json({"requeued": requeued, "not_requeued": []})
            else:
                where = "every queue" if all_queues else f"queue {queue_name}"
                click.echo(f"requeued {_plural(len(requeued), 'dead job')} of {where}")
            return
        ids = unique(job_ids)
        _require_jobs(q, ids)
        requeued = q.requeue(ids)
        skipped = _left_alone(q, ids, requeued)
    _report("requeued", requeued, skipped, "not dead", as_json)


@main.command()
@click.argument("job_ids", nargs=-1, type=JOB_ID, required=True, metavar="JOB_ID...")
@click.option(
    "--reason", default="killed by operator", show_default=True, help="Recorded as last_error."
)
@click.option("--json", "as_json", is_flag=True, help="Print what was (not) killed as JSON.")
@click.pass_context
def kill(ctx: click.Context, job_ids: tuple[int, ...], reason: str, as_json: bool) -> None:
    """Ready or running jobs to dead; a worker still running one loses its lease (fence + 1)."""
    if not reason.strip():
        raise click.BadParameter("reason must not be empty", param_hint="'--reason'")
    ids = unique(job_ids)
    with _queue(ctx) as q:
        _require_jobs(q, ids)
        killed = q.kill(ids, reason)
        skipped = _left_alone(q, ids, killed)
    _report("killed", killed, skipped, "already finished", as_json)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the reaped jobs as JSON.")
@click.pass_context
def reap(ctx: click.Context, as_json: bool) -> None:
    """Expired leases back to ready (or dead at max attempts), in batches until none is left."""
    reaped: list[tuple[int, str]] = []
    with _queue(ctx) as q:
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
    click.echo(f"reaped {_plural(len(reaped), 'job')}")
    if ready:
        click.echo(f"  ready again: {_ids_text(ready)}")
    if dead:
        click.echo(f"  dead (out of attempts): {_ids_text(dead)}")


@main.command()
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
@click.option("--json", "as_json", is_flag=True, help='Print {"deleted": N}.')
@click.pass_context
def prune(ctx: click.Context, older_than: timedelta, batch: int, as_json: bool) -> None:
    """Delete old done jobs and their history, in bounded batches."""
    deleted = 0
    with _queue(ctx) as q, _progress(total_hint=False) as progress:
        task = progress.add_task("pruning: 0 deleted")
        for count in q.prune_batches(older_than, batch):
            deleted += count
            progress.update(task, description=f"pruning: {deleted} deleted")
    if as_json:
        echo_json({"deleted": deleted})
    else:
        click.echo(f"pruned {_plural(deleted, 'done job')} older than {_span(older_than)}")


# ---------------------------------------------------------------------------- bench


def _bench_levels(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    """`1,4,10,50` -> (1, 4, 10, 50): each a concurrency from 1 to 1000, each once."""
    try:
        levels = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {value!r}") from None
    if not all(1 <= c <= 1000 for c in levels):
        raise click.BadParameter("each level must be from 1 to 1000")
    return tuple(dict.fromkeys(levels))


@main.command("bench")
@click.option(
    "--jobs",
    type=click.IntRange(1),
    default=None,
    help="Jobs per side (default 20,000; with --same-resources 10,000 per run).",
)
@click.option(
    "--workers",
    default=4,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes per side.",
)
@click.option(
    "--batch",
    default=10,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="The seed's LIMIT: jobs per seed claim (10 as the seed writes it). The "
    "pgq_same_batch side runs pgq's worker with this concurrency, so the same claim size.",
)
@click.option(
    "--concurrency",
    default=50,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="pgq's worker concurrency, hence its claim size, for the headline pgq side "
    "(ratio), its pickup latency and the variants.",
)
@click.option(
    "--payload-bytes",
    default=100,
    show_default=True,
    type=click.IntRange(0, 10_000_000),
    help="Padding in each job's payload.",
)
@click.option(
    "--latency-samples",
    default=200,
    show_default=True,
    type=click.IntRange(1),
    help="Jobs enqueued one at a time for pickup latency.",
)
@click.option(
    "--rounds",
    default=3,
    show_default=True,
    type=click.IntRange(1, 20),
    help="Drain rounds per side, interleaved; each side reports its median round.",
)
@click.option(
    "--stats-scale",
    is_flag=True,
    help="Instead: stats and leases timing over a large history, sizes, prune.",
)
@click.option(
    "--done",
    "done_jobs",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(0),
    help="--stats-scale: done jobs (with history).",
)
@click.option(
    "--ready",
    "ready_jobs",
    default=10_000,
    show_default=True,
    type=click.IntRange(0),
    help="--stats-scale: ready jobs.",
)
@click.option(
    "--running",
    "running_jobs",
    default=1_000,
    show_default=True,
    type=click.IntRange(0),
    help="--stats-scale: running jobs.",
)
@click.option(
    "--dead",
    "dead_jobs",
    default=1_000,
    show_default=True,
    type=click.IntRange(0),
    help="--stats-scale: dead jobs.",
)
@click.option(
    "--repeat",
    default=200,
    show_default=True,
    type=click.IntRange(1),
    help="--stats-scale: calls timed per query.",
)
@click.option(
    "--same-resources",
    is_flag=True,
    help="Instead: the seed (C threads, one process) against one `pgq worker --concurrency C` "
    "process, for each C of --concurrency-levels.",
)
@click.option(
    "--concurrency-levels",
    default="1,4,10,50",
    show_default=True,
    callback=_bench_levels,
    help="--same-resources: the values of C, comma-separated.",
)
@click.option(
    "--handler",
    "handler_kind",
    type=click.Choice(["sync", "async", "both"]),
    default="both",
    show_default=True,
    help="--same-resources: pgq's no-op handler, a plain function, an async def, or each.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with every figure.")
@click.pass_context
def bench_command(ctx: click.Context, /, **options: Any) -> None:
    """Benchmark pgq against the seed's plain SQL on a throwaway server (embedded, or --dsn
    with throwaway schemas that are dropped afterwards).

    \b
    Drain sides, same server, same run, same number of processes:
      seed            the seed's SQL as written, claim --batch (LIMIT 10)
      pgq_same_batch  pgq's worker, concurrency --batch: same claim size as the seed
      pgq             pgq's worker, concurrency --concurrency (its claim size)
    ratio = pgq drain / seed drain; ratio_same_batch = pgq_same_batch / seed.

    \b
    --same-resources: for each C, each side gets one process and C-way concurrency:
      seed  the seed's SQL, C threads in one process, claim LIMIT 10
      pgq   one `pgq worker --concurrency C --burst` process, no-op sync / async handler
    ratio = pgq drain / seed drain at the same C, per handler."""
    from pgq_bench import run_command  # here, so that only `pgq bench` loads the bench

    obj = settings(ctx)
    run_command(obj.dsn, obj.schema, **options)


# Commands that live in their own modules: the worker, the dashboard and demo.
from .tui_cli import dashboard_command, demo_command  # noqa: E402
from .worker_cli import worker_command  # noqa: E402

for _command in (worker_command, dashboard_command, demo_command):
    main.add_command(_command)

# Queue operations (pause, limit, filters, errors, health) live in their own module too.
from .ops_cli import install as _install_ops_commands  # noqa: E402

_install_ops_commands(main)
