"""A payload's numbers reach the database as the user wrote them, on every `pgq` path that
takes JSON text: jsonb reads the user's text, not a float's rounding of it (a review found
`12345678901234567890.12` stored as `1.2345678901234567e+19`, `1e-400` as `0.0`, and `1e400`
refused)."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import Pgq, error_line, ok

from pgq_core import JobSpec, Queue, jsontext, ops

NUMBERS = ["12345678901234567890.12", "1e-400", "1e400", "0.1", "-0", "-0.0", "1.50", "2E+3"]
BIG_INT = "123456789012345678901234567890123456789"
#: jsonb's extremes, and an integer longer than Python's int() reads by default.
EDGES = ["1e-16383", "9" * 131072, "-" + "7" * 5000, "0e-16383"]
#: One payload holding each number at the top of an object, in an array and nested.
TEXT = '{"n": [' + ", ".join([*NUMBERS, BIG_INT]) + '], "deep": {"x": 1e-400, "y": [0.1]}, "i": 7}'


def as_jsonb(conn: psycopg.Connection[Any], text: str) -> str:
    """What jsonb makes of `text`."""
    row = conn.execute("SELECT %s::text::jsonb::text", [text]).fetchone()
    assert row is not None
    return str(row[0])


def stored(conn: psycopg.Connection[Any], schema: str, ids: list[int]) -> list[str]:
    query = sql.SQL("SELECT payload::text FROM {}.jobs WHERE id = ANY(%s) ORDER BY id")
    return [str(r[0]) for r in conn.execute(query.format(sql.Identifier(schema)), [ids])]


def test_enqueue_argument_and_stdin_keep_every_digit(pgq: Pgq, conn: Any, schema: str) -> None:
    want = as_jsonb(conn, TEXT)
    assert "12345678901234567890.12" in want and "1e+400" not in want.lower()
    for text in (TEXT, *NUMBERS, BIG_INT, *EDGES):
        for args, stdin in ((("--", text), None), (("-",), text)):
            [job_id] = json.loads(ok(pgq("enqueue", "q", "--json", *args, input=stdin)))
            assert stored(conn, schema, [job_id]) == [as_jsonb(conn, text)], (text, args)
    count = sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(schema))
    before = conn.execute(count).fetchone()
    for text in ("NaN", '{"n": Infinity}', "-Infinity", "[1, NaN]"):  # still refused
        error_line(pgq("enqueue", "q", "--", text), 2, "not valid JSON", "is not JSON")
        error_line(pgq("enqueue", "q", "-", input=text), 2, "not valid JSON", "is not JSON")
        error_line(pgq("enqueue", "q", "--file", "-", input=f"{text}\n"), 2, "line 1")
    assert conn.execute(count).fetchone() == before


@pytest.mark.parametrize("path", ["copy", "enqueue_many", "after"])
def test_enqueue_file_keeps_every_digit_on_each_path(
    path: str, pgq: Pgq, queue: Queue, conn: Any, schema: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """COPY (`enqueue_payload_texts`), `enqueue_many` (a role that may not COPY), `--after`."""
    lines = [TEXT, *NUMBERS, BIG_INT, '{"plain": 1}']
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(f"{line}\n" for line in lines))
    args = ["enqueue", "q", "--file", str(jobs), "--json"]
    if path == "after":
        args += ["--after", str(queue.enqueue("q", {}))]
    if path == "enqueue_many":
        real = ops.may_copy
        monkeypatch.setattr(
            ops, "may_copy", lambda s: dataclasses.replace(real(s), read=lambda rows: False)
        )
        taken = lambda *a, **k: pytest.fail("COPY taken")  # noqa: E731
        monkeypatch.setattr(Queue, "enqueue_payload_texts", taken)
    ids = json.loads(ok(pgq(*args)))
    assert stored(conn, schema, ids) == [as_jsonb(conn, line) for line in lines]


def exact(text: str) -> Any:
    return json.loads(text, parse_float=Decimal)


def test_show_prints_the_digits_the_database_holds(pgq: Pgq, conn: Any) -> None:
    [job_id] = json.loads(ok(pgq("enqueue", "q", TEXT, "--json")))
    want = exact(as_jsonb(conn, TEXT))
    assert exact(ok(pgq("show", str(job_id), "--json")))["payload"] == want
    shown = ok(pgq("show", str(job_id)))
    assert "12345678901234567890.12" in shown and "0.1\n" in shown.replace(" ", "")


def test_schedule_payload_keeps_every_digit(pgq: Pgq, queue: Queue, conn: Any) -> None:
    args = ("schedule", "add", "s", "--queue", "q", "--cron", "* * * * *", "--payload", TEXT)
    ok(pgq(*args))
    job_id = queue.run_schedule("s")
    assert stored(conn, queue.schema, [job_id]) == [as_jsonb(conn, TEXT)]
    [listed] = exact(ok(pgq("schedule", "list", "--json")))
    assert listed["payload"] == exact(as_jsonb(conn, TEXT))
    assert "12345678901234567890.12" in ok(pgq("schedule", "list"))


def test_a_library_decimal_is_written_exactly_on_every_path(
    queue: Queue, conn: Any, schema: str
) -> None:
    """A Decimal in a payload raised TypeError (json.dumps): it is now its exact digits."""
    payload = {"d": Decimal("12345678901234567890.12"), "f": 0.5, "s": "é\\\t", "k": [None]}
    want = as_jsonb(conn, '{"d": 12345678901234567890.12, "f": 0.5, "s": "é\\\\\\t", "k": [null]}')
    ids = [queue.enqueue("q", payload)]
    ids += queue.enqueue_many([JobSpec("q", payload), JobSpec("q", payload, unique_key="u")])
    ids += queue.enqueue_copy([JobSpec("q", payload)])
    ids += queue.enqueue_payloads("q", [payload, {"plain": [1.5]}])
    assert stored(conn, schema, ids) == [want] * 5 + [as_jsonb(conn, '{"plain": [1.5]}')]


def test_the_encoder_writes_what_json_dumps_writes_but_for_decimals() -> None:
    circular: list[Any] = []
    circular.append(circular)
    encode = jsontext.encoder()
    for value in (
        {"a": [1, 2.5, True, None, "x\u00e9"], 1: "int key", 2.5: "f", None: 0, False: 1},
        [float("nan"), float("inf"), -float("inf"), (1, 2)],
    ):
        assert json.loads(jsontext.dumps(value)) == json.loads(json.dumps(value))
        assert encode(value) == json.dumps(value, separators=(",", ":"))
        assert jsontext.dumps(value, indent=2, ensure_ascii=False, default=str) == json.dumps(
            value, indent=2, ensure_ascii=False, default=str
        )
    nested = {"é": [{"d": Decimal("1.10")}, [], {}], "t": {1}}
    assert jsontext.dumps(nested, indent=2, ensure_ascii=False, default=sorted) == (
        '{\n  "é": [\n    {\n      "d": 1.10\n    },\n    [],\n    {}\n  ],'
        '\n  "t": [\n    1\n  ]\n}'
    )
    assert jsontext.loads('[1.10, 1e400, 7, "' + "9" * 5000 + '"]')[:3] == [
        Decimal("1.10"),
        Decimal("1e400"),
        7,
    ]
    assert jsontext.loads("9" * 5000) == Decimal("9" * 5000)
    with_decimal = {"k": [Decimal("1E+400"), 1.5], 2: Decimal("-0")}
    assert encode(with_decimal) == jsontext.dumps(with_decimal) == '{"k":[1E+400,1.5],"2":-0}'
    for bad, error in ((circular, ValueError), ({"s": {1}}, TypeError), ({(1,): 1}, TypeError)):
        for dumps in (jsontext.dumps, encode):
            with pytest.raises(error):
                dumps(bad)
            with pytest.raises(error):
                dumps([Decimal(1), bad])
    shared = [1]
    assert encode([shared, shared, Decimal("0.1")]) == "[[1],[1],0.1]"  # not circular
    assert encode([shared, shared]) == "[[1],[1]]"  # its memo was cleared after the fallback


def test_a_payload_filter_compares_the_digits_written(pgq: Pgq) -> None:
    """`--payload n=...` compared with a float's rounding: neither job matched."""
    ids = [
        json.loads(ok(pgq("enqueue", "q", f'{{"n": {n}}}', "--json")))[0]
        for n in ("12345678901234567890.12", "12345678901234567890.13", "1e400", "1e-400")
    ]
    for value, want in zip(("12345678901234567890.12", "12345678901234567890.13", "1e400",
                            "1e-400"), ids, strict=True):  # fmt: skip
        listed = json.loads(ok(pgq("jobs", "--payload", f"n={value}", "--json")))
        assert [row["id"] for row in listed] == [want], value
