"""`pgq pause/resume/limit`, the filter grammar of `pgq jobs/requeue/kill/delete`, `pgq errors`
and `pgq health` on a real server: every filter, every bad filter input (one `pgq: error:` line,
exit 2), dry runs that change nothing, batches, history rows naming operator and filter."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import Pgq, error_line, ok, statuses

from pgq_core import Queue, ops
from pgq_core.defaults import QUEUE_NAME_MAX_BYTES
from pgq_core.filters import JobFilter, parse_payload_match
from pgq_core.queries import query_with

LEASE = timedelta(seconds=30)


def _fail_one(queue: Queue, job_id: int, name: str, error: str) -> None:
    """Claim the queue's ready jobs, fail `job_id` with `error`, hand the others back."""
    claimed = queue.claim(name, 1000, LEASE, "w")
    [job] = [j for j in claimed if j.id == job_id]
    queue.fail(job.id, job.fence, error)
    queue.release_many([(j.id, j.fence) for j in claimed if j.id != job_id])


def failed_job(queue: Queue, error: str, name: str = "mail", payload: Any = None) -> int:
    """A job that failed once and waits to retry, with `error`."""
    job_id = queue.enqueue(name, payload if payload is not None else {})
    _fail_one(queue, job_id, name, error)
    return job_id


def dead_job(queue: Queue, error: str, name: str = "mail", payload: Any = None) -> int:
    job_id = queue.enqueue(name, payload if payload is not None else {}, max_attempts=1)
    _fail_one(queue, job_id, name, error)
    return job_id


def done_job(queue: Queue, name: str = "mail", payload: Any = None) -> int:
    job_id = queue.enqueue(name, payload if payload is not None else {})
    claimed = queue.claim(name, 1000, LEASE, "w")
    [job] = [j for j in claimed if j.id == job_id]
    queue.complete(job.id, job.fence)
    queue.release_many([(j.id, j.fence) for j in claimed if j.id != job_id])
    return job_id


def ids_of(result_json: str) -> list[int]:
    return sorted(int(r["id"]) for r in json.loads(result_json))


def backdate(conn: psycopg.Connection[Any], schema: str, job_id: int, age: timedelta) -> None:
    conn.execute(
        sql.SQL(
            "UPDATE {}.jobs SET queued_at = now() - %(a)s, "
            "finished_at = CASE WHEN finished_at IS NOT NULL THEN now() - %(a)s END "
            "WHERE id = %(id)s"
        ).format(sql.Identifier(schema)),
        {"a": age, "id": job_id},
    )


# ---------------------------------------------------------------------------- pause, limit


def test_pause_resume_limit_and_stats(pgq: Pgq, queue: Queue) -> None:
    queue.enqueue("mail", {})
    out = ok(pgq("pause", "mail", "--reason", "deploy"))
    assert "paused queue mail (deploy)" in out
    [row] = json.loads(ok(pgq("stats", "--json")))
    assert (row["paused"], row["limit"], row["pause_reason"]) == (True, None, "deploy")
    assert row["paused_by"].startswith("operator:")
    assert "(paused)" in ok(pgq("stats"))
    assert queue.claim("mail", 1, LEASE, "w") == []

    assert "resumed queue mail" in ok(pgq("resume", "mail"))
    assert "was not paused" in ok(pgq("resume", "mail"))
    assert json.loads(ok(pgq("limit", "mail", "2", "--json"))) == {
        "queue": "mail",
        "limit": 2,
        "limit_before": None,
        "has_jobs": True,
    }
    [row] = json.loads(ok(pgq("stats", "--json")))
    assert (row["paused"], row["limit"]) == (False, 2)
    assert "(limit 2)" in ok(pgq("stats"))
    assert "no limit on running jobs (was 2)" in ok(pgq("limit", "mail", "NONE"))
    assert len(queue.claim("mail", 1, LEASE, "w")) == 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["limit", "mail", "x"], "want a number or `none`"),
        (["limit", "mail", "--", "-1"], "want 1 to"),
        (["limit", "mail", "-1"], "want 1 to 2147483647 or `none`, got -1"),
        (["limit", "-5", "mail"], "want 1 to 2147483647 or `none`, got -5"),
        (["limit", "mail", "0"], "0 would run nothing: to stop the queue use `pgq pause QUEUE`"),
        (["limit", "mail", str(2**31)], "want 1 to"),
        (["limit", "mail"], "Missing argument"),
        (["pause", " "], "queue name must not be empty"),
        (["resume", ""], "queue name must not be empty"),
        (["pause", "mail", "--reason", "a\x00b"], "NUL"),
    ],
)
def test_queue_control_usage_errors(pgq: Pgq, args: list[str], fragment: str) -> None:
    error_line(pgq(*args), 2, fragment)


@pytest.mark.parametrize("command", ["pause", "resume", "limit"])
@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("x" * (QUEUE_NAME_MAX_BYTES + 1), "bytes long"),
        ("x" * 8000, "bytes long"),
        ("q\udcff", "not valid UTF-8"),
    ],
    ids=["too-long", "over-notify-payload", "not-utf8"],
)
def test_queue_control_refuses_names_no_job_can_have(
    pgq: Pgq, queue: Queue, command: str, name: str, fragment: str
) -> None:
    """The names `pgq enqueue` refuses are refused here too, before anything is written.
    Before: a name over 7999 bytes was paused, and then could not be resumed (its NOTIFY
    payload is too long): a queue in `pgq stats` for good; a name that is not UTF-8 (a raw
    byte on the command line) was "unexpected UnicodeEncodeError" (exit 1)."""
    args = [command, name, *(["3"] if command == "limit" else [])]
    error_line(pgq(*args), 2, fragment)
    assert queue.stats() == []
    with pytest.raises(ValueError, match=fragment):
        getattr(queue, "set_limit" if command == "limit" else command)(
            name, *([3] if command == "limit" else [])
        )
    assert queue.stats() == []


def test_pausing_or_limiting_a_queue_without_jobs_says_so(pgq: Pgq, queue: Queue) -> None:
    """Queue control applies to jobs to come, so a queue without jobs may be paused; the
    answer said "paused queue nosuchqueue" as for any other (a typo went unnoticed)."""
    out = ok(pgq("pause", "nosuchqueue"))
    assert out == (
        "paused queue nosuchqueue (no jobs yet): jobs enqueued on it wait until it is resumed\n"
    )
    assert json.loads(ok(pgq("pause", "nosuchqueue", "--json")))["has_jobs"] is False
    assert "queue other (no jobs yet): at most 3 running" in ok(pgq("limit", "other", "3"))
    job_id = queue.enqueue("nosuchqueue", {})
    assert queue.claim("nosuchqueue", 1, LEASE, "w") == []  # the pause holds the new job
    assert "paused queue nosuchqueue: its workers claim nothing now" in ok(
        pgq("pause", "nosuchqueue")
    )
    ok(pgq("resume", "nosuchqueue"))
    [job] = queue.claim("nosuchqueue", 1, LEASE, "w")
    queue.complete(job.id, job.fence)
    assert job.id == job_id and queue.job(job_id).status == "done"
    # only done jobs, even pruned: the queue is known by its completed count
    assert queue.prune(timedelta(0)) == 1
    assert json.loads(ok(pgq("pause", "nosuchqueue", "--json")))["has_jobs"] is True
    assert json.loads(ok(pgq("limit", "other", "4", "--json"))) == {
        "queue": "other",
        "limit": 4,
        "limit_before": 3,
        "has_jobs": False,
    }


def test_a_paused_queue_with_the_longest_name_resumes(pgq: Pgq, queue: Queue) -> None:
    name = "é" * (QUEUE_NAME_MAX_BYTES // 2)
    ok(pgq("pause", name))
    assert [s.paused for s in queue.stats()] == [True]
    ok(pgq("resume", name))
    assert not [s for s in queue.stats() if s.paused]


def test_hostile_pause_reason_is_printed_inert(pgq: Pgq) -> None:
    out = ok(pgq("pause", "mail", "--reason", "\x1b]0;owned\x07[bold]x"))
    assert "\x1b" not in out and "\\x1b" in out
    assert json.loads(ok(pgq("stats", "--json")))[0]["pause_reason"] == "\x1b]0;owned\x07[bold]x"


# ---------------------------------------------------------------------------- filters: jobs


def test_jobs_every_filter(pgq: Pgq, queue: Queue, conn: Any, schema: str) -> None:
    a = queue.enqueue("mail", {"customer": {"id": 42}, "tag": "x"})
    b = queue.enqueue("mail", {"customer": {"id": "42"}, "tag": "y"})
    c = queue.enqueue("sms", {"customer": {"id": 7}})
    f = failed_job(queue, "TimeoutError: 100% of_budget used", payload={"n": 1})
    d = dead_job(queue, "ValueError: bad row 12", payload={"n": 2})
    backdate(conn, schema, a, timedelta(hours=3))
    backdate(conn, schema, d, timedelta(days=2))

    def listing(*args: str) -> list[int]:
        return ids_of(ok(pgq("jobs", *args, "--json")))

    assert listing("--queue", "sms") == [c]
    assert listing("--status", "dead") == [d]
    assert listing("--status", "failed") == [f]
    assert listing("--status", "failed", "--status", "dead") == sorted([f, d])
    assert listing("--status", "ready") == sorted([a, b, c, f])
    assert listing("--error", "timeouterror") == [f]  # case-insensitive
    assert listing("--error", "100%") == [f]  # % and _ are literal
    assert listing("--error", "of_budget") == [f]
    assert listing("--error", "o%_b") == []
    assert listing("--error", "100_") == []  # `_` would match the `%` were it a wildcard
    assert listing("--payload", "customer.id=42") == [a]  # JSON 42: the number only
    assert listing("--payload", 'customer.id="42"') == [b]  # JSON "42": the string only
    assert listing("--payload", "tag=y") == [b]  # not JSON: compared as text
    assert listing("--payload", "payload.tag=x") == [a]
    assert listing("--payload", "customer.id=42", "--payload", "tag=x") == [a]
    assert listing("--payload", "n=1") == [f]
    assert listing("--payload", "missing.key=1") == []
    assert listing("--older-than", "1h") == sorted([a, d])  # a queued 3h ago, d died 2d ago
    assert listing("--older-than", "1d") == [d]
    assert listing("--newer-than", "1h") == sorted([b, c, f])
    assert listing("--status", "dead", "--newer-than", "1d") == []
    assert listing("--older-than", "1h", "--newer-than", "1d") == [a]
    assert listing("--queue", "mail", "--status", "ready", "--payload", "tag=y") == [b]
    out = ok(pgq("jobs", "--error", "nothing like this"))
    assert out.startswith("no jobs matching: error~")


def test_a_payload_filter_over_live_statuses_lists_newest_first_within_the_limit(
    queue: Queue, conn: Any, schema: str
) -> None:
    """The live-set form (payload test, live statuses only) answers exactly as the plain form:
    the same jobs, newest first, cut at the limit."""
    tagged = [queue.enqueue("mail", {"tag": "x", "n": n}) for n in range(12)]
    queue.enqueue("mail", {"tag": "y"})
    dead = [dead_job(queue, "boom", payload={"tag": "x"}) for _ in range(2)]
    done_job(queue, payload={"tag": "x"})
    live = JobFilter(statuses=("ready", "dead"), payload=(parse_payload_match("tag=x"),))
    assert ops.jobs_filtered(live).name == "jobs_filtered_live"
    assert ops.jobs_filtered(replace(live, statuses=("done", "dead"))).name == "jobs_filtered"
    assert ops.jobs_filtered(replace(live, statuses=())).name == "jobs_filtered"
    assert ops.jobs_filtered(replace(live, payload=())).name == "jobs_filtered"
    newest = sorted(tagged + dead, reverse=True)
    assert [j.id for j in queue.jobs_matching(live, 5)] == newest[:5]
    assert [j.id for j in queue.jobs_matching(live, 100)] == newest
    where, params = live.where(schema)
    plain = conn.execute(
        query_with("jobs_filtered", schema, where=where),
        {**params, "limit": 100, "error_chars": 100},
    ).fetchall()
    assert [r[0] for r in plain] == newest


def test_jobs_plain_forms_still_work(pgq: Pgq, queue: Queue) -> None:
    a = queue.enqueue("mail", {})
    assert ids_of(ok(pgq("jobs", "--queue", "mail", "--status", "ready", "--json"))) == [a]
    assert "mail" in ok(pgq("jobs", "-q", "mail", "-s", "ready", "-n", "1"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # --dry-run alone makes requeue and kill filtered commands
        (["requeue", "1", "--dry-run"], "give job ids or a filter, not both"),
        (["requeue", "1", "--queue", "mail", "--dead"], "give job ids or --queue/--all-queues"),
        (["kill", "1", "--dry-run"], "give job ids or a filter, not both"),
        (["kill", "--queue", "a", "--all-queues"], "give --queue or --all-queues, not both"),
    ],
)
def test_which_form_a_command_takes_decides_its_usage_error(
    pgq: Pgq, queue: Queue, args: list[str], message: str
) -> None:
    dead = dead_job(queue, "x")
    error_line(pgq(*args), 2, message)
    assert queue.job(dead).status == "dead"


def test_jobs_says_no_jobs_plainly_unless_filtered(pgq: Pgq, queue: Queue) -> None:
    """One queue and one status is the plain list; a second status (or failed) filters."""
    assert ok(pgq("jobs", "--queue", "mail", "--status", "ready")) == "no jobs\n"
    filtered = ok(pgq("jobs", "--queue", "mail", "--status", "ready", "--status", "dead"))
    assert filtered.startswith("no jobs matching: ") and "mail" in filtered


def test_jobs_output_is_inert(pgq: Pgq, queue: Queue) -> None:
    failed_job(queue, "\x1b[2J[red]boom[/red]\nsecond line", name="q\x1b[31m")
    out = ok(pgq("jobs", "--status", "failed"))
    assert "\x1b" not in out
    assert "\\x1b[2J[red]boom" in out
    [row] = json.loads(ok(pgq("jobs", "--status", "failed", "--json")))
    assert row["last_error"] == "\x1b[2J[red]boom[/red]\nsecond line"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--payload", "customer.id"], "PATH=VALUE"),
        (["--payload", "=42"], "dotted keys"),
        (["--payload", "a..b=1"], "dotted keys"),
        (["--payload", "a. b=1"], "dotted keys"),
        (["--payload", 'a="\\u0000"'], "\\u0000"),
        (["--payload", "a=\x00"], "NUL"),
        (["--older-than", "soon"], "not a duration"),
        (["--newer-than", "-5m"], "--newer-than"),
        (["--older-than", "2h", "--newer-than", "1h"], "window would be empty"),
        (["--error", ""], "--error must not be empty"),
        (["--error", "a\x00b"], "NUL"),
        (["--error-group", "xyz"], "12 hex digits"),
        (["--status", "bogus"], "bogus"),
        (["--queue", " ", "--error", "x"], "--queue must not be empty"),
        (["--limit", "0", "--error", "x"], "--limit"),
    ],
)
def test_jobs_bad_filter_input(pgq: Pgq, args: list[str], fragment: str) -> None:
    error_line(pgq("jobs", *args), 2, fragment)


# ---------------------------------------------------------------------------- bulk actions


def history(queue: Queue, job_id: int) -> list[tuple[str, str | None, str | None]]:
    return [(e.event, e.worker, e.detail) for e in queue.history(job_id)]


def test_requeue_over_a_filter_dry_run_then_batches(pgq: Pgq, queue: Queue) -> None:
    dead = [dead_job(queue, f"TimeoutError: call {i} timed out") for i in range(5)]
    other = dead_job(queue, "ValueError: nope")
    ready = failed_job(queue, "TimeoutError: call 9 timed out")

    dry = json.loads(ok(pgq("requeue", "--error", "timeout", "--dry-run", "--json")))
    assert dry == {
        "action": "requeue",
        "filter": 'error~"timeout"',
        "dry_run": True,
        "matching": 5,
    }
    assert "would requeue 5 jobs" in ok(pgq("requeue", "--error", "timeout", "--dry-run"))
    assert all(queue.job(i).status == "dead" for i in dead)

    out = ok(pgq("requeue", "--error", "timeout", "--batch", "2"))
    assert 'requeued 5 jobs matching: error~"timeout" (in 3 batches)' in out
    for job_id in dead:
        job = queue.job(job_id)
        assert (job.status, job.attempts) == ("ready", 0)
        event, worker, detail = history(queue, job_id)[-1]
        assert event == "requeued"
        assert worker and worker.startswith("operator:")
        assert detail == 'filter: error~"timeout"'
    assert queue.job(other).status == "dead"
    assert queue.job(ready).attempts == 1  # only dead rows are requeued
    assert json.loads(ok(pgq("requeue", "--error", "timeout", "--json")))["requeued"] == []


def test_requeue_queue_dead_with_a_filter_and_dry_run(pgq: Pgq, queue: Queue) -> None:
    a = dead_job(queue, "x", name="mail")
    dead_job(queue, "x", name="sms")
    assert "would requeue 1 job" in ok(pgq("requeue", "--queue", "mail", "--dead", "--dry-run"))
    result = json.loads(ok(pgq("requeue", "--queue", "mail", "--status", "dead", "--json")))
    assert result["requeued"] == [a]
    assert "would requeue 1 job" in ok(pgq("requeue", "--all-queues", "--dead", "--dry-run"))


def test_requeue_queue_dead_runs_in_batches_under_a_statement_timeout(
    pgq: Pgq, queue: Queue, dsn: str, schema: str
) -> None:
    """`requeue --queue Q --dead` was one statement over every dead job, and ignored --batch:
    under a statement timeout it failed whole. Each batch is now its own statement and commit.
    A trigger sleeping 2 ms per requeued row makes 600 rows take 1.2 s in one statement (over
    the 0.5 s timeout) and 20 rows 0.04 s."""
    ids = queue.enqueue_many([ops.JobSpec("mail", {"n": n}) for n in range(600)])
    other = queue.enqueue("sms", {})
    assert sorted(queue.bulk("kill", JobFilter(queue=None, statuses=("ready",)))) == [*ids, other]
    slow = sql.SQL(
        "CREATE FUNCTION {s}.slow_requeue() RETURNS trigger LANGUAGE plpgsql"
        " SET search_path = pg_catalog AS $$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$;"
        " CREATE TRIGGER slow_requeue BEFORE UPDATE ON {s}.jobs FOR EACH ROW"
        " WHEN (OLD.status = 'dead' AND NEW.status <> 'dead') EXECUTE FUNCTION {s}.slow_requeue()"
    ).format(s=sql.Identifier(schema))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(slow)
    try:
        whole = pgq(
            "--statement-timeout", "0.5", "requeue", "--queue", "mail", "--dead", "--batch", "1000"
        )
        error_line(whole, 1, "statement timeout")
        assert statuses(queue, ids) == {"dead"}  # the batch wrote nothing

        result = pgq(
            "--statement-timeout", "0.5", "requeue", "--queue", "mail", "--dead", "--batch", "20"
        )
        assert ok(result) == "requeued 600 dead jobs of queue mail\n"
        progress = result.stderr.splitlines()
        assert len(progress) == 30, result.stderr
        assert progress[0] == "batch 1: requeued 20 dead jobs so far"
        assert progress[-1] == "batch 30: requeued 600 dead jobs so far"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP FUNCTION {}.slow_requeue() CASCADE").format(sql.Identifier(schema))
            )
    assert statuses(queue, ids) == {"ready"}
    assert queue.job(other).status == "dead"  # another queue's dead job stays
    with psycopg.connect(dsn) as conn:
        counts = conn.execute(
            sql.SQL(
                "SELECT count(*), count(DISTINCT job_id) FROM {}.job_events"
                " WHERE event = 'requeued'"
            ).format(sql.Identifier(schema))
        ).fetchone()
    assert counts == (600, 600)  # each job requeued once, by one batch


def test_requeue_queue_dead_across_batches_keeps_keys_and_parents(queue: Queue) -> None:
    """Batches requeue as one statement did: of dead jobs sharing a unique key only the newest
    comes back, even when an older one is in an earlier batch; a child whose dead parent is
    requeued by an earlier batch waits for it again."""
    old = queue.enqueue("q", {"n": 1}, unique_key="k")
    parent = queue.enqueue("q", {"n": 2})
    fillers = queue.enqueue_many([ops.JobSpec("q", {"f": n}) for n in range(5)])
    child = queue.enqueue("q", {"n": 3}, depends_on=[parent])
    queue.kill([old])
    new = queue.enqueue("q", {"n": 4}, unique_key="k")
    queue.kill([parent, *fillers, new])
    assert queue.job(child).status == "dead"  # died of its parent
    requeued, held, orphaned = queue.requeue_dead_report("q", batch=2)
    assert held == [old] and orphaned == {}
    assert sorted(requeued) == sorted([parent, *fillers, new])
    assert queue.job(old).status == "dead" and queue.job(new).status == "ready"
    assert queue.job(parent).status == "ready"
    assert queue.job(child).status == "waiting"  # back with its parent, waiting on it


def test_kill_over_a_filter_bumps_the_fence(pgq: Pgq, queue: Queue) -> None:
    running = queue.enqueue("busy", {"customer": {"id": 42}})
    [job] = queue.claim("busy", 1, LEASE, "w")
    ready = queue.enqueue("mail", {"customer": {"id": 42}})
    other = queue.enqueue("mail", {"customer": {"id": 7}})
    done = done_job(queue, "done", {"customer": {"id": 42}})

    assert "would kill 2 jobs" in ok(pgq("kill", "--payload", "customer.id=42", "--dry-run"))
    out = ok(pgq("kill", "--payload", "customer.id=42", "--reason", "bad customer"))
    assert "killed 2 jobs" in out
    for job_id in (ready, running):
        detail = queue.job(job_id)
        assert (detail.status, detail.last_error) == ("dead", "bad customer")
        event, worker, text = history(queue, job_id)[-1]
        assert (event, text) == ("killed", "bad customer (filter: payload.customer.id=42)")
        assert worker and worker.startswith("operator:")
    assert queue.job(running).fence == job.fence + 1  # the worker's next write fails
    assert (queue.job(done).status, queue.job(other).status) == ("done", "ready")


def test_kill_ids_still_work_and_missing_argument(pgq: Pgq, queue: Queue) -> None:
    a = queue.enqueue("mail", {})
    assert json.loads(ok(pgq("kill", str(a), "--json")))["killed"] == [a]
    error_line(pgq("kill"), 2, "Missing argument")


def test_delete_dead_and_done_only_with_their_history(
    pgq: Pgq, queue: Queue, conn: Any, schema: str
) -> None:
    dead = dead_job(queue, "x")
    done = done_job(queue)
    ready = queue.enqueue("mail", {})
    dead_job(queue, "x", name="sms")

    assert "would delete 2 jobs" in ok(pgq("delete", "--queue", "mail", "--dry-run"))
    out = json.loads(ok(pgq("delete", "--queue", "mail", "--batch", "1", "--json")))
    assert sorted(out["deleted"]) == sorted([dead, done])
    left = conn.execute(
        sql.SQL("SELECT count(*) FROM {}.job_events WHERE job_id = ANY(%s)").format(
            sql.Identifier(schema)
        ),
        [[dead, done]],
    ).fetchone()
    assert left == (0,)
    assert queue.job(ready).status == "ready"
    assert "would delete 1 job" in ok(pgq("delete", "--all-queues", "--dry-run"))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["requeue", "1", "--error", "x"], "not both"),
        (["requeue", "--status", "ready", "--error", "x"], "requeue acts on dead jobs only"),
        (["requeue", "--error-group", "nothex"], "12 hex digits"),
        (["requeue", "--queue", "a", "--all-queues", "--error", "x"], "not both"),
        (["requeue", "--status", "dead"], "needs --queue Q"),
        (["kill", "--status", "ready"], "needs --queue Q"),
        (["kill", "1", "--queue", "mail"], "not both"),
        (["kill", "--status", "done", "--queue", "mail"], "kill acts on ready and running"),
        (["kill", "--queue", "mail", "--reason", " "], "reason must not be empty"),
        (["kill", "--payload", "x", "--queue", "mail"], "PATH=VALUE"),
        (["delete"], "needs --queue Q"),
        (["delete", "--status", "ready", "--queue", "mail"], "delete acts on dead and done"),
        (["delete", "--older-than", "7x"], "not a duration"),
        (["delete", "--queue", "a", "--all-queues"], "not both"),
        (["delete", "--queue", "a", "--batch", "0"], "--batch"),
    ],
)
def test_bulk_bad_input(pgq: Pgq, queue: Queue, args: list[str], fragment: str) -> None:
    dead = dead_job(queue, "x")
    error_line(pgq(*args), 2, fragment)
    assert queue.job(dead).status == "dead"


# ---------------------------------------------------------------------------- errors


def test_errors_group_varied_messages(pgq: Pgq, queue: Queue) -> None:
    timeouts = [
        dead_job(queue, "TimeoutError: GET https://api.example.com/v1/users/17?x=1 took 3.5s"),
        dead_job(queue, "TimeoutError: GET http://other.example/users/99 took 12s", name="sms"),
        failed_job(queue, "TimeoutError: GET https://api.example.com/v1/users/18 took 1s"),
    ]
    missing = [
        dead_job(queue, "KeyError: 'customer_42'"),
        dead_job(queue, 'KeyError: "customer_43"'),
        failed_job(queue, "KeyError: 'other key'\nTraceback (most recent call last): ..."),
    ]
    ids = [
        dead_job(queue, "LookupError: order 0xdeadbeef / 123e4567-e89b-12d3-a456-426614174000"),
        dead_job(queue, "LookupError: order 0x1F / 00000000-0000-0000-0000-000000000000"),
        dead_job(queue, "LookupError: order 7a3f9c21 / AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE"),
    ]
    other = dead_job(queue, "ValueError: something else")
    queue.requeue([other])  # requeued: back at attempt 0, no longer an error

    groups = json.loads(ok(pgq("errors", "--json")))
    by_pattern = {g["pattern"]: g for g in groups}
    assert set(by_pattern) == {
        "TimeoutError: GET <url> took <n>s",
        "KeyError: <str>",
        "LookupError: order <n> / <uuid>",
    }
    t = by_pattern["TimeoutError: GET <url> took <n>s"]
    assert (t["dead"], t["failed"], t["queues"]) == (2, 1, ["mail", "sms"])
    assert t["example_id"] == max(timeouts)
    assert t["example_error"] == queue.job(max(timeouts)).last_error
    k = by_pattern["KeyError: <str>"]
    assert (k["dead"], k["failed"], k["example_id"]) == (2, 1, max(missing))
    assert k["example_error"].endswith("Traceback (most recent call last): ...")
    assert by_pattern["LookupError: order <n> / <uuid>"]["dead"] == 3
    assert all(g["first_seen"] <= g["last_seen"] for g in groups)

    assert [g["pattern"] for g in json.loads(ok(pgq("errors", "--queue", "sms", "--json")))] == [
        "TimeoutError: GET <url> took <n>s"
    ]
    assert len(json.loads(ok(pgq("errors", "--since", "1h", "--json")))) == 3
    human = ok(pgq("errors"))
    assert t["group"] in human and f"example job {max(timeouts)}" in human

    # act on a group: jobs lists it, requeue takes its dead jobs, kill its failed one
    group = t["group"]
    listed = ids_of(ok(pgq("jobs", "--error-group", group, "--json")))
    assert listed == sorted(timeouts)
    out = json.loads(ok(pgq("requeue", "--error-group", group, "--json")))
    assert sorted(out["requeued"]) == sorted(timeouts[:2])
    assert history(queue, timeouts[0])[-1][2] == f"filter: error-group={group}"
    killed = json.loads(ok(pgq("kill", "--error-group", k["group"], "--json")))["killed"]
    assert killed == [missing[2]]
    assert by_pattern["LookupError: order <n> / <uuid>"]["example_id"] == max(ids)


def test_errors_empty_and_bad_input(pgq: Pgq) -> None:
    assert ok(pgq("errors")).strip() == "no failed or dead jobs with an error"
    assert json.loads(ok(pgq("errors", "--json"))) == []
    error_line(pgq("errors", "--since", "yesterday"), 2, "not a duration")
    error_line(pgq("errors", "--limit", "0"), 2, "--limit")


def test_errors_since_leaves_old_errors_out(pgq: Pgq, queue: Queue, conn: Any, schema: str) -> None:
    old = dead_job(queue, "OldError: 1")
    backdate(conn, schema, old, timedelta(days=3))
    dead_job(queue, "NewError: 2")
    patterns = [g["pattern"] for g in json.loads(ok(pgq("errors", "--since", "1d", "--json")))]
    assert patterns == ["NewError: <n>"]


# ---------------------------------------------------------------------------- health


@pytest.mark.slow  # the serial pass: the oldest snapshot on the server must be this test's own,
# and another test process on a shared server (PGQ_TEST_DSN) may hold an older one
def test_health_shows_a_held_open_transaction_as_the_xmin_holder(
    pgq: Pgq, queue: Queue, dsn: str
) -> None:
    queue.enqueue("mail", {})
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT /* \x1b[31m hostile */ txid_current(), 1")
        pid = holder.info.backend_pid
        data = json.loads(ok(pgq("health", "--json")))
        assert data["xmin"]["pid"] == pid
        assert data["xmin"]["state"] == "idle in transaction"
        assert data["xmin"]["age_seconds"] >= 0
        assert "warnings" in data and isinstance(data["warnings"], list)
        assert {t["table"] for t in data["tables"]} == {"jobs", "job_events"}
        assert 0 <= data["notify_usage"] < 1
        assert data["lock_waits"] == []
        human = ok(pgq("health"))
        assert f"pid {pid}" in human
        assert "\x1b" not in human and "\\x1b[31m" in human
        holder.rollback()


def test_health_reports_a_lock_wait_on_jobs(pgq: Pgq, queue: Queue, dsn: str) -> None:
    import threading

    job_id = queue.enqueue("mail", {})
    with psycopg.connect(dsn) as locker:
        locker.execute(
            sql.SQL("SELECT 1 FROM {}.jobs WHERE id = %s FOR UPDATE").format(
                sql.Identifier(queue.schema)
            ),
            [job_id],
        )
        waiter_done = threading.Event()

        def wait() -> None:
            with psycopg.connect(dsn, autocommit=True) as w:
                w.execute(
                    sql.SQL("UPDATE {}.jobs SET attempts = 0 WHERE id = %s").format(
                        sql.Identifier(queue.schema)
                    ),
                    [job_id],
                )
            waiter_done.set()

        thread = threading.Thread(target=wait)
        thread.start()
        try:
            for _ in range(100):
                waits = json.loads(ok(pgq("health", "--json")))["lock_waits"]
                if waits:
                    break
                time.sleep(0.05)
            assert waits and waits[0]["blocked_by"] == [locker.info.backend_pid]
            assert "lock wait: pid" in ok(pgq("health"))
        finally:
            locker.rollback()
            thread.join(10)
    assert waiter_done.is_set()


def test_error_group_follows_last_error_whatever_writes_it(
    queue: Queue, conn: Any, schema: str
) -> None:
    """The trigger keeps jobs.error_group right for pgq's own writes and plain SQL alike, and
    leaves it alone when a statement does not write last_error."""
    failed = failed_job(queue, "KeyError: 'a1'")
    dead = dead_job(queue, "KeyError: 'b2'")

    def group_of(job_id: int) -> str | None:
        row = conn.execute(
            sql.SQL("SELECT error_group FROM {}.jobs WHERE id = %s").format(sql.Identifier(schema)),
            [job_id],
        ).fetchone()
        assert row is not None
        return row[0]

    [g] = queue.errors()
    assert group_of(failed) == group_of(dead) == g.group
    conn.execute(
        sql.SQL("UPDATE {}.jobs SET last_error = 'OSError: disk 3 full' WHERE id = %s").format(
            sql.Identifier(schema)
        ),
        [dead],
    )
    assert group_of(dead) != g.group
    assert {e.pattern for e in queue.errors()} == {"KeyError: <str>", "OSError: disk <n> full"}
    conn.execute(
        sql.SQL("UPDATE {}.jobs SET attempts = attempts WHERE id = %s").format(
            sql.Identifier(schema)
        ),
        [failed],
    )
    assert group_of(failed) == g.group
    inserted = conn.execute(
        sql.SQL(
            "INSERT INTO {}.jobs (queue, payload, status, last_error) "
            "VALUES ('mail', '{{}}', 'dead', 'KeyError: ''z''') RETURNING id"
        ).format(sql.Identifier(schema))
    ).fetchone()
    assert inserted is not None and group_of(inserted[0]) == g.group
    # COPY too (migration 38: the trigger runs after the row, so COPY inserts in batches),
    # and a row written with its right group keeps it
    copy_in = sql.SQL("COPY {}.jobs (queue, payload, status, last_error, error_group) FROM STDIN")
    with conn.cursor().copy(copy_in.format(sql.Identifier(schema))) as copy:
        copy.write_row(("mail", "{}", "dead", "KeyError: 'y'", None))
        copy.write_row(("mail", "{}", "dead", "KeyError: 'x'", g.group))
        copy.write_row(("mail", "{}", "dead", "KeyError: 'w'", "not its group"))
    copied = conn.execute(
        sql.SQL(
            "SELECT error_group FROM {}.jobs"
            " WHERE last_error IN ('KeyError: ''y''', 'KeyError: ''x''', 'KeyError: ''w''')"
        ).format(sql.Identifier(schema))
    ).fetchall()
    assert copied == [(g.group,)] * 3
