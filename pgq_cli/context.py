"""What every command shares: the resolved database target, bounded sessions and one-line
error reporting.

Invariants: every connection a command opens is bounded (`config.connect_options`, and the
statement and lock timeouts of `session_limits`); every error line is one printable line with
the password scrubbed; database errors are named by what happened (`explain`)."""

from __future__ import annotations

import inspect
import json
import math
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import IO, Any, NoReturn, TypeVar

import click
import psycopg

from pgq_core import PgqError, Queue, Target, find_target, ops, parse_duration
from pgq_core.cluster import no_primary, read_from
from pgq_core.config import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_STATEMENT_TIMEOUT,
    check_lease,
    check_new_queue_name,
    check_queue_name,
    connect_options,
    connect_timeout,
    describe,
    first_line,
    pooled,
    schema_name,
    scrub,
)
from pgq_core.durations import DURATION_MAX
from pgq_core.models import ServerRole
from pgq_core.session import detect_pooler, is_pooler_error
from pgq_core.text import first_surrogate, printable

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes: 0 ok, 1 runtime failure (pgq or the database), 2 bad usage.
EXIT_RUNTIME = 1
EXIT_USAGE = 2
#: PostgreSQL's int and bigint ranges, so an out-of-range number is a usage error.
INT4_MAX = 2**31 - 1
INT4 = click.IntRange(1, INT4_MAX)
JOB_ID = click.IntRange(1, 2**63 - 1)


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, refusing nan and the infinities (which its bounds let through: a
    comparison with nan is false) as a usage error."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


@dataclass
class Settings:
    """Group options; the target is found (`pgq_core.find_target`: the embedded server
    started and migrated when no DSN is given) on first use."""

    dsn: str | None
    schema: str | None
    #: the operator's --statement-timeout (wins over the role's; 0: none); None: ours unless
    #: the role or database sets one
    statement_timeout: timedelta | None = None
    #: --read-dsn: where the read commands read (a standby); None: the target's DSN
    read_dsn: str | None = None
    _target: Target | None = field(default=None, repr=False)

    def target(self) -> Target:
        if self._target is None:
            self._target = find_target(self.dsn, self.schema)
        return self._target

    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit connection whose connect, statements and lock waits are bounded."""
        target = self.target()
        conn = psycopg.connect(target.dsn, autocommit=True, **connect_options(target.dsn))
        return self._bounded(conn, target.schema)

    def _bounded(self, conn: psycopg.Connection[Any], schema: str) -> psycopg.Connection[Any]:
        try:
            if (line := detect_pooler(conn)) is not None:
                click.echo(f"pgq: warning: {one_line(line)}", err=True)
            if pooled():  # a session setting would stay on a server session others get
                return conn
            Queue(conn, schema).run(
                ops.session_limits(
                    DEFAULT_STATEMENT_TIMEOUT
                    if self.statement_timeout is None
                    else self.statement_timeout,
                    DEFAULT_LOCK_TIMEOUT,
                    force=self.statement_timeout is not None,
                )
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def queue(self) -> Queue:
        return Queue(self.connect(), self.target().schema, owns=True)

    def reader(self) -> Queue:
        """Where a read command reads: the --read-dsn server (a read-only session that never
        asks for the writable host), else the target as `queue`."""
        if self.read_dsn is None:
            return self.queue()
        schema = schema_name(self.schema)
        conn = psycopg.connect(
            self.read_dsn, autocommit=True, **connect_options(self.read_dsn, reader=True)
        )
        conn = self._bounded(conn, schema)
        queue = Queue(conn, schema, owns=True)
        if not pooled():  # a session setting would stay on a server session others get
            try:
                queue.run(ops.read_only_session())
            except BaseException:
                queue.close()
                raise
        return queue

    def read_from(self, queue: Queue) -> ServerRole | None:
        """With --read-dsn, the server `queue` reads (standby or not, its lag); else None."""
        return queue.server_role() if self.read_dsn is not None else None

    def read_display(self) -> str:
        """The name of the server the read commands read (never its password)."""
        return describe(self.read_dsn) if self.read_dsn is not None else self.target().display


def say_read_from(role: ServerRole | None) -> None:
    """Before figures read through --read-dsn: where from, and how far behind the primary."""
    if role is not None:
        click.echo(one_line(read_from(role)))


def with_read_from(data: Any, role: ServerRole | None) -> Any:
    """`data` (a JSON object, or an array of objects) with `read_from` (the server read, its
    lag) in the object, or in each element of the array, when read through --read-dsn."""
    if role is None:
        return data
    where = role.to_dict()
    if isinstance(data, list):
        return [{**row, "read_from": where} for row in data]
    return {**data, "read_from": where}


def settings(ctx: click.Context) -> Settings:
    obj = ctx.find_object(Settings)
    assert obj is not None
    return obj


def command_name(argv0: str | None = None) -> str:
    """How to run pgq again as this process was run, for a hint to copy: `pgq` when the shell
    finds this very program under that name; else the path it was run as (a virtualenv not on
    PATH), or `python -m pgq_cli` for a module run."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else argv0 or ""
    if not argv0 or os.path.basename(argv0) in ("__main__.py", "-m", "-c"):
        return f"{shlex.quote(sys.executable)} -m pgq_cli"
    found = shutil.which("pgq")
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return "pgq"
    return shlex.quote(argv0)


def fail(message: str, code: int = EXIT_RUNTIME) -> NoReturn:
    click.echo(f"pgq: error: {one_line(message)}", err=True)
    sys.exit(code)


def one_line(text: str) -> str:
    """Whitespace collapsed, every control character shown as a visible escape."""
    return printable(" ".join(text.split()))


class OneLineError(click.ClickException):
    """A click error shown as `pgq: error: <message>` (click's own shows usage over 3+ lines)."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"pgq: error: {one_line(self.format_message())}", err=True)


class OneLineUsageError(OneLineError):
    exit_code = EXIT_USAGE


def _one_line_click_error(exc: click.ClickException) -> click.ClickException:
    """`exc` as one line; help on a bare command and errors already one line pass through."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError | OneLineError):
        return exc
    message = exc.format_message()
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        message = f"{message} (see '{exc.ctx.command_path} --help')"
    usage = isinstance(exc, click.UsageError) or exc.exit_code == EXIT_USAGE
    return OneLineUsageError(message) if usage else OneLineError(message)


class DocstringCommand(click.Command):
    """A command whose help is its docstring without the source's indentation, so its first
    paragraph reads as `pgq --help` lists it (see `LazyGroup.LAZY`); `--help` prints the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.help:
            self.help = inspect.cleandoc(self.help)


class PgqGroup(click.Group):
    """Turns every expected failure into `pgq: error: <one line>`, never a traceback.

    Usage errors exit 2, pgq and database errors exit 1. Passwords are scrubbed from every
    message. An unexpected exception is shown as one line too; PGQ_DEBUG=1 re-raises it.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            raise _one_line_click_error(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise _one_line_click_error(exc) from None
        except (click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise
        except PgqError as exc:
            fail(_clean(ctx, str(exc)))
        except psycopg.Error as exc:
            if is_pooler_error(exc):
                fail(
                    f"{_clean(ctx, first_line(str(exc)))}: the connection goes through a pooler "
                    "in transaction mode; run again with --pooled (or PGQ_POOLED=1)"
                )
            fail(_clean(ctx, explain(exc, _dsn(ctx))))
        except RecursionError:
            fail("a JSON value is nested too deeply for Python to read (stored by plain SQL?)")
        except Exception as exc:
            if os.environ.get("PGQ_DEBUG"):
                raise
            if isinstance(exc, UnicodeEncodeError) and (problem := raw_byte(exc.object)):
                fail(f"a value given is {problem}", EXIT_USAGE)
            detail = _clean(ctx, first_line(str(exc)))
            fail(f"{_unexpected(exc)}: {detail} (PGQ_DEBUG=1 shows the traceback)")


def _unexpected(exc: BaseException) -> str:
    """How an unforeseen exception is named: Python's own by its class (a `TypeError` says
    something to a reader); pgq's, whose names are internal, as a plain "unexpected error"."""
    module = type(exc).__module__.partition(".")[0]
    if module in ("pgq_core", "pgq_cli", "pgq_tui", "pgq_bench"):
        return "unexpected error"
    return f"unexpected {type(exc).__name__}"


def raw_byte(text: str) -> str | None:
    """What is wrong with `text` holding a lone surrogate (how Python hands over a command-line
    byte that is not UTF-8, which no PostgreSQL text can hold), or None."""
    found = first_surrogate(text)
    if found is None:
        return None
    code = ord(found)
    byte = f" \\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else ""
    return f"not valid UTF-8 text (a raw byte{byte})"


def _dsn(ctx: click.Context) -> str | None:
    obj = ctx.find_object(Settings)
    if obj and obj._target:
        return obj._target.dsn
    return obj.dsn if obj else None


def _clean(ctx: click.Context, text: str) -> str:
    obj = ctx.find_object(Settings)
    return scrub(scrub(text, _dsn(ctx)), obj.read_dsn if obj else None)


def _reason(exc: BaseException) -> str:
    """libpq's reason: its first line, completed by the next when it ends in ':'."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0]
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[1]}"
    return text.removeprefix("connection failed: ")


_AUTH = ("authentication failed", "pg_hba.conf", "password authentication", "no password supplied")


def explain(exc: psycopg.Error, dsn: str | None) -> str:
    """What happened, by psycopg error class (SQLSTATE), never just "unavailable": connect
    timeout, authentication, permission, statement or lock timeout, size limits, lost server.
    Not scrubbed: the caller scrubs."""
    errors = psycopg.errors
    if (waiting := no_primary(exc, dsn)) is not None:
        return waiting
    text = _reason(exc)
    if isinstance(exc, errors.ConnectionTimeout) or text == "connection timeout expired":
        seconds = connect_timeout(dsn) if dsn else None
        within = f" within {seconds:g}s" if seconds else ""
        return (
            f"connect timeout: the server did not answer{within} "
            "(connect_timeout in the DSN or PGCONNECT_TIMEOUT sets the wait)"
        )
    if isinstance(exc, errors.QueryCanceled):
        # told by the SQLSTATE (57014) alone: the server's words follow its lc_messages, and a
        # statement timeout and another session's cancel share the code
        return (
            "statement timeout: the server cancelled a statement (it ran past the statement "
            "timeout, or another session cancelled it; --statement-timeout or "
            "PGQ_STATEMENT_TIMEOUT sets the timeout, else the role's own setting applies)"
        )
    if isinstance(exc, errors.LockNotAvailable):
        return f"lock timeout: rows or tables pgq needs are locked by another session ({text})"
    if isinstance(
        exc, errors.InvalidPassword | errors.InvalidAuthorizationSpecification
    ) or any(a in text for a in _AUTH):
        return f"authentication failed: {text}"
    if isinstance(exc, errors.InsufficientPrivilege):
        return f"permission denied: {text}"
    if isinstance(exc, errors.ProgramLimitExceeded):
        return f"too large for PostgreSQL: {text}"
    if isinstance(exc, errors.IdleInTransactionSessionTimeout | errors.IdleSessionTimeout):
        return f"session timeout: {text}"
    if isinstance(exc, errors.OperationalError):
        return f"database unavailable: {text}"
    return f"database error: {text}"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


def echo_json(data: Any) -> None:
    """Datetimes as ISO 8601, durations as seconds."""
    click.echo(json.dumps(data, default=_json_default, indent=2))


def when(value: datetime | None) -> str:
    """A timestamp as the operator's local time to the second; empty for None."""
    return "" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def unique(ids: Sequence[int]) -> list[int]:
    """The ids in their given order, each once."""
    return list(dict.fromkeys(ids))


def duration(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    """click callback for durations (`30s`, `5m`, `7d`), at most `durations.DURATION_MAX`."""
    return _parsed(ctx, param, value, DURATION_MAX)


def _parsed(
    ctx: click.Context, param: click.Parameter, value: str | None, longest: timedelta | None
) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value, longest)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def lease_duration(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> timedelta | None:
    """click callback for a worker's `--lease`: a duration within `config.check_lease`."""
    parsed = _parsed(ctx, param, value, None)
    if parsed is None:
        return None
    try:
        return check_lease(parsed)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def at_most(limit: timedelta) -> Callable[[click.Context, click.Parameter, str | None], Any]:
    """click callback for a duration no longer than `limit`."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
        parsed = _parsed(ctx, param, value, None)
        if parsed is not None and parsed > limit:
            raise click.BadParameter(f"must be at most {limit.total_seconds():g}s", ctx, param)
        return parsed

    return check


def queue_option(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    """click callback: a queue name pgq can store and NOTIFY (see `config.check_queue_name`)."""
    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter("queue name must not be empty", ctx, param)
    try:
        return check_queue_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def new_queue_option(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    """click callback: `queue_option`, and a name that prints unlike any other (no invisible
    character, `config.check_new_queue_name`): for enqueue, pause, limit, a schedule's queue."""
    name = queue_option(ctx, param, value)
    if name is None:
        return None
    try:
        return check_new_queue_name(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def queue_names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    return tuple(name for name in value if queue_option(ctx, param, name) is not None)
