"""The dashboard's one-line filter form (`parse_filter` / `format_filter`): pure, no database."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgq_core.filters import FilterError, JobFilter, format_filter, parse_filter


def test_every_key() -> None:
    f = parse_filter(
        'queue:emails status:dead,failed error:"connection reset" '
        "payload:customer.id=42 older:1h newer:2d error-group:0123456789AB"
    )
    assert f.queue == "emails"
    assert f.statuses == ("dead", "failed")
    assert f.error == "connection reset"
    assert [(p.path, p.value, p.as_json) for p in f.payload] == [(("customer", "id"), 42, True)]
    assert f.older_than == timedelta(hours=1)
    assert f.newer_than == timedelta(days=2)
    assert f.error_group == "0123456789ab"


def test_empty_is_every_job_and_aliases() -> None:
    assert parse_filter("  ") == JobFilter()
    assert parse_filter("older-than:5m status:dead status:ready") == JobFilter(
        statuses=("dead", "ready"), older_than=timedelta(minutes=5)
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("timeout", "is not KEY:VALUE"),
        ("colour:red", "is not KEY:VALUE"),
        ("status:zombie", "unknown status 'zombie'"),
        ("older:soon", "not a duration"),
        ("error:", "needs a value"),
        ("queue:a queue:b", "given twice"),
        ('error:"open', "unclosed quote"),
        ("payload:customer", "PATH=VALUE"),
        ("error-group:xyz", "12 hex digits"),
        ("older:2h newer:1h", "window would be empty"),
    ],
)
def test_bad_input_is_one_line(text: str, message: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filter(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "status:dead error:timeout payload:customer.id=42 older:1h",
        'queue:"my queue" error:"it said \'no\'" newer:90s',
        'error-group:0123456789ab payload:name="x y"',
        "",
    ],
)
def test_format_reads_back(text: str) -> None:
    f = parse_filter(text)
    assert parse_filter(format_filter(f)) == f
