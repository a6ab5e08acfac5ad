"""The dashboard in a browser (`pgq dashboard --web`): textual-serve runs one dashboard process
per browser session and shows its terminal in the page (xterm.js). It is the same app, not a
second UI.

Who gets a session:
- bound to a loopback address (the default), anyone on this machine; the Host header must name
  a loopback host (a page elsewhere rebinding its name to 127.0.0.1 gets nothing) and a
  websocket's Origin must be the page's own (a page elsewhere cannot drive the dashboard);
- bound to any other address, only who gives the token: `/?token=...` for the page, which puts
  it in its websocket's path. Without it: 403, and no process is started.

What never leaves this process: the DSN (the sessions get it in their environment, never on a
command line), the token in any log line (paths are logged with it masked, queries never).

What no visitor can do (see also `web_session` for a session's own bounds):
- frame it: every response says `Content-Security-Policy: frame-ancestors 'none'` and
  `X-Frame-Options: DENY`, and a page requested as a frame gets 403;
- load anything from another host into it (its font is served here, the policy says 'self');
- hold a connection without a request: a connection idle (or half-sent) for `IDLE_SECONDS` is
  closed; a websocket whose page answers no ping is closed by the ping;
- flood the log: a bad request gets a status and one line, never a traceback; the event loop's
  own errors (an accept out of file descriptors, which asyncio retries after a second) are one
  line, at most one a second;
- outlive it: every session process ends when the server does, by SIGTERM, Ctrl+C or SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import re
import resource
import secrets
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import hdrs, web
from aiohttp.abc import AbstractAccessLogger
from textual_serve.server import Server
from yarl import URL

from .web_session import HEARTBEAT_SECONDS, MAX_MESSAGE, Session, terminal_size

#: where the token is taken from when set (else one is generated for a non-loopback address)
TOKEN_ENV = "PGQ_WEB_TOKEN"
#: a token travels in URLs: letters, digits and -._~ only (nothing to escape), long enough
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~-]{16,200}")
DEFAULT_LISTEN = "127.0.0.1:8080"
#: browser sessions at once (each is a dashboard process with its database connections)
MAX_SESSIONS = 16
#: how long a stop waits for the sessions to end
SHUTDOWN_SECONDS = 5.0
#: a connection with no request in flight is closed after this (idle, or a request half-sent)
IDLE_SECONDS = 10.0
#: the event loop's own errors: at most one line per this many seconds
LOOP_ERROR_EVERY = 1.0
#: on every response: no page of any site may frame this one
FRAME_HEADERS = {
    "Content-Security-Policy": (
        "frame-ancestors 'none'; default-src 'self'; script-src 'self' 'unsafe-inline'; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}
#: what a browser says it loads a page into when that is a frame (Sec-Fetch-Dest)
FRAME_DESTINATIONS = frozenset({"iframe", "frame", "embed", "object", "fencedframe"})
TEMPLATES = Path(__file__).parent / "web_templates"

log = logging.getLogger("pgq.web")


class WebError(ValueError):
    """Bad --listen or PGQ_WEB_TOKEN: one line, never quoting the token."""


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def wildcard(self) -> bool:
        return self.host in ("0.0.0.0", "::")

    def netloc(self, host: str | None = None) -> str:
        name = host or self.host
        return f"[{name}]:{self.port}" if ":" in name else f"{name}:{self.port}"


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address (any other name could resolve anywhere)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_listen(text: str) -> Listen:
    """HOST:PORT, [IPV6]:PORT; the port 1 to 65535."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or len(port) > 5:
        raise WebError(f"--listen takes HOST:PORT, e.g. {DEFAULT_LISTEN}; got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise WebError(f"--listen: put an IPv6 address in brackets, e.g. [::1]:8080; got {text!r}")
    number = int(port)
    if not 1 <= number <= 65535:
        raise WebError(f"--listen: the port must be 1 to 65535; got {port}")
    if not re.fullmatch(r"[A-Za-z0-9.:-]+", host):
        raise WebError(f"--listen: not a host name or address: {host!r}")
    return Listen(host, number)


def web_token(environ: Mapping[str, str]) -> tuple[str, bool]:
    """(token, generated): PGQ_WEB_TOKEN when set, else a fresh one."""
    given = environ.get(TOKEN_ENV)
    if given is None or given == "":
        return secrets.token_urlsafe(24), True
    if not TOKEN_PATTERN.fullmatch(given):
        raise WebError(
            f"{TOKEN_ENV} must be 16 to 200 letters, digits or -._~ "
            f"(it has {len(given)} characters)"
        )
    return given, False


def mask_path(path: str) -> str:
    """A request path as logged: the token in a websocket's path masked."""
    return "/ws/***" if path.startswith("/ws/") else path


class AccessLog(AbstractAccessLogger):
    """Sessions and refusals, never the query string (a token may be in it); static files are
    not logged."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        if request.path.startswith("/static/") and response.status < 400:
            return
        self.logger.info(
            "%s %s %s %s", request.remote, request.method, mask_path(request.path),
            response.status,
        )


class OneLineFormatter(logging.Formatter):
    """`pgq web: message`, an exception as its last line only (no locals, no frames)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"pgq web: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {exception_line(record.exc_info[1])}"
        return text.splitlines()[0] if text else text


def exception_line(exc: BaseException) -> str:
    """`Type: first line of its text` (the text unreadable or empty: the type alone)."""
    try:
        lines = str(exc).splitlines()
    except Exception:  # noqa: BLE001 - an unreadable message is still a line to log
        lines = []
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class LoopErrors:
    """The event loop's exception handler: one line per error, at most one line per
    `every` seconds (how many were not said is said with the next)."""

    def __init__(self, every: float = LOOP_ERROR_EVERY) -> None:
        self.every = every
        self.last = -float("inf")
        self.unsaid = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            self.unsaid += 1
            return
        self.last = now
        text = str(context.get("message") or "event loop error")
        exc = context.get("exception")
        if isinstance(exc, BaseException):
            text += f": {exception_line(exc)}"
        if self.unsaid:
            text += f" ({self.unsaid} more since the last such line)"
            self.unsaid = 0
        log.warning("%s", text)


class DashboardServer(Server):
    """textual-serve's server with a guard in front of every route (see the module)."""

    def __init__(
        self,
        command: str,
        listen: Listen,
        *,
        token: str | None,
        title: str = "pgq dashboard",
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        super().__init__(command, host=listen.host, port=listen.port, title=title)
        self.listen = listen
        self.token = token
        self.max_sessions = max_sessions
        self.sessions = 0
        #: sessions started since the server started (tests read it)
        self.sessions_started = 0
        self._stop: asyncio.Event | None = None
        #: the requests serving a session (each ends its dashboard process when cancelled)
        self._session_tasks: set[asyncio.Task[Any]] = set()
        #: the sessions whose process may still run
        self.live: set[Session] = set()
        self.templates_path = TEMPLATES

    # logging -----------------------------------------------------------------------------
    def initialize_logging(self) -> None:
        """One line per event on stderr: textual-serve's own handler would print tracebacks
        with their locals (a session's environment holds the DSN)."""
        handler = logging.StreamHandler()
        handler.setFormatter(OneLineFormatter())
        for name in ("pgq.web", "textual-serve", "aiohttp", "asyncio"):
            logger = logging.getLogger(name)
            logger.handlers[:] = [handler]
            logger.setLevel(logging.DEBUG if self.debug else logging.INFO)
            logger.propagate = False

    # the guard ---------------------------------------------------------------------------
    def host_allowed(self, host: str | None) -> bool:
        """Bound to loopback, the Host header must name a loopback host (DNS rebinding)."""
        if not self.listen.loopback:
            return True
        if not host:
            return False
        try:
            name = URL(f"http://{host}").host
        except ValueError:
            return False
        return name is not None and is_loopback(name)

    @staticmethod
    def same_origin(request: web.Request) -> bool:
        """A websocket opened by a page of this server (browsers always send Origin; a
        client without one is not a browser page)."""
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is None:
            return True
        host = request.headers.get(hdrs.HOST, "")
        _, sep, authority = origin.partition("://")
        return bool(sep) and authority.rstrip("/").lower() == host.lower()

    def token_given(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        given = request.match_info.get("token") or request.query.get("token") or ""
        return hmac.compare_digest(given.encode(), self.token.encode())

    @web.middleware
    async def guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Who gets what (see the module); whatever a handler raises is a status and one
        line, never a traceback."""
        try:
            return await self.checked(request, handler)
        except web.HTTPException:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one line for the operator, 500 for the page
            log.warning("%s %s failed: %s", request.method, mask_path(request.path),
                        exception_line(exc))
            return refuse(500, "this request failed; the server's log says why")

    async def checked(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not self.host_allowed(request.headers.get(hdrs.HOST)):
            return refuse(403, f"this server answers to localhost only ({self.listen.netloc()})")
        route = request.match_info.route.name
        if route not in ("index", "websocket", "websocket_token"):
            return await handler(request)  # static files
        if route == "index" and request.headers.get("Sec-Fetch-Dest") in FRAME_DESTINATIONS:
            return refuse(403, "this page is never shown in a frame")
        if route != "index" and not self.same_origin(request):
            return refuse(403, "a page of another site cannot open a session")
        if not self.token_given(request):
            return refuse(403, "a token is needed: open the address pgq printed at start")
        if route == "index":
            return await handler(request)
        if self.sessions >= self.max_sessions:
            return refuse(503, f"{self.max_sessions} sessions are open: close one first")
        self.sessions += 1
        self.sessions_started += 1
        task = asyncio.current_task()
        if task is not None:
            self._session_tasks.add(task)
        try:
            return await handler(request)
        finally:
            self.sessions -= 1
            if task is not None:
                self._session_tasks.discard(task)

    # routes ------------------------------------------------------------------------------
    async def on_shutdown(self, app: web.Application) -> None:
        """Stopping: every session is ended now (its dashboard told to quit, its page told
        the session ended), not after aiohttp's shutdown timeout."""
        tasks = set(self._session_tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_SECONDS)
        self.kill_sessions()

    def kill_sessions(self) -> None:
        """SIGKILL to every session's group still running (the last word of a stop)."""
        for session in list(self.live):
            session.kill_group(signal.SIGKILL)

    @staticmethod
    async def frame_headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(FRAME_HEADERS)

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard])
        app.on_shutdown.append(self.on_shutdown)
        app.on_response_prepare.append(self.frame_headers)
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes(
            [
                web.get("/", self.page, name="index"),
                web.get("/ws", self.session, name="websocket"),
                web.get("/ws/{token}", self.session, name="websocket_token"),
                web.static("/static", self.statics_path, name="static"),
            ]
        )
        return app

    async def page(self, request: web.Request) -> web.StreamResponse:
        """textual-serve's page, its websocket on this request's own host (never the bind
        address: 0.0.0.0 is not where a browser connects), with the token in its path."""
        scheme = "wss" if request.secure else "ws"
        path = "/ws" if self.token is None else f"/ws/{self.token}"
        try:
            font_size = int(request.query.get("fontsize", "16"))
        except ValueError:
            font_size = 16
        context = {
            "font_size": max(6, min(font_size, 48)),
            "app_websocket_url": f"{scheme}://{request.host}{path}",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        response = aiohttp_jinja2.render_template("app_index.html", request, context)
        response.headers["Cache-Control"] = "no-store"
        response.headers["Referrer-Policy"] = "no-referrer"  # the token is in the page's URL
        return response

    async def session(self, request: web.Request) -> web.StreamResponse:
        """A dashboard process for this websocket, until either ends (`web_session`)."""
        size = terminal_size(request.query)
        if size is None:
            return refuse(400, "width and height must be whole numbers of cells")
        websocket = web.WebSocketResponse(
            heartbeat=HEARTBEAT_SECONDS, max_msg_size=MAX_MESSAGE, timeout=2.0
        )
        if not websocket.can_prepare(request).ok:
            return refuse(400, "this address takes a websocket: open / in a browser")
        await websocket.prepare(request)
        session = Session(self.command, self.sessions_started, websocket, debug=self.debug)
        self.live.add(session)
        try:
            await session.run(*size)
        finally:
            self.live.discard(session)
        return websocket

    # running -----------------------------------------------------------------------------
    def serve(self, debug: bool = False, announce: Callable[[], None] | None = None) -> None:
        """Serve until SIGINT or SIGTERM; `announce` runs once the port is bound. OSError
        when it cannot be."""
        self.debug = debug
        self.initialize_logging()
        more_files()
        try:
            asyncio.run(self._serve(announce))
        finally:
            self.kill_sessions()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def _serve(self, announce: Callable[[], None] | None) -> None:
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(LoopErrors())
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._stop.set)
        runner = web.AppRunner(
            await self._make_app(),
            access_log_class=AccessLog,
            access_log=log,
            shutdown_timeout=SHUTDOWN_SECONDS,
            keepalive_timeout=IDLE_SECONDS,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, shutdown_timeout=SHUTDOWN_SECONDS)
            await site.start()
            if announce is not None:
                announce()
            await self._stop.wait()
        finally:
            await runner.cleanup()


def more_files() -> None:
    """The soft limit on open files raised to the hard one (each connection is one)."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = max(soft, 65536)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def refuse(status: int, text: str) -> web.Response:
    """No session: a short page saying why (never echoing what was sent)."""
    return web.Response(status=status, text=f"pgq: {text}\n", headers={"Cache-Control": "no-store"})


def page_url(listen: Listen, token: str | None, host: str | None = None) -> str:
    """The address to open, with the token when one is needed."""
    query = f"/?token={token}" if token else "/"
    return f"http://{listen.netloc(host)}{query}"


__all__ = [
    "DEFAULT_LISTEN",
    "TOKEN_ENV",
    "DashboardServer",
    "Listen",
    "WebError",
    "is_loopback",
    "page_url",
    "parse_listen",
    "web_token",
]
