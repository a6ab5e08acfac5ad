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


def header_text(state: HeaderState, now: float, width: int) -> Text:
    """Exactly one of: paused, live, a problem, connecting, disconnected; then the stale and
    read-only marks; then the database and schema, and the problem's text, cut first when room
    is short; the clock at the right edge whatever the width."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(" pgq ", style="bold black on #5fafff")
    text.append(" ")
    problem = Text()
    if state.paused:
        text.append(" ⏸ paused ", style="bold black on yellow")
    elif state.connection == CONNECTED and state.problem:
        text.append(" ⚠ ", style="bold black on yellow")
        problem.append(f" {printable(state.problem)}", style="bold yellow")
    elif state.connection == CONNECTED:
        text.append(" ● live ", style="bold black on green")
    elif state.connection == CONNECTING:
        text.append(" ◌ connecting ", style="bold black on yellow")
    else:
        text.append(" ✕ disconnected ", style="bold white on red")
        if state.problem:
            problem.append(f" {printable(state.problem)}", style="red")
    if state.stale_for is not None and not state.paused:
        text.append(" ")
        text.append(f" stale {humanize.duration(state.stale_for)} ", style="bold white on red")
    if state.read_only:
        text.append(" ")
        text.append(" read-only ", style="bold black on #af87ff")
    text.append(f"  {printable(state.database)}")
    text.append("  ·  schema ", style="grey62")
    text.append(f"{printable(state.schema)}  ")
    if state.host:
        text.append("·  ", style="grey62")
        text.append(printable(state.host))
        if state.standby:
            text.append(f" standby, {lag(state.lag)}", style="bold #af87ff")
        text.append("  ")
    if state.primary_changed:
        text.append(f"{printable(state.primary_changed)}  ", style="bold yellow")
    if state.writes:
        problem.append(f" primary: {printable(state.writes)}", style="yellow")
    text.append_text(problem)
    clock = time.strftime("%H:%M:%S", time.gmtime(now)) + " UTC"
    room = width - len(clock) - 2
    if room <= 0:
        return Text(clock[: max(0, width)], style="grey62")
    if text.cell_len > room:
        text.truncate(room, overflow="ellipsis")
    text.append(" " * (room - text.cell_len + 1))
    text.append(clock, style="grey62")
    return text


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
