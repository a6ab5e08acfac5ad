"""Write screenshots/*.svg: every dashboard view, from the fixed sample state (deterministic).

Run: .venv/bin/python scripts/screenshots.py
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot

from pgq_tui.app import DashboardApp
from pgq_tui.testing import sample_app

OUT = Path(__file__).resolve().parent.parent / "screenshots"
SIZE = (132, 38)

Steps = Callable[[Pilot[None]], Awaitable[None]]


async def settle(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, DashboardApp)
    for _ in range(200):
        if app.polls and not app._polling:
            break
        await pilot.pause(0.01)
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


async def queues(pilot: Pilot[None]) -> None:
    await pilot.press("down")


async def leases(pilot: Pilot[None]) -> None:
    await pilot.press("1", "tab")


async def jobs(pilot: Pilot[None]) -> None:
    await pilot.press("down", "down", "down", "enter")


async def job_detail(pilot: Pilot[None]) -> None:
    await pilot.press("down", "down", "down", "enter")
    await settle(pilot)
    await pilot.press("down", "down", "enter")


async def workers(pilot: Pilot[None]) -> None:
    await pilot.press("3")


async def confirm(pilot: Pilot[None]) -> None:
    await pilot.press("down", "down", "down", "R")


async def help_screen(pilot: Pilot[None]) -> None:
    await pilot.press("question_mark")


async def filtered(pilot: Pilot[None]) -> None:
    await pilot.press("2", "slash", *"503")


SHOTS: dict[str, Steps] = {
    "queues": queues,
    "leases": leases,
    "jobs": jobs,
    "job-detail": job_detail,
    "workers": workers,
    "confirm-requeue-all": confirm,
    "help": help_screen,
    "filter": filtered,
}


def screen_text(app: App[None]) -> str:
    """The current screen as plain text (for reading a layout in a terminal or a diff)."""
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
        await pilot.pause(0.2)
        path = OUT / f"{name}.svg"
        path.write_text(app.export_screenshot(title=f"pgq dashboard — {name}"))
        if text_dir := os.environ.get("PGQ_SCREENSHOT_TEXT"):
            Path(text_dir, f"{name}.txt").write_text(screen_text(app))
    return path


async def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, steps in SHOTS.items():
        print(await shoot(name, steps))


if __name__ == "__main__":
    asyncio.run(main())
