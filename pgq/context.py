"""What every command shares: the resolved database target and one-line error reporting."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import IO, Any, NoReturn, TypeVar

import click
import psycopg

from pgq_core import PgqError, Queue, Target, migrate, parse_duration, resolve
from pgq_core.config import first_line, scrub

F = TypeVar("F", bound=Callable[..., Any])

#: Exit codes: 0 ok, 1 runtime failure (pgq or the database), 2 bad usage.
EXIT_RUNTIME = 1
EXIT_USAGE = 2


@dataclass
class Settings:
    """Group options; the target is resolved (and the embedded server started) on first use."""

    dsn: str | None
    schema: str | None
    _target: Target | None = field(default=None, repr=False)

    def target(self) -> Target:
        if self._target is None:
            self._target = resolve(self.dsn, self.schema)
            if self._target.embedded:
                with psycopg.connect(self._target.dsn, autocommit=True) as conn:
                    migrate(conn, self._target.schema)
        return self._target

    def queue(self) -> Queue:
        target = self.target()
        return Queue.connect(target.dsn, target.schema)


def settings(ctx: click.Context) -> Settings:
    obj = ctx.find_object(Settings)
    assert obj is not None
    return obj


def fail(message: str, code: int = EXIT_RUNTIME) -> NoReturn:
    click.echo(f"pgq: error: {one_line(message)}", err=True)
    sys.exit(code)


def one_line(text: str) -> str:
    return " ".join(text.split())


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
        except psycopg.OperationalError as exc:
            fail(f"database unavailable: {_clean(ctx, first_line(str(exc)))}")
        except psycopg.Error as exc:
            fail(f"database error: {_clean(ctx, first_line(str(exc)))}")
        except Exception as exc:
            if os.environ.get("PGQ_DEBUG"):
                raise
            detail = _clean(ctx, first_line(str(exc)))
            fail(f"unexpected {type(exc).__name__}: {detail} (PGQ_DEBUG=1 shows the traceback)")


def _clean(ctx: click.Context, text: str) -> str:
    obj = ctx.find_object(Settings)
    if obj and obj._target:
        return scrub(text, obj._target.dsn)
    if obj and obj.dsn:
        return scrub(text, obj.dsn)
    return text


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


def echo_json(data: Any) -> None:
    """Datetimes as ISO 8601, durations as seconds."""
    click.echo(json.dumps(data, default=_json_default, indent=2))


def unique(ids: Sequence[int]) -> list[int]:
    """The ids in their given order, each once."""
    return list(dict.fromkeys(ids))


def duration(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    """click callback for durations (`30s`, `5m`, `7d`); a `--lease` must be longer than 0."""
    if value is None:
        return None
    try:
        parsed = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    if param.name == "lease" and parsed.total_seconds() <= 0:
        raise click.BadParameter("the lease must be longer than 0", ctx, param)
    return parsed
