"""Where the database comes from, and that no password is ever shown."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgq_core import PgqError
from pgq_core.config import check_schema, connect_options, describe, mask, resolve, scrub
from pgq_core.durations import parse_duration


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://alice:s3cret@db.example:5433/app",
        "host=db.example user=alice password=s3cret dbname=app",
        "postgres://alice:s3cret@db.example/app?sslmode=require",
    ],
)
def test_no_password_survives_mask_or_describe(dsn: str) -> None:
    assert "s3cret" not in mask(dsn)
    assert "s3cret" not in describe(dsn)
    assert "db.example" in describe(dsn)


def test_scrub_removes_the_password_from_error_text() -> None:
    text = 'connection to "db" failed: password "s3cret" rejected'
    assert "s3cret" not in scrub(text, "postgresql://u:s3cret@db/x")


def test_explicit_dsn_wins_and_a_bad_one_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQ_DSN", "postgresql://env@h/db")
    assert resolve("postgresql://flag@h/db", None).dsn == "postgresql://flag@h/db"
    assert resolve(None, None).dsn == "postgresql://env@h/db"
    monkeypatch.setenv("PGQ_SCHEMA", "other")
    assert resolve(None, None).schema == "other"
    with pytest.raises(PgqError) as err:
        resolve("host=h password=s3cret bogus_option=1", None)
    assert "s3cret" not in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["", "1abc", "has space", "x" * 59, 'q"uote'])
def test_bad_schema_names_are_refused(name: str) -> None:
    with pytest.raises(PgqError):
        check_schema(name)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("7d", 604800), ("250ms", 0.25), ("12", 12)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


def test_durations_stop_at_a_hundred_years() -> None:
    assert parse_duration("36525d") == timedelta(days=36525)
    for text in ("36525d1ms", "999999999d", "inf", "1e300"):
        with pytest.raises(ValueError, match="too long"):
            parse_duration(text)


@pytest.mark.parametrize("text", ["", "abc", "5x", "-3", "1h 2q"])
def test_bad_durations_raise_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_a_dsn_naming_several_hosts_asks_for_the_writable_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pgq_core.cluster import hosts, reader_options, writer_options

    monkeypatch.delenv("PGTARGETSESSIONATTRS", raising=False)
    several = "postgresql://app@db1:5432,db2:5433/app"
    assert hosts(several) == ["db1:5432", "db2:5433"]
    assert hosts("host=a,b port=7 dbname=x") == ["a:7", "b:7"]
    assert writer_options(several) == {"target_session_attrs": "read-write"}
    assert connect_options(several)["target_session_attrs"] == "read-write"
    assert reader_options(several) == {"target_session_attrs": "prefer-standby"}
    assert writer_options("postgresql://app@db1/app") == {}  # one host: nothing to choose
    assert writer_options(several + "?target_session_attrs=any") == {}  # the DSN says
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "primary")
    assert writer_options(several) == {}  # so does the environment


def test_no_writable_primary_is_said_in_plain_words() -> None:
    """psycopg's report of a failed multi-host connect (as it words it) becomes one line with
    each host's state; a single standby is named; other errors are left alone."""
    from pgq_core.cluster import no_primary

    report = (
        'connection failed: connection to server at "10.0.0.2", port 5433 failed: session is '
        "read-only\nMultiple connection attempts failed. All failures were:\n"
        "- host: '10.0.0.1', port: '5432', hostaddr: '10.0.0.1': connection failed: connection "
        'to server at "10.0.0.1", port 5432 failed: Connection refused\n\tIs the server '
        "running on that host and accepting TCP/IP connections?\n"
        "- host: '10.0.0.2', port: '5433', hostaddr: '10.0.0.2': connection failed: connection "
        'to server at "10.0.0.2", port 5433 failed: session is read-only'
    )
    dsn = "postgresql://u:secret@10.0.0.1:5432,10.0.0.2:5433/db"
    assert no_primary(report, dsn) == (
        "no writable primary among 2 hosts (10.0.0.1:5432 refused; 10.0.0.2:5433 read-only "
        "standby): waiting for a failover"
    )
    alone = no_primary("server is in hot standby mode", "postgresql://u@10.0.0.2:5433/db")
    assert alone is not None and alone.startswith("the server (10.0.0.2:5433) is a read-only")
    assert no_primary("Connection refused", dsn) is None
