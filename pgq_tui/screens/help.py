"""`?`: every key, what it does, and when it is refused; fits the screen and scrolls."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from pgq_core.filters import FILTER_SYNTAX

from ..pool import QUIT_GRACE

KEYS: tuple[tuple[str, str], ...] = (
    ("↑ ↓ PgUp PgDn", "move the cursor"),
    ("Tab Shift+Tab", "move between the queues table and the view below"),
    ("1 … 6", "show Leases, Jobs, Workers, Log, Errors, Health (the cursor goes there)"),
    ("Enter", "on a queue: browse its jobs (dead first); on a job (a stuck one too): open "
     "it; on an error group: its jobs"),
    ("s", "Jobs: next status (dead, ready, running, done, all)"),
    ("o", "Leases: open the selected job's worker in the Workers view"),
    ("/", "Jobs: filter on the server (below); elsewhere: filter the rows shown, or a job's "
     "history (Esc clears)"),
    ("r", "requeue the selected dead job"),
    ("R", "requeue every dead job of the selected queue; on a filtered Jobs view or an error "
     "group: all N matching (asks first, with the count)"),
    ("k", "kill the selected job: dead, fence + 1; on a filtered Jobs view or an error group: "
     "all N matching (asks first)"),
    ("p", "pause / resume the selected queue: no claims (asks first)"),
    ("w", "start a worker on the selected queue (handler from --handler)"),
    ("W", "stop this app's workers (gracefully)"),
    ("space", "pause / resume live updates"),
    ("Esc", "close a dialog, clear a filter, or go back from a job"),
    ("Ctrl+P", "command palette: the same actions by name"),
    ("?", "this help"),
    ("q", f"quit: running jobs get {QUIT_GRACE:g}s, then go back to ready (q q: at once)"),
)

VIEWS: tuple[tuple[str, str], ...] = (
    ("queues", "ready, scheduled, running, expiring, dead, done, oldest due, done/s"),
    ("1 Leases", "running jobs by time left, counting down (re-read every second)"),
    ("2 Jobs", "the selected queue's jobs by status; dead: the latest dead first"),
    ("3 Workers", "this app's workers and their current jobs, and every other live worker"),
    ("4 Log", "what this app's workers logged (warnings counted on the tab)"),
    ("5 Errors", "failed and dead jobs grouped by error, largest first (read every 5s)"),
    ("6 Health", "stuck jobs (lease renewed, running past 3x their queue's p99 and 1m), "
     "tables, vacuum, the xmin holder, NOTIFY queue, lock waits; warnings"),
)


def key_table(read_only: bool) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold #5fafff", justify="right", no_wrap=True)
    table.add_column(overflow="fold")
    for key, what in KEYS:
        table.add_row(key, what)
    table.add_row("", "")
    for view, what in VIEWS:
        table.add_row(view, what)
    table.add_row("", "")
    table.add_row("jobs filter", Text(FILTER_SYNTAX + " (the CLI's filter options)"))
    table.add_row("", "")
    if read_only:
        table.add_row("", Text("read-only: r R k p w W are disabled", style="bold #af87ff"))
    table.add_row(
        "expiring",
        Text.assemble(
            ("under a third of its lease left", "bold yellow"),
            " (every view, and pgq stats)",
        ),
    )
    table.add_row(
        "colors",
        Text.assemble(
            (" expired, awaiting the reaper ", "bold white on red"),
            "  ",
            ("dead", "bold red"),
        ),
    )
    table.add_row(
        "stale",
        Text("the server is unreachable: the data shown is that old (tables dimmed)"),
    )
    table.add_row("fence", Text("a counter; bold above 1: the job was claimed more than once"))
    return table


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("question_mark", "close", "Close", show=False),
        Binding("q", "close", "Close", show=False),
    ]

    def __init__(self, read_only: bool = False) -> None:
        super().__init__()
        self.read_only = read_only

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static("pgq dashboard — keys (↑ ↓ scroll, Esc closes)", id="help-title")
            yield Static(key_table(self.read_only))

    def on_mount(self) -> None:
        self.query_one("#help").focus()

    def action_close(self) -> None:
        self.dismiss(None)
