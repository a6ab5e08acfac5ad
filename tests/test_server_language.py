"""Hints and diagnoses are told by SQLSTATE, never by the server's words: a server speaking
German (lc_messages) gets the same "run `pgq migrate`", statement-timeout and read-only hints
as an English one, and no message names an internal class (`unexpected DataFault`).

The unit tests feed psycopg errors carrying a SQLSTATE and a German message; the server tests
need a server built with translations (Debian's PostgreSQL; the embedded one has none) and a
de_DE.UTF-8 locale (`.ci/run` generates it), and skip with the reason otherwise."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql
from psycopg.conninfo import make_conninfo
from support import ENV

from pgq_cli.cli import main
from pgq_cli.failures import explain
from pgq_core import session
from pgq_core.cluster import no_primary
from pgq_core.session import Failure
from pgq_core.worker.link import DataFault, Refused

GERMAN = "de_DE.UTF-8"


def run(*args: str) -> Result:
    return CliRunner(env=ENV).invoke(main, list(args), prog_name="pgq")


def one_error_line(result: Result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pgq: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------------- unit level


def test_a_missing_table_in_german_is_a_missing_schema() -> None:
    exc = psycopg.errors.UndefinedTable("Relation »pgq.jobs« existiert nicht")
    assert session.classify(exc, "pgq") is Failure.SCHEMA_MISSING
    assert "run `pgq migrate`" in str(session.schema_missing(exc, "pgq"))
    other = psycopg.errors.UndefinedTable("Relation »app.orders« existiert nicht")
    assert session.classify(other, "pgq") is not Failure.SCHEMA_MISSING  # a user's table


def test_a_missing_schema_in_german_is_a_missing_schema() -> None:
    exc = psycopg.errors.InvalidSchemaName("Schema »pgq« existiert nicht")
    assert session.is_schema_missing(exc, "pgq")


def test_a_statement_timeout_in_german_keeps_its_hint() -> None:
    for said in (
        "storniere Anfrage wegen Zeitüberschreitung der Anweisung",
        "canceling statement due to statement timeout",
    ):
        text = explain(psycopg.errors.QueryCanceled(said), None)
        assert text.startswith("statement timeout: "), text
        assert "--statement-timeout" in text
        assert said not in text  # the same line in every language


def test_a_read_only_refusal_in_german_says_no_writes() -> None:
    exc = psycopg.errors.ReadOnlySqlTransaction(
        "kann UPDATE nicht in einer Read-only-Transaktion ausführen"
    )
    said = no_primary(exc, "postgresql://u@db1/app")
    assert said is not None and "takes no writes" in said, said
    assert "database unavailable" not in explain(exc, None)  # the same plain words
    assert no_primary(psycopg.errors.UndefinedTable("x"), None) is None


@pytest.mark.parametrize(
    "fault",
    [
        DataFault("Spalte »queue« existiert nicht", "42703"),
        Refused("Spalte »queue« existiert nicht"),
    ],
)
def test_an_internal_exception_reaching_the_cli_is_not_named(
    fault: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `pgq: error: unexpected DataFault: ...`."""

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise fault

    monkeypatch.setattr("pgq_cli.session.Settings.reader", boom)
    line = one_error_line(run("--dsn", "postgresql://u@127.0.0.1:1/x", "stats"))
    assert type(fault).__name__ not in line
    assert "unexpected error: Spalte »queue« existiert nicht" in line


# ---------------------------------------------------------------------------- on a server


@pytest.fixture
def german(dsn: str) -> Iterator[str]:
    """`dsn` with the server speaking German, or a skip saying why it cannot."""
    german_dsn = make_conninfo(dsn, options=f"-c lc_messages={GERMAN}")
    try:
        with psycopg.connect(german_dsn, autocommit=True) as conn:
            try:
                conn.execute("SELECT FROM pgq_no_such_table_anywhere")
            except psycopg.errors.UndefinedTable as exc:
                said = exc.diag.message_primary or ""
    except psycopg.Error as exc:  # no such locale, or not a superuser
        pytest.skip(f"the server cannot set lc_messages={GERMAN}: {exc}")
    if "existiert nicht" not in said:
        pytest.skip(f"the server has no German translations (built without NLS): {said!r}")
    yield german_dsn


def test_german_server_missing_schema_says_run_migrate(german: str) -> None:
    result = run("--dsn", german, "--schema", "pgq_not_migrated_here", "stats")
    one_error_line(result, "run `pgq migrate`")


def test_german_server_worker_on_an_unmigrated_schema(german: str, dsn: str) -> None:
    """A worker on a schema with a stray `jobs` table and no pgq: the migrate hint, never
    `unexpected DataFault`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS pgq_half_made CASCADE")
        conn.execute("CREATE SCHEMA pgq_half_made; CREATE TABLE pgq_half_made.jobs (id int)")
    try:
        for schema in ("pgq_half_made", "pgq_never_made"):
            result = run(
                "--dsn", german, "--schema", schema,
                "worker", "q", "--burst", "--handler", "handlers_for_tests:noop",
            )  # fmt: skip
            line = one_error_line(result, "run `pgq migrate`")
            assert "unexpected" not in line and "DataFault" not in line
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA pgq_half_made CASCADE")


def test_german_server_statement_timeout_keeps_its_hint(german: str, dsn: str, schema: str) -> None:
    holder = psycopg.connect(dsn)
    holder.execute(
        sql.SQL("LOCK TABLE {}.jobs IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(schema))
    )
    try:
        started = time.monotonic()
        result = run(
            "--dsn", german, "--schema", schema, "--statement-timeout", "300ms", "jobs"
        )  # fmt: skip
        assert time.monotonic() - started < 30
    finally:
        holder.close()
    line = one_error_line(result, "statement timeout: ", "--statement-timeout")
    assert "Anfrage" not in line  # no German words decide or fill the hint
