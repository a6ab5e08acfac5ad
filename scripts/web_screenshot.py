"""Write screenshots/web-dashboard.png: `pgq dashboard --web` in a real headless Chromium.

Run: .venv/bin/python scripts/web_screenshot.py [--warm-up 30] [--dsn DSN] [--chromium PATH]

A fresh schema on the embedded server (or --dsn / PGQ_DSN) gets `pgq demo`'s queues, producer
and schedules; a `pgq worker` process works them with the demo's handler (fast jobs, failures,
retries, deaths, hangs); `pgq dashboard --web` serves the dashboard on a free loopback port and
Chromium (the system's, driven by Playwright: never downloaded) opens it at 1400x800. After
`--warm-up` seconds the page is shot, so every number in it is one the database held. The
schema is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
from playwright.sync_api import sync_playwright
from psycopg import sql

from pgq_cli.demo_jobs import DEMO_QUEUES, DemoProducer
from pgq_core import migrate, resolve

# the dashboard's test fixtures live with the tests (they are not in the wheel)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tui_support.web import (
    XTERM_HOOK,
    XTERM_INPUT,
    WebServer,
    shown_counts,
    wait_for_text,
)

OUT = Path(__file__).resolve().parent.parent / "screenshots" / "web-dashboard.png"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description="the web dashboard, shot in Chromium")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--warm-up", type=float, default=30.0)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    target = resolve(args.dsn, "pgq")
    schema = f"pgq_webshot_{secrets.token_hex(3)}"
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        migrate(conn, schema)
    env = {**os.environ, "PGQ_SCHEMA": schema}
    env.pop("PGQ_WEB_TOKEN", None)
    if not target.embedded:
        env["PGQ_DSN"] = target.dsn
    producer = DemoProducer(target.dsn, schema, freeze_every=8, wake_after=14.0)
    producer.fill()
    producer.start()
    worker = subprocess.Popen(
        [sys.executable, "-m", "pgq_cli", "worker", *DEMO_QUEUES,
         "--handler", "pgq_cli.demo_jobs:handle", "--concurrency", "12", "--lease", "30s"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    server = WebServer(
        ["dashboard", "--web", "--listen", f"127.0.0.1:{free_port()}", "--refresh", "1"], env
    )
    try:
        url = server.wait_started()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=args.chromium, args=["--no-sandbox"]
            )
            page = browser.new_page(viewport={"width": 1400, "height": 800})
            page.add_init_script(XTERM_HOOK)
            page.goto(url)
            wait_for_text(page, lambda t: shown_counts(t, DEMO_QUEUES[0]) is not None, "queues")
            page.focus(XTERM_INPUT)  # a focused app shows its keys in the footer
            page.wait_for_timeout(args.warm_up * 1000)
            OUT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(OUT))
            browser.close()
        print(OUT)
    finally:
        server.stop()
        worker.terminate()
        worker.wait(30)
        producer.stop()
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
