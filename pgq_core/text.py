"""Text that crosses a boundary: into the database (storable) or onto a terminal (printable).

Invariants:
- `storable` always returns text PostgreSQL accepts in a `text` column: no NUL, no lone
  surrogate, at most `limit` characters (a cut is marked).
- `describe_exception` never raises, whatever the exception's `__str__` does.
- `printable` returns text with no control character left: each is shown as a visible escape
  (`\\x1b`), so database or handler text can never move the cursor, retitle the window or make
  a terminal answer into stdin. Invisible characters (`INVISIBLE`: format characters and the
  default-ignorable ones) are shown as escapes too, so two names that differ only by one never
  print alike. It does not escape Rich markup: callers that print through
  Rich markup also pass the text through `rich.markup.escape` (or use `rich.text.Text`).
"""

from __future__ import annotations

import re
import traceback
from types import TracebackType

#: The longest error text stored with a job (characters).
ERROR_TEXT_LIMIT = 8192
CUT_MARK = " [... cut, {n} characters in all]"
#: The longest traceback stored with a failed attempt (characters).
TRACEBACK_LIMIT = 16 * 1024
TRACEBACK_CUT = "\n  [... {cut} characters of frames cut, {n} in all ...]\n"

_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
#: Every character `printable` escapes (newlines and tabs included), as a regex class body.
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL_WITH_NEWLINES = re.compile(f"[{CONTROL_CHARACTERS}]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
#: Characters that draw nothing: Unicode's format characters (category Cf) and its
#: Default_Ignorable_Code_Point set (soft hyphen, zero-width joiners and spaces, word joiner,
#: BOM, bidi controls, variation selectors, Hangul fillers, tags), as a regex class body.
INVISIBLE = (
    "\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
    "\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_INVISIBLE = re.compile(f"[{INVISIBLE}]")


def _visible(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, *, multiline: bool = False) -> str:
    """`text` with every control and invisible character shown as a visible escape. With
    `multiline`, newlines and tabs are kept (for blocks of text); otherwise they are escaped
    too."""
    pattern = _CONTROL if multiline else _CONTROL_WITH_NEWLINES
    text = pattern.sub(_visible, _SURROGATE.sub("\ufffd", text))
    return _INVISIBLE.sub(_visible, text)


def first_invisible(text: str) -> str | None:
    """The first invisible character (`INVISIBLE`) in `text`, or None."""
    found = _INVISIBLE.search(text)
    return found.group() if found else None


def first_surrogate(text: str) -> str | None:
    """The first surrogate code point in `text` (which no UTF-8, so no database text, can
    carry: a lone one in a handler's text, or a command-line byte that is not UTF-8), or None."""
    found = _SURROGATE.search(text)
    return found.group() if found else None


def storable(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """`text` fit for a PostgreSQL text column: NUL removed, lone surrogates replaced by
    U+FFFD, cut to `limit` characters with a mark saying how long it was."""
    clean = _SURROGATE.sub("\ufffd", text.replace("\x00", ""))
    if len(clean) <= limit:
        return clean
    mark = CUT_MARK.format(n=len(clean))
    return clean[: max(0, limit - len(mark))] + mark


def one_line(text: str, limit: int) -> str:
    """`text` as one short line fit for a text column: `storable`, each run of control
    characters (newlines and tabs included) and surrounding spaces made one space, cut to
    `limit` characters with an ellipsis."""
    clean = re.sub(rf"\s*[{CONTROL_CHARACTERS}]+\s*", " ", storable(text, len(text) + 1))
    clean = clean.strip()
    return clean if len(clean) <= limit else clean[: max(0, limit - 1)] + "…"


def describe_exception(exc: BaseException, limit: int = ERROR_TEXT_LIMIT) -> str:
    """`TypeName: message` (or `TypeName` when the message is empty), storable; an exception
    whose `__str__` raises gives `TypeName (unprintable)`."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001 - a hostile __str__ must not escape
        return storable(f"{name} (unprintable)", limit)
    if not isinstance(message, str):
        return storable(f"{name} (unprintable)", limit)
    return storable(f"{name}: {message}" if message else name, limit)


def first_line(text: str | None, cut: bool = False, width: int | None = None) -> str:
    """The first line of `text` (empty for None), ending in an ellipsis when it goes on past
    what is shown: past `width` characters, or past the end of a `cut` text."""
    if not text:
        return ""
    line, newline, _ = text.partition("\n")
    line = line.rstrip("\r")
    more = cut and not newline
    if width is not None and len(line) > width:
        line, more = line[: max(0, width - 1)], True
    return line + "…" if more else line


def libpq_reason(exc: BaseException) -> str:
    """One line from a libpq error: its first line, completed by the next when it ends in ':'
    (libpq puts the actual reason, e.g. "Connection refused", on the second line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0]
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[1]}"
    return text.removeprefix("connection failed: ")


def bounded_traceback(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """`text` (a formatted traceback) fit for a text column and at most `limit` characters: a
    longer one keeps its first quarter and its end (the innermost frames and the error), the
    frames between replaced by a line saying how many characters were cut."""
    clean = storable(text, len(text) + 1)
    if len(clean) <= limit:
        return clean
    longest_mark = len(TRACEBACK_CUT.format(cut=len(clean), n=len(clean)))
    room = max(0, limit - longest_mark)
    head = room // 4
    tail = room - head
    mark = TRACEBACK_CUT.format(cut=len(clean) - head - tail, n=len(clean))
    return clean[:head] + mark + (clean[-tail:] if tail else "")


def format_traceback(
    exc: BaseException, skip: str | None = None, limit: int = TRACEBACK_LIMIT
) -> str | None:
    """`exc`'s traceback as Python prints it (its causes and contexts included), the leading
    frames of file `skip` left out, bounded (`bounded_traceback`); None if it cannot be
    formatted. Never raises, whatever the exception's `__str__` does."""
    try:
        tb: TracebackType | None = exc.__traceback__
        while skip is not None and tb is not None and tb.tb_frame.f_code.co_filename == skip:
            tb = tb.tb_next
        lines = traceback.format_exception(type(exc), exc, tb)
        return bounded_traceback("".join(lines).rstrip("\n"), limit)
    except BaseException:  # noqa: BLE001 - a hostile exception must not escape
        return None


def keep_end(text: str, width: int) -> str:
    """`text` in at most `width` characters, keeping its end (a worker id's pid and suffix
    tell workers apart): a longer one starts with an ellipsis."""
    if len(text) <= width:
        return text
    return "…" + text[len(text) - max(0, width - 1) :] if width > 1 else "…"
