"""`pgq worker --reload`: the worker in a child process, restarted when a Python file changes.

Invariants:
- The child is this very command without the reload options (`python -m pgq_cli ...`), in a
  session of its own: a terminal's Ctrl-C reaches only this supervisor, which passes each stop
  signal on as one SIGTERM, so the child stops as any worker does (a first signal lets running
  jobs finish within --grace and hands the rest back, the attempt not counted; a second hands
  them back at once).
- On a change the child gets SIGTERM and is waited for before the next starts: two workers of
  this command never run at once. One that does not exit in time gets a second SIGTERM, then
  SIGKILL (its jobs then wait for their leases).
- A child that exits by itself (an import error in the new code) is not restarted until the
  next change.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger("pgq.reload")

#: What a missing watchfiles says (one line, naming the pip command).
MISSING = "pgq worker --reload needs the watchfiles package: pip install 'pgq-fence[reload]'"
#: Options of `pgq worker` that only the supervisor reads.
FLAGS = ("--reload",)
OPTIONS = ("--reload-dir",)
#: Seconds past --grace a stopping child is given before the second SIGTERM, then SIGKILL.
EXTRA_WAIT = 10.0


def child_arguments(argv: Sequence[str]) -> list[str]:
    """`argv` (the command's arguments after the program) without the reload options."""
    kept: list[str] = []
    skip = False
    for at, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--":
            return kept + list(argv[at:])
        if arg in FLAGS:
            continue
        if arg in OPTIONS:
            skip = True
            continue
        if any(arg.startswith(f"{o}=") for o in OPTIONS):
            continue
        kept.append(arg)
    return kept


class Supervisor:
    """Runs the worker command `command` and restarts it when a .py file under `paths`
    changes; `run()` returns the last child's exit code once stopped by a signal."""

    def __init__(self, command: list[str], paths: Sequence[Path], grace: float) -> None:
        self.command = command
        self.paths = list(paths)
        self.grace = grace
        self.stop = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self._signals = 0

    def run(self) -> int:
        import watchfiles

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.child = self._start()
        exited_logged = False
        for changes in watchfiles.watch(
            *self.paths,
            watch_filter=watchfiles.PythonFilter(),
            stop_event=self.stop,
            yield_on_timeout=True,
            rust_timeout=200,
            debounce=300,
            raise_interrupt=False,
        ):
            if self.stop.is_set():
                break
            if not changes:
                code = self.child.poll() if self.child is not None else None
                if code is not None and not exited_logged:
                    log.warning("worker exited with code %d; waiting for a change to restart", code)
                    exited_logged = True
                continue
            names = sorted({os.path.relpath(path) for _, path in changes})
            log.info("changed: %s; restarting the worker", ", ".join(names[:5]))
            self._stop_child()
            self.child = self._start()
            exited_logged = False
        return self._stop_child()

    def _start(self) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(self.command, start_new_session=True)
        watched = ", ".join(str(p) for p in self.paths)
        log.info(
            "worker started (pid %d); restarted when a .py file changes under %s",
            child.pid,
            watched,
        )
        return child

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        self.stop.set()
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def _stop_child(self) -> int:
        """SIGTERM the child (unless a signal of ours already went on) and wait for it."""
        child = self.child
        if child is None:
            return 0
        if child.poll() is None and not self._signals:
            child.send_signal(signal.SIGTERM)
        for again in (signal.SIGTERM, signal.SIGKILL):
            try:
                return exit_code(child.wait(timeout=self.grace + EXTRA_WAIT))
            except subprocess.TimeoutExpired:
                log.warning(
                    "worker (pid %d) did not stop in time: sending %s", child.pid, again.name
                )
                child.send_signal(again)
        return exit_code(child.wait())


def exit_code(returncode: int) -> int:
    """The child's exit status as ours: a worker ended by SIGTERM stopped as asked (0); one
    killed by another signal failed (1)."""
    if returncode >= 0:
        return returncode
    return 0 if returncode == -signal.SIGTERM else 1


def run(argv: Sequence[str], paths: Sequence[Path], grace: float) -> int:
    """Supervise `python -m pgq_cli ARGV` (the reload options dropped) until a signal."""
    command = [sys.executable, "-m", "pgq_cli", *child_arguments(argv)]
    return Supervisor(command, paths, grace).run()


def available() -> Any:
    """The watchfiles module, or None when it is not installed."""
    try:
        import watchfiles
    except ImportError:
        return None
    return watchfiles
