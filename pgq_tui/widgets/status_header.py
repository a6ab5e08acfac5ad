"""The top line: which database, whether it is reachable, paused or read-only, and the time."""

from __future__ import annotations

import time

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from pgq_core.text import printable

CONNECTED = "connected"
CONNECTING = "connecting"
DISCONNECTED = "disconnected"


class StatusHeader(Widget):
    """State is set by the app; rendering reads only these reactives and the app clock.
    Every string is shown through `printable` (the problem text may quote database text)."""

    database: reactive[str] = reactive("")
    schema: reactive[str] = reactive("")
    connection: reactive[str] = reactive(CONNECTING)
    problem: reactive[str] = reactive("")
    paused: reactive[bool] = reactive(False)
    read_only: reactive[bool] = reactive(False)
    now: reactive[float] = reactive(0.0)

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" pgq ", style="bold black on #5fafff")
        text.append(f" {printable(self.database)}")
        text.append("  ·  schema ", style="grey62")
        text.append(f"{printable(self.schema)}  ")
        if self.connection == CONNECTED and self.problem:
            text.append(" ⚠ ", style="bold black on yellow")
            text.append(f" {printable(self.problem)}", style="bold yellow")
        elif self.connection == CONNECTED:
            text.append(" ● live ", style="bold black on green")
        elif self.connection == CONNECTING:
            text.append(" ◌ connecting ", style="bold black on yellow")
        else:
            text.append(" ✕ disconnected — reconnecting ", style="bold white on red")
            if self.problem:
                text.append(f" {printable(self.problem)}", style="red")
        if self.paused:
            text.append("  ")
            text.append(" ⏸ paused ", style="bold black on yellow")
        if self.read_only:
            text.append("  ")
            text.append(" read-only ", style="bold black on #af87ff")
        clock = time.strftime("%H:%M:%S", time.gmtime(self.now)) + " UTC"
        pad = self.size.width - text.cell_len - len(clock) - 1
        if pad > 0:
            text.append(" " * pad)
            text.append(clock, style="grey62")
        return text
