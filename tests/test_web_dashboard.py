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
from support import free_port, statuses
from tui_support.web import (
    XTERM_HOOK,
    XTERM_INPUT,
    WebServer,
    shown_counts,
    wait_for_text,
)

from pgq_cli.cli import main
from pgq_core import JobSpec, Queue

QUEUE = "web_mail"
#: a quiet headless Chromium: no sandbox (containers), no GPU, no calls home
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
TOKEN = "a-token-for-the-browser-test-0123"


def chromium() -> str:
    path = (
        os.environ.get("PGQ_TEST_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
        or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
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
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
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
    assert statuses(queue, dead) == {"dead"}
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
    assert statuses(queue, dead) == {"ready"}
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
    assert statuses(queue, dead) == {"dead"}
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
        (["--web", "--listen", "127.0.0.1:²"], "--listen takes HOST:PORT"),
        (["--web", "--listen", "127.0.0.1:٨٠٨٠"], "--listen takes HOST:PORT"),
        (["--refresh", "nan"], "is not a finite number"),
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


# --- bounded sessions, never framed, tidy failures (issue 30) ------------------------------

UPGRADE = {
    "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def rss_mib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def watch_until_gone(pids: list[int], timeout: float) -> tuple[list[int], int]:
    """(pids still alive after `timeout`, the largest RSS seen in MiB), sampled every 0.1 s."""
    deadline = time.monotonic() + timeout
    peak = 0
    while time.monotonic() < deadline:
        live = [pid for pid in pids if alive(pid)]
        peak = max([peak, *(rss_mib(pid) for pid in live)])
        if not live:
            return [], peak
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)], peak


def in_thread(coroutine: Any, timeout: float = 60) -> Any:
    """Run a coroutine on a thread of its own (the module's Playwright keeps a loop on this
    one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result(timeout=timeout)


async def open_session(port: int, query: str = "width=100&height=30") -> Any:
    """A websocket session of the server on `port` (aiohttp client), once its screen came."""
    import aiohttp

    client = aiohttp.ClientSession()
    ws = await client.ws_connect(f"http://127.0.0.1:{port}/ws?{query}")
    received = 0
    while received < 1000:
        message = await asyncio.wait_for(ws.receive(), 30)
        assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), message
        received += len(message.data)
    return client, ws


@pytest.mark.parametrize("flood", [100_000, 1_000_000, "sustained"])
def test_a_flooded_session_ends_with_its_tab(server_factory: Any, flood: int | str) -> None:
    """`["stdin", "j" * N]` then close: the dashboard process is gone within seconds and
    never grew (before: at 100 kB it lived on at 221 MiB, at 1 MB it outlived the server). The
    sustained flood sends 8 KiB messages at 32 KiB/s for 4 s (sixteen times the input limit),
    then closes."""
    from pgq_tui.web_session import INPUT_BURST, QUIT_SECONDS, TERM_SECONDS

    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}")

    async def flood_and_close() -> list[int]:
        client, ws = await open_session(port)
        async with client:
            sessions = server.descendants()
            if flood == "sustained":  # 32 KiB/s for 4 s, in messages under the size limit
                for _ in range(16):
                    await ws.send_json(["stdin", "j" * INPUT_BURST])
                    await asyncio.sleep(0.25)
            else:  # over the message size limit: the server closes the session (1009; 1006
                # when it cut the connection while the message was still coming in)
                await ws.send_json(["stdin", "j" * int(flood)])
                deadline = time.monotonic() + 10
                while not ws.closed and time.monotonic() < deadline:
                    await asyncio.wait_for(ws.receive(), 10)
                assert ws.closed and ws.close_code in (1009, 1006), ws.close_code
            await ws.close()
        return sessions

    sessions = in_thread(flood_and_close())
    assert sessions, "no session process"
    left, peak = watch_until_gone(sessions, QUIT_SECONDS + TERM_SECONDS + 5)
    assert left == [], f"session processes outlived their tab: {cmdlines(left)}"
    assert peak < 200, f"a session grew to {peak} MiB"
    assert server.stop() == 0
    assert "Traceback" not in server.output()


def test_killing_the_server_ends_its_sessions(server_factory: Any) -> None:
    """SIGKILL of the server (no handler runs): the kernel ends its sessions (they were
    re-parented to PID 1 and lived on, with their database connections)."""
    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}")

    async def two_sessions() -> list[int]:
        opened = [await open_session(port) for _ in range(2)]
        sessions = server.descendants()
        server.process.kill()
        server.process.wait(10)
        for client, _ws in opened:
            await client.close()
        return sessions

    sessions = in_thread(two_sessions())
    assert len(sessions) >= 2
    left, _ = watch_until_gone(sessions, 10)
    assert left == [], f"sessions outlived a SIGKILLed server: {cmdlines(left)}"


def test_a_huge_terminal_is_cut_and_a_bad_one_refused(server_factory: Any) -> None:
    """?width=20000&height=20000 starts a 500 x 200 dashboard (it took 2.8 GB); width=-1 or
    a word is a 400 and one log line (it was a 52-line Rich traceback)."""
    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}")

    async def huge() -> dict[str, str]:
        client, ws = await open_session(port, "width=20000&height=20000")
        async with client:
            [pid] = [p for p in server.descendants() if "pgq_cli" in " ".join(cmdlines([p]))]
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            await ws.close()
        pairs = (item.decode().partition("=") for item in environ if item)
        return {name: value for name, _, value in pairs}

    environ = in_thread(huge())
    assert (environ["COLUMNS"], environ["ROWS"]) == ("500", "200")
    wait_until_no_sessions(server)
    before = len(server.output().splitlines())
    for query in ("width=-1&height=24", "width=80&height=abc", "width=0", "height=%C2%B2"):
        request = urllib.request.Request(f"http://127.0.0.1:{server_port(server)}/ws?{query}",
                                         headers=UPGRADE)
        assert fetch(request)[0] == 400, query
    assert server.descendants() == []
    time.sleep(0.3)
    lines = server.output().splitlines()[before:]
    assert len(lines) == 4 and all(line.endswith("GET /ws 400") for line in lines), lines


def server_port(server: WebServer) -> int:
    return int(server.url.rsplit(":", 1)[1].split("/")[0])


def fetch(request: urllib.request.Request | str) -> tuple[int, Any, bytes]:
    """(status, headers, body) of a request, whatever its status."""
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_every_response_forbids_framing_and_bad_requests_are_one_line(
    server_factory: Any,
) -> None:
    """Frame headers on the page, a static file, a refusal, a 404 and a 400; a plain GET /ws
    is a 400 (it was no response and a 20-line traceback); a page asked for as a frame is a
    403; the page loads its font from this server."""
    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}")
    base = f"http://127.0.0.1:{port}"
    cases = [
        (base + "/", 200),
        (base + "/static/js/textual.js", 200),
        (base + "/static/fonts/RobotoMono-VariableFont_wght.ttf", 200),
        (base + "/nowhere", 404),
        (base + "/ws", 400),
        (urllib.request.Request(base + "/", headers={"Sec-Fetch-Dest": "iframe"}), 403),
        (urllib.request.Request(base + "/", headers={"Host": f"evil.example:{port}"}), 403),
    ]
    for request, expected in cases:
        status_, headers, body = fetch(request)
        assert status_ == expected, (request, body)
        assert headers["X-Frame-Options"] == "DENY", request
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"], request
    page = fetch(base + "/")[2].decode()
    assert "googleapis" not in page and "/static/fonts/RobotoMono" in page
    assert "https://" not in page and "http://" not in page.replace("http://www.w3.org", "")
    time.sleep(0.3)
    output = server.output()
    assert "Traceback" not in output and "Error handling request" not in output
    assert output.count("GET /ws 400") == 1
    assert server.descendants() == []


@pytest.mark.slow  # ~25 s: waits out the idle timeout twice
def test_idle_and_half_sent_connections_time_out_and_accept_errors_are_one_line_a_second(
    server_factory: Any,
) -> None:
    """Under a 128-file limit, 200 connections that send nothing or half a request (more
    than the server can accept; the rest wait in its backlog): the accept errors are at most
    one line a second, no traceback; every connection is closed after the idle timeout (those
    in the backlog once they are accepted), and then the page is served again (before: 400
    idle sockets were open after 120 s, GET / timed out, asyncio logged tracebacks in a loop)."""
    import resource
    import socket

    from pgq_tui.web import IDLE_SECONDS

    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}")
    resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE, (128, 128))
    started = time.monotonic()
    sockets = []
    for n in range(200):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if n % 2:
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")
        sockets.append(s)
    time.sleep(2)
    deadline = time.monotonic() + 3 * IDLE_SECONDS + 10
    open_ = list(sockets)
    while open_ and time.monotonic() < deadline:
        still = []
        for s in open_:
            s.settimeout(0.01)
            try:
                if s.recv(1) == b"":
                    s.close()
                    continue
            except (TimeoutError, BlockingIOError):
                pass
            except OSError:
                s.close()
                continue
            still.append(s)
        open_ = still
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    for s in open_:
        s.close()
    assert open_ == [], f"{len(open_)} of 200 idle connections still open after {elapsed:.0f}s"
    assert status(f"http://127.0.0.1:{port}/") == 200
    output = server.output()
    assert "Traceback" not in output
    said = [line for line in output.splitlines() if "out of system resource" in line]
    assert said, "the accept errors were never said"
    assert len(said) <= elapsed + 1, said
    assert all(line.count("\n") == 0 for line in said)


STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdout.write("__GANGLION__\\n")
sys.stdout.flush()
while True:
    time.sleep(1)
"""


def test_a_dashboard_that_ignores_quit_and_sigterm_is_killed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A session process that never reads its input and ignores SIGTERM: its tab closes, it
    gets SIGKILL after QUIT_SECONDS + TERM_SECONDS, and its slot is held until it is reaped."""
    import shlex
    import sys

    from aiohttp.test_utils import TestClient, TestServer

    from pgq_tui.web import DashboardServer, Listen
    from pgq_tui.web_session import QUIT_SECONDS, TERM_SECONDS

    server = DashboardServer(
        shlex.join([sys.executable, "-c", STUBBORN]), Listen("127.0.0.1", free_port()),
        token=None,
    )

    async def visit() -> tuple[int, list[int], float, int]:
        async with TestClient(TestServer(await server._make_app())) as client:
            ws = await client.ws_connect("/ws?width=80&height=24")
            for _ in range(100):
                if server.live and next(iter(server.live)).pid:
                    break
                await asyncio.sleep(0.05)
            [session] = server.live
            assert session.pid is not None
            await ws.send_json(["stdin", "q" * 100])
            await ws.close()
            closed = time.monotonic()
            held = server.sessions  # the slot, while the process lives
            while server.sessions and time.monotonic() - closed < 10:
                await asyncio.sleep(0.05)
            return held, [session.pid], time.monotonic() - closed, server.sessions

    caplog.set_level("INFO", logger="pgq.web")
    held, pids, took, after = in_thread(visit())
    assert (held, after) == (1, 0)
    assert QUIT_SECONDS + TERM_SECONDS - 0.5 < took < QUIT_SECONDS + TERM_SECONDS + 5
    assert not alive(pids[0])
    said = [r.getMessage() for r in caplog.records if r.name == "pgq.web"]
    assert any("did not quit within 2s; killed" in m for m in said), said


def test_what_a_page_sends_is_checked_and_bounded() -> None:
    """Resizes are cut to 500 x 200 and refused below 1; messages that mean nothing are
    dropped; the token bucket lets a burst through and then its rate."""
    from pgq_tui.web_session import INPUT_BURST, Session, TokenBucket, terminal_size

    assert terminal_size({}) == (80, 24)
    assert terminal_size({"width": "20000", "height": "20000"}) == (500, 200)
    for bad in ("-1", "0", "abc", "²", "1e3", "9" * 20, ""):
        assert terminal_size({"width": bad}) is None, bad

    session = Session("true", 1, None)  # type: ignore[arg-type]
    _, meta, _ = session.envelope('["resize", {"width": 20000, "height": 3}]') or ("", b"", 0)
    assert json_of(meta) == {"type": "resize", "width": 500, "height": 3}
    for nonsense in ('["resize", {"width": -1, "height": 3}]', '["resize", {"width": true,'
                     ' "height": 3}]', "[]", "{}", "not json", '["open_url", "x"]', '[1]'):
        assert session.envelope(nonsense) is None, nonsense
    assert session.envelope('["stdin", "jj"]') == ("stdin", b"jj", 2)

    bucket = TokenBucket(rate=1000, burst=INPUT_BURST)
    assert bucket.take(INPUT_BURST)
    assert not bucket.take(INPUT_BURST)
    bucket.at -= 1.0  # a second later
    assert bucket.take(1000) and not bucket.take(100)


def json_of(data: bytes) -> Any:
    import json

    return json.loads(data)


#: Run before the page's scripts: the page's own websocket kept as window.__pgqSocket, so a
#: test can send what a hostile page script would.
SOCKET_HOOK = """
(() => {
  const Original = window.WebSocket;
  window.WebSocket = function (...args) {
    const socket = new Original(...args);
    window.__pgqSocket = socket;
    return socket;
  };
  window.WebSocket.prototype = Original.prototype;
  Object.assign(window.WebSocket, Original);
})();
"""

FRAMING_PAGE = """<!DOCTYPE html><html><body>
<iframe src="{url}" width="600" height="300"></iframe>
<iframe src="{url}" width="600" height="300"></iframe>
<iframe src="{url}" width="600" height="300"></iframe>
</body></html>"""


@pytest.fixture
def other_origin() -> Iterator[Any]:
    """A site on another origin serving one page: `serve(html)` gives its address."""
    import http.server
    import threading

    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get("page", b"")
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def serve(html: str) -> str:
        pages["page"] = html.encode()
        return f"http://localhost:{httpd.server_address[1]}/"

    try:
        yield serve
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.slow  # Chromium and a server: ~10 s
def test_a_page_elsewhere_cannot_frame_the_dashboard(
    queue: Queue, page: Any, server_factory: Any, other_origin: Any
) -> None:
    """Another origin frames the dashboard three times: every frame shows nothing and no
    session starts (before: 17 frames took all 16 slots, and keys typed into one reached a
    dashboard with actions allowed); the operator's own tab then gets the dashboard, and its
    page loads nothing from any other host (its font included)."""
    fill(queue)
    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}")
    own = f"http://127.0.0.1:{port}/"
    page.goto(other_origin(FRAMING_PAGE.format(url=own)))
    page.wait_for_timeout(2000)
    frames = [frame for frame in page.frames if frame != page.main_frame]
    assert len(frames) == 3
    for frame in frames:
        shown = frame.evaluate("() => document.body ? document.body.innerText : ''")
        assert "pgq" not in shown and "Textual" not in shown, shown
        assert frame.evaluate("() => window.__pgqTerminal === undefined")
    page.mouse.click(300, 150)
    page.keyboard.type("Ry")
    page.wait_for_timeout(500)
    output = server.output()
    assert "GET /ws" not in output and server.descendants() == [], output
    assert output.count("GET / 403") == 3, output

    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(own)
    wait_for_text(page, lambda t: shown_counts(t, QUEUE) == db_counts(queue), "the counts")
    page.wait_for_timeout(500)  # the font, loaded after the first screen
    elsewhere = [url for url in requested if not url.startswith((own, f"ws://127.0.0.1:{port}/"))]
    assert elsewhere == [], elsewhere
    assert any(url.endswith(".ttf") for url in requested), requested
    assert page.evaluate("() => document.fonts.check('16px \"Roboto Mono\"')")


@pytest.mark.slow  # Chromium and a server with sessions: ~15 s
@pytest.mark.parametrize("typed", [6_000, 100_000, 1_000_000])
def test_a_closed_tab_ends_its_session_whatever_was_typed(
    queue: Queue, browser: Any, server_factory: Any, typed: int
) -> None:
    """A real tab types, sends `typed` characters of input on its websocket and closes: its
    process is gone within seconds (before: from ~100 kB of input it lived on, from 1 MB past
    the server)."""
    from pgq_tui.web_session import QUIT_SECONDS, TERM_SECONDS

    fill(queue)
    port = free_port()
    server = server_factory("--listen", f"127.0.0.1:{port}")
    context = browser.new_context(viewport={"width": 1400, "height": 800})
    context.add_init_script(XTERM_HOOK)
    context.add_init_script(SOCKET_HOOK)
    tab = context.new_page()
    try:
        tab.goto(f"http://127.0.0.1:{port}/")
        wait_for_text(tab, lambda t: shown_counts(t, QUEUE) == db_counts(queue), "the counts")
        sessions = server.descendants()
        assert sessions
        tab.focus(XTERM_INPUT)
        tab.keyboard.type("jjj")  # typed keys, then what a page script can send
        tab.evaluate(
            """n => window.__pgqSocket.send(JSON.stringify(["stdin", "j".repeat(n)]))""", typed
        )
        tab.wait_for_timeout(300)
        tab.close()
    finally:
        context.close()
    left, peak = watch_until_gone(sessions, QUIT_SECONDS + TERM_SECONDS + 5)
    assert left == [], f"a closed tab's session lives on: {cmdlines(left)}"
    assert peak < 200, f"a session grew to {peak} MiB"
    assert server.stop() == 0
    assert "Traceback" not in server.output()
