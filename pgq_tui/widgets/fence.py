"""How a fence reads: a neutral counter, never in an error colour."""

from __future__ import annotations

from rich.text import Text

#: a fence above 1 means the job was claimed (or killed) more than once: worth a glance only
REPEATED_STYLE = "bold"


def fence_style(fence: int) -> str:
    return REPEATED_STYLE if fence > 1 else ""


def fence_text(fence: int) -> Text:
    """The fence as a plain number; above 1 it is bold, nothing louder."""
    return Text(str(fence), style=fence_style(fence))
