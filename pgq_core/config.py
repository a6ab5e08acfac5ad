"""Where the database comes from, and how it is named on screen (never with its password)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import embedded
from .errors import PgqError

DEFAULT_SCHEMA = "pgq"
#: Seconds to wait for a connection when neither the DSN nor PGCONNECT_TIMEOUT says otherwise.
DEFAULT_CONNECT_TIMEOUT = 5
_SCHEMA = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,57}$")


@dataclass(frozen=True)
class Target:
    dsn: str
    schema: str
    embedded: bool

    @property
    def display(self) -> str:
        return describe(self.dsn) + ("" if not self.embedded else " (embedded)")


def check_schema(schema: str) -> str:
    """Schema names are identifiers; the NOTIFY channel `<schema>_jobs` must fit in 63 bytes."""
    if not _SCHEMA.match(schema):
        raise PgqError(
            f"invalid schema name {schema!r}: use letters, digits and _, at most 58 characters"
        )
    return schema


def resolve(dsn: str | None, schema: str | None) -> Target:
    """`dsn` (or PGQ_DSN) names a server; with neither, the embedded server under PGQ_HOME."""
    schema = check_schema(schema or os.environ.get("PGQ_SCHEMA") or DEFAULT_SCHEMA)
    dsn = dsn or os.environ.get("PGQ_DSN") or None
    if dsn:
        try:
            conninfo_to_dict(dsn)
        except Exception as exc:  # noqa: BLE001 - psycopg raises ProgrammingError
            raise PgqError(f"invalid DSN {mask(dsn)!r}: {first_line(str(exc))}") from None
        return Target(dsn, schema, embedded=False)
    return Target(embedded.start(), schema, embedded=True)


def mask(dsn: str) -> str:
    """The DSN with any password replaced by ***; unparseable input is hidden whole."""
    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn) if "@" in dsn else "***"
    if params.get("password"):
        params["password"] = "***"
    if dsn.startswith(("postgres://", "postgresql://")) and "password" not in params:
        return dsn
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def describe(dsn: str) -> str:
    """Short human name of a server: user@host:port/db, no password."""
    try:
        p = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001
        return "***"
    host = str(p.get("host") or "localhost")
    port = f":{p['port']}" if p.get("port") else ""
    user = f"{p['user']}@" if p.get("user") else ""
    return f"{user}{host}{port}/{p.get('dbname') or p.get('user') or ''}"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def scrub(text: str, dsn: str) -> str:
    """Remove a DSN's password from an error text before it is shown or logged."""
    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:  # noqa: BLE001
        password = None
    return text.replace(str(password), "***") if password else text


def connect_options(dsn: str) -> dict[str, Any]:
    """Keyword arguments for every `psycopg.connect`: nothing waits forever for a server.

    A `connect_timeout` in the DSN or PGCONNECT_TIMEOUT in the environment wins over the
    default; keepalives notice a server that vanished without closing the connection.
    """
    options: dict[str, Any] = {
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }
    try:
        given = conninfo_to_dict(dsn).get("connect_timeout")
    except Exception:  # noqa: BLE001 - an unparseable DSN fails at connect, with its own error
        given = None
    if not given and not os.environ.get("PGCONNECT_TIMEOUT"):
        options["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT
    return options
