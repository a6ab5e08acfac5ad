"""The footer of keys: spaced out with the command palette's key where there is room; below
COMPACT_BELOW columns compact and without the palette's key (Ctrl+P still opens it), so that
every key the app shows fits at 80 columns."""

from __future__ import annotations

from textual import events
from textual.widgets import Footer

#: narrower than this, the footer is compact and leaves the palette's key out
COMPACT_BELOW = 110


class KeysFooter(Footer):
    def on_resize(self, event: events.Resize) -> None:
        narrow = event.size.width < COMPACT_BELOW
        if narrow == self.compact and narrow != self.show_command_palette:
            return
        self.compact = narrow
        self.show_command_palette = not narrow
        self.call_after_refresh(self.recompose)  # the palette's key comes or goes
