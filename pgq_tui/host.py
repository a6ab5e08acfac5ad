"""What the screens may read and ask of the app, as a Protocol: screens never import the app.

Imports no Textual."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from .latency import LatencyTrend
from .pool import Pool
from .source import Source
from .state import HeaderState
from .throughput import Throughput

Severity = Literal["information", "warning", "error"]


class Host(Protocol):
    source: Source
    pool: Pool
    throughput: Throughput
    latency: LatencyTrend
    read_only: bool
    blink: bool
    refresh_seconds: float
    paused: bool
    clock: Callable[[], float]

    def header_state(self) -> HeaderState: ...

    def lease_left(self, job_id: int) -> tuple[float, float | None] | None:
        """(seconds left now, lease length) of a running job from the latest leases read
        (re-read every second), or None when the job is not among them."""
        ...

    def move_queues_window(self, offset: int) -> None:
        """Show the queues from the `offset`th by name (a poll is asked for)."""
        ...

    def alert(self, message: str, *, title: str = "", severity: Severity = "information") -> None:
        """Say something to the operator (database text allowed: shown printable)."""
        ...
