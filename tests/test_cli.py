"""The `pgq` command line on a real server: every command's happy path, checked in the
database, and every bad input, which must be one `pgq: error:` line and a non-zero exit."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from support import ENV, Pgq, error_line, ok

from pgq_cli.cli import main
from pgq_core import Queue, ops
from pgq_core.migrate import migrations

LEASE = timedelta(seconds=30)
UNREACHABLE = "postgresql://pgq:s3cret@127.0.0.1:1/pgq?connect_timeout=3"
def q(schema: str, text: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def scalar(conn: psycopg.Connection[Any], schema: str, text: str, *params: Any) -> Any:
    found = conn.execute(q(schema, text), params).fetchone()
    assert found is not None
    return found[0]


def count_jobs(conn: psycopg.Connection[Any], schema: str) -> int:
    return int(scalar(conn, schema, "SELECT count(*) FROM {s}.jobs"))


def status_of(queue: Queue, job_id: int) -> str:
    return queue.job(job_id).status


def dead_job(queue: Queue, name: str = "mail") -> int:
    job_id = queue.enqueue(name, {})
    queue.kill([job_id])
    return job_id


def done_job(queue: Queue, name: str = "mail") -> int:
    job_id = queue.enqueue(name, {})
    [job] = queue.claim(name, 1, LEASE, "w")
    queue.complete(job.id, job.fence)
    return job_id


# ---------------------------------------------------------------------------- migrate, stats


def test_migrate_creates_the_schema_then_reports_up_to_date(dsn: str, conn: Any) -> None:
    name = f"t_{secrets.token_hex(5)}"
    runner = CliRunner(env=ENV)
    try:
        first = ok(runner.invoke(main, ["--dsn", dsn, "--schema", name, "migrate"]))
        again = ok(runner.invoke(main, ["--dsn", dsn, "--schema", name, "migrate"]))
        versions = ", ".join(str(v) for v, _, _ in migrations())
        assert first.strip() == f"schema {name}: applied version(s) {versions}"
        assert again.strip() == f"schema {name}: up to date"
        assert scalar(conn, name, "SELECT count(*) FROM {s}.jobs") == 0
    finally:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_stats_counts_each_status_per_queue(pgq: Pgq, queue: Queue) -> None:
    queue.enqueue("mail", {})
    queue.enqueue("mail", {})
    queue.claim("mail", 1, LEASE, "w")
    dead_job(queue)
    done_job(queue)
    queue.enqueue("sms", {}, delay=timedelta(hours=1))

    rows = {r["queue"]: r for r in json.loads(ok(pgq("stats", "--json")))}
    assert set(rows) == {"mail", "sms"}
    mail = rows["mail"]
    assert (mail["ready"], mail["running"], mail["dead"], mail["done"]) == (1, 1, 1, 1)
    assert (rows["sms"]["ready"], rows["sms"]["scheduled"]) == (0, 1)

    table = ok(pgq("stats"))
    assert "mail" in table and "sms" in table and "dead" in table


# ---------------------------------------------------------------------------- enqueue


def test_enqueue_one_payload_with_max_attempts(pgq: Pgq, queue: Queue) -> None:
    [job_id] = json.loads(
        ok(pgq("enqueue", "mail", '{"to": "a@example.com"}', "--max-attempts", "3", "--json"))
    )
    job = queue.job(job_id)
    assert (job.queue, job.payload, job.max_attempts, job.status) == (
        "mail",
        {"to": "a@example.com"},
        3,
        "ready",
    )
    assert [e.event for e in job.history] == ["enqueued"]


def test_enqueue_without_payload_enqueues_an_empty_object(pgq: Pgq, queue: Queue) -> None:
    out = ok(pgq("enqueue", "mail"))
    job_id = int(out.split()[2])
    assert out.strip() == f"enqueued job {job_id} on mail"
    assert queue.job(job_id).payload == {}


def test_enqueue_any_json_value(pgq: Pgq, queue: Queue) -> None:
    ids = [
        json.loads(ok(pgq("enqueue", "m", text, "--json")))[0]
        for text in ('"hi"', "42", "[1, 2]", "null")
    ]
    assert [queue.job(i).payload for i in ids] == ["hi", 42, [1, 2], None]


def test_enqueue_delay_and_run_at_schedule_the_job(
    pgq: Pgq, queue: Queue, conn: Any, schema: str
) -> None:
    [delayed] = json.loads(ok(pgq("enqueue", "mail", "{}", "--delay", "1h", "--json")))
    due_in = scalar(conn, schema, "SELECT run_at - now() FROM {s}.jobs WHERE id = %s", delayed)
    assert timedelta(minutes=59) < due_in <= timedelta(hours=1)

    [fixed] = json.loads(
        ok(pgq("enqueue", "mail", "{}", "--run-at", "2030-01-31T09:00:00+00:00", "--json"))
    )
    assert queue.job(fixed).run_at == datetime(2030, 1, 31, 9, tzinfo=UTC)

    [local] = json.loads(ok(pgq("enqueue", "mail", "--run-at", "2030-01-31T09:00:00", "--json")))
    assert queue.job(local).run_at == datetime(2030, 1, 31, 9).astimezone()
    assert queue.claim("mail", 10, LEASE, "w") == []


def test_enqueue_file_skips_blank_lines_and_keeps_order(
    pgq: Pgq, queue: Queue, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"n": 1}\n\n   \n{"n": 2}\n{"n": 3}')
    ids = json.loads(
        ok(pgq("enqueue", "mail", "--file", str(jobs), "--max-attempts", "2", "--json"))
    )
    assert len(ids) == 3
    assert [queue.job(i).payload for i in ids] == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert {queue.job(i).max_attempts for i in ids} == {2}

    out = ok(pgq("enqueue", "mail", "--file", str(jobs)))
    assert out.startswith("enqueued 3 jobs on mail (ids ")


def test_enqueue_file_with_a_byte_order_mark(pgq: Pgq, queue: Queue, tmp_path: Path) -> None:
    jobs = tmp_path / "bom.jsonl"
    jobs.write_bytes('{"name": "Zoë"}\r\n{"n": 2}\r\n'.encode("utf-8-sig"))
    ids = json.loads(ok(pgq("enqueue", "mail", "--file", str(jobs), "--json")))
    assert [queue.job(i).payload for i in ids] == [{"name": "Zoë"}, {"n": 2}]


def test_enqueue_file_from_stdin(pgq: Pgq, conn: Any, schema: str) -> None:
    out = ok(pgq("enqueue", "mail", "--file", "-", input='{"a": 1}\n{"b": 2}\n'))
    assert out.startswith("enqueued 2 jobs")
    assert count_jobs(conn, schema) == 2


def test_enqueue_dash_reads_one_payload_from_stdin(
    pgq: Pgq, queue: Queue, conn: Any, schema: str
) -> None:
    """`pgq enqueue thumbs -` said "not valid JSON" of the dash (only --file - read stdin)."""
    [job_id] = json.loads(
        ok(pgq("enqueue", "thumbs", "-", "--json", input='{\n  "image": "a.jpg",\n  "w": 320\n}\n'))
    )
    assert queue.job(job_id).payload == {"image": "a.jpg", "w": 320}
    assert queue.job(job_id).queue == "thumbs"
    for stdin, fragment in [
        ("", "stdin is empty: give one JSON value"),
        ("  \n", "stdin is empty: give one JSON value"),
        ('{"a": 1}\n{"b": 2}\n', "not valid JSON (Extra data"),
        (b"\xff{}", "stdin is not UTF-8 text"),
    ]:
        error_line(pgq("enqueue", "thumbs", "-", input=stdin), 2, fragment)
    assert count_jobs(conn, schema) == 1


def test_enqueue_empty_file_enqueues_nothing(pgq: Pgq, conn: Any, schema: str) -> None:
    out = ok(pgq("enqueue", "mail", "--file", "-", input="\n\n"))
    assert "nothing enqueued" in out
    assert count_jobs(conn, schema) == 0


def test_enqueue_big_file_is_one_transaction(
    pgq: Pgq, conn: Any, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 000 lines go in in several steps; a database error in a late step leaves nothing,
    and its line says so."""
    from pgq_cli import enqueue_cli

    monkeypatch.setattr(enqueue_cli, "COPY_STEP", 5000)
    big = tmp_path / "big.jsonl"
    big.write_text("".join(f'{{"n": {n}}}\n' for n in range(12_000)))
    assert json.loads(ok(pgq("enqueue", "bulk", "--file", str(big), "--json")))[-1] > 0
    assert count_jobs(conn, schema) == 12_000
    conn.execute(q(schema, "DELETE FROM {s}.jobs"))

    conn.execute(
        q(
            schema,
            """
        CREATE FUNCTION {s}.refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.payload ? 'boom' THEN RAISE EXCEPTION 'boom refused'; END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_boom BEFORE INSERT ON {s}.jobs
          FOR EACH ROW EXECUTE FUNCTION {s}.refuse_boom();
    """,
        )
    )
    lines = [f'{{"n": {n}}}\n' for n in range(12_000)]
    lines[11_000] = '{"boom": true}\n'
    big.write_text("".join(lines))
    said = f"nothing from {big} was enqueued"  # the error says so: the file is one transaction
    error_line(pgq("enqueue", "bulk", "--file", str(big)), 1, "boom refused", said)
    error_line(pgq("enqueue", "bulk", "--file", "-", input=big.read_text()), 1, "from stdin")
    line = error_line(pgq("enqueue", "b", "--file", str(big), "--after", "999999"), 1, "999999")
    assert line.count("nothing") == 1, "said once, not twice"
    assert count_jobs(conn, schema) == 0


def test_a_data_error_the_lines_do_not_explain_is_the_servers(
    pgq: Pgq, conn: Any, schema: str, tmp_path: Path
) -> None:
    """A data exception from the COPY (here a trigger's) sends `--file` back to its reader to
    name the line; when every line reads as JSON, the server's error is said, in one line, and
    nothing is enqueued."""
    conn.execute(
        q(
            schema,
            """
        CREATE FUNCTION {s}.refuse_odd() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.payload ? 'odd' THEN
            RAISE EXCEPTION 'odd refused' USING ERRCODE = 'invalid_parameter_value';
          END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_odd BEFORE INSERT ON {s}.jobs
          FOR EACH ROW EXECUTE FUNCTION {s}.refuse_odd();
    """,
        )
    )
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"n": 1}\n{"odd": 2}\n')
    said = error_line(pgq("enqueue", "odd", "--file", str(jobs)), 1, "odd refused")
    assert f"nothing from {jobs} was enqueued" in said, said
    assert count_jobs(conn, schema) == 0


def test_enqueue_file_in_a_pipe_loads_neither_rich_nor_the_embedded_server(
    dsn: str, schema: str, queue: Queue, tmp_path: Path
) -> None:
    """`pgq enqueue --file` is a process whose start is part of its cost: with a DSN given and
    stderr not a terminal it prints no progress, so Rich and the embedded server's module are
    never imported."""
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(f'{{"n": {n}}}\n' for n in range(6000)))
    code = (
        "import sys\n"
        "from pgq_cli.cli import main\n"
        "try:\n"
        f"    main(['--dsn', {dsn!r}, '--schema', {schema!r}, 'enqueue', 'q', '--file', "
        f"{str(jobs)!r}])\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
        "loaded = [m for m in sys.modules\n"
        "          if m.split('.')[0] == 'rich' or m == 'pgq_core.embedded']\n"
        "print(loaded, file=sys.stderr); sys.exit(1 if loaded else 0)\n"
    )
    unset = ("FORCE_TERMINAL", "TTY_COMPATIBLE", "PGQ_DSN", "PGQ_SCHEMA")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("enqueued 6,000 jobs on q")
    assert len(queue.jobs(queue="q", limit=10)) == 10


def test_enqueue_bad_payload_json(pgq: Pgq, conn: Any, schema: str) -> None:
    error_line(pgq("enqueue", "mail", "{to: 1}"), 2, "PAYLOAD_JSON", "not valid JSON")
    error_line(pgq("enqueue", "mail", "NaN"), 2, "not valid JSON")
    error_line(pgq("enqueue", "mail", '{"a": "\\u0000"}'), 2, "\\u0000")
    for number in ("1e9999999", "[1e-16384]", "1" + "0" * 131072):  # more than jsonb holds
        error_line(pgq("enqueue", "mail", number), 2, "out of range")
    assert count_jobs(conn, schema) == 0


def test_enqueue_bad_line_names_it_and_enqueues_nothing(
    pgq: Pgq, conn: Any, schema: str, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"n": 1}\n{"n": 2}\n\n{"n": 3,}\n{"n": 5}\n')
    line = error_line(pgq("enqueue", "mail", "--file", str(jobs)), 2, "line 4", "jobs.jsonl")
    assert "nothing was enqueued" in line
    error_line(pgq("enqueue", "mail", "--file", "-", input='{}\n{"a": NaN}\n'), 2, "stdin: line 2")
    # the server reads each line (COPY); a line it refuses is named as Python's reading names it
    for bad, why in (('{"a": "\\u0000"}', "\\u0000"), ("[" * 5000 + "]" * 5000, "too deeply"),
                     ("1e131072", "out of range"), ('"\\udc00"', "surrogate")):  # fmt: skip
        text = '{"n": 1}\r\n' * 3 + f"{bad}\r\n" + '{"n": 2}\n'
        said = error_line(pgq("enqueue", "mail", "--file", "-", input=text), 2, "stdin: line 4")
        assert why in said and "nothing was enqueued" in said, said
    assert count_jobs(conn, schema) == 0


@pytest.mark.parametrize("may_copy", [True, False])
def test_enqueue_file_refuses_a_line_ending_in_what_json_calls_no_whitespace(
    pgq: Pgq, conn: Any, schema: str, may_copy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSON's whitespace is a space, tab, LF or CR: a line ending in any other (a form feed,
    a no-break space) is refused by jsonb, on the COPY path, and now by Python's reading too,
    which names it, on either path. Python stripped any Unicode whitespace: a role that may
    not COPY enqueued the file, and one that may failed with the server's error, unnamed
    ("invalid input syntax for type json", exit 1)."""
    if not may_copy:
        real = ops.may_copy
        monkeypatch.setattr(
            ops, "may_copy", lambda s: dataclasses.replace(real(s), read=lambda rows: False)
        )
    for tail in ("\x0c", "\x0b", "\x1c", "\u00a0", "\u2003"):
        text = f'{{"n": 0}}\n{{"n": 1}}{tail}\r\n{{"n": 2}}\n'
        said = error_line(pgq("enqueue", "mail", "--file", "-", input=text), 2, "stdin: line 2")
        assert "not valid JSON" in said and "nothing was enqueued" in said, said
    assert count_jobs(conn, schema) == 0
    ok(pgq("enqueue", "mail", "--file", "-", input='{"n": 1} \t\r\n\f\n'))
    assert count_jobs(conn, schema) == 1, "trailing JSON whitespace, and a blank line, are fine"


def test_enqueue_file_lines_are_stored_as_written(
    pgq: Pgq, conn: Any, schema: str, tmp_path: Path
) -> None:
    """A line's text reaches jsonb as written: CRLF endings, a byte-order mark, tabs between
    tokens, backslashes, non-ASCII; blank and whitespace-only lines are skipped."""
    lines = ['{"path": "C:\\\\new\\ttab",\t"n": 1.10}', "  [1,\t2]  ", "\t "]
    lines += ['"\u2603 \\u00e9"', ""]
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode())
    ids = json.loads(ok(pgq("enqueue", "mail", "--file", str(jobs), "--json")))
    stored = conn.execute(
        q(schema, "SELECT payload::text FROM {s}.jobs WHERE id = ANY(%s) ORDER BY id"), [ids]
    ).fetchall()
    texts = [lines[0], lines[1], lines[3]]
    assert stored == [conn.execute("SELECT %s::jsonb::text", [t]).fetchone() for t in texts]
    assert "1.10" in stored[0][0] and "\u2603 \u00e9" in stored[2][0]


def test_enqueue_file_that_is_not_text(pgq: Pgq, tmp_path: Path) -> None:
    binary = tmp_path / "jobs.bin"
    binary.write_bytes(b'{"n": 1}\n\n\xff\xfe\x00\n{"n": 2}\n')
    error_line(pgq("enqueue", "mail", "--file", str(binary)), 2, "line 3 is not UTF-8")
    error_line(pgq("enqueue", "mail", "--file", str(tmp_path / "missing")), 2, "missing")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["mail", "{}", "--file", "-"], ["PAYLOAD_JSON or --file"]),
        (["mail", "--delay", "5x"], ["--delay", "not a duration: '5x'"]),
        (["mail", "--delay", "-5s"], ["--delay", "not a duration: '-5s'"]),
        (["mail", "--run-at", "tomorrow"], ["--run-at", "ISO 8601"]),
        (["mail", "--delay", "1s", "--run-at", "2030-01-01"], ["--delay or --run-at"]),
        (["mail", "--max-attempts", "0"], ["--max-attempts", "0 is not in the range"]),
        (["mail", "--max-attempts", "x"], ["--max-attempts"]),
        (["mail", "--max-attempts", str(2**31)], ["--max-attempts"]),
        (["mail", "--delay", "99999999999w"], ["--delay", "too long"]),
        (["", "{}"], ["queue name must not be empty"]),
        ([], ["Missing argument 'QUEUE'"]),
    ],
)
def test_enqueue_usage_errors(
    pgq: Pgq, conn: Any, schema: str, args: list[str], fragments: list[str]
) -> None:
    error_line(pgq("enqueue", *args, input="{}\n"), 2, *fragments)
    assert count_jobs(conn, schema) == 0


# ---------------------------------------------------------------------------- jobs, show


def test_jobs_filters_by_queue_and_status_newest_first(pgq: Pgq, queue: Queue) -> None:
    first = queue.enqueue("mail", {})
    second = queue.enqueue("mail", {})
    other = queue.enqueue("sms", {})
    [claimed] = queue.claim("mail", 1, LEASE, "w-1")
    assert claimed.id == first

    listed = json.loads(ok(pgq("jobs", "--json")))
    assert [r["id"] for r in listed] == [other, second, first]
    running = json.loads(ok(pgq("jobs", "--queue", "mail", "--status", "running", "--json")))
    assert [(r["id"], r["status"], r["worker"], r["fence"]) for r in running] == [
        (first, "running", "w-1", 1)
    ]
    datetime.fromisoformat(running[0]["lease_until"])
    assert [r["id"] for r in json.loads(ok(pgq("jobs", "-q", "mail", "--json")))] == [second, first]
    assert [r["id"] for r in json.loads(ok(pgq("jobs", "--limit", "1", "--json")))] == [other]
    assert json.loads(ok(pgq("jobs", "--status", "dead", "--json"))) == []

    table = ok(pgq("jobs", "--queue", "mail"))
    assert "w-1" in table and "running" in table and "sms" not in table
    assert ok(pgq("jobs", "--status", "done")).strip() == "no jobs"


def test_jobs_bad_options(pgq: Pgq) -> None:
    error_line(pgq("jobs", "--status", "finished"), 2, "--status", "'finished' is not one of")
    error_line(pgq("jobs", "--limit", "0"), 2, "--limit", "(see 'pgq jobs --help')")


def test_show_every_column_payload_and_history(pgq: Pgq, queue: Queue) -> None:
    job_id = queue.enqueue("mail", {"to": "a@example.com", "tags": [1, 2]}, max_attempts=4)
    [job] = queue.claim("mail", 1, LEASE, "w-1")
    queue.fail(job.id, job.fence, "smtp down")
    queue.kill([job_id], "operator gave up")

    detail = json.loads(ok(pgq("show", str(job_id), "--json")))
    assert set(detail) >= {
        "id",
        "queue",
        "status",
        "payload",
        "run_at",
        "attempts",
        "max_attempts",
        "lease_until",
        "fence",
        "last_error",
        "queued_at",
        "worker",
        "claimed_at",
        "lease_seconds",
        "finished_at",
        "history",
    }
    assert (detail["status"], detail["attempts"], detail["max_attempts"], detail["fence"]) == (
        "dead",
        1,
        4,
        2,
    )
    assert detail["payload"] == {"to": "a@example.com", "tags": [1, 2]}
    assert detail["last_error"] == "operator gave up"
    assert detail["lease_seconds"] == 30
    assert [(e["event"], e["fence"]) for e in detail["history"]] == [
        ("enqueued", 0),
        ("claimed", 1),
        ("failed", 1),
        ("killed", 2),
    ]

    human = ok(pgq("show", str(job_id)))
    assert '"to": "a@example.com"' in human
    assert '  "tags": [' in human
    for text in ("fence history", "claimed", "failed", "killed", "operator gave up", "w-1"):
        assert text in human


def test_show_unknown_job(pgq: Pgq) -> None:
    error_line(pgq("show", "424242"), 1, "no job with id 424242")
    error_line(pgq("show", "abc"), 2, "JOB_ID")
    error_line(pgq("show", "0"), 2, "JOB_ID")
    error_line(pgq("show", str(2**63)), 2, "JOB_ID")


# ---------------------------------------------------------------------------- requeue, kill


def test_requeue_ids_reports_the_ones_that_were_not_dead(pgq: Pgq, queue: Queue) -> None:
    dead = dead_job(queue)
    ready = queue.enqueue("mail", {})
    out = ok(pgq("requeue", str(dead), str(ready), str(dead)))
    assert f"requeued 1 job: {dead}" in out
    assert f"not requeued (not dead): {ready} (ready)" in out
    job = queue.job(dead)
    assert (job.status, job.attempts, job.history[-1].event) == ("ready", 0, "requeued")

    again = json.loads(ok(pgq("requeue", str(dead), "--json")))
    assert again == {"requeued": [], "not_requeued": [{"id": dead, "status": "ready"}]}


def test_requeue_dead_jobs_of_one_queue_then_of_all(pgq: Pgq, queue: Queue) -> None:
    mail = [dead_job(queue, "mail"), dead_job(queue, "mail")]
    sms = dead_job(queue, "sms")
    assert ok(pgq("requeue", "--queue", "mail", "--dead")).strip() == (
        "requeued 2 dead jobs of queue mail"
    )
    assert [status_of(queue, i) for i in [*mail, sms]] == ["ready", "ready", "dead"]

    assert json.loads(ok(pgq("requeue", "--all-queues", "--dead", "--json")))["requeued"] == [sms]
    assert status_of(queue, sms) == "ready"
    assert "requeued 0 dead jobs" in ok(pgq("requeue", "--all-queues", "--dead"))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["1", "--queue", "mail", "--dead"], "not both"),
        (["1", "--all-queues", "--dead"], "not both"),
        (["--queue", "mail"], "need --dead"),
        (["--queue", "mail", "--all-queues", "--dead"], "--queue or --all-queues"),
        ([], "give job ids"),
        (["x"], "JOB_ID"),
    ],
)
def test_requeue_usage_errors(pgq: Pgq, queue: Queue, args: list[str], fragment: str) -> None:
    dead = dead_job(queue)
    error_line(pgq("requeue", *args), 2, fragment)
    assert status_of(queue, dead) == "dead"


def test_requeue_unknown_id_changes_nothing(pgq: Pgq, queue: Queue) -> None:
    dead = dead_job(queue)
    error_line(pgq("requeue", str(dead), "424242"), 1, "no job id 424242", "nothing was changed")
    assert status_of(queue, dead) == "dead"


def test_kill_ready_and_running_jobs_but_not_finished_ones(
    pgq: Pgq, queue: Queue, conn: Any, schema: str
) -> None:
    ready = queue.enqueue("mail", {})
    running = queue.enqueue("mail", {}, delay=timedelta(seconds=0))
    [held] = queue.claim("mail", 1, LEASE, "w")
    done = done_job(queue, "other")
    result = json.loads(
        ok(pgq("kill", str(ready), str(running), str(done), "--reason", "bad data", "--json"))
    )
    assert result == {
        "killed": sorted([ready, running]),
        "not_killed": [{"id": done, "status": "done"}],
    }
    for job_id in (ready, running):
        job = queue.job(job_id)
        assert (job.status, job.last_error, job.history[-1].event) == ("dead", "bad data", "killed")
    assert queue.job(held.id).fence == held.fence + 1
    assert status_of(queue, done) == "done"

    out = ok(pgq("kill", str(ready)))
    assert "killed no jobs" in out and f"{ready} (dead)" in out


def test_kill_errors(pgq: Pgq, queue: Queue) -> None:
    ready = queue.enqueue("mail", {})
    error_line(pgq("kill", str(ready), "424242"), 1, "no job id 424242")
    assert status_of(queue, ready) == "ready"
    error_line(pgq("kill"), 2, "Missing argument")
    error_line(pgq("kill", str(ready), "--reason", " "), 2, "reason must not be empty")
    assert status_of(queue, ready) == "ready"


# ---------------------------------------------------------------------------- reap, prune


def test_reap_returns_expired_leases(pgq: Pgq, queue: Queue, conn: Any, schema: str) -> None:
    retry = queue.enqueue("mail", {})
    last = queue.enqueue("mail", {}, max_attempts=1)
    live = queue.enqueue("mail", {})
    queue.claim("mail", 3, LEASE, "w")
    conn.execute(
        q(
            schema,
            "UPDATE {s}.jobs SET lease_until = now() - interval '1 second' WHERE id = ANY(%s)",
        ),
        [[retry, last]],
    )
    out = ok(pgq("reap"))
    assert "reaped 2 jobs" in out
    assert f"ready again: {retry}" in out and f"dead (out of attempts): {last}" in out
    assert [status_of(queue, i) for i in (retry, last, live)] == ["ready", "dead", "running"]
    assert json.loads(ok(pgq("reap", "--json"))) == []
    assert ok(pgq("reap")).strip() == "no expired leases"


def test_prune_deletes_old_done_jobs_in_batches(
    pgq: Pgq, queue: Queue, conn: Any, schema: str
) -> None:
    old = [done_job(queue) for _ in range(5)]
    recent = done_job(queue)
    ready = queue.enqueue("mail", {})
    conn.execute(
        q(schema, "UPDATE {s}.jobs SET finished_at = now() - interval '8 days' WHERE id = ANY(%s)"),
        [old],
    )
    out = ok(pgq("prune", "--older-than", "7d", "--batch", "2"))
    assert out.strip() == "pruned 5 done jobs older than 7d"
    remaining = [r[0] for r in conn.execute(q(schema, "SELECT id FROM {s}.jobs ORDER BY id"))]
    assert remaining == [recent, ready]
    assert (
        scalar(conn, schema, "SELECT count(*) FROM {s}.job_events WHERE job_id = ANY(%s)", old) == 0
    )
    assert json.loads(ok(pgq("prune", "--older-than", "7d", "--json"))) == {
        "deleted": 0,
        "partitions_dropped": [],
        "history_rows_kept": 0,
        "partitions_locked": [],
        "orphan_rows_deleted": 0,
        "days_not_created": [],
    }


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--older-than", "7 days"], "not a duration: '7 days'"),
        (["--older-than", "7d", "--batch", "0"], "--batch"),
        ([], "Missing option '--older-than'"),
        (["--older-than", "999999999d"], "too long"),
        (["--older-than", "36526d"], "at most 100 years"),
    ],
)
def test_prune_usage_errors(pgq: Pgq, queue: Queue, args: list[str], fragment: str) -> None:
    """Before, --older-than 999999999d reached the server: 'timestamp out of range', exit 1."""
    done = done_job(queue)
    error_line(pgq("prune", *args), 2, fragment)
    assert status_of(queue, done) == "done"


def test_prune_takes_a_hundred_years(pgq: Pgq, queue: Queue) -> None:
    done = done_job(queue)
    assert "pruned 0 done jobs" in ok(pgq("prune", "--older-than", "36525d"))
    assert status_of(queue, done) == "done"


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "--older-than", "999999999d"],
        ["jobs", "--newer-than", "999999999d"],
        ["requeue", "--all-queues", "--dead", "--older-than", "999999999d"],
        ["requeue", "--all-queues", "--dead", "--newer-than", "999999999d"],
        ["kill", "--all-queues", "--newer-than", "999999999d"],
        ["delete", "--all-queues", "--newer-than", "999999999d"],
        ["delete", "--all-queues", "--older-than", "999999999d"],
        ["errors", "--since", "999999999d"],
        ["enqueue", "mail", "{}", "--delay", "999999999d"],
    ],
)
def test_a_duration_past_postgresqls_timestamps_is_a_usage_error(
    pgq: Pgq, queue: Queue, args: list[str]
) -> None:
    """Before, each reached the server ('timestamp out of range' or 'interval out of range',
    exit 1) or acted: an --older-than or --newer-than the database cannot subtract from now()
    is a usage error, exit 2, and nothing changes."""
    dead, done, ready = dead_job(queue), done_job(queue), queue.enqueue("mail", {})
    option = next(a for a in args if a.startswith("--") and a not in ("--all-queues", "--dead"))
    error_line(pgq(*args), 2, option, "too long")
    assert [status_of(queue, j) for j in (dead, ready, done)] == ["dead", "ready", "done"]
    assert len(queue.jobs(limit=10)) == 3


# ---------------------------------------------------------------------------- servers, schemas


@pytest.mark.parametrize(
    "args", [["stats"], ["jobs"], ["enqueue", "mail", "{}"], ["show", "1"], ["migrate"]]
)
def test_unreachable_server_is_one_line_without_the_password(args: list[str]) -> None:
    result = CliRunner(env=ENV).invoke(main, ["--dsn", UNREACHABLE, *args])
    line = error_line(result, 1, "database unavailable", "127.0.0.1")
    assert "s3cret" not in result.output and "s3cret" not in line


def test_password_in_a_bad_dsn_is_never_shown() -> None:
    result = CliRunner(env=ENV).invoke(main, ["--dsn", "host=x password=s3cret bogus=1", "stats"])
    error_line(result, 1, "invalid DSN")
    assert "s3cret" not in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["stats"],
        ["jobs"],
        ["enqueue", "mail"],
        ["enqueue", "mail", "--file", "-"],
        ["show", "1"],
        ["kill", "1"],
        ["reap"],
        ["requeue", "--all-queues", "--dead"],
        ["prune", "--older-than", "1d"],
    ],
)
def test_unmigrated_schema_says_run_migrate(dsn: str, args: list[str]) -> None:
    name = f"never_{secrets.token_hex(4)}"
    result = CliRunner(env=ENV).invoke(main, ["--dsn", dsn, "--schema", name, *args], input="{}\n")
    line = error_line(result, 1)
    assert line == f"pgq: error: schema '{name}' has no pgq tables: run `pgq migrate` first"


def test_invalid_schema_name_and_unknown_command(dsn: str) -> None:
    runner = CliRunner(env=ENV)
    error_line(
        runner.invoke(main, ["--dsn", dsn, "--schema", "no-dash", "stats"]),
        1,
        "invalid schema name",
    )
    error_line(runner.invoke(main, ["--dsn", dsn, "frobnicate"]), 2, "No such command")
    error_line(runner.invoke(main, ["--dsn", dsn, "stats", "--bogus"]), 2, "--bogus")


def test_help_still_shows_usage() -> None:
    result = CliRunner(env=ENV).invoke(main, ["enqueue", "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.stdout and "--file" in result.stdout


def test_console_script_bad_input_has_no_traceback(dsn: str, schema: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "PGQ_HOME": "/nonexistent-pgq-home"}
    bad_json = subprocess.run(
        [sys.executable, "-m", "pgq_cli", "--dsn", dsn, "--schema", schema,
         "enqueue", "m", "{oops"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert bad_json.returncode == 2
    assert bad_json.stdout == ""
    assert bad_json.stderr.startswith("pgq: error: Invalid value for 'PAYLOAD_JSON'")
    assert bad_json.stderr.count("\n") == 1 and "Traceback" not in bad_json.stderr

    unreachable = subprocess.run(
        [sys.executable, "-m", "pgq_cli", "--dsn", UNREACHABLE, "stats"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.count("\n") == 1 and "Traceback" not in unreachable.stderr
    assert "s3cret" not in unreachable.stderr + unreachable.stdout


def test_a_burst_worker_says_which_retries_it_leaves_waiting(
    dsn: str, schema: str, queue: Queue
) -> None:
    """It exited with failed jobs due again in a minute without a word: an operator thought
    the queue was drained (the test failed before)."""
    for _ in range(2):
        queue.enqueue("mail", {"error": "smtp down"}, backoff_base=30)
    queue.enqueue("mail", {"error": "bad address"}, max_attempts=1)
    done = subprocess.run(
        [sys.executable, "-m", "pgq_cli", "--dsn", dsn, "--schema", schema, "worker", "mail",
         "--handler", "tests.handlers_for_tests:fail_with", "--burst"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parent.parent)},
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 0, done.stderr
    [line] = [x for x in done.stderr.splitlines() if "waiting for their retry" in x]
    assert "exiting (--burst) with 2 failed job(s) waiting for their retry, the first at " in line
    assert "run the worker again then, or without --burst" in line
    seconds = float(line.split("(in ")[1].split("s)")[0])
    assert 60 * 0.75 - 2 <= seconds <= 60  # 30 s * 2**1, less up to a quarter
    queue.enqueue("other", {"error": "x"}, max_attempts=1)
    quiet = subprocess.run(
        [sys.executable, "-m", "pgq_cli", "--dsn", dsn, "--schema", schema, "worker", "other",
         "--handler", "tests.handlers_for_tests:fail_with", "--burst"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parent.parent)},
        cwd=Path(__file__).parent.parent,
    )
    assert quiet.returncode == 0 and "waiting for their retry" not in quiet.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("worker", "q"),  # no handler: a usage error
        ("worker", "q", "--handler", "no_such_module:f"),
        ("worker", "q", "--handler", "handlers_for_tests:noop", "--burst"),
    ],
)
def test_a_worker_run_in_process_leaves_the_signal_handlers_as_it_found_them(
    pgq: Pgq, args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pgq worker` records SIGTERM/SIGINT from its first line; in a process that goes on
    after it (a test, an embedding app) the handlers are put back, whichever way it ended:
    before, a usage error left SIGTERM recorded and ignored for the rest of the process."""
    import signal
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    pgq(*args)
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_counts_print_with_thousands_separators_and_job_ids_without() -> None:
    """One rule for every command (`pgq reap` printed `12000 jobs`, `pgq requeue --error ...`
    `12,000 jobs`): counts are read, ids are copied."""
    from pgq_cli import output

    assert output.plural(1, "job") == "1 job"
    assert output.plural(12000, "dead job") == "12,000 dead jobs"
    ids = list(range(10000, 11025))
    assert output.ids_text(ids) == ", ".join(map(str, ids[:20])) + ", … (1,005 more)"
