"""The log of the workers started inside the app: their `pgq.worker` records, newest last."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import RichLog

from ..humanize import db_text
from ..state import LogLine

LEVEL_STYLE = {
    "DEBUG": "grey50",
    "INFO": "",
    "WARNING": "bold yellow",
    "ERROR": "bold red",
    "CRITICAL": "bold white on red",
}


def log_text(line: LogLine) -> Text:
    """`HH:MM:SS LEVEL text`; the text shown printable (control characters escaped), never
    read as markup."""
    text = Text()
    text.append(time.strftime("%H:%M:%S", time.gmtime(line.at)), style="grey62")
    text.append(f" {line.level:<7} ", style=LEVEL_STYLE.get(line.level, ""))
    text.append_text(db_text(line.text, multiline=True))
    return text


class LogPanel(RichLog):
    """Wrapped at the panel's width; keeps the last `max_lines` lines."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(max_lines=500, wrap=True, markup=False, highlight=False, id=id)

    def add(self, line: LogLine) -> None:
        self.write(log_text(line))
