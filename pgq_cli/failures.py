"""How a command fails: one printable `pgq: error:` line (the caller scrubs passwords), its
exit code (1 runtime, 2 usage), and database errors named by what happened (`explain`)."""

from __future__ import annotations

import sys
from typing import IO, Any, NoReturn

import click
import psycopg

from pgq_core.cluster import no_primary
from pgq_core.config import connect_timeout
from pgq_core.text import first_surrogate, libpq_reason, printable

#: Exit codes: 0 ok, 1 runtime failure (pgq or the database), 2 bad usage.
EXIT_RUNTIME = 1
EXIT_USAGE = 2


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


def raw_byte(text: str) -> str | None:
    """What is wrong with `text` holding a lone surrogate (how Python hands over a command-line
    byte that is not UTF-8, which no PostgreSQL text can hold), or None."""
    found = first_surrogate(text)
    if found is None:
        return None
    code = ord(found)
    byte = f" \\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else ""
    return f"not valid UTF-8 text (a raw byte{byte})"


_AUTH = ("authentication failed", "pg_hba.conf", "password authentication", "no password supplied")


def explain(exc: psycopg.Error, dsn: str | None) -> str:
    """What happened, by psycopg error class (SQLSTATE), never just "unavailable": connect
    timeout, authentication, permission, statement or lock timeout, size limits, lost server.
    Not scrubbed: the caller scrubs."""
    errors = psycopg.errors
    if (waiting := no_primary(exc, dsn)) is not None:
        return waiting
    text = libpq_reason(exc)
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
    if isinstance(exc, errors.InvalidPassword | errors.InvalidAuthorizationSpecification) or any(
        a in text for a in _AUTH
    ):
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
