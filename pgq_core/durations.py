"""Human durations: `30s`, `5m`, `1h30m`, `7d`, `250ms`, or a bare number of seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

#: The longest duration: 100 years. A span PostgreSQL subtracts from now() must stay within its
#: timestamps (4713 BC on): `prune --older-than 999999999d` reached the server as "timestamp out
#: of range".
DURATION_MAX = timedelta(days=36525)
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, longest: timedelta | None = DURATION_MAX) -> timedelta:
    """A duration as the CLI reads one (`30s`, `5m`, `1h30m`, `7d`; a bare number is seconds),
    at most `longest` (None: no bound); ValueError with a message fit for an operator."""
    cleaned = text.strip().lower().replace(" ", "")
    try:
        seconds = float(cleaned)
    except ValueError:
        parts = _PART.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 1h30m, 7d)") from None
        seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if math.isnan(seconds):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 5m, 1h30m, 7d)")
    if seconds < 0:
        raise ValueError(f"duration must not be negative: {text!r}")
    if longest is not None and seconds > longest.total_seconds():
        raise ValueError(f"duration too long: {text!r} (at most {_span(longest)})")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration too long: {text!r}") from None


def _span(limit: timedelta) -> str:
    return "100 years" if limit == DURATION_MAX else f"{limit.total_seconds():g}s"


def duration_label(span: timedelta) -> str:
    """The short form `parse_duration` reads back: 5m, 1h, 1h30m, 90s, 1d; 250ms under a
    second."""
    total = span.total_seconds()
    if total < 1:
        return f"{round(total * 1000)}ms"
    seconds = round(total)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)


def short_duration(seconds: float) -> str:
    """A duration in its largest sensible unit, as the CLI and the dashboard print it alike:
    850ms, 4.2s, 37s, 3m05s, 2h14m, 3d04h."""
    s = abs(seconds)
    if s < 1:
        return f"{int(s * 1000)}ms"
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{int(s)}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"
