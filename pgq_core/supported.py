"""The platforms pgq runs on: Linux and macOS. Imported first by `pgq_core`, so that anywhere
else the import fails with one line instead of a missing `fcntl` or `pwd` module (the embedded
server's file locks and account lookups are POSIX)."""

from __future__ import annotations

import sys

PLATFORMS = {"linux": "Linux", "darwin": "macOS"}


def refusal(platform: str) -> str | None:
    """Why pgq cannot run on `platform` (a `sys.platform` value), or None when it can."""
    if platform.startswith(tuple(PLATFORMS)):
        return None
    return (
        f"pgq runs on Linux and macOS only, not on {platform} "
        "(on Windows, run it under WSL 2)"
    )


_refused = refusal(sys.platform)
if _refused:
    raise ImportError(_refused, name="pgq_core")
