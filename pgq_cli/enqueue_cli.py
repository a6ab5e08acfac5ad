"""`pgq enqueue`: one job from an argument or stdin, or a JSON-lines file in one transaction.

Invariants: a payload is strict JSON (no NaN, no lone surrogates, no NUL) checked before any
row is written; a file is all enqueued or none of it; a bad line is named by its number.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import IO, Any

import click
import psycopg

from pgq_core import JobSpec, PgqError, Unstorable, jsontext, ops
from pgq_core.defaults import DEFAULT_MAX_ATTEMPTS
from pgq_core.text import printable

from . import output
from .failures import raw_byte
from .options import INT4, JOB_ID, DocstringCommand, bad_parameter, duration, new_queue_option
from .output import echo_json
from .session import settings

#: Files with at least this many jobs get a progress bar (on a terminal).
PROGRESS_THRESHOLD = 5000
#: Jobs per `enqueue_many` call while a file is enqueued (all inside one transaction), and the
#: most JSON text (bytes) one call carries: jsonb arrays hold at most 255 MB.
ENQUEUE_STEP = 5000
ENQUEUE_STEP_BYTES = 64 * 1024 * 1024
#: Jobs per COPY (`enqueue_payloads`) while a file is enqueued: a COPY has no array to bound.
COPY_STEP = 50_000
#: The largest payload line of a file: a jsonb value holds at most 255 MB.
PAYLOAD_MAX_BYTES = 255 * 1024 * 1024
#: --run-at between these; PostgreSQL stores more, but an earlier time is a typo, not a plan.
RUN_AT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
RUN_AT_MAX = datetime(9999, 12, 30, tzinfo=UTC)
#: The longest --delay: 100 years.
DELAY_MAX = timedelta(days=36525)


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
    with bad_parameter(ctx, param):
        return ops.check_unique_key(value)


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


#: Numbers keep their exact digits (a fraction or an exponent as a Decimal, which `jsontext`
#: writes back as such): jsonb reads the user's text, not a float's rounding of it.
_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=jsontext.number, parse_int=jsontext.checked_integer
)


#: JSON's whitespace, all jsonb skips after a value (str.rstrip() would strip a form feed or
#: a no-break space too, which jsonb refuses: `--file` sends COPY each line as written).
_JSON_WHITESPACE = " \t\n\r"


def parse_payload(text: str, *, decoded: bool = False) -> Any:
    """One JSON value as jsonb accepts it, its numbers with a fraction or an exponent as
    Decimal (their exact digits); ValueError with a one-line reason otherwise.

    Only a \\u escape can put NUL or a lone surrogate in a string, so only then is it walked;
    a raw lone surrogate is a command-line byte that is not UTF-8 (`decoded`: the text came
    from a strict UTF-8 decode, which never yields one, so it is not looked for).
    """
    problem = None if decoded else raw_byte(text)
    if problem:
        raise ValueError(problem)
    try:
        value = _DECODER.decode(text.rstrip(_JSON_WHITESPACE))
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
                f"{name}: line {number} is too large ({output.size(len(raw))}; a payload holds at "
                f"most {output.size(PAYLOAD_MAX_BYTES)}); nothing was enqueued",
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
            payloads.append((parse_payload(line, decoded=True), len(raw)))
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
            f"stdin is too large (a payload holds at most {output.size(PAYLOAD_MAX_BYTES)})",
            param_hint=hint,
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise click.BadParameter("stdin is not UTF-8 text", param_hint=hint) from None
    if not text.strip():
        raise click.BadParameter("stdin is empty: give one JSON value", param_hint=hint)
    return text


# ---------------------------------------------------------------------------- enqueue


@click.command("enqueue", cls=DocstringCommand)
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
@click.option(
    "--after",
    "after",
    type=JOB_ID,
    multiple=True,
    metavar="JOB_ID",
    help="Wait until this job is done (repeat for several); dies if it dies.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the new ids as a JSON array.")
@click.pass_context
def enqueue_command(
    ctx: click.Context,
    queue_name: str,
    payload: str | None,
    file: IO[bytes] | None,
    delay: timedelta | None,
    run_at: datetime | None,
    max_attempts: int,
    priority: int,
    unique_key: str | None,
    after: tuple[int, ...],
    as_json: bool,
) -> None:
    """Add a job to QUEUE with PAYLOAD_JSON (default {}; - reads it from stdin), or one job
    per line of --file.

    With --after, the job waits (status waiting) until every job named is done, and dies if
    one dies.

    With --unique-key, a second enqueue while a job with that key is ready, scheduled or
    running inserts nothing and prints the existing job's id."""
    if payload is not None and file is not None:
        raise click.UsageError("give PAYLOAD_JSON or --file, not both")
    if delay is not None and run_at is not None:
        raise click.UsageError("give --delay or --run-at, not both")
    if unique_key is not None and file is not None:
        raise click.UsageError("--unique-key names one job: it does not go with --file")
    if unique_key is not None and after:
        raise click.UsageError("--unique-key does not go with --after (a waiting job holds no key)")

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
            depends_on=after,
        )
        with settings(ctx).queue() as q:
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
    data = file.read()
    options = {
        "run_at": run_at,
        "delay": delay,
        "max_attempts": max_attempts,
        "priority": priority,
    }
    ids = _enqueue_all(ctx, queue_name, data, options, after, name)
    if as_json:
        echo_json(ids)
    elif ids:
        click.echo(
            f"enqueued {output.plural(len(ids), 'job')} on {printable(queue_name)} "
            f"(ids {ids[0]}..{ids[-1]})"
        )
    else:
        click.echo(f"{name}: no jobs (only blank lines); nothing enqueued")


def _steps(payloads: list[tuple[Any, int]], most: int) -> Iterator[list[Any]]:
    """Consecutive runs of at most `most` payloads and ENQUEUE_STEP_BYTES of JSON each."""
    step: list[Any] = []
    size = 0
    for payload, payload_size in payloads:
        if step and (len(step) >= most or size + payload_size > ENQUEUE_STEP_BYTES):
            yield step
            step, size = [], 0
        step.append(payload)
        size += payload_size
    if step:
        yield step


def json_lines(data: bytes, name: str) -> list[str]:
    """The text of every non-blank line of a JSON-lines file, unparsed (jsonb reads it);
    BadParameter naming the first line that is not UTF-8 or too large (`read_payload_lines`)."""
    try:
        if len(data) > PAYLOAD_MAX_BYTES and max(map(len, data.split(b"\n"))) > PAYLOAD_MAX_BYTES:
            raise ValueError("a line is too large")
        lines = data.decode("utf-8-sig").split("\n")
    except ValueError:  # UnicodeDecodeError too
        read_payload_lines(io.BytesIO(data), name)  # names the line
        raise
    return [line for line in lines if line and not line.isspace()]


def _enqueue_all(
    ctx: click.Context,
    queue_name: str,
    data: bytes,
    options: dict[str, Any],
    after: tuple[int, ...],
    name: str,
) -> list[int]:
    """One job per non-blank line of `data`, all in one transaction: a failure part-way leaves
    nothing enqueued, and its error says so (one noted before the commit: the transaction never
    committed). Each statement carries a bounded step, so each stays under jsonb's size limit
    and the statement timeout. Jobs without dependencies go through COPY, each line's text as
    it is (`Queue.enqueue_payload_texts`: jsonb parses it), when the role may (INSERT on
    jobs.id; pgq's producer role may not); a line the server refuses is then named by
    `read_payload_lines`. Else each line is parsed here first, for `enqueue_many`."""
    ids: list[int] = []
    texts = json_lines(data, name)
    if not texts:
        return ids
    with settings(ctx).queue() as q, output.progress(total_hint=True) as progress:
        task = progress.add_task(
            "enqueueing", total=len(texts), visible=len(texts) >= PROGRESS_THRESHOLD
        )
        bulk = not after and q.run(ops.may_copy(q.schema))
        payloads = [] if bulk else read_payload_lines(io.BytesIO(data), name)
        committing = False
        try:
            with q.conn.transaction():
                if bulk:
                    for at in range(0, len(texts), COPY_STEP):
                        step = texts[at : at + COPY_STEP]
                        ids += q.enqueue_payload_texts(queue_name, step, **options)
                        progress.advance(task, len(step))
                for values in _steps(payloads, ENQUEUE_STEP):
                    specs = [JobSpec(queue_name, p, depends_on=after, **options) for p in values]
                    ids += q.enqueue_many(specs)
                    progress.advance(task, len(values))
                committing = True
        except (PgqError, psycopg.Error, ValueError) as exc:
            if bulk and isinstance(exc, ValueError | psycopg.DataError | Unstorable):
                read_payload_lines(io.BytesIO(data), name)  # names a line Python refuses too
            if not committing and "nothing was enqueued" not in str(exc):  # said once
                exc.add_note(f"nothing from {printable(name)} was enqueued")
            raise
    return ids
