"""The `pgq` group's error handling: every expected failure of any command becomes one
`pgq: error:` line with the password scrubbed, never a traceback."""

from __future__ import annotations

import os
from typing import Any

import click
import psycopg

from pgq_core import PgqError
from pgq_core.config import first_line, scrub
from pgq_core.session import is_pooler_error

from .failures import EXIT_USAGE, OneLineError, OneLineUsageError, explain, fail, raw_byte
from .session import Settings


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
            fail(_clean(ctx, _noted(exc, str(exc))))
        except psycopg.Error as exc:
            if is_pooler_error(exc):
                fail(
                    f"{_clean(ctx, first_line(str(exc)))}: the connection goes through a pooler "
                    "in transaction mode; run again with --pooled (or PGQ_POOLED=1)"
                )
            fail(_clean(ctx, _noted(exc, explain(exc, _dsn(ctx)))))
        except RecursionError:
            fail("a JSON value is nested too deeply for Python to read (stored by plain SQL?)")
        except Exception as exc:
            if os.environ.get("PGQ_DEBUG"):
                raise
            if isinstance(exc, UnicodeEncodeError) and (problem := raw_byte(exc.object)):
                fail(f"a value given is {problem}", EXIT_USAGE)
            detail = _clean(ctx, first_line(str(exc)))
            fail(f"{_unexpected(exc)}: {detail} (PGQ_DEBUG=1 shows the traceback)")


def _noted(exc: BaseException, said: str) -> str:
    """`said` of `exc`, and what the command noted on it (`add_note`: what the failure left
    undone), on the same line."""
    notes = getattr(exc, "__notes__", None) or []
    return "; ".join([said, *(first_line(str(note)) for note in notes)])


def _unexpected(exc: BaseException) -> str:
    """How an unforeseen exception is named: Python's own by its class (a `TypeError` says
    something to a reader); pgq's, whose names are internal, as a plain "unexpected error"."""
    module = type(exc).__module__.partition(".")[0]
    if module in ("pgq_core", "pgq_cli", "pgq_tui", "pgq_bench"):
        return "unexpected error"
    return f"unexpected {type(exc).__name__}"


def _dsn(ctx: click.Context) -> str | None:
    obj = ctx.find_object(Settings)
    if obj and obj._target:
        return obj._target.dsn
    return obj.dsn if obj else None


def _clean(ctx: click.Context, text: str) -> str:
    obj = ctx.find_object(Settings)
    return scrub(scrub(text, _dsn(ctx)), obj.read_dsn if obj else None)
