"""`pgq`: the command line over pgq_core (queue operations) and pgq_tui (the dashboard).

Every command reaches the database through pgq_core's `Queue`; none holds SQL. Commands that
print data take `--json`; bad input is one `pgq: error: ...` line (exit 2 for usage, 1 for
runtime failures), never a traceback.

Invariants: text from the database reaches the terminal only as `rich.text.Text` through
`pgq_core.text.printable` (never as markup, never a control character); `--json` prints the
raw values. The worker, dashboard, demo and bench commands are imported only when run, so
`pgq --help` stays fast.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import IO, TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.table import Table
from rich.text import Text

from pgq_core import JobDetail, JobNotFound, JobSpec, Queue, ops
from pgq_core import migrate as run_migrate
from pgq_core.config import check_dsn
from pgq_core.models import STATUSES, PruneReport
from pgq_core.ops import DEFAULT_MAX_ATTEMPTS, PRUNE_BATCH, REAP_BATCH, PayloadPreview
from pgq_core.text import printable

from .context import (
    PgqGroup,
    Settings,
    at_most,
    duration,
    echo_json,
    fail,
    new_queue_option,
    queue_option,
    raw_byte,
    settings,
    unique,
    when,
)
from .ops_cli import jobs_table

if TYPE_CHECKING:
    from rich.progress import Progress

#: Files with at least this many jobs get a progress bar (on a terminal).
PROGRESS_THRESHOLD = 5000
#: PostgreSQL's int and bigint ranges, so an out-of-range number is a usage error.
INT4 = click.IntRange(1, 2**31 - 1)
JOB_ID = click.IntRange(1, 2**63 - 1)
#: Jobs per `enqueue_many` call while a file is enqueued (all inside one transaction), and the
#: most JSON text (bytes) one call carries: jsonb arrays hold at most 255 MB.
ENQUEUE_STEP = 5000
ENQUEUE_STEP_BYTES = 64 * 1024 * 1024
#: The largest payload line of a file: a jsonb value holds at most 255 MB.
PAYLOAD_MAX_BYTES = 255 * 1024 * 1024
#: Characters of a payload `pgq show` prints unless --full.
SHOW_CHARS = 64 * 1024
#: the most cells a queue name takes in a table; a longer one is cut with an ellipsis
NAME_CELLS = 40
#: --run-at between these; PostgreSQL stores more, but an earlier time is a typo, not a plan.
RUN_AT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
RUN_AT_MAX = datetime(9999, 12, 30, tzinfo=UTC)
#: The longest --statement-timeout, as for a worker's (PostgreSQL itself refuses more than
#: 2^31 - 1 ms, 24.8 days, with a bare "invalid value").
STATEMENT_TIMEOUT_MAX = timedelta(days=1)
#: The longest --delay: 100 years.
DELAY_MAX = timedelta(days=36525)


class LazyGroup(PgqGroup):
    """Commands of `LAZY` are imported when run (or asked for their help), not at start-up;
    `pgq --help` lists them by their short help here."""

    #: name -> (module, attribute, short help)
    LAZY: dict[str, tuple[str, str, str]] = {
        "worker": (
            "pgq_cli.worker_cli",
            "worker_command",
            "Run a handler on the jobs of QUEUES until stopped.",
        ),
        "dashboard": (
            "pgq_cli.tui_cli",
            "dashboard_command",
            "Live view of queues, leases, jobs and workers, with operator actions (? for keys).",
        ),
        "demo": (
            "pgq_cli.tui_cli",
            "demo_command",
            "Fill demo queues with a realistic mix and open the dashboard with workers running.",
        ),
        "bench": (
            "pgq_cli.bench_cli",
            "bench_command",
            "Benchmark pgq against the seed's plain SQL on a throwaway server.",
        ),
        "schedule": (
            "pgq_cli.app_cli",
            "schedule_group",
            "Periodic jobs: add, list, remove or run a cron schedule.",
        ),
        "metrics": (
            "pgq_cli.prod_cli",
            "metrics_command",
            "Serve Prometheus metrics of the queue, read from the database on every scrape.",
        ),
        "psql": (
            "pgq_cli.db_cli",
            "psql_command",
            "Open psql on the queue's database (the embedded server too).",
        ),
        "dsn": (
            "pgq_cli.db_cli",
            "dsn_command",
            "Print the DSN of the queue's database, password included, for your own programs.",
        ),
        "config": (
            "pgq_cli.prod_cli",
            "config_group",
            "Show the schema's settings, or change one (`pgq config notify edge`).",
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.LAZY:
            module, attribute, _ = self.LAZY[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            if name in self.LAZY and name not in self.commands:
                placeholder = click.Command(name, help=self.LAZY[name][2])
                rows.append((name, placeholder.get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option(
    "--statement-timeout",
    envvar="PGQ_STATEMENT_TIMEOUT",
    callback=at_most(STATEMENT_TIMEOUT_MAX),
    help="Longest any one statement may run, e.g. 30s; 0 for none (or PGQ_STATEMENT_TIMEOUT). "
    "Default: the role's own, else 30s.",
)
@click.option(
    "--pooled",
    is_flag=True,
    envvar="PGQ_POOLED",
    help="The DSN goes through a pooler in transaction mode (PgBouncer), or PGQ_POOLED=1: no "
    "prepared statements, no session settings, LISTEN only on --listen-dsn.",
)
@click.option(
    "--listen-dsn",
    envvar="PGQ_LISTEN_DSN",
    help="A direct connection (not pooled) for LISTEN, or PGQ_LISTEN_DSN. Pooled without one, "
    "workers and the dashboard poll alone.",
)
@click.version_option(package_name="pgq-fence")
@click.pass_context
def main(
    ctx: click.Context,
    dsn: str | None,
    schema: str | None,
    statement_timeout: timedelta | None,
    pooled: bool,
    listen_dsn: str | None,
) -> None:
    """A job queue in one PostgreSQL table, with leases, fencing tokens and a dashboard."""
    # pgq_core reads both from the environment, and the processes pgq starts inherit them
    if pooled:
        os.environ["PGQ_POOLED"] = "1"
    if listen_dsn:
        check_dsn(listen_dsn)
        os.environ["PGQ_LISTEN_DSN"] = listen_dsn
    ctx.obj = Settings(dsn, schema, statement_timeout)


# ---------------------------------------------------------------------------- parameter types


def _run_at(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """ISO 8601; a time without an offset is local time."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        aware = parsed if parsed.tzinfo else parsed.astimezone()
        in_range = RUN_AT_MIN <= aware <= RUN_AT_MAX
    except (ValueError, OverflowError):
        raise click.BadParameter(
            f"not an ISO 8601 time: {value!r} (use e.g. 2030-01-31T09:00:00+00:00)", ctx, param
        ) from None
    if not in_range:
        raise click.BadParameter(
            f"{value!r} is out of range: give a time between 1970 and 9999", ctx, param
        )
    return aware


def _delay(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    parsed = duration(ctx, param, value)
    if parsed is not None and parsed > DELAY_MAX:
        raise click.BadParameter("the delay must be at most 100 years", ctx, param)
    return parsed


def _unique_key(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return ops.check_unique_key(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


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

    Only a \\u escape can put NUL or a lone surrogate in a string, so only then is it walked;
    a raw lone surrogate is a command-line byte that is not UTF-8.
    """
    problem = raw_byte(text)
    if problem:
        raise ValueError(problem)
    try:
        value = _DECODER.decode(text.rstrip())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    problem = _string_problem(value) if "\\u" in text else None
    if problem:
        raise ValueError(problem)
    return value


def read_payload_lines(stream: IO[bytes], name: str) -> list[tuple[Any, int]]:
    """Every non-blank line of a JSON-lines stream with its size in bytes; BadParameter naming
    the first bad line (not UTF-8, not JSON, nested too deeply, too large)."""
    payloads: list[tuple[Any, int]] = []
    for number, raw in enumerate(stream, start=1):
        if len(raw) > PAYLOAD_MAX_BYTES:
            raise click.BadParameter(
                f"{name}: line {number} is too large ({_size(len(raw))}; a payload holds at "
                f"most {_size(PAYLOAD_MAX_BYTES)}); nothing was enqueued",
                param_hint="'--file'",
            )
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
            payloads.append((parse_payload(line), len(raw)))
        except ValueError as exc:
            raise click.BadParameter(
                f"{name}: line {number} is not valid JSON ({exc}); nothing was enqueued",
                param_hint="'--file'",
            ) from None
    return payloads


def read_stdin_payload() -> str:
    """One payload's JSON text from stdin (`pgq enqueue QUEUE -`), whole: it may span lines.
    BadParameter if stdin is empty, not UTF-8 or larger than a payload may be."""
    hint = "'PAYLOAD_JSON' (- reads stdin)"
    stream: IO[bytes] | None = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise click.BadParameter("there is no stdin to read", param_hint=hint)
    raw = stream.read(PAYLOAD_MAX_BYTES + 1)
    if len(raw) > PAYLOAD_MAX_BYTES:
        raise click.BadParameter(
            f"stdin is too large (a payload holds at most {_size(PAYLOAD_MAX_BYTES)})",
            param_hint=hint,
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise click.BadParameter("stdin is not UTF-8 text", param_hint=hint) from None
    if not text.strip():
        raise click.BadParameter("stdin is empty: give one JSON value", param_hint=hint)
    return text


# ---------------------------------------------------------------------------- output helpers


def _console() -> Console:
    return Console(soft_wrap=False)


def _text(value: str | None, *, multiline: bool = False, style: str = "") -> Text:
    """Database text for the terminal: never markup, every control character escaped."""
    return Text(printable(value or "", multiline=multiline), style=style)


def _size(size: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("kB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _progress(total_hint: bool) -> Progress:
    """A progress display on stderr, only when stderr is a terminal (never in pipes or --json)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    err = Console(stderr=True)
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total_hint:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    return Progress(*columns, console=err, transient=True, disable=not err.is_terminal)


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
    group = settings(ctx)
    target = group.target()
    with group.connect() as conn:
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
    table = Table(title=_text(f"pgq · {settings(ctx).target().display}"))
    for col in ("queue", "ready", "scheduled", "running", "expiring", "dead", "done", "oldest due"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for r in rows:
        oldest = "" if r.oldest_due_seconds is None else f"{r.oldest_due_seconds:.1f}s"
        name = _text(r.queue)
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
            str(r.running),
            str(r.expiring),
            str(r.dead),
            str(r.done),
            oldest,
        )
    _console().print(table)


# ---------------------------------------------------------------------------- enqueue


@main.command()
@click.argument("queue_name", metavar="QUEUE", callback=new_queue_option)
@click.argument("payload", metavar="[PAYLOAD_JSON]", required=False)
@click.option(
    "--file",
    "-f",
    "file",
    type=click.File("rb"),
    help="Enqueue one job per line of this JSON-lines file (- for stdin); all or nothing.",
)
@click.option("--delay", callback=_delay, help="Due after this long, e.g. 30s, 5m, 1h.")
@click.option("--run-at", callback=_run_at, help="Due at this ISO 8601 time (no offset: local).")
@click.option(
    "--max-attempts",
    type=INT4,
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help="Attempts before the job is dead.",
)
@click.option(
    "--priority",
    type=click.IntRange(-(2**31), 2**31 - 1),
    default=0,
    show_default=True,
    help="Higher is claimed first among the queue's due jobs.",
)
@click.option(
    "--unique-key",
    callback=_unique_key,
    help="Enqueue nothing while a ready, scheduled or running job holds this key.",
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
    priority: int,
    unique_key: str | None,
    as_json: bool,
) -> None:
    """Add a job to QUEUE with PAYLOAD_JSON (default {}; - reads it from stdin), or one job
    per line of --file.

    With --unique-key, a second enqueue while a job with that key is ready, scheduled or
    running inserts nothing and prints the existing job's id."""
    if payload is not None and file is not None:
        raise click.UsageError("give PAYLOAD_JSON or --file, not both")
    if delay is not None and run_at is not None:
        raise click.UsageError("give --delay or --run-at, not both")
    if unique_key is not None and file is not None:
        raise click.UsageError("--unique-key names one job: it does not go with --file")

    if file is None:
        if payload == "-":
            payload = read_stdin_payload()
        try:
            value = parse_payload(payload) if payload is not None else {}
        except ValueError as exc:
            raise click.BadParameter(
                f"not valid JSON ({exc})", param_hint="'PAYLOAD_JSON'"
            ) from None
        spec = JobSpec(
            queue_name,
            value,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            priority=priority,
            unique_key=unique_key,
        )
        with _queue(ctx) as q:
            (outcome,) = q.enqueue_many_detailed([spec])
        if as_json:
            echo_json([outcome.id])
        elif outcome.inserted:
            click.echo(f"enqueued job {outcome.id} on {printable(queue_name)}")
        else:
            click.echo(
                f"job {outcome.id} already holds unique key {printable(unique_key or '')}; "
                "nothing enqueued"
            )
        return

    name = "stdin" if getattr(file, "name", "-") in ("-", "<stdin>") else str(file.name)
    payloads = read_payload_lines(file, name)
    specs = [
        (
            JobSpec(
                queue_name,
                p,
                run_at=run_at,
                delay=delay,
                max_attempts=max_attempts,
                priority=priority,
            ),
            size,
        )
        for p, size in payloads
    ]
    ids = _enqueue_all(ctx, specs)
    if as_json:
        echo_json(ids)
    elif ids:
        click.echo(
            f"enqueued {_plural(len(ids), 'job')} on {printable(queue_name)} "
            f"(ids {ids[0]}..{ids[-1]})"
        )
    else:
        click.echo(f"{name}: no jobs (only blank lines); nothing enqueued")


def _steps(specs: list[tuple[JobSpec, int]]) -> Iterator[list[JobSpec]]:
    """Consecutive runs of at most ENQUEUE_STEP jobs and ENQUEUE_STEP_BYTES of JSON each."""
    step: list[JobSpec] = []
    size = 0
    for spec, spec_size in specs:
        if step and (len(step) >= ENQUEUE_STEP or size + spec_size > ENQUEUE_STEP_BYTES):
            yield step
            step, size = [], 0
        step.append(spec)
        size += spec_size
    if step:
        yield step


def _enqueue_all(ctx: click.Context, specs: list[tuple[JobSpec, int]]) -> list[int]:
    """All specs in one transaction: a failure part-way leaves nothing enqueued. Each statement
    carries a bounded step, so each stays under jsonb's size limit and the statement timeout."""
    ids: list[int] = []
    if not specs:
        return ids
    with _queue(ctx) as q, _progress(total_hint=True) as progress:
        task = progress.add_task(
            "enqueueing", total=len(specs), visible=len(specs) >= PROGRESS_THRESHOLD
        )
        with q.conn.transaction():
            for step in _steps(specs):
                ids += q.enqueue_many(step)
                progress.advance(task, len(step))
    return ids


# ---------------------------------------------------------------------------- browsing


@main.command()
@click.option("--queue", "-q", "queue_name", callback=queue_option, help="Only this queue.")
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
    _console().print(jobs_table(rows))


@main.command()
@click.argument("job_id", type=JOB_ID)
@click.option("--full", is_flag=True, help="Print the whole payload (default: its first 64 kB).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (history included).")
@click.pass_context
def show(ctx: click.Context, job_id: int, full: bool, as_json: bool) -> None:
    """Every column of one job, its payload and its fence history.

    Only the first part of a large payload is fetched and printed, with its size, unless --full
    (--json always holds the whole job)."""
    with _queue(ctx) as q:
        if as_json:
            echo_json(q.job(job_id).to_dict())
            return
        found = q.run(ops.job_preview(job_id, 2**31 - 1 if full else SHOW_CHARS))
        if found is None:
            raise JobNotFound(job_id)
        detail, preview = found
        detail.history.extend(q.history(job_id))
    _print_detail(detail, preview)


def _payload(preview: PayloadPreview) -> Text:
    """Pretty and highlighted when whole and small; otherwise the JSON text as it is."""
    if not preview.complete:
        return _text(preview.text, multiline=True)
    if len(preview.text) > SHOW_CHARS:
        return _text(preview.text, multiline=True)
    try:
        pretty = json.dumps(json.loads(preview.text), indent=2, ensure_ascii=False)
    except (RecursionError, ValueError):  # plain SQL stored what Python cannot read
        pretty = preview.text
    if len(pretty) > 4 * SHOW_CHARS:  # deep nesting: indentation would dwarf the payload
        pretty = preview.text
    text = _text(pretty, multiline=True)
    JSONHighlighter().highlight(text)
    return text


def _print_detail(d: JobDetail, preview: PayloadPreview) -> None:
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
        fields.add_row(label, _text(value))
    error = _text(d.last_error, multiline=True)
    if d.last_error_truncated and d.last_error_bytes is not None:
        error.append(
            f" ... ({_size(d.last_error_bytes)} in all; --full shows all)", style="dim"
        )
    fields.add_row("last error", error)
    if d.result is not None:
        shown = json.dumps(d.result, ensure_ascii=False)
        if len(shown) > SHOW_CHARS:
            shown = shown[:SHOW_CHARS] + f" ... ({_size(len(shown))} in all; --json shows all)"
        fields.add_row("result", _text(shown, multiline=True))
    console.print(fields)
    if preview.complete:
        console.print(Text("payload", style="bold"))
    else:
        console.print(
            Text.assemble(
                ("payload", "bold"),
                f" ({_size(preview.size)} of JSON; the first {_size(len(preview.text))} shown, "
                "--full shows all)",
            )
        )
    if len(preview.text) > SHOW_CHARS:
        console.file.flush()
        click.echo(printable(preview.text, multiline=True))
    else:
        console.print(_payload(preview))
    history = Table(title="fence history", title_justify="left")
    for col in ("at", "event", "fence", "worker", "detail"):
        history.add_column(col, justify="right" if col == "fence" else "left")
    for e in d.history:
        history.add_row(
            when(e.at), e.event, str(e.fence), _text(e.worker), _text(e.detail, multiline=True)
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
@click.option(
    "--queue",
    "-q",
    "queue_name",
    callback=queue_option,
    help="Requeue the dead jobs of this queue.",
)
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
            requeued, key_held = q.requeue_dead_report(queue_name)
            if as_json:
                held = "dead: a ready or running job holds its unique key"
                echo_json(
                    {
                        "requeued": requeued,
                        "not_requeued": [{"id": i, "status": held} for i in key_held],
                    }
                )
            else:
                where = "every queue" if all_queues else f"queue {printable(queue_name or '')}"
                click.echo(f"requeued {_plural(len(requeued), 'dead job')} of {where}")
                if key_held:
                    click.echo(
                        f"left dead (a ready or running job holds their unique key): "
                        f"{_ids_text(key_held)}"
                    )
            return
        ids = unique(job_ids)
        _require_jobs(q, ids)
        requeued, key_held = q.requeue_report(ids)
        skipped = _left_alone(q, ids, requeued)
    for job_id in key_held:
        if skipped.get(job_id) == "dead":
            skipped[job_id] = "dead: a ready or running job holds its unique key"
    why = "not dead, or unique key held" if key_held else "not dead"
    _report("requeued", requeued, skipped, why, as_json)


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
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"deleted": N, "partitions_dropped": [...], "history_rows_kept": N, ...}.',
)
@click.pass_context
def prune(ctx: click.Context, older_than: timedelta, batch: int, as_json: bool) -> None:
    """Delete old done jobs and their history, in bounded batches; drop the days of history
    that lie entirely before the cutoff, keeping the history of jobs still present."""
    with _queue(ctx) as q, _progress(total_hint=False) as progress:
        task = progress.add_task("pruning: 0 deleted")

        def show(report: PruneReport) -> None:
            dropped = len(report.partitions_dropped)
            progress.update(
                task,
                description=f"pruning: {report.deleted} deleted, "
                f"{_plural(dropped, 'partition')} dropped",
            )

        report = q.prune_report(older_than, batch, show)
    if as_json:
        echo_json(report.to_dict())
        return
    click.echo(f"pruned {_plural(report.deleted, 'done job')} older than {_span(older_than)}")
    if report.partitions_dropped:
        click.echo(
            f"dropped {_plural(len(report.partitions_dropped), 'history partition')} "
            f"({', '.join(report.partitions_dropped)}), keeping "
            f"{_plural(report.history_rows_kept, 'history row')} of jobs still present"
        )
    if report.partitions_locked:
        click.echo(
            f"left {_plural(len(report.partitions_locked), 'history partition')} for the next "
            f"prune (busy: {', '.join(report.partitions_locked)})"
        )
    for day in report.days_not_created:
        click.echo(f"no history partition for {day} (its rows go to the default partition)")


# Queue operations (pause, limit, filters, errors, health) live in their own module.
from .ops_cli import install as _install_ops_commands  # noqa: E402

_install_ops_commands(main)
