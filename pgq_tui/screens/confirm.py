"""A yes/no question before a destructive action: y confirms, n or Esc cancels.

The question and detail may quote database text (a queue name): both are shown as plain,
printable text, never as markup."""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from ..humanize import db_text


class ConfirmScreen(ModalScreen[bool]):
    CSS_PATH = "confirm.tcss"
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "Cancel", show=False),
    ]

    def __init__(self, title: str, detail: str) -> None:
        super().__init__()
        self.title_text = title
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(db_text(self.title_text), id="question")
            yield Static(db_text(self.detail, multiline=True), id="detail")
            yield Static("[b]y[/b] confirm    [b]n[/b] / [b]Esc[/b] cancel", id="keys")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class BulkConfirmScreen(ModalScreen[str]):
    """R or k over a filter: `y` acts on all the matching jobs (their exact count is in the
    question), as `y` answers every dialog; with `single`, `o` acts on the selected job
    alone. Dismissed with "all", "one" or "" (cancelled)."""

    CSS_PATH = "confirm.tcss"
    BINDINGS = [
        Binding("y", "answer('all')", "Yes, all matching"),
        Binding("a", "answer('all')", "All matching", show=False),
        Binding("o", "answer('one')", "This job only", show=False),
        Binding("n", "answer('')", "No"),
        Binding("escape", "answer('')", "Cancel", show=False),
    ]

    def __init__(self, title: str, detail: str, single: str | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.detail = detail
        self.single = single

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(db_text(self.title_text), id="question")
            yield Static(db_text(self.detail, multiline=True), id="detail")
            keys = "[b]y[/b] all matching    [b]n[/b] / [b]Esc[/b] cancel"
            if self.single is not None:
                keys = f"[b]o[/b] {escape(self.single)} only    " + keys
            yield Static(keys, id="keys")

    def action_answer(self, answer: str) -> None:
        if answer == "one" and self.single is None:
            return
        self.dismiss(answer)
