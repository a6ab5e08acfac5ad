"""The process's standard descriptors 0-2 stay open while a worker runs.

Invariant: a worker never opens a connection while any of fds 0-2 is closed. A handler may
close them (a daemonising library does); the next socket the process opened would then take
the lowest free number, and the worker's log lines, written to fd 2, would go to the database
server. So the descriptors are remembered when the worker starts and put back (or /dev/null,
if one was closed from the start) once handlers ended (runner.py) and before every connect.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading

STANDARD_FDS = (0, 1, 2)
#: Copies of fds 0-2 (at 3 or above, close-on-exec) taken by `hold_standard_fds`.
_held: dict[int, int] = {}
_lock = threading.Lock()


def _copy_above_standard(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def hold_standard_fds() -> None:
    """Remember what fds 0-2 are now (a closed one as /dev/null); idempotent per process."""
    with _lock:
        for fd in STANDARD_FDS:
            if fd in _held:
                continue
            try:
                _held[fd] = _copy_above_standard(fd)
            except OSError:
                null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
                _held[fd] = _copy_above_standard(null)
                os.close(null)
        restore_standard_fds()


def restore_standard_fds() -> list[int]:
    """Reopen each of fds 0-2 that is closed on what `hold_standard_fds` remembered (an fd
    pointed elsewhere on purpose is left alone). Returns the fds put back."""
    restored = []
    for fd, copy in list(_held.items()):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.dup2(copy, fd, inheritable=True)
                restored.append(fd)
    return restored
