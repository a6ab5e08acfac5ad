"""Assemble the dashboard for a real database: PgSource plus in-app workers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from .app import DashboardApp
from .messages import WorkerFailed
from .pool import WorkerPool
from .source import PgSource


def make_app(
    dsn: str,
    schema: str,
    database: str,
    *,
    handler: Callable[..., Any] | None = None,
    refresh: float = 2.0,
    read_only: bool = False,
    concurrency: int = 4,
    lease: timedelta = timedelta(seconds=30),
    grace: float = 5.0,
    start_workers: Sequence[str] = (),
) -> DashboardApp:
    """`database` is the name shown in the header: never the DSN itself (it may hold a password)."""
    pool = WorkerPool(
        dsn,
        schema,
        None if read_only else handler,
        concurrency=concurrency,
        lease=lease,
        grace=grace,
    )
    app = DashboardApp(
        PgSource(dsn, schema),
        pool,
        database=database,
        schema=schema,
        refresh=refresh,
        read_only=read_only,
        start_workers=start_workers,
    )

    def report(text: str) -> None:  # on the pool's thread: post_message is thread-safe
        app.post_message(WorkerFailed(text))

    pool.on_error = report
    return app
