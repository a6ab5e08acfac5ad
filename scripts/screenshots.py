"""Write screenshots/*.svg: every dashboard view, from the fixed sample state (deterministic).

Run: .venv/bin/python scripts/screenshots.py
(PGQ_SCREENSHOT_TEXT=DIR also writes each view as plain text, to read a layout in a terminal.)
"""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path

from rich.console import Console
from textual.app import App

from pgq_tui.testing import SIZE, VIEWS, Steps, sample_app, settle

OUT = Path(__file__).resolve().parent.parent / "screenshots"


def screen_text(app: App[None]) -> str:
    """The current screen as plain text."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=[]))
    return console.export_text()


async def shoot(name: str, steps: Steps) -> Path:
    app = sample_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await steps(pilot)
        await settle(pilot)
        path = OUT / f"{name}.svg"
        path.write_text(app.export_screenshot(title=f"pgq dashboard — {name}"))
        if text_dir := os.environ.get("PGQ_SCREENSHOT_TEXT"):
            Path(text_dir, f"{name}.txt").write_text(screen_text(app))
    return path


async def main() -> None:
    OUT.mkdir(exist_ok=True)
    for stale in OUT.glob("*.svg"):
        stale.unlink()
    for name, steps in VIEWS.items():
        print(await shoot(name, steps))


if __name__ == "__main__":
    asyncio.run(main())
