"""What a command's options and arguments take: PostgreSQL's integer ranges, finite floats,
durations, leases and queue names as click types and callbacks (bad input is a usage error,
exit 2), and the command class whose help is its docstring."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import click

from pgq_core import parse_duration
from pgq_core.config import check_lease, check_new_queue_name, check_queue_name
from pgq_core.durations import DURATION_MAX

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


class DocstringCommand(click.Command):
    """A command whose help is its docstring without the source's indentation, so its first
    paragraph reads as `pgq --help` lists it (see `LazyGroup.LAZY`); `--help` prints the same."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.help:
            self.help = inspect.cleandoc(self.help)


def unique(ids: Sequence[int]) -> list[int]:
    """The ids in their given order, each once."""
    return list(dict.fromkeys(ids))


def duration(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    """click callback for durations (`30s`, `5m`, `7d`), at most `durations.DURATION_MAX`."""
    return _parsed(ctx, param, value, DURATION_MAX)


@contextmanager
def bad_parameter(ctx: click.Context, param: click.Parameter) -> Iterator[None]:
    """A ValueError raised inside (a check's one-line refusal) becomes click's usage error for
    `param`: one line, exit 2."""
    try:
        yield
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _parsed(
    ctx: click.Context, param: click.Parameter, value: str | None, longest: timedelta | None
) -> timedelta | None:
    if value is None:
        return None
    with bad_parameter(ctx, param):
        return parse_duration(value, longest)


def lease_duration(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> timedelta | None:
    """click callback for a worker's `--lease`: a duration within `config.check_lease`."""
    parsed = _parsed(ctx, param, value, None)
    if parsed is None:
        return None
    with bad_parameter(ctx, param):
        return check_lease(parsed)


def at_most(limit: timedelta) -> Callable[[click.Context, click.Parameter, str | None], Any]:
    """click callback for a duration no longer than `limit`."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
        parsed = _parsed(ctx, param, value, None)
        if parsed is not None and parsed > limit:
            raise click.BadParameter(f"must be at most {limit.total_seconds():g}s", ctx, param)
        return parsed

    return check


def queue_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """click callback: a queue name pgq can store and NOTIFY (see `config.check_queue_name`)."""
    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter("queue name must not be empty", ctx, param)
    with bad_parameter(ctx, param):
        return check_queue_name(value)


def new_queue_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """click callback: `queue_option`, and a name that prints unlike any other (no invisible
    character, `config.check_new_queue_name`): for enqueue, pause, limit, a schedule's queue."""
    name = queue_option(ctx, param, value)
    if name is None:
        return None
    with bad_parameter(ctx, param):
        return check_new_queue_name(name)


def queue_names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    return tuple(name for name in value if queue_option(ctx, param, name) is not None)
