"""`pgq dashboard --web` in a real headless Chromium: a real server process on a free port,
the page's terminal read from xterm.js, keys typed into it, the database checked after.

The two browser tests are marked slow (`python -m pytest -m slow -n 0` runs them, as CI does);
the server-only ones run by default. Skips only where no Chromium (`chromium` on PATH, or
PGQ_TEST_CHROMIUM) or no Python playwright is found; Playwright never downloads a browser.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from psycopg.conninfo import conninfo_to_dict
from support import free_port

from pgq_cli.cli import main
from pgq_core import JobSpec, Queue
from pgq_tui.web_testing import (
    XTERM_HOOK,
    XTERM_INPUT,
    WebServer,
    shown_counts,
    wait_for_text,
)

QUEUE = "web_mail"
TOKEN = "a-token-for-the-browser-test-0123"


def chromium() -> str:
    path = os.environ.get("PGQ_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser"
    )
    if not path:
        pytest.skip("no Chromium (apt-get install chromium, or set PGQ_TEST_CHROMIUM)")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium()
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (the test extra)"
    )
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 800})
    context.add_init_script(XTERM_HOOK)
    try:
        yield context.new_page()
    finally:
        context.close()


def fill(queue: Queue) -> list[int]:
    """3 ready jobs and 2 dead ones; the dead ones' ids."""
    dead = queue.enqueue_many([JobSpec(QUEUE, {"d": i}, max_attempts=1) for i in range(2)])
    for job in queue.claim(QUEUE, 2, worker="test-worker"):
        queue.fail(job.id, job.fence, "smtp said no")
    queue.enqueue_many([JobSpec(QUEUE, {"n": i}) for i in range(3)])
    assert {queue.job(i).status for i in dead} == {"dead"}
    return dead


def db_counts(queue: Queue) -> dict[str, int]:
    stats = next(s for s in queue.stats() if s.queue == QUEUE)
    return {
        "ready": stats.ready, "scheduled": stats.scheduled, "running": stats.running,
        "expiring": stats.expiring, "dead": stats.dead, "done": stats.done,
    }


def cmdlines(pids: list[int]) -> list[str]:
    lines = []
    for pid in pids:
        try:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return lines


def alive(pid: int) -> bool:
    """Running (a zombie, or a pid gone, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def server_factory(dsn: str, schema: str) -> Iterator[Any]:
    started: list[WebServer] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WebServer:
        """`pgq --schema SCHEMA dashboard --web ARGS`, the DSN in its environment only."""
        environ = {k: v for k, v in os.environ.items() if k != "PGQ_WEB_TOKEN"}
        environ.update(PGQ_DSN=dsn, **(env or {}))
        server = WebServer(["--schema", schema, "dashboard", "--web", *args], environ)
        started.append(server)
        server.wait_started()
        return server

    yield start
    for server in started:
        server.stop()


@pytest.mark.slow  # Chromium and a server with a session: ~8 s each, ~20 s together
def test_the_browser_shows_the_live_counts_and_R_y_requeues_the_dead(
    dsn: str, queue: Queue, page: Any, server_factory: Any
) -> None:
    dead = fill(queue)
    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}", "--refresh", "0.5")
    assert server.url == f"http://127.0.0.1:{port}/", server.output()
    assert "actions allowed" in server.output()

    page.goto(server.url)
    text = wait_for_text(
        page, lambda t: shown_counts(t, QUEUE) == db_counts(queue), "the queue's counts"
    )
    assert shown_counts(text, QUEUE) == {
        "ready": 3, "scheduled": 0, "running": 0, "expiring": 0, "dead": 2, "done": 0
    }
    queue.enqueue(QUEUE, {"late": True})  # live: the page follows the database
    wait_for_text(page, lambda t: (shown_counts(t, QUEUE) or {}).get("ready") == 4, "4 ready")

    # the session is a `pgq dashboard` process whose command line holds no password
    sessions = server.descendants()
    assert sessions, "no session process"
    lines = cmdlines([server.process.pid, *sessions])
    assert any("-m pgq_cli dashboard" in line for line in lines), lines
    password = conninfo_to_dict(dsn).get("password")
    if password:
        assert not any(password in line for line in lines), "a password on a command line"

    page.focus(XTERM_INPUT)
    page.keyboard.type("R")
    wait_for_text(page, lambda t: f"Requeue every dead job of queue {QUEUE}?" in t, "the ask")
    page.keyboard.type("y")
    wait_for_text(page, lambda t: f"requeued 2 dead jobs of {QUEUE}" in t, "the requeue said")
    assert {queue.job(i).status for i in dead} == {"ready"}
    wait_for_text(page, lambda t: (shown_counts(t, QUEUE) or {}).get("dead") == 0, "0 dead")

    page.close()  # the browser leaves: its session ends
    wait_until_no_sessions(server)
    assert server.stop() == 0
    output = server.output()
    if password:
        assert password not in output
    assert "Traceback" not in output


def wait_until_no_sessions(server: WebServer, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while server.descendants() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.descendants() == [], cmdlines(server.descendants())


@pytest.mark.slow  # Chromium and a server with a session: ~8 s each, ~20 s together
def test_elsewhere_a_token_is_needed_and_the_browser_gets_a_read_only_dashboard(
    queue: Queue, page: Any, server_factory: Any
) -> None:
    dead = fill(queue)
    port = free_port()
    server = server_factory("--listen", f"0.0.0.0:{port}", env={"PGQ_WEB_TOKEN": TOKEN})
    output = server.output()
    assert server.url == f"http://HOST:{port}/?token=$PGQ_WEB_TOKEN", output
    assert TOKEN not in output, "the token of PGQ_WEB_TOKEN is never printed"
    assert "read-only (not on loopback" in output
    base = f"http://127.0.0.1:{port}/"

    # without the right token: 403 for the page and its websocket, and no session starts
    for url in (base, f"{base}?token=wrong-token-0123456789", f"{base}?token="):
        response = page.goto(url)
        assert response.status == 403, url
        assert "a token is needed" in page.content()
    opened = page.evaluate(
        """url => new Promise(done => {
             const ws = new WebSocket(url);
             ws.onopen = () => done("open"); ws.onerror = () => done("refused");
           })""",
        f"ws://127.0.0.1:{port}/ws/wrong-token-0123456789?width=80&height=24",
    )
    assert opened == "refused"
    assert status(f"http://127.0.0.1:{port}/ws") == 403
    page.wait_for_timeout(500)
    assert server.descendants() == [], "a session started without the token"

    # with it: the dashboard, read-only, and a refused R says so
    response = page.goto(f"{base}?token={TOKEN}")
    assert response.status == 200
    wait_for_text(page, lambda t: shown_counts(t, QUEUE) == db_counts(queue), "the counts")
    wait_for_text(page, lambda t: "read-only" in t.splitlines()[0], "the read-only header")
    page.focus(XTERM_INPUT)
    page.keyboard.type("R")
    wait_for_text(page, lambda t: "read-only: actions are disabled" in t, "the refusal")
    page.keyboard.type("y")
    page.wait_for_timeout(500)
    assert {queue.job(i).status for i in dead} == {"dead"}
    assert "Requeue every dead job" not in wait_for_text(page, lambda t: True, "anything")
    assert TOKEN not in server.output(), "the token is in a log line"

    # stopped with the page still open: the session ends with it, at once
    sessions = server.descendants()
    assert sessions
    started = time.monotonic()
    assert server.stop() == 0
    assert time.monotonic() - started < 8
    assert [pid for pid in sessions if alive(pid)] == [], "a session outlived the server"
    wait_for_text(page, lambda t: True, "anything")
    page.wait_for_selector("body.-closed", timeout=10_000)  # "Session ended." in the page


def test_a_generated_token_is_printed_once_and_opens_the_page(server_factory: Any) -> None:
    port = free_port()
    server = server_factory("--listen", f"0.0.0.0:{port}")
    prefix = f"http://HOST:{port}/?token="
    assert server.url.startswith(prefix), server.output()
    token = server.url.removeprefix(prefix)
    assert len(token) >= 16
    base = f"http://127.0.0.1:{port}/"
    assert status(base) == 403
    assert status(f"{base}?token={token[:-1]}") == 403
    assert status(f"{base}?token={token}") == 200
    assert server.output().count(token) == 1, "the token is printed once, then never logged"


def test_on_loopback_another_host_name_or_origin_gets_nothing(server_factory: Any) -> None:
    """A page elsewhere cannot reach a localhost server: not by rebinding its own name to
    127.0.0.1 (Host), not by opening the websocket from its own origin (Origin)."""
    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}")
    base = f"http://127.0.0.1:{port}"
    assert status(base + "/") == 200

    def get(path: str, **headers: str) -> int:
        request = urllib.request.Request(base + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    assert get("/", Host=f"evil.example:{port}") == 403
    upgrade = {
        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    assert get("/ws?width=80&height=24", Origin="http://evil.example", **upgrade) == 403
    assert server.descendants() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "127.0.0.1:8080"], "--listen goes with --web"),
        (["--allow-actions"], "--allow-actions goes with --web"),
        (["--web", "--listen", "nowhere"], "--listen takes HOST:PORT"),
        (["--web", "--listen", "127.0.0.1:70000"], "the port must be 1 to 65535"),
        (["--web", "--listen", "::1:8080"], "put an IPv6 address in brackets"),
        (["--web", "--read-only", "--allow-actions"], "contradict"),
    ],
)
def test_bad_web_options_are_one_line(
    dsn: str, schema: str, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, ["--dsn", dsn, "--schema", schema, "dashboard", *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_bad_token_in_the_environment_is_one_line_without_it(dsn: str, schema: str) -> None:
    result = CliRunner(env={"PGQ_WEB_TOKEN": "short secret"}).invoke(
        main, ["--dsn", dsn, "--schema", schema, "dashboard", "--web", "--listen", "0.0.0.0:1"]
    )
    assert result.exit_code == 2, result.output
    assert "PGQ_WEB_TOKEN must be 16 to 200 letters" in result.stderr
    assert "short secret" not in result.output


def test_past_the_session_limit_a_browser_gets_503_and_no_process() -> None:
    """(On a thread of its own: the module's Playwright keeps an event loop on this one.)"""
    from aiohttp.test_utils import TestClient, TestServer

    from pgq_tui.web import DashboardServer, Listen

    server = DashboardServer("false", Listen("127.0.0.1", free_port()), token=None, max_sessions=0)

    async def visit() -> tuple[int, str, int]:
        async with TestClient(TestServer(await server._make_app())) as client:
            response = await client.get("/ws?width=80&height=24", headers={
                "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            })
            return response.status, await response.text(), (await client.get("/")).status

    with ThreadPoolExecutor(1) as pool:
        status_ws, text, status_page = pool.submit(asyncio.run, visit()).result(timeout=30)
    assert status_ws == 503 and "0 sessions are open" in text
    assert status_page == 200
    assert server.sessions_started == 0
