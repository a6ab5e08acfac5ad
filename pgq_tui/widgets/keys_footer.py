"""The footer of keys: spaced out with the command palette's key where there is room; below
COMPACT_BELOW columns compact and without the palette's key (Ctrl+P still opens it), so that
every key the app shows fits at 80 columns. It is composed again only when what it shows
changes: a focus move that leaves the keys as they were rebuilds nothing."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

#: narrower than this, the footer is compact and leaves the palette's key out
COMPACT_BELOW = 110


class KeysFooter(Footer):
    #: what the footer was last composed from (`_shown`), None before its first keys
    _drawn: tuple[object, ...] | None = None

    def _shown(self) -> tuple[object, ...]:
        """Everything `Footer.compose` reads: the screen's bindings (in order, each with whether
        it is enabled and its tooltip) and the footer's own style."""
        bindings = tuple(
            (binding, enabled, tooltip)
            for (_node, binding, enabled, tooltip) in self.screen.active_bindings.values()
        )
        return (self.compact, self.show_command_palette, bindings)

    def compose(self) -> ComposeResult:
        self._drawn = self._shown() if self._bindings_ready else None
        yield from super().compose()

    def bindings_changed(self, screen: Screen[object]) -> None:
        if (
            self._drawn is not None
            and self.is_attached
            and screen is self.screen
            and self._drawn == self._shown()
        ):
            return  # the keys shown are the keys drawn
        super().bindings_changed(screen)

    def on_resize(self, event: events.Resize) -> None:
        narrow = event.size.width < COMPACT_BELOW
        if narrow == self.compact and narrow != self.show_command_palette:
            return
        self.compact = narrow
        self.show_command_palette = not narrow
        self.call_after_refresh(self.recompose)  # the palette's key comes or goes
