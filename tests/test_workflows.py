"""Workflows on a real server: a job that depends on others waits until they are all done, is
ready in the transaction of the last completion (whichever statement completes it), dies with
a parent (transitively, naming it), comes back when that parent is requeued; unknown parents
are refused, done ones satisfied; two sessions completing two parents at once never leave a
dependent waiting."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from click.testing import Result
from psycopg import sql
from rich.console import Console
from support import dashboard, error_line, events, make_worker, ok

from pgq_core import (
    AsyncQueue,
    JobSpec,
    PgqError,
    Queue,
    TaskArgumentError,
    Tasks,
    achain,
    agroup,
    chain,
    group,
)
from pgq_core.filters import JobFilter

LEASE = timedelta(seconds=30)
Pgq = Callable[..., Result]


def take(queue: Queue, name: str, n: int = 10) -> dict[int, int]:
    """Claim what is ready on `name`: {id: fence}."""
    return {j.id: j.fence for j in queue.claim(name, n, LEASE, "w")}


def status(queue: Queue, job_id: int) -> str:
    return queue.job(job_id).status


def test_a_chain_runs_in_order(queue: Queue) -> None:
    a = queue.enqueue("q", {"step": "a"})
    b = queue.enqueue("q", {"step": "b"}, depends_on=[a])
    c = queue.enqueue("q", {"step": "c"}, depends_on=[b])
    assert [status(queue, i) for i in (a, b, c)] == ["ready", "waiting", "waiting"]
    held = take(queue, "q")
    assert list(held) == [a]  # b and c are not claimable
    queue.complete(a, held[a])
    assert [status(queue, i) for i in (b, c)] == ["ready", "waiting"]
    assert ("unblocked", 0, None) in events(queue, b)
    assert [e.detail for e in queue.history(b) if e.event == "unblocked"] == [
        f"parent {a} done, the last"
    ]
    held = take(queue, "q")
    assert list(held) == [b]
    queue.complete(b, held[b])
    held = take(queue, "q")
    assert list(held) == [c]


def test_a_group_fans_in(queue: Queue) -> None:
    parents = queue.enqueue_many([JobSpec("q", {"n": n}) for n in range(5)])
    last = queue.enqueue("q", {"n": "all"}, depends_on=parents)
    detail = queue.job(last)
    assert detail.status == "waiting" and detail.parents_total == 5
    assert [p.id for p in detail.parents] == parents
    held = take(queue, "q")
    assert set(held) == set(parents)
    for job_id in parents[:-1]:
        queue.complete(job_id, held[job_id])
        assert status(queue, last) == "waiting"
    queue.complete(parents[-1], held[parents[-1]])
    assert status(queue, last) == "ready"
    assert [c.id for c in queue.job(parents[0]).children] == [last]


def test_a_parent_that_dies_kills_its_dependents_transitively(queue: Queue) -> None:
    a = queue.enqueue("q", {}, max_attempts=1)
    other = queue.enqueue("q", {})
    b = queue.enqueue("q", {}, depends_on=[a, other])
    c = queue.enqueue("q", {}, depends_on=[b])
    d = queue.enqueue("q", {}, depends_on=[other])  # not a descendant of a
    held = take(queue, "q")
    queue.fail(a, held[a], "boom")
    assert status(queue, a) == "dead"
    jb, jc = queue.job(b), queue.job(c)
    assert (jb.status, jb.last_error) == ("dead", f"parent {a} died")
    assert (jc.status, jc.last_error) == ("dead", f"parent {b} died")
    assert [e.detail for e in queue.history(c) if e.event == "parent died"] == [
        f"parent {b} died"
    ]
    assert status(queue, d) == "waiting"
    # the other parent completing leaves the dead dependent dead
    queue.complete(other, held[other])
    assert status(queue, b) == "dead" and status(queue, d) == "ready"


def test_kill_and_reap_kill_dependents(queue: Queue) -> None:
    a = queue.enqueue("q", {})
    b = queue.enqueue("q", {}, depends_on=[a])
    assert queue.kill([b]) == [b]  # a waiting job can be killed
    b2 = queue.enqueue("q", {}, depends_on=[a])
    assert queue.kill([a]) == [a]
    assert queue.job(b2).last_error == f"parent {a} died"
    r = queue.enqueue("r", {}, max_attempts=1)
    rb = queue.enqueue("r", {}, depends_on=[r])
    queue.claim("r", 1, timedelta(milliseconds=1), "w")
    time.sleep(0.05)
    assert (r, "dead") in queue.reap()
    assert queue.job(rb).last_error == f"parent {r} died"


def test_requeue_brings_dependents_back_to_waiting(queue: Queue) -> None:
    a = queue.enqueue("q", {}, max_attempts=1)
    b = queue.enqueue("q", {}, depends_on=[a])
    c = queue.enqueue("q", {}, depends_on=[b])
    held = take(queue, "q")
    queue.fail(a, held[a], "boom")
    assert status(queue, c) == "dead"
    assert queue.requeue([a]) == [a]
    assert [status(queue, i) for i in (a, b, c)] == ["ready", "waiting", "waiting"]
    held = take(queue, "q")
    assert list(held) == [a]
    queue.complete(a, held[a])
    assert status(queue, b) == "ready"
    # a dependent of a job dead on its own account is not revived by its own parent's requeue
    x = queue.enqueue("q", {}, max_attempts=1)
    y = queue.enqueue("q", {}, depends_on=[x], max_attempts=1)
    held = take(queue, "q")
    queue.complete(b, held[b])
    queue.complete(x, held[x])
    held = take(queue, "q")
    queue.fail(y, held[y], "own failure")
    assert queue.requeue_dead("q")  # c and y
    assert status(queue, y) == "ready"


def test_a_dependent_with_another_dead_parent_stays_dead_on_requeue(queue: Queue) -> None:
    a = queue.enqueue("q", {}, max_attempts=1)
    b = queue.enqueue("q", {}, max_attempts=1)
    c = queue.enqueue("q", {}, depends_on=[a, b])
    held = take(queue, "q")
    queue.fail(a, held[a], "boom")
    queue.fail(b, held[b], "boom")
    assert queue.requeue([a]) == [a]
    assert queue.job(c).status == "dead"
    assert queue.job(c).last_error == f"parent {b} died"
    assert queue.requeue([b]) == [b]
    assert queue.job(c).status == "waiting"


def test_unknown_parent_is_refused_and_done_parent_satisfied(queue: Queue) -> None:
    a = queue.enqueue("q", {})
    with pytest.raises(PgqError, match=r"^depends_on: no job 999999; nothing was enqueued$"):
        queue.enqueue("q", {}, depends_on=[a, 999999])
    assert [j.id for j in queue.jobs("q")] == [a]
    held = take(queue, "q")
    queue.complete(a, held[a])
    b = queue.enqueue("q", {}, depends_on=[a])
    assert status(queue, b) == "ready"
    with pytest.raises(ValueError, match="unique_key"):
        queue.enqueue("q", {}, depends_on=[a], unique_key="k")
    with pytest.raises(ValueError, match="not a job id"):
        queue.enqueue("q", {}, depends_on=[0])


def test_a_dead_parent_makes_a_new_dependent_dead(queue: Queue) -> None:
    a = queue.enqueue("q", {})
    queue.kill([a])
    b = queue.enqueue("q", {}, depends_on=[a])
    assert (queue.job(b).status, queue.job(b).last_error) == ("dead", f"parent {a} died")
    queue.requeue([a])
    assert status(queue, b) == "waiting"


def test_enqueue_many_mixes_keys_and_dependencies(queue: Queue) -> None:
    a = queue.enqueue("q", {})
    ids = queue.enqueue_many(
        [
            JobSpec("q", {"k": 1}, unique_key="one"),
            JobSpec("q", {"after": a}, depends_on=[a]),
            JobSpec("q", {"plain": True}),
            JobSpec("q", {"k": 1}, unique_key="one"),
        ]
    )
    assert ids[0] == ids[3] and len(set(ids)) == 3
    assert [status(queue, i) for i in ids[:3]] == ["ready", "waiting", "ready"]
    assert [p.id for p in queue.job(ids[1]).parents] == [a]


def test_two_sessions_completing_two_parents_leave_no_dependent_waiting(
    dsn: str, schema: str, queue: Queue
) -> None:
    rounds = 40
    pairs = []
    for _ in range(rounds):
        p1 = queue.enqueue("a", {})
        p2 = queue.enqueue("b", {})
        child = queue.enqueue("c", {}, depends_on=[p1, p2])
        pairs.append((p1, p2, child))
    held_a = take(queue, "a", rounds)
    held_b = take(queue, "b", rounds)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def complete(held: dict[int, int], which: int) -> None:
        try:
            with Queue.connect(dsn, schema) as q:
                for trio in pairs:
                    barrier.wait()
                    job_id = trio[which]
                    q.complete(job_id, held[job_id])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            barrier.abort()

    threads = [
        threading.Thread(target=complete, args=(held_a, 0)),
        threading.Thread(target=complete, args=(held_b, 1)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    statuses = {status(queue, child) for _, _, child in pairs}
    assert statuses == {"ready"}
    with psycopg.connect(dsn) as conn:
        left = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.jobs WHERE parents_left <> 0").format(
                sql.Identifier(schema)
            )
        ).fetchone()
    assert left == (0,)


async def test_async_queue_has_depends_on(aqueue: AsyncQueue, queue: Queue) -> None:
    a = await aqueue.enqueue("q", {})
    b = await aqueue.enqueue("q", {}, depends_on=[a])
    (c,) = await aqueue.enqueue_many([JobSpec("q", {}, depends_on=[a, b])])
    detail = await aqueue.job(c)
    assert detail.status == "waiting" and [p.id for p in detail.parents] == [a, b]
    assert [x.id for x in (await aqueue.job(a)).children] == [b, c]
    with pytest.raises(PgqError, match="no job 424242"):
        await aqueue.enqueue("q", {}, depends_on=[424242])


# -- the task API -------------------------------------------------------------------------

flow = Tasks(queue="flow")
order: list[str] = []


@flow.task()
def step(name: str) -> str:
    order.append(name)
    return name


def run_all(dsn: str, schema: str) -> None:
    """Drain the flow queue with an in-process worker."""
    flow.use_database(dsn, schema)
    worker = make_worker(dsn, schema, flow, queues=["flow"], burst=True)
    asyncio.run(worker.run())


def test_chain_and_group_run_in_order(dsn: str, schema: str, queue: Queue) -> None:
    order.clear()
    ids = chain(
        step.s("a"), [step.s("b1"), step.s("b2"), step.s("b3")], step.s("c"), conn=queue
    )
    assert len(ids) == 5
    detail = queue.job(ids[-1])
    assert [p.id for p in detail.parents] == ids[1:4]
    later = group(step.s("d1"), step.s("d2"), depends_on=[ids[-1]], conn=queue)
    last = step.enqueue("e", depends_on=later, conn=queue)
    assert status(queue, last) == "waiting"
    run_all(dsn, schema)
    assert order[0] == "a" and set(order[1:4]) == {"b1", "b2", "b3"}
    assert order[4] == "c" and set(order[5:7]) == {"d1", "d2"} and order[7] == "e"
    assert queue.job(last).status == "done"


def test_a_chain_is_one_transaction(queue: Queue) -> None:
    with pytest.raises(PgqError, match="no job 987654"):
        chain(step.s("x"), step.s("y"), depends_on=[987654], conn=queue)
    before = len(queue.jobs("flow"))
    with pytest.raises(TaskArgumentError):
        step.s(nom="x")  # checked when the step is made
    with pytest.raises(PgqError, match="not a step"):
        chain(step.s("x"), "y", conn=queue)  # type: ignore[arg-type]
    with pytest.raises(PgqError, match="nothing to enqueue"):
        group(conn=queue)
    assert len(queue.jobs("flow")) == before == 0


async def test_async_chain_and_group(aqueue: AsyncQueue, queue: Queue) -> None:
    ids = await achain(step.s("a"), step.s("b"), conn=aqueue)
    fan = await agroup(step.s("c"), step.s("d"), depends_on=ids[-1:], conn=aqueue)
    last = await step.enqueue_async("e", depends_on=fan, conn=aqueue)
    assert [status(queue, i) for i in (*ids, *fan, last)] == ["ready"] + ["waiting"] * 4
    assert [p.id for p in queue.job(last).parents] == fan


# -- pgq show and the dashboard -----------------------------------------------------------


def test_show_lists_parents_and_children(pgq: Pgq, queue: Queue) -> None:
    parents = queue.enqueue_many([JobSpec("[red]mail", {"n": n}) for n in range(60)])
    child = queue.enqueue("q", {}, depends_on=parents)
    queue.kill([parents[0]])
    detail = json.loads(ok(pgq("show", str(child), "--json")))
    assert detail["status"] == "dead" and detail["last_error"] == f"parent {parents[0]} died"
    assert detail["parents_total"] == 60 and len(detail["parents"]) == 50
    assert detail["parents"][0] == {"id": parents[0], "queue": "[red]mail", "status": "dead"}
    assert detail["children"] == [] and detail["children_total"] == 0
    assert [e["event"] for e in detail["history"]] == ["enqueued", "parent died"]
    parent = json.loads(ok(pgq("show", str(parents[1]), "--json")))
    assert parent["children"] == [{"id": child, "queue": "q", "status": "dead"}]
    human = ok(pgq("show", str(child)))
    assert f"{parents[0]} dead ([red]mail), {parents[1]} ready ([red]mail)" in human
    assert "... and 10 more" in human
    assert f"{child} dead (q)" in ok(pgq("show", str(parents[1])))
    listed = json.loads(ok(pgq("jobs", "--status", "waiting", "--json")))
    assert listed == []


def shown(widget: Any) -> str:
    """The text a Static shows (its Rich renderable, printed)."""
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


async def test_the_dashboard_shows_parents_and_children(
    dsn: str, schema: str, queue: Queue
) -> None:
    from textual.widgets import Static
    from tui_support.pilot import wait_for

    from pgq_tui.screens.job_detail import LINKS_SHOWN, JobDetailScreen

    parents = queue.enqueue_many([JobSpec("[b]mail", {"n": n}) for n in range(12)])
    child = queue.enqueue("q", {}, depends_on=parents)
    app = dashboard(dsn, schema)
    async with app.run_test(size=(132, 40)) as pilot:
        await wait_for(pilot, lambda: app.dashboard.data is not None, "the first poll")
        app.push_screen(JobDetailScreen(child))
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, JobDetailScreen) and app.screen.job is not None,
            "the job detail",
        )
        facts = shown(app.screen.query_one("#facts", Static))
        assert "waits for" in facts and f"{parents[0]} ready [b]mail" in facts
        assert f"… and {12 - LINKS_SHOWN} more" in facts
        assert f"{parents[LINKS_SHOWN]} ready" not in facts
        assert "waiting" in facts
        app.pop_screen()
        app.push_screen(JobDetailScreen(parents[0]))
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, JobDetailScreen)
            and app.screen.job is not None
            and app.screen.job.id == parents[0],
            "the parent's detail",
        )
        facts = shown(app.screen.query_one("#facts", Static))
        assert "dependents" in facts and f"{child} waiting q" in facts


def test_requeueing_a_dependent_itself_waits_again_for_its_parents(queue: Queue) -> None:
    a = queue.enqueue("q", {})
    b = queue.enqueue("q", {}, depends_on=[a])
    queue.kill([b])  # killed while waiting
    assert queue.requeue([b]) == [b]
    assert status(queue, b) == "waiting"  # not ready: a is not done
    held = take(queue, "q")
    queue.complete(a, held[a])
    assert status(queue, b) == "ready"
    # once its parents are done, a requeued dependent is ready at once
    queue.kill([b])
    assert queue.requeue([b]) == [b] and status(queue, b) == "ready"
    # by filter too
    c = queue.enqueue("q", {})
    d = queue.enqueue("q", {}, depends_on=[c])
    queue.kill([d])
    queue.bulk("requeue", JobFilter(queue="q", statuses=("dead",)))
    assert status(queue, d) == "waiting"


def test_pgq_enqueue_after(pgq: Pgq, queue: Queue) -> None:
    a = queue.enqueue("q", {})
    [b] = json.loads(ok(pgq("enqueue", "q", "{}", "--after", str(a), "--json")))
    assert status(queue, b) == "waiting"
    assert [p.id for p in queue.job(b).parents] == [a]
    error_line(pgq("enqueue", "q", "{}", "--after", "424242"), 1, "depends_on: no job 424242")
    error_line(pgq("enqueue", "q", "--after", str(a), "--unique-key", "k"), 2, "--after")
    error_line(pgq("enqueue", "q", "--after", "0"), 2, "--after")
    assert [j.id for j in queue.jobs("q")] == [b, a]


def test_stats_count_waiting_jobs(pgq: Pgq, queue: Queue) -> None:
    a = queue.enqueue("q", {})
    queue.enqueue_many([JobSpec("w", {}, depends_on=[a]) for _ in range(3)])
    stats = {s.queue: s for s in queue.stats()}
    assert (stats["w"].waiting, stats["w"].ready, stats["q"].waiting) == (3, 0, 0)
    rows = {r["queue"]: r for r in json.loads(ok(pgq("stats", "--json")))}
    assert rows["w"]["waiting"] == 3


def test_a_job_without_dependents_settles_without_calling_the_trigger(
    dsn: str, schema: str, queue: Queue
) -> None:
    """The trigger's WHEN tests has_children: a job nothing depends on runs no function."""
    lonely = queue.enqueue_many([JobSpec("q", {}) for _ in range(5)])
    parent = queue.enqueue("q", {})
    queue.enqueue("q", {}, depends_on=[parent])
    held = take(queue, "q")
    with psycopg.connect(dsn) as conn:
        conn.execute("SET track_functions = 'pl'")
        q = Queue(conn, schema)

        def calls() -> int:
            row = conn.execute(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
                " WHERE schemaname = %s AND funcname = 'jobs_settle_dependents'",
                [schema],
            ).fetchone()
            assert row is not None
            return int(row[0])

        q.complete_many([(i, held[i]) for i in lonely], "w")
        assert calls() == 0
        q.complete(parent, held[parent])
        assert calls() == 1
        conn.commit()


def test_a_deleted_parent_blocks_its_children_as_a_dead_one_does(queue: Queue) -> None:
    """The parent died (its child with it), then was deleted: requeueing the queue's dead
    jobs leaves the child dead, as with a dead parent (the parent never succeeded: ready, it
    would run ahead of it; waiting, it would wait for ever), and says why."""
    parent = queue.enqueue("q", {})
    child = queue.enqueue("q", {}, depends_on=[parent])
    queue.kill([parent])
    assert queue.job(child).status == "dead"
    queue.conn.execute(
        sql.SQL("DELETE FROM {}.jobs WHERE id = %s").format(sql.Identifier(queue.schema)),
        [parent],
    )
    requeued, held, orphaned = queue.requeue_dead_report("q")
    assert (requeued, held, orphaned) == ([], [], {child: (parent, "gone")})
    detail = queue.job(child)
    assert detail.status == "dead", detail
    assert queue.claim("q", 10, timedelta(seconds=30), "w") == []


# --- semantics an operator can trust (issue 30) ---------------------------------------------


def test_an_operators_kill_is_final_unless_that_job_is_requeued(pgq: Pgq, queue: Queue) -> None:
    """kill C (waiting), kill P, requeue P: C stays dead, with the operator's reason (before:
    C went back to waiting, 'requeued with its ancestor', and ran once P completed). Its own
    requeue brings it back, and its dependents with it."""
    p = queue.enqueue("q", {})
    c = queue.enqueue("q", {}, depends_on=[p])
    d = queue.enqueue("q", {}, depends_on=[c])
    ok(pgq("kill", str(c), "--reason", "do NOT run this one"))
    assert status(queue, d) == "dead"
    ok(pgq("kill", str(p)))
    ok(pgq("requeue", str(p)))
    assert [status(queue, i) for i in (p, c, d)] == ["ready", "dead", "dead"]
    assert queue.job(c).last_error == "do NOT run this one"
    assert [e.event for e in queue.history(c)][-1] == "killed"
    held = take(queue, "q")
    queue.complete(p, held[p])
    assert [status(queue, i) for i in (c, d)] == ["dead", "dead"]
    assert queue.requeue([c]) == [c]  # its own requeue: it runs, and so does its dependent
    assert [status(queue, i) for i in (c, d)] == ["ready", "waiting"]
    assert queue.job(d).last_error is None


def test_requeueing_a_child_of_a_dead_parent_is_refused_in_one_line(
    pgq: Pgq, queue: Queue
) -> None:
    """Refused, not revived: the child stays dead and the line names the parent to requeue
    (before: 'requeued 1 job', and the child waited for ever)."""
    p = queue.enqueue("q", {}, max_attempts=1)
    c = queue.enqueue("q", {}, depends_on=[p])
    held = take(queue, "q")
    queue.fail(p, held[p], "boom")
    assert status(queue, c) == "dead"
    assert queue.requeue_report([c]) == ([], [], {c: (p, "dead")})
    result = pgq("requeue", str(c))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "requeued no jobs",
        f"not requeued (not dead, or parent dead or gone): {c} (dead: its parent {p} is dead; "
        f"requeue {p} to run both in order)",
    ]
    assert json.loads(pgq("requeue", str(c), "--json").output)["not_requeued"] == [
        {"id": c, "status": f"dead: its parent {p} is dead; requeue {p} to run both in order"}
    ]
    assert status(queue, c) == "dead"
    # requeued together, in one statement, they run in order
    assert sorted(queue.requeue([c, p])) == [p, c]
    assert [status(queue, i) for i in (p, c)] == ["ready", "waiting"]
    assert queue.requeue_dead("q") == []


def test_a_revived_job_loses_its_stale_error(queue: Queue) -> None:
    """Brought back with its parent, a job waits without 'parent N died', and when it is done
    it shows no error (before: a done job still showed 'parent 13563 died')."""
    p = queue.enqueue("q", {}, max_attempts=1)
    c = queue.enqueue("q", {}, depends_on=[p])
    held = take(queue, "q")
    queue.fail(p, held[p], "boom")
    assert queue.job(c).last_error == f"parent {p} died"
    queue.requeue([p])
    assert (status(queue, c), queue.job(c).last_error) == ("waiting", None)
    held = take(queue, "q")
    queue.complete(p, held[p])
    held = take(queue, "q")
    queue.complete(c, held[c])
    assert (status(queue, c), queue.job(c).last_error) == ("done", None)


def test_health_lists_children_waiting_on_dead_or_missing_parents(
    pgq: Pgq, queue: Queue
) -> None:
    """Waiting jobs no requeue of theirs could have made (an older pgq's requeue past a dead
    parent, a parent deleted by hand): `pgq health` lists them, says why and what to do."""
    p = queue.enqueue("q", {}, max_attempts=1)
    c = queue.enqueue("q", {}, depends_on=[p])
    gone = queue.enqueue("q", {})
    g = queue.enqueue("q", {}, depends_on=[gone])
    fine = queue.enqueue("q", {}, depends_on=[gone])
    held = take(queue, "q")
    queue.fail(p, held[p], "boom")
    queue.complete(gone, held[gone])
    jobs = sql.Identifier(queue.schema)
    waiting_again = sql.SQL(
        "UPDATE {}.jobs SET status = 'waiting', parents_left = 1 WHERE id = %s"
    ).format(jobs)
    # as an older pgq's requeue of c left it; g's parent deleted by hand before it was done
    queue.conn.execute(waiting_again, [c])
    queue.conn.execute(waiting_again, [g])
    queue.conn.execute(sql.SQL("DELETE FROM {}.jobs WHERE id = %s").format(jobs), [gone])
    assert status(queue, fine) == "ready"  # a done parent pruned: nothing wrong

    stranded = queue.health().stranded
    assert stranded is not None and stranded.total == 2
    assert [(j.id, j.dead_parent, j.reason) for j in stranded.jobs] == [
        (c, p, f"its parent {p} is dead"),
        (g, None, "1 of the parents it waits on is gone"),
    ]
    said = ok(pgq("health"))
    assert "stranded jobs: 2 waiting on a dead or gone parent" in said
    assert f"pgq requeue {p}" in said
    assert (
        f"warning: 2 waiting jobs can never run (a parent dead or gone): job {c} on 'q', its "
        f"parent {p} is dead" in " ".join(said.split())
    )
    assert json.loads(ok(pgq("health", "--json")))["stranded"]["total"] == 2


def test_an_enqueue_in_flight_never_keeps_a_claim_from_its_parent(
    dsn: str, schema: str, queue: Queue
) -> None:
    """Two transactions enqueueing children of P, open (P already has children, and its
    first): a claim takes P at once (before: the enqueue held P's row to its commit and the
    claim skipped it). P's completion then waits for the enqueues' commits, and counts their
    children off."""
    p = queue.enqueue("q", {})
    first = queue.enqueue("q", {}, depends_on=[p])
    bounded = "-c lock_timeout=5s"  # an enqueue waiting for the other fails, not hangs
    with (
        psycopg.connect(dsn, options=bounded) as c1,
        psycopg.connect(dsn, options=bounded) as c2,
    ):
        kids = [Queue(c, schema).enqueue("q", {}, depends_on=[p]) for c in (c1, c2)]
        assert list(take(queue, "q")) == [p]  # not blocked by two open enqueues
        held = {p: queue.job(p).fence}
        done = threading.Event()

        def complete() -> None:
            with Queue.connect(dsn, schema) as other:
                other.complete(p, held[p])
            done.set()

        worker = threading.Thread(target=complete)
        worker.start()
        assert not done.wait(0.5)  # the completion waits for the children in flight
        c1.commit()
        c2.commit()
        worker.join(30)
    assert done.is_set()
    assert [status(queue, i) for i in (first, *kids)] == ["ready"] * 3
