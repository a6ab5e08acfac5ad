"""One filter grammar for listing jobs and for bulk actions over them.

A `JobFilter` becomes a WHERE fragment over the alias `j` (`where(schema)`), a psycopg.sql
composition whose every value is a bound parameter: no operator text is ever spliced into SQL.
The statements it plugs into live in sql/operator.sql and sql/observer.sql (`{where}`).

Invariants:
- `parse_*` raise `FilterError` (a ValueError) with a one-line message fit for an operator.
- An empty filter matches every job; each given part narrows it (they are ANDed).
- Time filters compare against the job's age: since `finished_at` for done and dead jobs, since
  `queued_at` for ready and running ones (`failed` jobs are ready).
- `describe()` is the filter as an operator would type it again; history rows record it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from psycopg import sql

from . import jsontext
from .durations import parse_duration
from .models import STATUSES

#: `failed` is a view of `ready`: jobs waiting to retry, with the error of their last attempt
#: (a requeued job starts again at attempt 0 and is not failed, whatever its old error).
FILTER_STATUSES = (*STATUSES, "failed")
FAILED = "(j.status = 'ready' AND j.attempts > 0 AND j.last_error IS NOT NULL)"
_GROUP = re.compile(r"^[0-9a-f]{12}$")
_SEGMENT = re.compile(r"^[^.\s]+$")
#: Which statuses each bulk action may change.
ACTION_STATUSES = {
    "requeue": ("dead",),
    "kill": ("ready", "running", "failed"),
    "delete": ("dead", "done"),
}


class FilterError(ValueError):
    """Bad filter input; the message is one line."""


def _check_text(text: str, what: str) -> str:
    if "\x00" in text:
        raise FilterError(f"{what} must not contain NUL")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FilterError(f"{what} is not valid text (a lone surrogate)") from None
    return text


@dataclass(frozen=True)
class PayloadMatch:
    """`payload` at `path` equals `value`: as JSON when `as_json`, else as text."""

    path: tuple[str, ...]
    value: Any
    as_json: bool
    text: str

    def describe(self) -> str:
        return f"payload.{'.'.join(self.path)}={self.text}"


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


#: A number keeps its exact digits (`jsontext`): it is compared with jsonb's, not a float's.
_DECODER = json.JSONDecoder(
    parse_constant=_reject_constant,
    parse_float=jsontext.number,
    parse_int=jsontext.checked_integer,
)


def parse_payload_match(text: str) -> PayloadMatch:
    """`customer.id=42`: a dotted path into the payload, `=`, a value. A value that parses as
    JSON is compared as JSON (`42`, `true`, `"42"`, `null`); any other is compared as text."""
    _check_text(text, "--payload")
    path_text, sep, value_text = text.partition("=")
    if not sep:
        raise FilterError(f"--payload wants PATH=VALUE, e.g. customer.id=42; got {text!r}")
    path_text = path_text.strip()
    if path_text.startswith("payload."):
        path_text = path_text[len("payload.") :]
    parts = tuple(path_text.split("."))
    if not path_text or not all(_SEGMENT.match(p) for p in parts):
        raise FilterError(f"--payload path must be dotted keys, e.g. customer.id; got {text!r}")
    try:
        value = _DECODER.decode(value_text)
    except ValueError:
        return PayloadMatch(parts, value_text, False, value_text)
    if "\\u" in value_text and "\\u0000" in value_text.lower():
        raise FilterError("--payload value must not contain \\u0000")
    return PayloadMatch(parts, value, True, value_text)


def parse_age(text: str, option: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise FilterError(f"{option}: {exc}") from None


def parse_error_group(text: str) -> str:
    group = text.strip().lower()
    if not _GROUP.match(group):
        raise FilterError(
            f"--error-group wants the 12 hex digits `pgq errors` shows; got {text[:40]!r}"
        )
    return group


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _age_column(statuses: Sequence[str]) -> sql.Composable:
    finished = {"done", "dead"}
    if statuses and set(statuses) <= finished:
        return sql.SQL("j.finished_at")
    if statuses and not set(statuses) & finished:
        return sql.SQL("j.queued_at")
    return sql.SQL("CASE WHEN j.status IN ('done', 'dead') THEN j.finished_at ELSE j.queued_at END")


@dataclass(frozen=True)
class JobFilter:
    """Which jobs: every given part must hold. `statuses` may include `failed`."""

    queue: str | None = None
    statuses: tuple[str, ...] = ()
    error: str | None = None
    payload: tuple[PayloadMatch, ...] = ()
    older_than: timedelta | None = None
    newer_than: timedelta | None = None
    error_group: str | None = None

    def __post_init__(self) -> None:
        for status in self.statuses:
            if status not in FILTER_STATUSES:
                raise FilterError(
                    f"unknown status {status!r} (one of {', '.join(FILTER_STATUSES)})"
                )
        if self.queue is not None:
            _check_text(self.queue, "--queue")
            if not self.queue.strip():
                raise FilterError("--queue must not be empty")
        if self.error is not None:
            _check_text(self.error, "--error")
            if not self.error.strip():
                raise FilterError("--error must not be empty")
        if (
            self.older_than is not None
            and self.newer_than is not None
            and self.older_than >= self.newer_than
        ):
            raise FilterError(
                "--older-than must be less than --newer-than (the window would be empty)"
            )

    @property
    def empty(self) -> bool:
        return self == JobFilter()

    def live_only(self) -> bool:
        """Names statuses, none of them `done`: the rows it can match sit in the partial
        indexes of the live set, which stays small however much history the table keeps."""
        return bool(self.statuses) and "done" not in self.statuses

    def for_action(self, action: str) -> JobFilter:
        """This filter narrowed to the statuses `action` may change; FilterError when the
        filter names only statuses the action leaves alone."""
        allowed = ACTION_STATUSES[action]
        if not self.statuses:
            return replace(self, statuses=allowed)
        kept = tuple(s for s in self.statuses if s in allowed)
        if not kept:
            raise FilterError(
                f"{action} acts on {' and '.join(allowed)} jobs only, not "
                f"{', '.join(self.statuses)}"
            )
        return replace(self, statuses=kept)

    def describe(self) -> str:
        parts: list[str] = []
        if self.queue is not None:
            parts.append(f"queue={self.queue}")
        if self.statuses:
            parts.append(f"status={','.join(self.statuses)}")
        if self.error is not None:
            parts.append(f"error~{json.dumps(self.error, ensure_ascii=False)}")
        if self.error_group is not None:
            parts.append(f"error-group={self.error_group}")
        parts += [p.describe() for p in self.payload]
        if self.older_than is not None:
            parts.append(f"older-than={_span(self.older_than)}")
        if self.newer_than is not None:
            parts.append(f"newer-than={_span(self.newer_than)}")
        return " ".join(parts) or "all jobs"

    def where(self, schema: str) -> tuple[sql.Composable, dict[str, Any]]:
        """(fragment over alias `j`, its parameters); parameter names start with `f_`."""
        clauses: list[sql.Composable] = []
        params: dict[str, Any] = {}

        def bind(value: Any) -> sql.Placeholder:
            name = f"f_{len(params)}"
            params[name] = value
            return sql.Placeholder(name)

        if self.queue is not None:
            clauses.append(sql.SQL("j.queue = {}").format(bind(self.queue)))
        if self.statuses:
            plain = [s for s in self.statuses if s != "failed"]
            either: list[sql.Composable] = []
            if plain:
                # Literals, not parameters: statuses come from a fixed list, and a literal
                # status lets the planner use the partial indexes (status = 'dead', ...)
                # even in the generic plan of a prepared statement.
                either += [sql.SQL("j.status = {}").format(sql.Literal(st)) for st in plain]
            if "failed" in self.statuses and "ready" not in plain:
                either.append(sql.SQL(FAILED))
            clauses.append(sql.SQL("({})").format(sql.SQL(" OR ").join(either)))
        if self.error is not None:
            pattern = f"%{_like_escape(self.error)}%"
            clauses.append(sql.SQL("j.last_error ILIKE {}").format(bind(pattern)))
        if self.error_group is not None:
            clauses.append(
                sql.SQL(
                    "(j.error_group = {} AND (j.status = 'dead' OR " + FAILED + "))"
                ).format(bind(self.error_group))
            )
        for match in self.payload:
            path = bind(list(match.path))
            if match.as_json:
                clauses.append(
                    sql.SQL("j.payload #> {}::text[] = {}::jsonb").format(
                        path, bind(jsontext.jsonb(match.value))
                    )
                )
            else:
                clauses.append(
                    sql.SQL("j.payload #>> {}::text[] = {}").format(path, bind(match.value))
                )
        age = _age_column(self.statuses)
        if self.older_than is not None:
            clauses.append(sql.SQL("{} < now() - {}::interval").format(age, bind(self.older_than)))
        if self.newer_than is not None:
            clauses.append(sql.SQL("{} >= now() - {}::interval").format(age, bind(self.newer_than)))
        assert all(st in FILTER_STATUSES for st in self.statuses)
        if not clauses:
            return sql.SQL("true"), params
        return sql.SQL(" AND ").join(clauses), params


def _span(value: timedelta) -> str:
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


#: The one-line filter form the dashboard's `/` takes: `key:value` terms, ANDed. Each key is
#: the CLI option of the same name (`older` and `newer` are short for --older-than and
#: --newer-than); a value with spaces is quoted ("..." or '...').
FILTER_KEYS = ("queue", "status", "error", "payload", "older", "newer", "error-group")
FILTER_SYNTAX = (
    "queue:Q status:dead,failed error:TEXT payload:PATH=VALUE older:1h newer:1d "
    "error-group:GROUP"
)
_ALIASES = {"older-than": "older", "newer-than": "newer", "group": "error-group"}


def _terms(text: str) -> list[str]:
    """Split on spaces outside quotes; quotes are removed (`error:"a b"` is one term)."""
    terms: list[str] = []
    current: list[str] = []
    quote = ""
    started = False
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            else:
                current.append(ch)
        elif ch in "\"'":
            quote, started = ch, True
        elif ch.isspace():
            if started:
                terms.append("".join(current))
            current, started = [], False
        else:
            current.append(ch)
            started = True
    if quote:
        raise FilterError(f"unclosed quote {quote} in the filter")
    if started:
        terms.append("".join(current))
    return terms


def parse_filter(text: str) -> JobFilter:
    """`status:dead error:timeout payload:customer.id=42 older:1h` as a JobFilter (an empty
    text: every job). FilterError with one line on bad input. `status` takes commas and may
    be repeated; `payload` may be repeated; other keys once."""
    _check_text(text, "the filter")
    seen: dict[str, str] = {}
    statuses: list[str] = []
    payload: list[PayloadMatch] = []
    for term in _terms(text):
        key, sep, value = term.partition(":")
        key = _ALIASES.get(key.lower(), key.lower())
        if not sep or key not in FILTER_KEYS:
            raise FilterError(
                f"{term[:40]!r} is not KEY:VALUE with KEY one of {', '.join(FILTER_KEYS)}"
            )
        if not value:
            raise FilterError(f"{key}: needs a value")
        if key == "status":
            statuses += [s.strip().lower() for s in value.split(",") if s.strip()]
        elif key == "payload":
            payload.append(parse_payload_match(value))
        elif key in seen:
            raise FilterError(f"{key}: given twice")
        else:
            seen[key] = value
    return JobFilter(
        queue=seen.get("queue"),
        statuses=tuple(dict.fromkeys(statuses)),
        error=seen.get("error"),
        payload=tuple(payload),
        older_than=parse_age(seen["older"], "older") if "older" in seen else None,
        newer_than=parse_age(seen["newer"], "newer") if "newer" in seen else None,
        error_group=parse_error_group(seen["error-group"]) if "error-group" in seen else None,
    )


def _quoted(value: str) -> str:
    if value and not any(ch.isspace() or ch in "\"'" for ch in value):
        return value
    return f"'{value}'" if '"' in value else f'"{value}"'


def format_filter(where: JobFilter) -> str:
    """`where` in the form `parse_filter` reads (parse_filter(format_filter(f)) == f for
    filters whose texts do not hold both kinds of quote)."""
    parts: list[str] = []
    if where.queue is not None:
        parts.append(f"queue:{_quoted(where.queue)}")
    if where.statuses:
        parts.append(f"status:{','.join(where.statuses)}")
    if where.error is not None:
        parts.append(f"error:{_quoted(where.error)}")
    if where.error_group is not None:
        parts.append(f"error-group:{where.error_group}")
    parts += [f"payload:{_quoted('.'.join(p.path) + '=' + p.text)}" for p in where.payload]
    if where.older_than is not None:
        parts.append(f"older:{_span(where.older_than)}")
    if where.newer_than is not None:
        parts.append(f"newer:{_span(where.newer_than)}")
    return " ".join(parts)
