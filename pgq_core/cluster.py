"""What a client sees of a replicated cluster: the hosts a DSN names, and a failover's gap in
plain words.

Invariants:
- A DSN naming several hosts reaches the writable one: pgq's connections ask libpq for
  `target_session_attrs=read-write` unless the DSN (or PGTARGETSESSIONATTRS) says otherwise,
  so a worker or a producer never settles on a standby and follows a promotion by itself.
- While no host takes writes, every message says so in one line ("no writable primary among
  2 hosts ...: waiting for a failover"), never a libpq fragment; no password appears in it.
- A reader's connection (`--read-dsn`) never asks for the writable host: of several hosts it
  prefers a standby (`reader_options`), and what it read says where from and how far behind
  (`read_from`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from .models import ServerRole

#: SQLSTATE read_only_sql_transaction: a statement that writes, refused by a standby or a
#: read-only session.
READ_ONLY_SQLSTATE = "25006"
#: What libpq and the server say of a host that is up but cannot take writes.
_STANDBY = (
    "session is read-only",
    "server is in hot standby mode",
    "not accepting writes",
    "is in recovery",
    "read-only transaction",
)
#: One failure line of psycopg's multi-host report: `- host: 'h', port: 'p', ...: <reason>`.
_ATTEMPT = re.compile(r"^- host: '([^']*)', port: '([^']*)'.*?: (?:connection failed: )?(.*)$")


def hosts(dsn: str) -> list[str]:
    """`host:port` of each host the DSN names, in order (one entry for a single host)."""
    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - an unparseable DSN names no host we can show
        return []
    names = str(params.get("host") or params.get("hostaddr") or "localhost").split(",")
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(names)
    return [f"{h}:{p}" if p else h for h, p in zip(names, ports, strict=False)]


def _asking(dsn: str, attrs: str) -> dict[str, Any]:
    """`target_session_attrs=attrs` for a DSN naming several hosts, unless the DSN or
    PGTARGETSESSIONATTRS already says which host to take."""
    if len(hosts(dsn)) < 2 or os.environ.get("PGTARGETSESSIONATTRS"):
        return {}
    try:
        if conninfo_to_dict(dsn).get("target_session_attrs"):
            return {}
    except Exception:  # noqa: BLE001 - unparseable: connect reports it
        return {}
    return {"target_session_attrs": attrs}


def writer_options(dsn: str) -> dict[str, Any]:
    """Keyword arguments that send a connection of a several-host DSN to the writable host."""
    return _asking(dsn, "read-write")


def reader_options(dsn: str) -> dict[str, Any]:
    """Keyword arguments for a reader's connection: of several hosts, a standby if one is up
    (`prefer-standby`), unless the DSN or PGTARGETSESSIONATTRS says otherwise."""
    return _asking(dsn, "prefer-standby")


def lag(seconds: float | None) -> str:
    """How far a standby is behind, in words: "0.4 s behind", "3 min behind"."""
    if seconds is None:
        return "lag unknown"
    if seconds < 60:
        return f"{seconds:.1f} s behind"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min behind"
    return f"{seconds / 3600:.1f} h behind"


def read_from(role: ServerRole) -> str:
    """The line beside figures read through `--read-dsn`: "read from standby 127.0.0.1:5433,
    0.4 s behind the primary", or that the server read is not a standby."""
    if not role.standby:
        return f"read from {role.address} (not a standby: the primary's own figures)"
    return f"read from standby {role.address}, {lag(role.lag_seconds)} the primary"


def standby_refusal(role: ServerRole) -> str:
    """Why figures of a standby reached without `--read-dsn` are not shown as the primary's."""
    return (
        f"this server is a standby (read-only, in recovery) at {role.address}, "
        f"{lag(role.lag_seconds)} its primary: its figures are not the primary's; name the "
        "primary with --dsn (or every host with target_session_attrs=read-write), or read this "
        "standby on purpose with --read-dsn"
    )


def standby_worker(role: ServerRole) -> str:
    """Why a worker that must end (`--burst`) stops at once on a standby rather than wait."""
    return (
        f"the server ({role.address}) is a read-only standby (in recovery): a --burst worker "
        "can claim nothing there; name the primary, or every host of the cluster with "
        "target_session_attrs=read-write"
    )


def _said(reason: str) -> str:
    low = reason.lower()
    if any(s in low for s in _STANDBY):
        return "read-only standby"
    if "refused" in low:
        return "refused"
    if "timeout" in low:
        return "no answer"
    return reason.strip().rstrip(".")


def no_primary(said: BaseException | str, dsn: str | None) -> str | None:
    """The plain-words reason when `said` (a connect or statement error, or its text) means the
    servers are up but none takes writes, as during a failover; None when it means something
    else. A statement's refusal is told by its SQLSTATE (25006), in any lc_messages; only
    libpq's own connect-time words are matched as text."""
    if getattr(said, "sqlstate", None) == READ_ONLY_SQLSTATE:
        said = "read-only transaction"
    text = said if isinstance(said, str) else str(said)
    low = text.lower()
    if not any(s in low for s in _STANDBY):
        return None
    named = hosts(dsn) if dsn else []
    attempts = [m.groups() for m in map(_ATTEMPT.match, text.splitlines()) if m]
    if attempts:
        states = "; ".join(f"{h}:{p} {_said(r)}" for h, p, r in attempts)
        return (
            f"no writable primary among {len(attempts)} hosts ({states}): "
            "waiting for a failover"
        )
    if len(named) > 1:
        return f"no writable primary among {len(named)} hosts: waiting for a failover"
    where = f" ({named[0]})" if named else ""
    what = "takes no writes (a standby, or read-only sessions)"
    if "read-only transaction" not in low:
        what = "is a read-only standby"
    return (
        f"the server{where} {what}: name the primary, or every host of the cluster with "
        "target_session_attrs=read-write"
    )
