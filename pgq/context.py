"""What every command shares: the resolved database target and one-line error reporting."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import click
import psycopg

from pgq_core import PgqError, Queue, Target, migrate, resolve
from pgq_core.config import first_line, scrub

F = TypeVar("F", bound=Callable[..., Any])


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


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"pgq: error: {message}", err=True)
    sys.exit(code)


class PgqGroup(click.Group):
    """Turns every expected failure into `pgq: error: <one line>` and exit 1, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgqError as exc:
            fail(_clean(ctx, str(exc)))
        except psycopg.OperationalError as exc:
            fail(f"database unavailable: {_clean(ctx, first_line(str(exc)))}")
        except psycopg.Error as exc:
            fail(f"database error: {_clean(ctx, first_line(str(exc)))}")


def _clean(ctx: click.Context, text: str) -> str:
    obj = ctx.find_object(Settings)
    if obj and obj._target:
        return scrub(text, obj._target.dsn)
    if obj and obj.dsn:
        return scrub(text, obj.dsn)
    return text


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, default=str, indent=2))
