"""Unlucky and hostile input on a real server and through the real `pgq` command line:
database text never drives the terminal, passwords never show, nothing waits forever, and
values that cannot work are refused with one honest line."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgq_cli import cli, enqueue_cli
from pgq_cli.cli import main
from pgq_core import PgqError, Queue, migrate, parse_duration
from pgq_core.config import HIDDEN, check_concurrency, check_dsn, check_lease, check_schema, scrub
from pgq_core.defaults import CONCURRENCY_MAX, QUEUE_NAME_MAX_BYTES
from pgq_core.exporter import QueueCollector
from pgq_core.worker.link import Timeouts, open_sync_connection

ENV = {"PGQ_DSN": None, "PGQ_SCHEMA": None, "PGQ_DEBUG": None, "COLUMNS": "160"}
HOSTILE = "mk[/]x\x1b]0;pwned\x07\x1b[2J\x1b[6n[link=file:///etc/passwd]y"
ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner(env=ENV).invoke(main, list(args), input=input, prog_name="pgq")


def one_error_line(result: Result, code: int, *fragments: str) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pgq: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def pgq_process(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[bytes]:
    """The real `pgq` in its own process, output as raw bytes (stdout and stderr are pipes, so
    Rich adds no styling: any ESC in the output came from data)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PGQ_")}
    environ.update(COLUMNS="200", PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, "-m", "pgq_cli", *args],
        capture_output=True,
        timeout=timeout,
        env=environ,
        cwd=ROOT,
    )


def count_jobs(conn: psycopg.Connection[Any], schema: str) -> int:
    found = conn.execute(
        sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(schema))
    ).fetchone()
    assert found is not None
    return int(found[0])


# ---------------------------------------------------------------------------- escapes


@pytest.fixture
def hostile_job(queue: Queue, conn: psycopg.Connection[Any], schema: str) -> int:
    """A dead job whose queue, last error, worker and history hold markup and control."""
    job_id = queue.enqueue(HOSTILE, {"note": "\x1b[2J\u202e"})
    conn.execute(
        sql.SQL(
            "UPDATE {}.jobs SET status = 'dead', last_error = %s, worker = %s WHERE id = %s"
        ).format(sql.Identifier(schema)),
        [f"boom {HOSTILE}\nsecond line \x1b[6n", f"w{HOSTILE}", job_id],
    )
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.job_events (job_id, event, fence, worker, detail) "
            "VALUES (%s, 'failed', 0, %s, %s)"
        ).format(sql.Identifier(schema)),
        [job_id, f"w{HOSTILE}", f"d{HOSTILE}"],
    )
    conn.execute(  # plain SQL may write the group too (the trigger only follows last_error)
        sql.SQL("UPDATE {}.jobs SET error_group = %s WHERE id = %s").format(
            sql.Identifier(schema)
        ),
        [f"g{HOSTILE}", job_id],
    )
    return job_id


@pytest.mark.parametrize("command", [["jobs"], ["stats"], ["show", "{id}"], ["errors"]])
def test_database_text_never_reaches_the_terminal_raw(
    dsn: str, schema: str, hostile_job: int, command: list[str]
) -> None:
    args = [a.format(id=hostile_job) for a in command]
    done = pgq_process("--dsn", dsn, "--schema", schema, *args)
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    assert b"\x1b" not in out and b"\x07" not in out
    assert "\u202e".encode() not in out
    assert b"\\x1b]0;pwned\\x07" in done.stdout or b"\\x1b]0;pwned" in done.stdout
    assert b"mk[/]x" in done.stdout  # markup shown as the text it is


def test_json_output_keeps_the_raw_values(pgq_json: Any, hostile_job: int) -> None:
    shown = pgq_json("show", str(hostile_job))
    assert shown["queue"] == HOSTILE
    assert shown["last_error"].startswith(f"boom {HOSTILE}")


@pytest.fixture
def pgq_json(dsn: str, schema: str) -> Any:
    def call(*args: str) -> Any:
        result = run("--dsn", dsn, "--schema", schema, *args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    return call


def test_an_error_line_is_printable() -> None:
    done = pgq_process("--\x1b[2Jx\x07", "stats")
    assert done.returncode == 2
    assert b"\x1b" not in done.stderr and b"\x07" not in done.stderr
    assert done.stderr.startswith(b"pgq: error: ") and b"\\x1b[2J" in done.stderr


def test_the_worker_log_is_printable(dsn: str, schema: str, queue: Queue) -> None:
    error = "bad \x1b]0;title\x07 \x1b[2J \x1b[6n\nforged line"
    queue.enqueue("esc", {"error": error}, max_attempts=1)
    done = pgq_process(
        "--dsn", dsn, "--schema", schema,
        "worker", "esc", "--handler", "tests.handlers_for_tests:fail_with", "--burst",
    )
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stderr and b"\x07" not in done.stderr
    assert b"\\x1b]0;title\\x07" in done.stderr
    assert not any(line.startswith(b"forged") for line in done.stderr.splitlines())


# ---------------------------------------------------------------------------- passwords

PASSWORDS = ["Xq%zzKv9", "Xq@Kv9Zt", "Xq:Kv9:Zt", "Xq/Kv9/Zt", "Xq Kv9 Zt", "Xqä Kv9ö", "Xq%Kv9Zt"]


def _forms(password: str) -> list[str]:
    quoted = password.replace("\\", "\\\\").replace("'", "\\'")
    return [
        f"postgresql://pgq:{password}@127.0.0.1:1/pgq?connect_timeout=3",
        f"postgresql://pgq:{quote(password, safe='')}@127.0.0.1:1/pgq?connect_timeout=3",
        f"host=127.0.0.1 port=1 user=pgq password='{quoted}' connect_timeout=3",
        f"host=127.0.0.1 port=1 user=pgq password={password} connect_timeout=3",
    ]


@pytest.mark.parametrize("password", PASSWORDS)
def test_no_password_form_ever_shows(password: str) -> None:
    for dsn in _forms(password):
        result = run("--dsn", dsn, "stats")
        line = one_error_line(result, 1)
        for secret in (password, quote(password, safe=""), "Kv9", "Zt"):
            assert secret not in line, (dsn, line)


def test_an_invalid_percent_escape_is_named_not_quoted() -> None:
    line = one_error_line(run("--dsn", "postgresql://pgq:ab%zzcd@h/db", "stats"), 1)
    assert "%zz" not in line and "cd" not in line.split("error:")[1].replace("encoded", "")
    assert "%25" in line


def test_an_unencoded_at_sign_is_refused_before_connecting() -> None:
    line = one_error_line(run("--dsn", "postgresql://pgq:p@ssw0rd@127.0.0.1:1/db", "stats"), 1)
    assert "ssw0rd" not in line and "%40" in line


def test_a_short_password_garbles_nothing() -> None:
    line = one_error_line(run("--dsn", "postgresql://u:ab@127.0.0.1:1/db", "stats"), 1)
    assert "database unavailable" in line and "***" not in line


@pytest.mark.parametrize(
    ("dsn", "text", "expected"),
    [
        ("postgresql://u:s3cret@h/db", 'password "s3cret" rejected', 'password "***" rejected'),
        ("postgresql://u:s3cret@h/db", "notas3cretword s3cret", "notas3cretword ***"),
        ("postgresql://u:p%40ss%2Fw@h/db", "got p%40ss%2Fw and p@ss/w", "got *** and ***"),
        ("host=h password='a b c d'", "x 'a b c d' y a b c d.", "x *** y ***."),
        ("postgresql://u:ab@h/db", "database unavailable", "database unavailable"),
        ("postgresql://u:ab@h/db", 'user "ab" failed', HIDDEN),
        ("postgresql://u:pässwörd@h/db", "for pässwörd.", "for ***."),
    ],
)
def test_scrub_replaces_the_password_as_a_token_only(dsn: str, text: str, expected: str) -> None:
    assert scrub(text, dsn) == expected


def test_scrub_finds_the_password_of_an_unparseable_dsn() -> None:
    with pytest.raises(Exception) as err:
        check_dsn("postgresql://u:s3cr%zzet@h/db")
    assert "s3cr" not in str(err.value)
    assert "s3cr%zzet" not in scrub("bad token s3cr%zzet", "postgresql://u:s3cr%zzet@h/db")


# ---------------------------------------------------------------------------- hangs


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.mark.parametrize(
    "args", [["stats"], ["jobs"], ["migrate"], ["enqueue", "q", "{}"]]
)
@pytest.mark.slow
def test_a_server_that_never_answers_is_a_timeout_not_a_hang(
    silent_server: int, args: list[str]
) -> None:
    dsn = f"postgresql://u:Xsecret9@127.0.0.1:{silent_server}/db"
    env = {} if args == ["stats"] else {"PGCONNECT_TIMEOUT": "1"}
    started = time.monotonic()
    done = pgq_process("--dsn", dsn, *args, timeout=30, **env)
    took = time.monotonic() - started
    assert done.returncode == 1
    assert took < (10 if args == ["stats"] else 5), took
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pgq: error: connect timeout"), lines
    assert "Xsecret9" not in done.stderr.decode()


@pytest.fixture
def throwaway_role(dsn: str, schema: str) -> Iterator[tuple[str, psycopg.Connection[Any]]]:
    """A login role that may read and write the queue's schema; yields its DSN and an admin
    connection. Dropped afterwards."""
    role = f"r_{secrets.token_hex(4)}"
    admin = psycopg.connect(dsn, autocommit=True)
    ident, target = sql.Identifier(role), sql.Identifier(schema)
    password = secrets.token_hex(8)
    admin.execute(
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(ident, sql.Literal(password))
    )
    admin.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(target, ident))
    admin.execute(
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {} TO {}").format(
            target, ident
        )
    )
    admin.execute(  # no function of the schema is PUBLIC's (schema version 28)
        sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {} TO {}").format(target, ident)
    )
    params = conninfo_to_dict(dsn)
    params["user"] = role
    params["password"] = password
    try:
        yield make_conninfo("", **{k: v for k, v in params.items() if v is not None}), admin
    finally:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        admin.execute(sql.SQL("DROP ROLE {}").format(ident))
        admin.close()


def _lock_jobs(dsn: str, schema: str) -> psycopg.Connection[Any]:
    holder = psycopg.connect(dsn)
    holder.execute(
        sql.SQL("LOCK TABLE {}.jobs IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(schema))
    )
    return holder


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [("statement_timeout", "1ms", "statement timeout"), ("lock_timeout", "200ms", "lock timeout")],
)
def test_a_timeout_set_on_the_role_is_named(
    dsn: str,
    schema: str,
    throwaway_role: tuple[str, psycopg.Connection[Any]],
    setting: str,
    value: str,
    message: str,
) -> None:
    role_dsn, admin = throwaway_role
    role = conninfo_to_dict(role_dsn)["user"]
    admin.execute(
        sql.SQL("ALTER ROLE {} SET {} = {}").format(
            sql.Identifier(str(role)), sql.Identifier(setting), sql.Literal(value)
        )
    )
    holder = _lock_jobs(dsn, schema)
    try:
        started = time.monotonic()
        result = run("--dsn", role_dsn, "--schema", schema, "stats")
        assert time.monotonic() - started < 5
    finally:
        holder.close()
    line = one_error_line(result, 1, f"pgq: error: {message}")
    assert "unavailable" not in line


def test_our_statement_timeout_bounds_a_blocked_command(dsn: str, schema: str) -> None:
    holder = _lock_jobs(dsn, schema)
    try:
        started = time.monotonic()
        result = run("--dsn", dsn, "--schema", schema, "--statement-timeout", "300ms", "jobs")
        assert time.monotonic() - started < 5
    finally:
        holder.close()
    one_error_line(result, 1, "statement timeout")


def test_a_sub_millisecond_statement_timeout_still_bounds_a_blocked_command(
    dsn: str, schema: str
) -> None:
    """0.5ms is a (short) timeout, not none: it was truncated to 0 ms, which PostgreSQL reads
    as no statement timeout at all (the command then waited out the lock timeout, 10 s)."""
    holder = _lock_jobs(dsn, schema)
    try:
        started = time.monotonic()
        result = run("--dsn", dsn, "--schema", schema, "--statement-timeout", "0.5ms", "jobs")
        took = time.monotonic() - started
    finally:
        holder.close()
    one_error_line(result, 1, "statement timeout")
    assert took < 5, took


@pytest.mark.parametrize(("given", "shown"), [("0", "0"), ("0.0004", "1ms"), ("1.5ms", "2ms")])
def test_the_statement_timeout_given_is_the_one_the_session_gets(
    dsn: str, schema: str, given: str, shown: str
) -> None:
    """`--statement-timeout 0` is none, as its help says (it was 30 s); a positive value is at
    least 1 ms (it was truncated to 0: none)."""
    group = cli.Settings(dsn, schema, parse_duration(given))
    with group.connect() as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == (shown,)


def test_worker_and_exporter_timeouts_under_a_millisecond_are_not_none(
    dsn: str, schema: str
) -> None:
    """The worker's session bounds and the exporter's (and pooled transactions') local ones:
    a positive timeout never becomes 0 ms (none)."""
    short = Timeouts(statement=0.0005, lock=0.0001)
    conn = open_sync_connection(dsn, short)
    show = "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
    try:
        assert within_1ms(lambda: conn.execute(show).fetchone()) == ("1ms", "1ms")

        def local() -> Any:
            with Queue(conn, schema) as q, conn.transaction():
                q.run(short.local_limits())
                return conn.execute(show).fetchone()

        assert within_1ms(local) == ("1ms", "1ms")
    finally:
        conn.close()
    collector = QueueCollector(
        lambda: psycopg.connect(dsn, autocommit=True), schema, timeout=timedelta(microseconds=300)
    )
    try:
        q = collector._open()
        shown = within_1ms(lambda: q.conn.execute("SHOW statement_timeout").fetchone())
        assert shown == ("1ms",)
    finally:
        collector.close()


def within_1ms(attempt: Callable[[], Any]) -> Any:
    """`attempt()`, again while the 1 ms statement timeout it reads cancels it: on a crowded
    machine even SHOW outlasts 1 ms (PostgreSQL 15 in CI, 1 run in ~10)."""
    for _ in range(200):
        try:
            return attempt()
        except psycopg.errors.QueryCanceled:
            continue
    return attempt()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("1e12", "at most"), ("nan", "not a duration"), ("inf", "too long")],
)
def test_a_statement_timeout_postgresql_cannot_take_is_a_usage_error(
    dsn: str, schema: str, value: str, fragment: str
) -> None:
    """Before: 1e12 reached the server ("database error: invalid value for parameter", exit
    1) and nan read "cannot convert float NaN to integer"."""
    result = run("--dsn", dsn, "--schema", schema, "--statement-timeout", value, "stats")
    one_error_line(result, 2, "--statement-timeout", fragment)


def test_permission_is_named(
    dsn: str, schema: str, throwaway_role: tuple[str, psycopg.Connection[Any]]
) -> None:
    role_dsn, admin = throwaway_role
    role = str(conninfo_to_dict(role_dsn)["user"])
    admin.execute(
        sql.SQL("REVOKE SELECT ON ALL TABLES IN SCHEMA {} FROM {}").format(
            sql.Identifier(schema), sql.Identifier(role)
        )
    )
    one_error_line(run("--dsn", role_dsn, "--schema", schema, "jobs"), 1, "permission denied")


# ---------------------------------------------------------------------------- bounds


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--lease", "1e13"], "between 1s and 1d"),
        (["--lease", "1ms"], "between 1s and 1d"),
        (["--lease", "0.5"], "between 1s and 1d"),
        (["--concurrency", "1000000000000"], str(CONCURRENCY_MAX)),
        (["--grace", "1e13"], "--grace"),
    ],
)
def test_worker_values_that_cannot_work_are_usage_errors(args: list[str], fragment: str) -> None:
    result = run("worker", "q", "--handler", "tests.handlers_for_tests:noop", *args)
    one_error_line(result, 2, fragment)


def test_bounds_for_the_worker_engineer() -> None:
    assert check_lease(timedelta(seconds=30)) == timedelta(seconds=30)
    for bad in (timedelta(milliseconds=999), timedelta(days=1, seconds=1)):
        with pytest.raises(ValueError):
            check_lease(bad)
    assert check_concurrency(CONCURRENCY_MAX) == CONCURRENCY_MAX
    with pytest.raises(ValueError):
        check_concurrency(CONCURRENCY_MAX + 1)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("é" * (QUEUE_NAME_MAX_BYTES // 2 + 1), "bytes long"),
        ("a\x00b", "NUL"),
        ("", "empty"),
        ("  ", "empty"),
    ],
)
def test_queue_names_that_cannot_work(
    dsn: str, schema: str, conn: psycopg.Connection[Any], queue: Queue, name: str, fragment: str
) -> None:
    result = run("--dsn", dsn, "--schema", schema, "enqueue", name, "{}")
    one_error_line(result, 2, fragment)
    if name.strip():
        with pytest.raises(ValueError, match=fragment):
            queue.enqueue(name, {})
    assert count_jobs(conn, schema) == 0


RAW_BYTE = "\udcff"  # how Python hands over a command-line byte that is not UTF-8


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", "q", f'"{RAW_BYTE}"'],
        ["enqueue", "q", f'{{"{RAW_BYTE}": 1}}'],
        ["schedule", "add", "s", "--queue", "q", "--cron", "* * * * *", "--payload",
         f'"{RAW_BYTE}"'],
        ["pause", "q", "--reason", f"r{RAW_BYTE}"],
        ["kill", "{id}", "--reason", f"r{RAW_BYTE}"],
        ["errors", "--queue", f"q{RAW_BYTE}"],
    ],
    ids=["payload", "payload-key", "schedule-payload", "pause-reason", "kill-reason", "errors"],
)
def test_text_that_is_not_utf8_is_a_usage_error(
    dsn: str, schema: str, conn: psycopg.Connection[Any], queue: Queue, args: list[str]
) -> None:
    """A raw byte that is not UTF-8 on the command line is named, exit 2, and nothing changes.
    Before: "unexpected UnicodeEncodeError" (exit 1), or for a payload "database error:
    invalid input syntax for type json" (exit 1)."""
    job_id = queue.enqueue("q", {})
    args = [a.replace("{id}", str(job_id)) for a in args]
    result = run("--dsn", dsn, "--schema", schema, *args)
    one_error_line(result, 2, "not valid UTF-8")
    assert "UnicodeEncodeError" not in result.stderr
    assert count_jobs(conn, schema) == 1
    assert queue.job(job_id).status == "ready"
    assert queue.stats()[0].paused is False
    assert queue.list_schedules() == []


def _schema_exists(conn: psycopg.Connection[Any], name: str) -> bool:
    found = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", [f'"{name}"']).fetchone()
    return bool(found and found[0])


@pytest.mark.parametrize("name", ["information_schema", "pg_catalog", "pg_pgq"])
def test_a_system_schema_is_refused_by_name(
    dsn: str, conn: psycopg.Connection[Any], name: str
) -> None:
    """Before: `--schema information_schema migrate` installed the queue among the system
    views (pg_dump leaves that schema out: backups lost the queue), and `stats` there said
    "run `pgq migrate` first"; a pg_ name was "database error: unacceptable schema name"."""
    result = run("--dsn", dsn, "--schema", name, "stats")
    one_error_line(result, 1, "invalid schema name", "reserved")
    with pytest.raises(PgqError, match="reserved"):
        check_schema(name)
    assert check_schema("PG_upper") == "PG_upper"  # PostgreSQL reserves lower-case pg_ only


def test_migrate_refuses_a_schema_name_it_would_have_to_quote(
    conn: psycopg.Connection[Any],
) -> None:
    """The migrations put the schema inside string literals (regclass casts in function
    bodies): the core `migrate` checks the name itself, before anything is created. Before, it
    relied on its callers, so `migrate(conn, "x'y")` created schema x'y and failed half-way
    with a syntax error (a crafted name would have written SQL into those functions)."""
    name = f"t_{secrets.token_hex(3)}'y"
    try:
        with pytest.raises(PgqError, match="invalid schema name"):
            migrate(conn, name)
        assert not _schema_exists(conn, name)
    finally:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_the_longest_queue_name_allowed_works(queue: Queue) -> None:
    name = secrets.token_hex(QUEUE_NAME_MAX_BYTES // 2)
    assert queue.job(queue.enqueue(name, {})).queue == name


@pytest.mark.parametrize("when", ["0001-01-01", "1969-12-31T00:00:00+00:00", "9999-12-31T23:59"])
def test_run_at_out_of_range_is_a_usage_error(
    dsn: str, schema: str, conn: psycopg.Connection[Any], when: str
) -> None:
    result = run("--dsn", dsn, "--schema", schema, "enqueue", "q", "--run-at", when)
    one_error_line(result, 2, "--run-at")
    assert count_jobs(conn, schema) == 0


def test_a_deep_line_is_named(dsn: str, schema: str, conn: psycopg.Connection[Any]) -> None:
    text = '{"a": 1}\n{"b": 2}\n' + "[" * 100_000 + "]" * 100_000 + "\n"
    result = run("--dsn", dsn, "--schema", schema, "enqueue", "q", "--file", "-", input=text)
    one_error_line(result, 2, "line 3", "nested too deeply", "nothing was enqueued")
    assert count_jobs(conn, schema) == 0


#: (SQL for the payload, a piece of it `pgq show` prints as stored)
UNREADABLE = {
    "deep": ("('{\"a\":' || repeat('[', 5000) || repeat(']', 5000) || '}')::jsonb", "[" * 40),
    "long-number": ("('{\"n\":' || repeat('9', 5000) || '}')::jsonb", "9" * 40),
}


@pytest.mark.parametrize("kind", list(UNREADABLE))
def test_a_payload_python_cannot_read_is_one_clear_error_never_a_traceback(
    dsn: str, schema: str, conn: psycopg.Connection[Any], queue: Queue, kind: str
) -> None:
    """Plain SQL can store JSON that Python's json cannot load (nested 5,000 deep, an integer
    of 5,000 digits). Reading that job is one clear error (PgqError), `pgq show` still shows
    every column and the payload as stored, and `pgq show --json` says why in one line, or
    prints the integer's digits (it reads numbers exactly, as `jsontext.loads`)."""
    (job_id,) = conn.execute(
        sql.SQL("INSERT INTO {}.jobs (queue, payload) VALUES ('q', {}) RETURNING id").format(
            sql.Identifier(schema), sql.SQL(UNREADABLE[kind][0])
        )
    ).fetchone() or (0,)
    with pytest.raises(PgqError, match="cannot be read by Python"):
        queue.job(job_id)
    shown = run("--dsn", dsn, "--schema", schema, "show", str(job_id))
    assert shown.exit_code == 0, shown.output
    assert "Traceback" not in shown.output and "unexpected" not in shown.output
    assert UNREADABLE[kind][1] in shown.stdout
    as_json = run("--dsn", dsn, "--schema", schema, "show", str(job_id), "--json")
    if kind == "long-number":
        assert as_json.exit_code == 0, as_json.output
        shown_json = json.loads(as_json.stdout, parse_int=Decimal)
        assert shown_json["payload"] == {"n": Decimal("9" * 5000)}
        assert '"n": ' + "9" * 5000 + "\n" in as_json.stdout
    else:
        one_error_line(as_json, 1, "cannot be read by Python", "plain SQL")


def test_a_too_large_line_is_named(
    dsn: str, schema: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(enqueue_cli, "PAYLOAD_MAX_BYTES", 1000)
    text = '{"a": 1}\n' + json.dumps({"big": "x" * 2000}) + "\n"
    result = run("--dsn", dsn, "--schema", schema, "enqueue", "q", "--file", "-", input=text)
    one_error_line(result, 2, "line 2 is too large", "nothing was enqueued")
    assert count_jobs(conn, schema) == 0


def test_a_file_goes_in_statements_bounded_by_bytes(
    dsn: str, schema: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(enqueue_cli, "ENQUEUE_STEP_BYTES", 3000)
    lines = [json.dumps({"i": i, "pad": "x" * 900}) for i in range(20)]
    result = run(
        "--dsn", dsn, "--schema", schema, "enqueue", "q", "--file", "-", "--json",
        input="\n".join(lines) + "\n",
    )
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 20 == count_jobs(conn, schema)
    steps = list(enqueue_cli._steps([(object(), 1000)] * 20, enqueue_cli.COPY_STEP))
    assert [len(s) for s in steps] == [3] * 6 + [2]
    assert [len(s) for s in enqueue_cli._steps([(object(), 1)] * 20, 8)] == [8, 8, 4]


def test_show_prints_the_first_part_of_a_large_payload(
    dsn: str, schema: str, queue: Queue
) -> None:
    big = {"items": ["y" * 100] * 2000}
    job_id = queue.enqueue("big", big)
    started = time.monotonic()
    result = run("--dsn", dsn, "--schema", schema, "show", str(job_id))
    assert time.monotonic() - started < 5
    assert result.exit_code == 0, result.output
    assert "--full shows all" in result.stdout
    assert result.stdout.count("y" * 100) < 700
    full = run("--dsn", dsn, "--schema", schema, "show", str(job_id), "--full")
    assert full.exit_code == 0, full.output
    assert full.stdout.count("y" * 100) == 2000
    small = run("--dsn", dsn, "--schema", schema, "show", str(queue.enqueue("s", {"k": 1})))
    assert '"k": 1' in small.stdout and "--full" not in small.stdout


def test_help_lists_lazy_commands_as_they_describe_themselves() -> None:
    for name, (module, attribute, short) in cli.LazyGroup.LAZY.items():
        command = getattr(__import__(module, fromlist=[attribute]), attribute)
        assert (command.help or "").split("\n\n")[0].replace("\n", " ").startswith(
            short.rstrip(".")
        ), name


def test_help_imports_no_heavy_module() -> None:
    code = (
        "import sys; from pgq_cli.cli import main\n"
        "heavy = [m for m in ('textual', 'pgq_tui', 'pgq_bench', 'pgq_core.worker',"
        " 'rich.progress') if m in sys.modules]\n"
        "print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]"
