"""Failed and dead jobs grouped by their normalized error, the largest groups first."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from pgq_core.models import ErrorGroup
from pgq_core.text import first_line

from .. import humanize
from .keyed_table import Column, KeyedTable, Row


def group_row(group: ErrorGroup, now: float) -> Row:
    return (
        group.group,
        [
            humanize.db_text(group.group, style="grey62"),
            Text(humanize.count(group.dead), style="bold red" if group.dead else "grey50"),
            Text(humanize.count(group.failed), style="yellow" if group.failed else "grey50"),
            Text(humanize.ago(now - group.first_seen.timestamp())),
            Text(humanize.ago(now - group.last_seen.timestamp())),
            humanize.name_text(", ".join(group.queues)),
            humanize.db_text(group.pattern.splitlines()[0] if group.pattern else "", style="red"),
        ],
    )


#: the most characters of the example's first line shown under the table
EXAMPLE_CELLS = 400


class ErrorsTable(KeyedTable):
    COLUMNS: tuple[Column, ...] = (
        ("group", "group", 12, 3),
        ("dead", "dead", 6, 0),
        ("failed", "failed", 6, 0),
        ("first", "first seen", 10, 4),
        ("last", "last seen", 10, 2),
        ("queues", "queues", 14, 1),
        ("pattern", "error", None, 0),
    )
    RIGHT = frozenset({"dead", "failed"})

    def show(self, groups: Sequence[ErrorGroup], now: float) -> None:
        self.sync([group_row(g, now) for g in groups])


def example_text(group: ErrorGroup | None) -> Text:
    """The selected group's newest job and the first line of its full error."""
    if group is None:
        return Text(" no failed or dead jobs with an error", style="grey50")
    first = first_line(group.example_error, group.example_error_truncated, EXAMPLE_CELLS)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append_text(
        humanize.db_text(f" {group.group} e.g. job {group.example_id}: ", style="grey62")
    )
    text.append_text(humanize.db_text(first))
    return text
