"""Write screenshots/*.svg: every dashboard view, from a real run of `pgq demo`'s setup.

Run: .venv/bin/python scripts/screenshots.py [--warm-up 30] [--dsn DSN]

What `pgq demo` does, headless: a fresh schema on the embedded server (or --dsn / PGQ_DSN),
the demo producer filling and feeding four queues, and the dashboard with one in-app worker
per queue. After `--warm-up` seconds of that live load (jobs done, retried, dead, reaped and
a frozen worker's stale write), each view is shot at 132x40 (`NAME.svg`) and 80x24
(`NAME-80x24.svg`), so every number in every picture is one the database held. The schema is
dropped at the end. (PGQ_SCREENSHOT_TEXT=DIR also writes each view as plain text.)
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console
from textual.app import App
from textual.pilot import Pilot

from pgq_cli.demo_jobs import DEMO_QUEUES, DemoProducer, handle
from pgq_core import migrate, resolve
from pgq_tui.app import DashboardApp
from pgq_tui.launch import make_app
from pgq_tui.widgets.queues_table import QueuesTable

# the dashboard's test fixtures live with the tests (they are not in the wheel)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tui_support.pilot import NARROW, VIEWS, Steps, settle

OUT = Path(__file__).resolve().parent.parent / "screenshots"
LARGE = (132, 40)


def screen_text(app: App[None]) -> str:
    """The current screen as plain text."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=[]))
    return console.export_text()


async def reset(pilot: Pilot[Any], app: DashboardApp) -> None:
    """Back to how the dashboard opens: no dialog, no filter, first queue, Leases view."""
    while app.screen is not app.dashboard:
        app.pop_screen()
        await pilot.pause()
    dashboard = app.dashboard
    dashboard.action_clear_filter()
    dashboard.status_chosen = False
    dashboard.query_one(QueuesTable).move_cursor(row=0)
    dashboard.action_show_tab("leases")
    dashboard.query_one(QueuesTable).focus()
    await pilot.pause(0.3)


async def shoot(pilot: Pilot[Any], app: DashboardApp, name: str, steps: Steps) -> Path:
    await reset(pilot, app)
    await steps(pilot)
    await pilot.pause(0.4)  # the Jobs view's own read lands
    await settle(pilot)
    path = OUT / f"{name}.svg"
    path.write_text(app.export_screenshot(title=f"pgq dashboard — {name}"))
    if text_dir := os.environ.get("PGQ_SCREENSHOT_TEXT"):
        Path(text_dir, f"{name}.txt").write_text(screen_text(app))
    print(path)
    return path


async def main() -> None:
    parser = argparse.ArgumentParser(description="dashboard screenshots from a live demo")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--warm-up", type=float, default=30.0)
    args = parser.parse_args()
    target = resolve(args.dsn, "pgq")
    schema = f"pgq_shots_{secrets.token_hex(3)}"
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        migrate(conn, schema)
    producer = DemoProducer(target.dsn, schema, freeze_every=8, wake_after=14.0)
    producer.fill()
    producer.start()
    app = make_app(
        target.dsn,
        schema,
        "demo@localhost/postgres",
        handler=handle,
        refresh=1.0,
        lease=timedelta(seconds=30),
        grace=1.0,
        start_workers=list(DEMO_QUEUES),
    )
    app.blink = False
    app.animation_level = "none"
    try:
        OUT.mkdir(exist_ok=True)
        for stale in OUT.glob("*.svg"):
            stale.unlink()
        async with app.run_test(size=LARGE) as pilot:
            await pilot.pause(args.warm_up)
            for size, suffix in ((LARGE, ""), (NARROW, "-80x24")):
                await pilot.resize_terminal(*size)
                await pilot.pause(0.5)
                for name, steps in VIEWS.items():
                    await shoot(pilot, app, f"{name}{suffix}", steps)
            await reset(pilot, app)
            app.pool.stop_all(immediately=True)
            await app.pool.wait(5)
            app.exit()
    finally:
        producer.stop()
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    asyncio.run(main())
