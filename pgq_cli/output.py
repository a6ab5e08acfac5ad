"""What every `pgq` command prints for humans: the console, database text made safe for the
terminal, plurals, id lists, sizes, durations, timestamps, JSON (and where a read was made)
and the progress display.

Invariants: database text reaches Rich only as `Text` (`text`) or markup-escaped (`escaped`),
both through `pgq_core.text.printable`, so no control character or markup gets through; counts
are printed with thousands separators, job ids never (an id is copied, not read). Rich is
imported only when something is printed through it, and its progress module only for a
progress display on a terminal: `pgq --help` and a `pgq enqueue --file` in a pipe never load
them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import click

from pgq_core import jsontext
from pgq_core.cluster import read_from
from pgq_core.models import ServerRole
from pgq_core.text import printable

from .failures import one_line

if TYPE_CHECKING:
    import psycopg
    from rich.console import Console
    from rich.progress import Progress, TaskID
    from rich.text import Text


def console() -> Console:
    """stdout for tables and reports: lines are never wrapped into the next one."""
    from rich.console import Console

    return Console(soft_wrap=False)


def text(value: str | None, *, multiline: bool = False, style: str = "") -> Text:
    """Database text for the terminal: never markup, every control character escaped."""
    from rich.text import Text

    return Text(printable(value or "", multiline=multiline), style=style)


def escaped(value: str | None) -> str:
    """Database text for a Rich string with markup: control characters visible, markup escaped."""
    from rich.markup import escape

    return escape(printable(value or ""))


def plural(count: int, word: str) -> str:
    """`1 job`, `12,000 jobs`."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def ids_text(ids: Sequence[int], limit: int = 20) -> str:
    """The first `limit` ids, then how many more."""
    shown = ", ".join(map(str, ids[:limit]))
    return shown + (f", … ({len(ids) - limit:,} more)" if len(ids) > limit else "")


def size(count: int) -> str:
    """Bytes the way a person reads them: 1.5 MB, 300 bytes."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("kB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def megabytes(count: int) -> str:
    """Bytes in MB with one decimal, as the health tables print every size."""
    return f"{count / 2**20:,.1f} MB"


def span(value: timedelta) -> str:
    """A duration the way an operator writes it: 7d, 1h30m, 45s."""
    seconds = value.total_seconds()
    if 0 < seconds < 1:
        return f"{seconds * 1000:g}ms"
    parts = []
    for unit, unit_seconds in (("d", 86400), ("h", 3600), ("m", 60)):
        count, seconds = divmod(seconds, unit_seconds)
        if count:
            parts.append(f"{int(count)}{unit}")
    if seconds or not parts:
        parts.append(f"{seconds:g}s")
    return "".join(parts)


class NoProgress:
    """What `progress` gives where Rich would show nothing: the same calls, doing nothing."""

    def __enter__(self) -> NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, **fields: Any) -> TaskID:
        return cast("TaskID", 0)

    def advance(self, task: TaskID, advance: float = 1) -> None:
        return None

    def update(self, task: TaskID, **fields: Any) -> None:
        return None


def progress(total_hint: bool) -> Progress | NoProgress:
    """A progress display on stderr, only when stderr is a terminal (never in pipes or --json).
    Where Rich cannot take stderr for a terminal (not a tty, and neither TTY_COMPATIBLE nor
    FORCE_TERMINAL set), Rich is not even imported."""
    forced = os.environ.get("TTY_COMPATIBLE") or os.environ.get("FORCE_TERMINAL")
    if not forced and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return NoProgress()
    from rich.console import Console
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


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


def echo_json(data: Any) -> None:
    """Datetimes as ISO 8601, durations as seconds, a Decimal as its digits (`exact_json`)."""
    click.echo(jsontext.dumps(data, default=_json_default, indent=2))


def exact_json(conn: psycopg.Connection[Any]) -> None:
    """jsonb read on `conn` keeps its numbers' digits (`jsontext.loads`), for `echo_json`."""
    from psycopg.types.json import set_json_loads

    set_json_loads(jsontext.loads, conn)


def when(value: datetime | None) -> str:
    """A timestamp as the operator's local time to the second; empty for None."""
    return "" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


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
