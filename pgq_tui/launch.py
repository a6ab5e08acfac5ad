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
    read_dsn: str | None = None,
) -> DashboardApp:
    """`database` is the name shown in the header: never the DSN itself (it may hold a password).
    With `read_dsn` (a standby) the polls read there; actions and LISTEN stay on `dsn`."""
    pool = WorkerPool(
        dsn,
        schema,
        None if read_only else handler,
        concurrency=concurrency,
        lease=lease,
        grace=grace,
    )
    app = DashboardApp(
        PgSource(dsn, schema, read_dsn=read_dsn),
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
