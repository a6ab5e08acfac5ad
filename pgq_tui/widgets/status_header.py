"""The top line: which database, whether it is reachable and the data fresh, paused or
read-only, the host read (a standby: how far behind) and when the primary last changed, and
the time (always shown: the rest is cut to leave it room)."""

from __future__ import annotations

import time

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from pgq_core.cluster import lag
from pgq_core.text import printable

from .. import humanize
from ..state import CONNECTED, CONNECTING, DISCONNECTED, HeaderState

__all__ = ["CONNECTED", "CONNECTING", "DISCONNECTED", "StatusHeader", "header_text"]


#: the database's name is shortened (an ellipsis in its middle) to no fewer characters, but
#: for a schema's name that would not fit otherwise
DATABASE_MIN = 12


def middle_cut(text: str, width: int) -> str:
    """`text` in at most `width` characters, its start and end kept around an ellipsis (a
    DSN's user@host and its database name both matter)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def header_text(state: HeaderState, now: float, width: int) -> Text:
    """Exactly one of: paused, live, a problem, connecting, disconnected; then the stale and
    read-only marks; then the database and schema; the clock at the right edge whatever the
    width. When room is short the problem's text, then the host, are cut first; then the
    separators and badges grow compact and the database name loses its middle: the schema's
    name is the last thing cut."""
    clock = time.strftime("%H:%M:%S", time.gmtime(now)) + " UTC"
    room = width - len(clock) - 2
    if room <= 0:
        return Text(clock[: max(0, width)], style="grey62")
    for compact in range(4):
        text, kept = _header(state, compact, room)
        if kept <= room:
            break
    if text.cell_len > room:
        # the gap after the schema may go, the schema itself only when nothing else is left
        text.truncate(max(room, min(kept, text.cell_len)), overflow="ellipsis")
        text.truncate(room, overflow="crop" if kept >= room - 1 else "ellipsis")
    text.append(" " * max(0, room - text.cell_len + 1))
    text.append(clock, style="grey62")
    return text


def _header(state: HeaderState, compact: int, room: int) -> tuple[Text, int]:
    """The header's text before the clock, `compact` (0-3) steps shorter, and how many cells
    of it must not be cut (up to the schema's name)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(" pgq ", style="bold black on #5fafff")
    text.append(" ")
    problem = Text()
    if state.paused:
        text.append(" ⏸ paused " if compact < 2 else " ⏸ ", style="bold black on yellow")
    elif state.connection == CONNECTED and state.problem:
        text.append(" ⚠ ", style="bold black on yellow")
        problem.append(f" {printable(state.problem)}", style="bold yellow")
    elif state.connection == CONNECTED:
        text.append(" ● live " if compact < 2 else " ● ", style="bold black on green")
    elif state.connection == CONNECTING:
        text.append(" ◌ connecting " if compact < 2 else " ◌ ", style="bold black on yellow")
    else:
        text.append(" ✕ disconnected ", style="bold white on red")
        if state.problem:
            problem.append(f" {printable(state.problem)}", style="red")
    if state.stale_for is not None and not state.paused:
        text.append(" ")
        text.append(f" stale {humanize.duration(state.stale_for)} ", style="bold white on red")
    if state.read_only:
        text.append(" ")
        text.append(" read-only " if compact < 2 else " ro ", style="bold black on #af87ff")
    gap = "  " if compact == 0 else " "
    schema = printable(state.schema)
    database = printable(state.database)
    if compact >= 2:
        after = len(gap) + len(" · schema ") + len(schema) + 2  # 2: room for " …" after
        least = DATABASE_MIN if compact == 2 else 5
        database = middle_cut(database, max(least, room - text.cell_len - after))
    text.append(f"{gap}{database}")
    text.append(f"{gap}·{gap}schema ", style="grey62")
    text.append(schema)
    kept = text.cell_len
    text.append(gap)
    if state.host:
        text.append(f"·{gap}", style="grey62")
        text.append(printable(state.host))
        if state.standby:
            text.append(f" standby, {lag(state.lag)}", style="bold #af87ff")
        text.append(gap)
    if state.primary_changed:
        text.append(f"{printable(state.primary_changed)}{gap}", style="bold yellow")
    if state.writes:
        problem.append(f" primary: {printable(state.writes)}", style="yellow")
    text.append_text(problem)
    return text, kept


class StatusHeader(Widget):
    """State is set by the app; rendering reads only these reactives. Every string is shown
    through `printable` (the problem text may quote database text)."""

    state: reactive[HeaderState] = reactive(HeaderState)
    now: reactive[float] = reactive(0.0)

    def show(self, state: HeaderState, now: float) -> None:
        """The app's state and clock together: a header given a state alone (a screen just
        pushed) drew the clock at 00:00:00 until the next refresh."""
        self.state, self.now = state, now

    def render(self) -> Text:
        return header_text(self.state, self.now, self.size.width)
