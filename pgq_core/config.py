"""Where the database comes from, and how it is named on screen (never with its password)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, unquote

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .cluster import hosts, reader_options, writer_options
from .defaults import (
    CONCURRENCY_MAX,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SCHEMA,
    LEASE_MAX,
    LEASE_MIN,
    NOTIFY_PAYLOAD_MAX_BYTES,
    QUEUE_NAME_MAX_BYTES,
)
from .errors import PgqError
from .text import first_invisible

#: Passwords shorter than this are not searched for inside a message (that would garble
#: words); a message holding one as a whole token is replaced by HIDDEN.
SHORT_PASSWORD = 4
HIDDEN = "(details hidden: the message may hold the database password)"
_SCHEMA = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,57}$")
_URL = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
#: What a URL's user info may hold raw (RFC 3986: unreserved, sub-delims, ':', %-escapes),
#: plus non-ASCII, which libpq passes through.
_USERINFO_OK = re.compile(r"^(?:[A-Za-z0-9\-._~!$&'()*+,;=:\u0080-\U0010ffff]|%[0-9A-Fa-f]{2})*$")
_KV_PASSWORD = re.compile(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")


@dataclass(frozen=True)
class Target:
    dsn: str
    schema: str
    embedded: bool

    @property
    def display(self) -> str:
        return describe(self.dsn) + ("" if not self.embedded else " (embedded)")


def check_schema(schema: str) -> str:
    """Schema names are identifiers; the NOTIFY channel `<schema>_jobs` must fit in 63 bytes.
    PostgreSQL's own schemas are refused: it reserves `pg_*`, and `information_schema` holds
    the system views (pg_dump leaves it out, so a queue there would miss every backup)."""
    if not _SCHEMA.match(schema):
        raise PgqError(
            f"invalid schema name {schema!r}: use letters, digits and _, at most 58 characters"
        )
    if schema.startswith("pg_") or schema == "information_schema":
        raise PgqError(
            f"invalid schema name {schema!r}: reserved for PostgreSQL's own schemas "
            "(pg_* and information_schema)"
        )
    return schema


def _userinfo(dsn: str) -> str | None:
    """The raw `user:password` part of a URL DSN (up to its last '@'), or None."""
    if not _URL.match(dsn):
        return None
    rest = _URL.sub("", dsn, count=1).split("?", 1)[0]
    return rest[: rest.rindex("@")] if "@" in rest else None


def _parse_problem(message: str) -> str:
    """What is wrong with a DSN psycopg refused, in words that quote none of it."""
    if "percent-encoded" in message:
        return "a %-escape is invalid (write % itself as %25)"
    if 'missing "="' in message or "unterminated quoted string" in message:
        return "a key=value pair is malformed (quote values holding spaces: password='a b')"
    if "invalid connection option" in message:
        return "it names an unknown connection option"
    if "invalid URI" in message or "URI" in message:
        return "the URL is malformed"
    return "it could not be parsed"


def check_dsn(dsn: str) -> None:
    """PgqError when `dsn` cannot name a server as written. The message never quotes the DSN:
    psycopg's own parse errors do, and a typo there is often in the password."""
    userinfo = _userinfo(dsn)
    if userinfo is not None and not _USERINFO_OK.match(userinfo):
        raise PgqError(
            "invalid DSN: its user name or password holds a character a URL must carry "
            "percent-encoded ('@' as %40, '/' as %2F, '%' as %25, space as %20, "
            "'?' as %3F, '#' as %23), or a bad %-escape"
        )
    try:
        conninfo_to_dict(dsn)
    except Exception as exc:  # noqa: BLE001 - psycopg raises ProgrammingError
        raise PgqError(f"invalid DSN: {_parse_problem(str(exc))}") from None


def schema_name(schema: str | None = None) -> str:
    """`schema`, else PGQ_SCHEMA, else `pgq`; checked by `check_schema`."""
    return check_schema(schema or os.environ.get("PGQ_SCHEMA") or DEFAULT_SCHEMA)


def resolve(dsn: str | None, schema: str | None) -> Target:
    """As `find_target`, without migrating: `dsn` (or PGQ_DSN) names a server; with neither,
    the embedded server under PGQ_HOME, started if needed."""
    schema = schema_name(schema)
    dsn = dsn or os.environ.get("PGQ_DSN") or None
    if dsn:
        check_dsn(dsn)
        return Target(dsn, schema, embedded=False)
    from . import embedded  # here: a DSN given never loads it (subprocess, tempfile, ...)

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
    """Short human name of a server: user@host:port/db (each host of a cluster's DSN), no
    password."""
    try:
        p = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001
        return "***"
    user = f"{p['user']}@" if p.get("user") else ""
    return f"{user}{','.join(hosts(dsn))}/{p.get('dbname') or p.get('user') or ''}"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _kv_value(raw: str) -> str:
    if raw.startswith("'") and raw.endswith("'") and len(raw) > 1:
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def passwords(dsn: str) -> set[str]:
    """Every form the password of `dsn` may take in a message: as parsed, as written in the
    DSN (percent-encoded or quoted), percent-decoded and percent-encoded; PGPASSWORD too.
    Works on DSNs psycopg cannot parse."""
    found: set[str] = set()
    try:
        parsed = conninfo_to_dict(dsn).get("password")
    except Exception:  # noqa: BLE001 - an unparseable DSN still has its password found below
        parsed = None
    if parsed:
        found.add(str(parsed))
    userinfo = _userinfo(dsn)
    if userinfo and ":" in userinfo:
        found.add(userinfo.split(":", 1)[1])
    for match in _KV_PASSWORD.finditer(dsn):
        found.add(match.group(1))
        found.add(_kv_value(match.group(1)))
    if os.environ.get("PGPASSWORD"):
        found.add(os.environ["PGPASSWORD"])
    for password in list(found):
        found.add(unquote(password))
        found.add(quote(password, safe=""))
    found.discard("")
    return found


def scrub(text: str, dsn: str | None) -> str:
    """`text` with the password of `dsn` replaced by *** wherever it stands as a token (not
    inside another word: a password `ab` leaves "database unavailable" alone). When a short
    password stands as a token, the whole text becomes HIDDEN rather than a guess."""
    if not dsn:
        return text
    for password in sorted(passwords(dsn), key=len, reverse=True):
        token = re.compile(rf"(?<!\w){re.escape(password)}(?!\w)")
        if not token.search(text):
            continue
        if len(password) < SHORT_PASSWORD:
            return HIDDEN
        text = token.sub("***", text)
    return text


def _bounded(value: timedelta, low: timedelta, high: timedelta, what: str) -> timedelta:
    if not low <= value <= high:
        raise ValueError(f"{what} must be between {_span(low)} and {_span(high)}")
    return value


def _span(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def check_lease(lease: timedelta) -> timedelta:
    """ValueError unless LEASE_MIN <= lease <= LEASE_MAX."""
    return _bounded(lease, LEASE_MIN, LEASE_MAX, "the lease")


def check_concurrency(concurrency: int) -> int:
    """ValueError unless 1 <= concurrency <= CONCURRENCY_MAX."""
    if not 1 <= concurrency <= CONCURRENCY_MAX:
        raise ValueError(f"concurrency must be between 1 and {CONCURRENCY_MAX}")
    return concurrency


def check_worker_settings(
    queues: Sequence[str],
    concurrency: int,
    lease: timedelta,
    timeout: float | None,
    statement_timeout: float,
    lock_timeout: float,
    prefetch: int | None,
) -> None:
    """ValueError, saying which, unless a worker's settings can run."""
    if not queues or not all(queues):
        raise ValueError("a worker needs at least one non-empty queue name")
    check_concurrency(concurrency)
    check_lease(lease)
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout must be positive")
    if statement_timeout <= 0 or lock_timeout <= 0:
        raise ValueError("statement and lock timeouts must be positive")
    if prefetch is not None and prefetch < 0:
        raise ValueError("prefetch must be 0 (no buffer) or more")


def _visible_code(ch: str) -> str:
    return f"U+{ord(ch):04X}"


def check_queue_name(name: str) -> str:
    """ValueError unless `name` is storable and fits a NOTIFY payload: not empty, no NUL, valid
    UTF-8, at most QUEUE_NAME_MAX_BYTES bytes. Any name a job can have (also one plain SQL
    stored): what looking a queue up takes."""
    if not name:
        raise ValueError("queue name must not be empty")
    if "\x00" in name:
        raise ValueError("queue name must not hold a NUL character")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("queue name is not valid UTF-8") from None
    if size > QUEUE_NAME_MAX_BYTES:
        raise ValueError(
            f"queue name is {size} bytes long (UTF-8); at most {QUEUE_NAME_MAX_BYTES} fit "
            f"(it is indexed, and it is the NOTIFY payload, at most {NOTIFY_PAYLOAD_MAX_BYTES})"
        )
    return name


def check_new_queue_name(name: str) -> str:
    """`check_queue_name`, and no invisible character (`text.INVISIBLE`: zero-width joiner,
    BOM, word joiner, soft hyphen, bidi controls...), so it prints unlike any other name: what
    naming a queue takes (enqueue, pause, limit, a schedule's queue)."""
    check_queue_name(name)
    invisible = first_invisible(name)
    if invisible is not None:
        raise ValueError(
            f"queue name holds an invisible character ({_visible_code(invisible)}): it would "
            "print like another queue's name"
        )
    return name


def connect_timeout(dsn: str) -> float:
    """Seconds a connection attempt to `dsn` may take: the DSN's, PGCONNECT_TIMEOUT or ours."""
    try:
        given = conninfo_to_dict(dsn).get("connect_timeout")
    except Exception:  # noqa: BLE001
        given = None
    for value in (given, os.environ.get("PGCONNECT_TIMEOUT")):
        try:
            return float(str(value))
        except ValueError:
            continue
    return DEFAULT_CONNECT_TIMEOUT


def connect_options(dsn: str, *, reader: bool = False) -> dict[str, Any]:
    """Keyword arguments for every `psycopg.connect`: nothing waits forever for a server, and
    a DSN naming several hosts reaches the writable one (`cluster.writer_options`); a
    `reader`'s (`--read-dsn`) prefers a standby instead (`cluster.reader_options`).

    A `connect_timeout` in the DSN or PGCONNECT_TIMEOUT in the environment wins over the
    default; keepalives notice a server that vanished without closing the connection. Text
    travels as UTF-8 whatever the database's encoding (the server converts, or refuses a
    character its encoding lacks with 22P05 on the statement that sent it): payloads, errors,
    queue names and results round-trip, and no PGCLIENTENCODING or role setting changes that.
    """
    options: dict[str, Any] = {
        "client_encoding": "UTF8",
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
    if pooled():
        options["prepare_threshold"] = None  # a pooler's server sessions are shared
    # several hosts: the writable one, or for a reader a standby (cluster.py)
    options.update(reader_options(dsn) if reader else writer_options(dsn))
    return options


def read_dsn(given: str | None = None) -> str | None:
    """Where reads may go instead of the primary: `given` (--read-dsn), else PGQ_READ_DSN;
    checked by `check_dsn`. None: reads go to the DSN the writes use."""
    found = given or os.environ.get("PGQ_READ_DSN") or None
    if found:
        check_dsn(found)
    return found


_YES = ("1", "true", "yes", "on")
_NO = ("0", "false", "no", "off")
#: How this process learnt that its connections go through a pooler (`note_pooler`).
_pooler_seen: list[str] = []
_pooler_lock = threading.Lock()


def pooled() -> bool:
    """True when connections go through a pooler in transaction mode (PgBouncer): PGQ_POOLED
    (1/true/yes/on) says so, or this process found out (`note_pooler`) and PGQ_POOLED does not
    say 0/false/no/off. Pooled: no server-side prepared statements (statement names of
    different clients would collide on shared server sessions), no session settings (they
    would stay on a server session other clients get) and no LISTEN on the pooled DSN (see
    `listen_dsn`)."""
    setting = os.environ.get("PGQ_POOLED", "").strip().lower()
    if setting in _YES:
        return True
    return bool(_pooler_seen) and setting not in _NO


def pooling_undeclared() -> bool:
    """True when PGQ_POOLED says nothing, so pgq looks for a pooler itself."""
    setting = os.environ.get("PGQ_POOLED", "").strip().lower()
    return setting not in _YES and setting not in _NO and not _pooler_seen


def note_pooler(evidence: str) -> bool:
    """Record that this process's connections go through a pooler (unless PGQ_POOLED says
    otherwise): `pooled()` is True from now on. True the first time only, so the caller says
    so once (`pooler_line`)."""
    with _pooler_lock:
        if not pooling_undeclared():
            return False
        _pooler_seen.append(evidence)
        return True


def pooler_line(evidence: str) -> str:
    """What pgq says, once, when it found a pooler nobody announced."""
    return (
        f"the database connection goes through a pooler ({evidence}): pooled mode from now on "
        "(no prepared statements, no session settings, no LISTEN on this DSN); say --pooled "
        "(PGQ_POOLED=1) to skip this check, or PGQ_POOLED=0 if the pooler keeps sessions"
    )


def forget_pooler() -> None:
    """Forget a pooler found by `note_pooler` (tests)."""
    with _pooler_lock:
        _pooler_seen.clear()


def listen_dsn(dsn: str) -> str | None:
    """Where to LISTEN for new jobs: PGQ_LISTEN_DSN (a direct connection) when set, else `dsn`
    unless pooled: LISTEN needs a session of its own, which transaction pooling does not give.
    None: poll alone."""
    direct = os.environ.get("PGQ_LISTEN_DSN")
    if direct:
        check_dsn(direct)
        return direct
    return None if pooled() else dsn
