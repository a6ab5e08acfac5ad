"""`pgq dashboard --web` from the outside, as a browser sees it: the server as a real process,
and what its page shows, read from the terminal xterm.js draws.

Shared by tests/test_web_dashboard.py, tests/test_docs.py and scripts/web_screenshot.py. No
Playwright import here: the `page` arguments are Playwright pages (sync API), the rest is the
JavaScript they run.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: Run before the page's own scripts: textual-serve keeps its xterm.js Terminal to itself
#: (`this.terminal = new Terminal(...)`), so the first object assigned to a `terminal`
#: property that looks like one is kept as window.__pgqTerminal. Its buffer is the text on
#: screen: the WebGL renderer leaves none in the page.
XTERM_HOOK = """
(() => {
  Object.defineProperty(Object.prototype, "terminal", {
    configurable: true,
    get() { return undefined; },
    set(value) {
      Object.defineProperty(this, "terminal",
        {value, writable: true, configurable: true, enumerable: true});
      if (value && value.buffer && value.buffer.active && typeof value.write === "function") {
        window.__pgqTerminal = value;
      }
    },
  });
})();
"""
#: The terminal's visible rows as text, or null before the terminal exists.
XTERM_TEXT = """() => {
  const t = window.__pgqTerminal;
  if (!t) { return null; }
  const b = t.buffer.active, rows = [];
  for (let y = 0; y < t.rows; y++) {
    const line = b.getLine(b.viewportY + y);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
}"""
#: Where the terminal takes keys (it must have the focus: a page opened headless has none).
XTERM_INPUT = ".xterm-helper-textarea"


def screen_text(page: Any) -> str:
    """What the dashboard in `page` shows now, one line per terminal row."""
    text = page.evaluate(XTERM_TEXT)
    return text if isinstance(text, str) else ""


def wait_for_text(
    page: Any, found: Callable[[str], bool], what: str, timeout: float = 30.0
) -> str:
    """The screen text once `found` holds on it; AssertionError with the last screen if not
    within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = screen_text(page)
        if found(text):
            return text
        page.wait_for_timeout(100)
    raise AssertionError(f"the page did not show {what} within {timeout:g}s:\n{text}")


def row_of(text: str, queue_name: str) -> list[str] | None:
    """The cells of `queue_name`'s line in the Queues view (split on blanks, box edges
    dropped), or None."""
    for line in text.splitlines():
        cells = line.replace("│", " ").split()
        if cells and cells[0] == queue_name:
            return cells
    return None


def shown_counts(text: str, queue_name: str) -> dict[str, int] | None:
    """ready, scheduled, running, expiring, dead, done of `queue_name` as the page shows
    them, or None while its row is not there."""
    cells = row_of(text, queue_name)
    if cells is None or len(cells) < 7:
        return None
    names = ("ready", "scheduled", "running", "expiring", "dead", "done")
    try:
        numbers = [int(cell.replace(",", "")) for cell in cells[1:7]]
    except ValueError:
        return None
    return dict(zip(names, numbers, strict=True))


class WebServer:
    """`python -m pgq_cli ARGS` (a `pgq ... dashboard --web ...`) as a real process in a
    session of its own, until `stop()`; `url` is the address it printed."""

    def __init__(
        self, args: Sequence[str], env: Mapping[str, str], cwd: Path | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pgq_cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = ""

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def wait_started(self, timeout: float = 60.0) -> str:
        """The address it printed (`pgq: open URL`); AssertionError with its output if it
        ended or printed none within `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if line.startswith("pgq: open "):
                self.url = line.removeprefix("pgq: open ")
                return self.url
        raise AssertionError("the server printed no address:\n" + "\n".join(self.lines))

    def output(self) -> str:
        """Everything it printed so far."""
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return "\n".join(self.lines)

    def descendants(self) -> list[int]:
        """The processes it started (the sessions), from /proc."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
        found: list[int] = []
        todo = [self.process.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, as a service manager stops it; its exit code (SIGKILL after `timeout`)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait(10)
