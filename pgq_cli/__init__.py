"""pgq: the command line over pgq_core and pgq_tui."""

import atexit
import gc
import sys

# At exit, what is still alive is frozen first, so the interpreter's last collection does not
# walk it (the modules alone: ~30 ms of a short command's exit). Registered first, run last.
atexit.register(gc.freeze)

try:
    import pgq_core  # noqa: F401
except ImportError as exc:
    if exc.name != "pgq_core":
        raise
    sys.exit(f"pgq: error: {exc.msg}")
