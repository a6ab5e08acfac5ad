"""The dashboard on the fixed sample state, for layout snapshots and screenshots."""

from __future__ import annotations

from .app import DashboardApp
from .pool import StaticPool
from .sample import WORKERS, SampleSource, clock, warm
from .throughput import Throughput


def sample_app(read_only: bool = False) -> DashboardApp:
    """Frozen clock, no LISTEN, no cursor blink; every number is a constant of `sample`."""
    return DashboardApp(
        SampleSource(),
        StaticPool(WORKERS),
        database="ops@db.example.com:5432/shop",
        schema="pgq",
        refresh=3600,
        read_only=read_only,
        listen=False,
        clock=clock,
        blink=False,
        throughput=warm(Throughput()),
    )
