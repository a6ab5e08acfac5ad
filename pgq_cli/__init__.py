"""pgq: the command line over pgq_core and pgq_tui."""

import sys

try:
    import pgq_core  # noqa: F401
except ImportError as exc:
    if exc.name != "pgq_core":
        raise
    sys.exit(f"pgq: error: {exc.msg}")
