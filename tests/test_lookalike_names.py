"""Queue names that print alike: invisible characters (format characters and Unicode's
default-ignorable set) are refused where a queue is named (enqueue, pause, limit, a schedule's
queue), and shown as visible escapes wherever a name plain SQL stored anyway is printed; a long
name is cut with an ellipsis in tables."""

from __future__ import annotations

import sys
import unicodedata
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import Pgq, error_line, ok
from tui_support.pilot import wait_for

from pgq_core import Queue
from pgq_core.text import INVISIBLE, first_invisible, printable
from pgq_tui.launch import make_app
from pgq_tui.widgets.queues_table import QueuesTable

#: zero-width joiner, BOM, word joiner, soft hyphen, a bidi override, a tag, a variation
#: selector, the Mongolian vowel separator
INVISIBLES = ("\u200d", "\ufeff", "\u2060", "\u00ad", "\u202e", "\U000e0041", "\ufe0f", "\u180e")


def plain_sql_job(conn: psycopg.Connection[Any], schema: str, queue: str) -> None:
    conn.execute(
        sql.SQL("INSERT INTO {}.jobs (queue, payload) VALUES (%s, '{{}}')").format(
            sql.Identifier(schema)
        ),
        [queue],
    )


def test_every_format_and_default_ignorable_character_is_invisible() -> None:
    """INVISIBLE holds all of category Cf (from this Python's Unicode tables) and the
    Default_Ignorable_Code_Point ranges, and nothing that draws (letters, digits, spaces)."""
    missing = [
        f"U+{code:04X}"
        for code in range(sys.maxunicode + 1)
        if unicodedata.category(chr(code)) == "Cf" and first_invisible(chr(code)) is None
    ]
    assert missing == []
    assert all(first_invisible(ch) == ch for ch in INVISIBLES)
    assert first_invisible("emails-ä 1 \u00a0x") is None
    assert INVISIBLE
    assert printable("emails\u200d") == "emails\\u200d"
    assert printable("q\U000e0041") == "q\\U000e0041"


@pytest.mark.parametrize("ch", INVISIBLES, ids=[f"U+{ord(c):04X}" for c in INVISIBLES])
def test_names_with_an_invisible_character_are_refused(
    pgq: Pgq, queue: Queue, ch: str
) -> None:
    name = f"emails{ch}"
    code = f"U+{ord(ch):04X}"
    for args in (
        ("enqueue", name),
        ("pause", name),
        ("limit", name, "3"),
        ("schedule", "add", "nightly", "--queue", name, "--cron", "0 3 * * *"),
        ("schedule", "add", f"n{ch}", "--queue", "emails", "--cron", "0 3 * * *"),
    ):
        line = error_line(pgq(*args), 2, "invisible character", code)
        assert ch not in line
    with pytest.raises(ValueError, match="invisible character"):
        queue.enqueue(name, {})
    with pytest.raises(ValueError, match="invisible character"):
        queue.pause(name)
    with pytest.raises(ValueError, match="invisible character"):
        queue.set_limit(name, 1)
    assert queue.stats() == []
    # one plain SQL stored can still be looked at, resumed and freed of a limit
    queue.conn.execute(
        sql.SQL(
            "INSERT INTO {}.queue_settings (queue, paused_at, max_running) VALUES (%s, now(), 2)"
        ).format(sql.Identifier(queue.schema)),
        [name],
    )
    ok(pgq("resume", name))
    ok(pgq("limit", name, "none"))
    ok(pgq("jobs", "--queue", name))


def test_names_plain_sql_stored_print_unlike_each_other(
    pgq: Pgq, conn: psycopg.Connection[Any], schema: str
) -> None:
    names = ["emails", "emails\u200d", "emails\ufeff", "emails\u2060", "emails\u00ad"]
    for name in names:
        plain_sql_job(conn, schema, name)
    shown = ok(pgq("stats"))
    for escape in ("emails\\u200d", "emails\\ufeff", "emails\\u2060", "emails\\xad"):
        assert escape in shown
    assert not any(first_invisible(ch) for ch in shown)
    listed = ok(pgq("jobs"))
    assert "emails\\u200d" in listed and not any(first_invisible(ch) for ch in listed)


def test_a_long_name_is_cut_in_the_stats_table(
    pgq: Pgq, conn: psycopg.Connection[Any], schema: str
) -> None:
    plain_sql_job(conn, schema, "x" * 2000)
    plain_sql_job(conn, schema, "short")
    shown = ok(pgq("stats"))
    assert "x" * 39 + "…" in shown and "x" * 41 not in shown
    assert len(shown.splitlines()) < 12


async def test_the_dashboard_cuts_a_long_name_and_escapes_invisible_ones(
    dsn: str, conn: psycopg.Connection[Any], schema: str
) -> None:
    for name in ("y" * 2000, "emails", "emails\u200d"):
        plain_sql_job(conn, schema, name)
    app = make_app(dsn, schema, "db", refresh=0.2)
    async with app.run_test(size=(132, 38)) as pilot:
        table = app.dashboard.query_one(QueuesTable)
        await wait_for(pilot, lambda: table.row_count == 3, "three queues")
        assert "ready" in table.shown_columns and "dead" in table.shown_columns
        widths = [c.get_render_width(table) for c in table.ordered_columns]
        assert widths[0] <= 44
        dead = table.shown_columns.index("dead")
        assert sum(widths[: dead + 1]) <= table.size.width  # the dead counts are on screen
        cells = [table.get_row_at(i)[0].plain for i in range(3)]
        assert "emails\\u200d" in cells and "emails" in cells
        assert ("y" * 39 + "…") in cells
