"""How numbers and times read on screen: short, humane, and always the same width class; and
how text from the database reads: as data (`db_text`), never markup or terminal control."""

from __future__ import annotations

from rich.text import Text

from pgq_core.durations import short_duration
from pgq_core.text import CONTROL_CHARACTERS, printable

SPARK_BARS = " ▁▂▃▄▅▆▇█"


def duration(seconds: float) -> str:
    """A duration in its largest sensible unit: 850ms, 4.2s, 37s, 3m05s, 2h14m, 3d04h (as the
    CLI prints it: `short_duration`)."""
    return short_duration(seconds)


def ago(seconds: float) -> str:
    return (
        "just now"
        if 0 <= seconds < 1
        else (f"{duration(seconds)} ago" if seconds >= 0 else f"in {duration(seconds)}")
    )


def count(n: int) -> str:
    """Integers with thin grouping: 1234567 -> 1,234,567."""
    return f"{n:,}"


def rate(per_second: float) -> str:
    if per_second <= 0:
        return "0/s"
    if per_second < 10:
        return f"{per_second:.1f}/s"
    if per_second < 10_000:
        return f"{per_second:.0f}/s"
    return f"{per_second / 1000:.0f}k/s"


def sparkline(values: list[float]) -> str:
    """One character per value, scaled to the largest; any non-zero value shows at least ▁."""
    top = max(values, default=0.0)
    if top <= 0:
        return " " * len(values)
    steps = len(SPARK_BARS) - 1
    out = []
    for v in values:
        if v <= 0:
            out.append(" ")
        else:
            out.append(SPARK_BARS[max(1, round(v / top * steps))])
    return "".join(out)


def short_worker(worker: str | None, width: int = 28) -> str:
    """Worker ids are host:pid:suffix; keep the distinguishing tail when space is short."""
    if not worker:
        return "—"
    worker = printable(worker)
    if len(worker) <= width:
        return worker
    return "…" + worker[-(width - 1) :]


#: What a filter field accepts (`Input(restrict=...)`): text without control characters, so a
#: paste cannot put terminal control on the screen, echoed back as the field's own value.
TYPED_TEXT = f"[^{CONTROL_CHARACTERS}]*"


def db_text(value: str | None, *, multiline: bool = False, style: str = "") -> Text:
    """Text from the database (queue names, errors, worker ids, reasons) for a widget: a
    `Text` (never parsed as markup) with every control character shown as a visible escape."""
    return Text(printable(value or "", multiline=multiline), style=style)


#: the most cells a name takes in a table before it is cut with an ellipsis
NAME_CELLS = 40


def name_text(value: str | None, *, style: str = "", cells: int = NAME_CELLS) -> Text:
    """A name from the database (a queue's) for a table cell: `db_text`, cut with an ellipsis
    past `cells` cells, so one long name cannot push the other columns off the screen."""
    text = db_text(value, style=style)
    if text.cell_len > cells:
        text.truncate(cells, overflow="ellipsis")
    return text
