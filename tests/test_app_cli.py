"""`pgq enqueue --unique-key`, `pgq schedule ...` and `pgq worker --tasks` through the real
command line: happy paths checked in the database, bad input one `pgq: error:` line."""

from __future__ import annotations

import json

import pytest
from support import Pgq, error_line, ok

from pgq_core import Queue


def test_enqueue_unique_key_twice_makes_one_job(pgq: Pgq, queue: Queue) -> None:
    first = ok(pgq("enqueue", "orders", '{"order": 42}', "--unique-key", "order:42"))
    job_id = int(first.split()[2])
    again = ok(pgq("enqueue", "orders", '{"order": 42}', "--unique-key", "order:42"))
    assert again.strip() == f"job {job_id} already holds unique key order:42; nothing enqueued"
    assert json.loads(ok(pgq("enqueue", "orders", "--unique-key", "order:42", "--json"))) == [
        job_id
    ]
    assert len(queue.jobs()) == 1
    shown = ok(pgq("show", str(job_id)))
    assert "unique key" in shown and "order:42" in shown
    listed = json.loads(ok(pgq("jobs", "--json")))
    assert listed[0]["unique_key"] == "order:42"
    assert json.loads(ok(pgq("show", str(job_id), "--json")))["unique_key"] == "order:42"


def test_unique_key_shown_printable(pgq: Pgq, queue: Queue) -> None:
    job_id = queue.enqueue("q", {}, unique_key="k\x1b[31m")
    out = ok(pgq("enqueue", "q", "--unique-key", "k\x1b[31m"))
    assert "\x1b" not in out and "\\x1b" in out
    assert "\x1b" not in ok(pgq("show", str(job_id)))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--unique-key", ""], "unique key must not be empty"),
        (["--unique-key", "x" * 3000], "at most 2048 fit"),
        (["--unique-key", "k", "--file", "-"], "does not go with --file"),
    ],
)
def test_enqueue_unique_key_usage_errors(
    pgq: Pgq, queue: Queue, args: list[str], fragment: str
) -> None:
    error_line(pgq("enqueue", "q", *args, input="{}\n"), 2, fragment)
    assert queue.jobs() == []


def test_requeue_says_when_a_unique_key_is_held(pgq: Pgq, queue: Queue) -> None:
    dead = queue.enqueue("q", {}, unique_key="k")
    queue.kill([dead])
    queue.enqueue("q", {}, unique_key="k")
    out = ok(pgq("requeue", str(dead)))
    assert "requeued no jobs" in out and "unique key" in out
    out = ok(pgq("requeue", "--queue", "q", "--dead"))
    assert f"left dead (a ready or running job holds their unique key): {dead}" in out


def test_schedule_add_list_run_remove(pgq: Pgq, queue: Queue) -> None:
    added = ok(
        pgq(
            "schedule", "add", "digest", "--queue", "emails", "--cron", "*/5 * * * *",
            "--payload", '{"kind": "digest"}', "--max-attempts", "3",
        )
    )
    assert added.startswith("schedule digest: */5 * * * * on emails; next run ")
    listed = json.loads(ok(pgq("schedule", "list", "--json")))
    assert len(listed) == 1
    entry = listed[0]
    assert (entry["name"], entry["queue"], entry["cron"], entry["payload"]) == (
        "digest", "emails", "*/5 * * * *", {"kind": "digest"}
    )
    assert entry["last_slot"] is None and entry["next_slot"].endswith("+00:00")
    table = ok(pgq("schedule", "list"))
    assert "digest" in table and "never" in table and "*/5 * * * *" in table
    ran = ok(pgq("schedule", "run", "digest"))
    job_id = int(ran.split()[2])
    assert queue.job(job_id).payload == {"kind": "digest"}
    assert json.loads(ok(pgq("schedule", "run", "digest", "--json")))[0] > job_id
    assert ok(pgq("schedule", "remove", "digest")).strip() == "removed schedule digest"
    assert ok(pgq("schedule", "list")).strip() == "no schedules"


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["add", "s", "--queue", "q", "--cron", "not cron"], 2, "bad cron expression"),
        (["add", "s", "--queue", "q", "--cron", "99 * * * *"], 2, "Bad minute"),
        (["add", "s", "--queue", "q", "--cron", "* * * * *", "--payload", "{"], 2, "JSON"),
        (["add", "s", "--queue", "", "--cron", "* * * * *"], 2, "queue name"),
        (["add", "", "--queue", "q", "--cron", "* * * * *"], 2, "schedule name"),
        (["add", "s", "--cron", "* * * * *"], 2, "--queue"),
        (["remove", "nope"], 1, "no schedule named 'nope'"),
        (["run", "nope"], 1, "no schedule named 'nope'"),
        (["frobnicate"], 2, "No such command"),
    ],
)
def test_schedule_bad_input(
    pgq: Pgq, queue: Queue, args: list[str], code: int, fragment: str
) -> None:
    error_line(pgq("schedule", *args), code, fragment)
    assert queue.list_schedules() == []


def test_schedule_add_twice_needs_replace(pgq: Pgq, queue: Queue) -> None:
    ok(pgq("schedule", "add", "s", "--queue", "q", "--cron", "* * * * *"))
    error_line(  # it did not say how to change it (the test failed before)
        pgq("schedule", "add", "s", "--queue", "q", "--cron", "0 * * * *"),
        1,
        "schedule s already exists: add --replace to change it (its last run is kept), or "
        "remove it first",
    )
    ok(pgq("schedule", "add", "s", "--queue", "r", "--cron", "0 * * * *", "--replace"))
    assert [(s.queue, s.cron) for s in queue.list_schedules()] == [("r", "0 * * * *")]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["q"], "give --handler or --tasks"),
        (["q", "--handler", "m:f", "--tasks", "m:t"], "give --handler or --tasks"),
        (["--handler", "handlers_for_tests:noop"], "give at least one QUEUE"),
        (["--tasks", "pgq_core:Queue"], "not a pgq_core.Tasks registry"),
    ],
)
def test_worker_tasks_usage_errors(pgq: Pgq, args: list[str], fragment: str) -> None:
    error_line(pgq("worker", *args), 2, fragment)
