"""JSON text with its numbers exact: a payload as the queue sends it on every path (one job,
a batch, COPY, a schedule), and as the CLI reads and prints it back.

Invariant: json.dumps's text (compact unless indented; ASCII unless asked otherwise; NaN and
Infinity written as such, for the server to refuse), but a `decimal.Decimal` is written as its
own digits, so a number read by `loads` (or `json.loads(text, parse_float=Decimal)`) reaches
jsonb, or the terminal, exactly as it was written. A value without a Decimal takes json's C
encoder; one with a Decimal, the slower `_exact`."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from psycopg.types.json import Jsonb

_ascii: Callable[[str], str] = json.encoder.encode_basestring_ascii


class _HasDecimal(Exception):
    """Raised by the C encoder's `default` at a Decimal: the value takes `_exact`."""


def _found(value: Any) -> Any:
    if isinstance(value, Decimal):
        raise _HasDecimal
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: json.dumps's encoder but for `_found`: json.dumps(default=...) would make one per call.
_ENCODER = json.JSONEncoder(default=_found, separators=(",", ":"))
#: Integers with more digits are read as Decimal: int() refuses over 4300 by default.
INT_DIGITS = 4000


def dumps(
    value: Any,
    *,
    indent: int | None = None,
    ensure_ascii: bool = True,
    default: Callable[[Any], Any] | None = None,
) -> str:
    """`value` as JSON text (see the module), compact unless `indent`, json.dumps's options
    as it takes them; TypeError or ValueError as json.dumps."""
    try:
        if indent is None and ensure_ascii and default is None:
            return _ENCODER.encode(value)
        return json.JSONEncoder(
            default=_found if default is None else _before(default),
            indent=indent,
            ensure_ascii=ensure_ascii,
            separators=(",", ":" if indent is None else ": "),
        ).encode(value)
    except _HasDecimal:
        return _exact(value, indent=indent, ensure_ascii=ensure_ascii, default=default)


def _before(default: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`default`, but a Decimal goes to `_exact`."""

    def found(value: Any) -> Any:
        if isinstance(value, Decimal):
            raise _HasDecimal
        return default(value)

    return found


#: jsonb's numbers (PostgreSQL's numeric): at most this many digits before the point, and
#: after it.
NUMERIC_INT_DIGITS = 131072
NUMERIC_SCALE = 16383


def integer(text: str) -> int | Decimal:
    """A JSON integer, exact: an int, or a Decimal past what int() reads."""
    return int(text) if len(text) <= INT_DIGITS else Decimal(text)


def number(text: str) -> Decimal:
    """A JSON number as a Decimal with its exact digits; ValueError if jsonb could not hold
    it (for `json.loads`'s parse_float, and parse_int past INT_DIGITS)."""
    value = Decimal(text)
    exponent = value.as_tuple().exponent
    if not (
        isinstance(exponent, int)
        and exponent >= -NUMERIC_SCALE
        and (not value or value.adjusted() < NUMERIC_INT_DIGITS)
    ):
        raise ValueError(f"number out of range: {text[:20]}")
    return value


def checked_integer(text: str) -> int | Decimal:
    """`integer`, ValueError past what jsonb holds (`number`)."""
    return int(text) if len(text) <= INT_DIGITS else number(text)


def loads(data: str | bytes) -> Any:
    """json.loads, its numbers exact: a fraction or an exponent as Decimal (`dumps` writes
    its digits back), an integer as `integer` reads it."""
    return json.loads(data, parse_float=Decimal, parse_int=integer)


def jsonb(value: Any) -> Jsonb:
    """`value` as a jsonb parameter, its text from `dumps`."""
    return Jsonb(value, dumps=dumps)


def _as_is(text: str) -> str:
    return text


def encoded(text: str) -> Jsonb:
    """JSON `text` (from `dumps`) as a jsonb parameter, sent as it is."""
    return Jsonb(text, dumps=_as_is)


def array_of(texts: list[str]) -> Jsonb:
    """The JSON array of the values whose `dumps` texts are `texts`, as a jsonb parameter."""
    return encoded("[" + ",".join(texts) + "]")


def encoder() -> Callable[[Any], str]:
    """`dumps` from one encoder made once (json.dumps makes a new one per call, half its cost
    for a small payload), for one caller at a time: its memo of the containers being encoded,
    which catches a circular value, is its own."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is None:  # no C accelerator
        return dumps
    markers: dict[int, Any] = {}
    encode = c_make_encoder(markers, _found, _ascii, None, ":", ",", False, False, True)

    def encoded(value: Any) -> str:
        try:
            return "".join(encode(value, 0))
        except _HasDecimal:
            markers.clear()  # the containers it was inside are no longer being encoded
            return _exact(value)
        except BaseException:
            markers.clear()
            raise

    return encoded


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key(key: Any, string: Callable[[str], str]) -> str:
    """A dict key as json.dumps writes it (always a string)."""
    if isinstance(key, str):
        return string(key)
    if key is True or key is False or key is None:
        return f'"{json.dumps(key)}"'
    if isinstance(key, int):
        return f'"{int.__repr__(key)}"'
    if isinstance(key, float):
        return f'"{_float(key)}"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _exact(
    value: Any,
    *,
    indent: int | None = None,
    ensure_ascii: bool = True,
    default: Callable[[Any], Any] | None = None,
) -> str:
    """json.dumps's text for `value` (compact unless `indent`), a Decimal written as `str`
    writes it."""
    parts: list[str] = []
    inside: set[int] = set()
    string = _ascii if ensure_ascii else json.encoder.encode_basestring
    colon = ":" if indent is None else ": "

    def line(level: int) -> str:
        return "" if indent is None else "\n" + " " * (indent * level)

    def write(item: Any, level: int) -> None:
        if isinstance(item, str):
            parts.append(string(item))
        elif item is None or item is True or item is False:
            parts.append(json.dumps(item))
        elif isinstance(item, int):
            parts.append(int.__repr__(item))
        elif isinstance(item, float):
            parts.append(_float(item))
        elif isinstance(item, Decimal):
            parts.append(str(item))
        elif isinstance(item, dict | list | tuple):
            if not item:
                parts.append("{}" if isinstance(item, dict) else "[]")
                return
            if id(item) in inside:
                raise ValueError("Circular reference detected")
            inside.add(id(item))
            members = item.items() if isinstance(item, dict) else enumerate(item)
            parts.append("{" if isinstance(item, dict) else "[")
            for n, (key, member) in enumerate(members):
                parts.append(("," if n else "") + line(level + 1))
                if isinstance(item, dict):
                    parts.append(_key(key, string) + colon)
                write(member, level + 1)
            parts.append(line(level) + ("}" if isinstance(item, dict) else "]"))
            inside.discard(id(item))
        elif default is not None:
            write(default(item), level)
        else:
            raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")

    write(value, 0)
    return "".join(parts)
