"""One browser session of `pgq dashboard --web`: a dashboard process driven over its pipes
(Textual's web driver protocol: packets of a type byte, a 4-byte length and a payload), its
screen sent to the page's websocket, the page's keys, resizes and pings sent to it.

Invariants:
- The process runs in a process group of its own, with its data segment capped
  (`MEMORY_LIMIT`, RLIMIT_DATA), and on Linux it is killed by the kernel when the server dies,
  even by SIGKILL (PR_SET_PDEATHSIG, its parent checked after it is set).
- Ending, for whatever reason (the tab closed, the connection timed out, the server stopping):
  the dashboard is asked to quit; after `QUIT_SECONDS` its group gets SIGTERM, after
  `TERM_SECONDS` more SIGKILL. The session (and its slot) ends only once the process is
  reaped, so a closed tab's process is gone within `QUIT_SECONDS + TERM_SECONDS`.
- Input is bounded: a websocket message over `MAX_MESSAGE` bytes ends the session (1009); the
  rest is charged to a token bucket (`INPUT_BURST` bytes, refilled at `INPUT_RATE` per second),
  and a message that does not fit is dropped whole (said once per session). Nothing the page
  sends waits on the process: input goes through a queue of `INPUT_QUEUE` packets, so a close
  is seen however busy the dashboard is.
- The terminal is at most `MAX_COLUMNS` x `MAX_ROWS`, at start and on every resize.
- A packet from the process over `MAX_PACKET` bytes ends the session; the process's stderr is
  kept to its last `STDERR_KEPT` bytes, and only its last line is logged, once, if it failed.
- Never forwarded to the page: requests to open a URL or deliver a file (the dashboard makes
  none; a page must not be steered by what a session prints).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import resource
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping
from importlib.metadata import version
from typing import Any

from aiohttp import WSMsgType, web

#: cells, at start and on resize (a bigger request is cut to these)
MAX_COLUMNS = 500
MAX_ROWS = 200
#: a websocket message larger than this ends the session
MAX_MESSAGE = 64 * 1024
#: input the page may send: bytes at once, and bytes per second after that
INPUT_BURST = 8 * 1024
INPUT_RATE = 2 * 1024
#: what a message other than keys costs in the bucket (resize, ping, focus, blur)
CONTROL_COST = 64
#: packets waiting for the process's stdin
INPUT_QUEUE = 64
#: the largest packet the process may send the page
MAX_PACKET = 16 * 1024 * 1024
#: the dashboard process's data segment (its normal use is ~50 MiB)
MEMORY_LIMIT = 512 * 1024 * 1024
#: after asking the dashboard to quit, seconds until SIGTERM, then until SIGKILL
QUIT_SECONDS = 2.0
TERM_SECONDS = 1.0
#: websocket pings: a page that answers none within half of this is gone
HEARTBEAT_SECONDS = 10.0
#: of the process's stderr, the last bytes kept
STDERR_KEPT = 4096

log = logging.getLogger("pgq.web")

_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    """libc's prctl on Linux (looked up in the server, never in a forked child)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return function


_PRCTL = _prctl()


def child_setup(parent: int, memory: int) -> Callable[[], None]:
    """What runs in a session's process between fork and exec: die with the server (Linux),
    cap the data segment. No import, no lock, no logging here (the server has threads)."""

    def setup() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the server died before the line above
                os._exit(1)
        with contextlib.suppress(ValueError, OSError):
            _, hard = resource.getrlimit(resource.RLIMIT_DATA)
            limit = memory if hard == resource.RLIM_INFINITY else min(memory, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))

    return setup


def terminal_size(query: Mapping[str, str]) -> tuple[int, int] | None:
    """(columns, rows) a session starts with: 80 x 24 when not given, cut to the maximum;
    None when one is given but is not a whole number of at least 1."""
    size = []
    for name, default, most in (("width", 80, MAX_COLUMNS), ("height", 24, MAX_ROWS)):
        text = query.get(name)
        if text is None:
            size.append(default)
            continue
        if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) < 1:
            return None
        size.append(min(int(text), most))
    return size[0], size[1]


def _cells(value: Any, most: int) -> int | None:
    """A resize's width or height, cut to the maximum; None when it is not a whole number of
    at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return min(value, most)


def packet(kind: bytes, payload: bytes) -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


def _plain(text: str, limit: int = 200) -> str:
    """One line, no control characters (a session's stderr is data)."""
    return "".join(c if c.isprintable() else "?" for c in text)[:limit]


class TokenBucket:
    """`burst` units at once, `rate` more per second; take() says whether `cost` fit."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.level = burst
        self.at = time.monotonic()

    def take(self, cost: float) -> bool:
        now = time.monotonic()
        self.level = min(self.burst, self.level + (now - self.at) * self.rate)
        self.at = now
        if cost > self.level:
            return False
        self.level -= cost
        return True


class Session:
    """One dashboard process and the page it draws in (see the module)."""

    def __init__(
        self, command: str, number: int, websocket: web.WebSocketResponse, *, debug: bool = False
    ) -> None:
        self.argv = shlex.split(command)
        self.number = number
        self.websocket = websocket
        self.debug = debug
        self.process: asyncio.subprocess.Process | None = None
        self.bucket = TokenBucket(INPUT_RATE, INPUT_BURST)
        self.input: asyncio.Queue[bytes] = asyncio.Queue(INPUT_QUEUE)
        self.stderr = bytearray()
        self.said: set[str] = set()
        #: how it ended: "quit", "terminated" or "killed" (by this session), or None
        self.ended_by: str | None = None
        #: messages dropped by the input limit (tests and the final log line read it)
        self.dropped = 0

    # the process --------------------------------------------------------------------------
    def environment(self, width: int, height: int) -> dict[str, str]:
        environment = dict(os.environ)
        environment.update(
            TEXTUAL_DRIVER="textual.drivers.web_driver:WebDriver",
            TEXTUAL_FPS="60",
            TEXTUAL_COLOR_SYSTEM="truecolor",
            TERM_PROGRAM="textual",
            TERM_PROGRAM_VERSION=version("textual-serve"),
            COLUMNS=str(width),
            ROWS=str(height),
        )
        return environment

    async def start(self, width: int, height: int) -> None:
        """OSError when the command cannot be started."""
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.environment(width, height),
            start_new_session=True,
            preexec_fn=child_setup(os.getpid(), MEMORY_LIMIT),
        )

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def kill_group(self, sig: signal.Signals) -> None:
        """`sig` to the session's process group (its dashboard and anything it started)."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    # running ------------------------------------------------------------------------------
    async def run(self, width: int, height: int) -> None:
        """Until the page or the dashboard ends it, or the server stops (a cancel); the
        process is reaped before this returns."""
        try:
            await self.start(width, height)
        except OSError as exc:
            log.warning("session %d: cannot start the dashboard: %s", self.number, exc.strerror)
            await self.close_page()
            return
        workers = [
            asyncio.create_task(self.from_page()),
            asyncio.create_task(self.to_page()),
            asyncio.create_task(self.to_process()),
            asyncio.create_task(self.keep_stderr()),
        ]
        try:
            await asyncio.wait(workers[:2], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the server is stopping: end the session as any other
        finally:
            await self.end(workers)

    async def end(self, workers: list[asyncio.Task[None]]) -> None:
        """Ask the dashboard to quit, then signal its group; reap it; close the page."""
        process = self.process
        assert process is not None
        reaped = asyncio.ensure_future(process.wait())
        if process.returncode is None:
            self.ended_by = "quit"
            self.write_now(packet(b"M", json.dumps({"type": "quit"}).encode()))
            for sig, seconds in ((signal.SIGTERM, QUIT_SECONDS), (signal.SIGKILL, TERM_SECONDS)):
                done, _ = await asyncio.wait({reaped}, timeout=seconds)
                if done:
                    break
                self.ended_by = "terminated" if sig == signal.SIGTERM else "killed"
                self.kill_group(sig)
        await asyncio.wait({reaped})
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await self.close_page()
        self.say_end(process.returncode)

    def write_now(self, data: bytes) -> None:
        """Onto the process's stdin without waiting (it may be closed already)."""
        stdin = None if self.process is None else self.process.stdin
        if stdin is not None:
            with contextlib.suppress(RuntimeError, OSError):
                stdin.write(data)

    async def close_page(self) -> None:
        if not self.websocket.closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.websocket.close(), 2)

    def say_end(self, status: int | None) -> None:
        text = self.stderr.decode("utf-8", "replace").strip()
        last = text.splitlines()[-1] if text else ""
        if self.ended_by in ("terminated", "killed"):
            log.warning(
                "session %d: the dashboard did not quit within %gs; %s",
                self.number, QUIT_SECONDS, self.ended_by,
            )
        elif status not in (0, None) and self.ended_by is None:
            detail = f": {_plain(last)}" if last else ""
            log.warning("session %d: the dashboard ended with status %s%s",
                        self.number, status, detail)
        if self.dropped:
            log.info("session %d: %d messages dropped by the input limit", self.number,
                     self.dropped)

    def say_once(self, key: str, text: str, *args: object) -> None:
        if key not in self.said:
            self.said.add(key)
            log.warning("session %d: " + text, self.number, *args)

    # page -> process ----------------------------------------------------------------------
    async def from_page(self) -> None:
        """The page's messages, each charged to the bucket, queued for the process; until the
        page closes (or sends a message over MAX_MESSAGE, which closes it)."""
        async for message in self.websocket:
            if message.type != WSMsgType.TEXT:
                continue
            data = self.envelope(message.data)
            if data is None:
                continue
            kind, payload, cost = data
            if not self.bucket.take(cost):
                self.dropped += 1
                self.say_once("rate", "input over %d bytes/s dropped", INPUT_RATE)
                continue
            if kind == "ping":
                await self.websocket.send_json(["pong", payload])
                continue
            try:
                self.input.put_nowait(packet(b"D" if kind == "stdin" else b"M", payload))
            except asyncio.QueueFull:
                self.dropped += 1
                self.say_once("busy", "the dashboard is not reading its input; input dropped")

    def envelope(self, text: str) -> tuple[str, Any, int] | None:
        """(kind, payload, cost) of one page message, or None for one that means nothing
        (said once per session)."""
        try:
            envelope = json.loads(text)
            kind = envelope[0]
            if kind == "stdin":
                data = str(envelope[1]).encode("utf-8", "replace")
                return kind, data, len(data)
            if kind == "resize":
                width = _cells(envelope[1]["width"], MAX_COLUMNS)
                height = _cells(envelope[1]["height"], MAX_ROWS)
                if width is None or height is None:
                    raise ValueError("bad size")
                meta = {"type": "resize", "width": width, "height": height}
                return kind, json.dumps(meta).encode(), CONTROL_COST
            if kind == "ping":
                return kind, str(envelope[1])[:64], CONTROL_COST
            if kind in ("focus", "blur"):
                return kind, json.dumps({"type": kind}).encode(), CONTROL_COST
            raise ValueError("unknown message")
        except (ValueError, TypeError, KeyError, IndexError, RecursionError):
            self.say_once("bad", "a message from the page that means nothing was ignored")
            return None

    async def to_process(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        stdin = self.process.stdin
        while True:
            data = await self.input.get()
            try:
                stdin.write(data)
                await stdin.drain()
            except (RuntimeError, OSError):
                return

    # process -> page ----------------------------------------------------------------------
    async def to_page(self) -> None:
        """The dashboard's screen to the page; returns when the process closes its output,
        says it exits, or sends what it must not."""
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        try:
            for _ in range(10):  # the web driver's prelude, then packets
                line = await stdout.readline()
                if not line or line == b"__GANGLION__\n":
                    break
            while True:
                kind = await stdout.readexactly(1)
                size = int.from_bytes(await stdout.readexactly(4), "big")
                if size > MAX_PACKET:
                    self.say_once("packet", "the dashboard sent a %d-byte packet; ended", size)
                    return
                payload = await stdout.readexactly(size)
                if kind == b"D":
                    await self.websocket.send_bytes(payload)
                elif kind == b"M" and self.exits(payload):
                    return
        except (asyncio.IncompleteReadError, ValueError, ConnectionResetError):
            return

    @staticmethod
    def exits(payload: bytes) -> bool:
        """Whether a meta packet says the dashboard is exiting (the rest are not forwarded)."""
        try:
            meta = json.loads(payload)
        except ValueError:
            return False
        return isinstance(meta, dict) and meta.get("type") == "exit"

    async def keep_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        while data := await self.process.stderr.read(4096):
            self.stderr += data
            del self.stderr[:-STDERR_KEPT]


__all__ = ["MAX_COLUMNS", "MAX_ROWS", "Session", "TokenBucket", "terminal_size"]
