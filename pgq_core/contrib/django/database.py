"""A Django `DATABASES` entry for the queue's database, so a project's own tables and pgq's
schema share one database (and one transaction). Imports no Django: settings modules use it."""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict

from ...config import resolve

#: libpq parameters a Django DATABASES entry holds as NAME, USER, PASSWORD, HOST and PORT
_NAMED = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}


def database_settings(dsn: str | None = None) -> dict[str, Any]:
    """`DATABASES["default"]` for `dsn`, else PGQ_DSN, else pgq's embedded PostgreSQL (started
    if needed: nothing to configure). Every other libpq parameter of the DSN (sslmode, options,
    ...) goes into OPTIONS, which Django hands to psycopg as they are."""
    params = conninfo_to_dict(resolve(dsn, None).dsn)
    entry: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql"}
    for key, name in _NAMED.items():
        entry[name] = str(params.pop(key, None) or "")
    entry["OPTIONS"] = {k: v for k, v in params.items() if v is not None}
    return entry
