"""The enqueue's cheap paths: `Queue.enqueue`'s one INSERT for a job without a key or
dependencies, the bulk path `enqueue_copy` (COPY), and the `edge` probe of migration 25: each
writes the jobs, wakes listeners and refuses bad input as the general path does."""

from __future__ import annotations

import json
import re
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgq_core import (
    AsyncQueue,
    JobSpec,
    PgqError,
    Queue,
    Unstorable,
    listen_statement,
    ops,
    queries,
)

COLUMNS = "queue, payload, status, max_attempts, priority, backoff_base, backoff_cap, trace"


def rows(queue: Queue, ids: list[int]) -> list[tuple[Any, ...]]:
    query = sql.SQL(
        "SELECT id, {c}, run_at - queued_at FROM {s}.jobs WHERE id = ANY(%s) ORDER BY id"
    )
    return queue.conn.execute(
        query.format(c=sql.SQL(COLUMNS), s=sql.Identifier(queue.schema)), [ids]
    ).fetchall()


def heard(dsn: str, schema: str) -> psycopg.Connection[Any]:
    ears = psycopg.connect(dsn, autocommit=True)
    ears.execute(listen_statement(schema))
    return ears


def specs() -> list[JobSpec]:
    return [
        JobSpec("c", {"n": 1}),
        JobSpec("c", {"n": 2}, delay=timedelta(hours=1), priority=3, max_attempts=2),
        JobSpec("c", [3], run_at=datetime(2031, 1, 1, tzinfo=UTC), backoff_base=1.5,
                backoff_cap=60),
        JobSpec("d", "four", delay=timedelta(0)),
    ]  # fmt: skip


def test_enqueue_copy_writes_what_enqueue_many_writes(queue: Queue) -> None:
    many = queue.enqueue_many(specs())
    copied = queue.enqueue_copy(specs())
    assert copied == sorted(copied) and copied[0] > many[-1]
    written, expected = rows(queue, copied), rows(queue, many)
    assert [r[1:-1] for r in written] == [r[1:-1] for r in expected]
    delays = [r[-1] for r in written]
    assert delays[0] == delays[3] == timedelta(0)
    assert delays[1] == timedelta(hours=1)
    assert delays[2] > timedelta(days=365)


def test_a_batch_without_unique_keys_is_one_plain_insert_as_the_keyed_path_writes(
    queue: Queue, dsn: str
) -> None:
    keyed = [*specs(), JobSpec("c", {"k": 1}, unique_key="k")]
    assert ops.enqueue_round(specs()).name == "enqueue_plain"
    assert ops.enqueue_round(keyed).name == "enqueue"
    plain = queue.enqueue_many(specs())
    general = queue.enqueue_many(keyed)[:-1]
    assert plain == sorted(plain) and len(set(plain)) == len(specs())
    written, expected = rows(queue, plain), rows(queue, general)
    assert [r[1:-1] for r in written] == [r[1:-1] for r in expected]
    assert [r[2] for r in written] == [s.payload for s in specs()], "ids in the specs' order"
    assert [r[-1] for r in written][:2] == [timedelta(0), timedelta(hours=1)]
    shared = [JobSpec("u", {"n": n}, priority=4, max_attempts=7) for n in range(3)]
    params = ops.enqueue_round(shared).params
    assert (params["queues"], params["queue"], params["priorities"], params["priority"]) == (
        [], "u", [], 4
    ), "a value every job shares is sent once"
    assert ops.enqueue_round(specs()).params["priority"] is None
    assert [r[1:6] for r in rows(queue, queue.enqueue_many(shared))] == [
        ("u", {"n": n}, "ready", 7, 4) for n in range(3)
    ]
    queue.set_notify("always")
    with heard(dsn, queue.schema) as ears:
        queue.enqueue_many([JobSpec(q, {"n": n}) for n in range(300) for q in ("x", "y")])
        assert sorted(n.payload for n in ears.notifies(timeout=0.4)) == ["x", "y"]
    with pytest.raises(ValueError, match="max_attempts"):
        queue.enqueue_many([JobSpec("c", {}), JobSpec("c", {}, max_attempts=0)])


def test_enqueue_copy_is_all_or_nothing_and_refuses_what_it_cannot_carry(queue: Queue) -> None:
    with pytest.raises(ValueError, match="unique_key or depends_on"):
        queue.enqueue_copy([JobSpec("c", {}), JobSpec("c", {}, unique_key="k")])
    with pytest.raises(ValueError, match="unique_key or depends_on"):
        queue.enqueue_copy([JobSpec("c", {}, depends_on=[1])])
    with pytest.raises(ValueError, match="max_attempts"):
        queue.enqueue_copy([JobSpec("c", {}), JobSpec("c", {}, max_attempts=0)])
    for enqueue in (queue.enqueue_copy, queue.enqueue_many):  # each name checked, once
        with pytest.raises(ValueError, match="invisible"):
            enqueue([JobSpec("c", {}), JobSpec("c", {}), JobSpec("c\u200d", {})])
        with pytest.raises(ValueError, match="queue name"):
            enqueue([JobSpec("c", {}), JobSpec("", {})])
    with pytest.raises(Unstorable):  # the server refuses the second job: none is written
        queue.enqueue_copy([JobSpec("c", {}), JobSpec("c", {"bad": "\x00"})])
    assert queue.enqueue_copy([]) == []
    assert not queue.has_jobs("c")


def test_enqueue_copy_commits_with_the_callers_transaction(queue: Queue, dsn: str) -> None:
    with psycopg.connect(dsn) as own:
        ids = queue.enqueue_copy([JobSpec("t", {"n": n}) for n in range(3)], conn=own)
        assert not queue.has_jobs("t"), "not visible before the caller commits"
        own.rollback()
    assert not queue.has_jobs("t") and rows(queue, ids) == []
    with psycopg.connect(dsn) as own:
        ids = queue.enqueue_copy([JobSpec("t", {"n": n}) for n in range(3)], conn=own)
    assert [r[0] for r in rows(queue, ids)] == ids


@pytest.mark.parametrize("mode", ["always", "edge"])
def test_enqueue_copy_wakes_listeners_once_per_queue(queue: Queue, dsn: str, mode: str) -> None:
    queue.set_notify(mode)
    with heard(dsn, queue.schema) as ears:
        queue.enqueue_copy([JobSpec(q, {"n": n}) for n in range(500) for q in ("x", "y")])
        assert sorted(n.payload for n in ears.notifies(timeout=0.4)) == ["x", "y"]


async def test_async_enqueue_copy_writes_the_same_jobs(queue: Queue, aqueue: AsyncQueue) -> None:
    ids = await aqueue.enqueue_copy(specs())
    expected = queue.enqueue_many(specs())
    written, wanted = rows(queue, ids), rows(queue, expected)
    assert [r[1:-1] for r in written] == [r[1:-1] for r in wanted]
    assert [r[-1] for r in written][:2] == [r[-1] for r in wanted][:2]  # due now; in an hour
    with pytest.raises(ValueError, match="unique_key or depends_on"):
        await aqueue.enqueue_copy([JobSpec("c", {}, unique_key="k")])


#: Payloads whose text COPY must escape (backslashes, JSON's escapes), and beyond ASCII.
AWKWARD = [
    {"path": "C:\\temp\\new", "quote": '"q"', "ws": "tab\tnl\ncr\r", "snow": "\u2603 \U0001f600"},
    "\\N",
    [1.5, -0.0, 10**30, None, True, {"": []}],
]


def test_enqueue_payloads_writes_what_enqueue_copy_of_a_spec_each_writes(queue: Queue) -> None:
    """One template for every payload: the same rows as a JobSpec each, in order, ids
    ascending; payloads COPY must escape come back as they went in."""
    options: dict[str, Any] = {
        "delay": timedelta(hours=1), "priority": 3, "max_attempts": 2, "backoff_base": 1.5,
        "backoff_cap": 60,
    }  # fmt: skip
    copied = queue.enqueue_copy([JobSpec("p\\q\tr", p, **options) for p in AWKWARD])
    loaded = queue.enqueue_payloads("p\\q\tr", AWKWARD, **options)
    assert loaded == sorted(loaded) and loaded[0] > copied[-1]
    written, expected = rows(queue, loaded), rows(queue, copied)
    assert [r[1:] for r in written] == [r[1:] for r in expected]
    assert [r[2] for r in written] == AWKWARD and written[0][-1] == timedelta(hours=1)
    at = datetime(2031, 1, 1, tzinfo=UTC)
    [later] = queue.enqueue_payloads("p", iter([{}]), run_at=at)
    assert queue.job(later).run_at == at
    [now] = queue.enqueue_payloads("p", [{}])
    assert rows(queue, [now])[0][-1] == timedelta(0)


def test_enqueue_payloads_is_all_or_nothing_and_checks_its_options(queue: Queue) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        queue.enqueue_payloads("c", [{}], max_attempts=0)
    with pytest.raises(ValueError, match="backoff_cap"):
        queue.enqueue_payloads("c", [{}], backoff_cap=-1)
    with pytest.raises(ValueError, match="queue name"):
        queue.enqueue_payloads("", [{}])
    with pytest.raises(ValueError, match="not one payload"):
        queue.enqueue_payloads("c", {"one": "job"})
    with pytest.raises(Unstorable):  # the server refuses the last: none is written
        queue.enqueue_payloads("c", [{"n": n} for n in range(3000)] + [{"bad": "\x00"}])
    with pytest.raises(TypeError, match="not JSON serializable"):
        queue.enqueue_payloads("c", [{}, {"when": datetime.now(UTC)}])
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(ValueError, match=r"[Cc]ircular"):
        queue.enqueue_payloads("c", [[1], looped])
    assert queue.enqueue_payloads("c", []) == []
    assert not queue.has_jobs("c")


def test_enqueue_payloads_takes_any_iterable_and_refuses_one_payload(queue: Queue) -> None:
    """Any iterable of payloads (a deque is a Sequence that cannot be sliced) enqueues a job
    per item; a str, bytes, bytearray, memoryview or dict is one payload, refused."""
    ids = queue.enqueue_payloads("c", deque([{"n": 1}, {"n": 2}, {"n": 3}]))
    assert [r[2] for r in rows(queue, ids)] == [{"n": 1}, {"n": 2}, {"n": 3}]
    for one in ("ab", b"ab", bytearray(b"ab"), memoryview(b"ab"), {"a": 1}):
        with pytest.raises(ValueError, match="not one payload"):
            queue.enqueue_payloads("one", one)
    assert not queue.has_jobs("one")


#: JSON texts as a file's lines hold them: JSON's whitespace (a tab, a CR, a pretty-printed
#: value's newlines) between tokens, backslashes, raw non-ASCII, digits a float would round.
TEXTS = [
    json.dumps(AWKWARD[0], ensure_ascii=False),
    '{"a":\t[1,\t2]}\r',
    json.dumps({"nested": {"list": [1, 2]}}, indent=2),
    '"\\\\N"',
    "12345678901234567890.123456789",
    '  [1e400, -0.0, {"": []}]  ',
]


def test_enqueue_payload_texts_stores_each_text_as_jsonb_reads_it(queue: Queue) -> None:
    """Each text is stored as the server's jsonb reads that text (its digits exact), with the
    template's options, as `enqueue_payloads` stores its payloads."""
    options: dict[str, Any] = {"delay": timedelta(hours=1), "priority": 3, "max_attempts": 2}
    ids = queue.enqueue_payload_texts("t", TEXTS, **options)
    assert ids == sorted(ids) and len(ids) == len(TEXTS)
    as_jsonb = sql.SQL("SELECT payload::text FROM {}.jobs WHERE id = ANY(%s) ORDER BY id")
    stored = queue.conn.execute(as_jsonb.format(sql.Identifier(queue.schema)), [ids]).fetchall()
    read = [queue.conn.execute("SELECT %s::jsonb::text", [t]).fetchone() for t in TEXTS]
    assert stored == read
    assert "12345678901234567890.123456789" in stored[4][0]
    same = queue.enqueue_payloads("t", [json.loads(TEXTS[0])], **options)
    assert [r[1:] for r in rows(queue, ids[:1])] == [r[1:] for r in rows(queue, same)]


def test_enqueue_payload_texts_refuses_before_writing_or_writes_nothing(queue: Queue) -> None:
    """A text nested deeper than Python's json reads back (a worker could not load it) or not
    a str is refused before any statement; a text jsonb refuses, by the server, with nothing
    written."""
    many = [f'{{"n": {n}}}' for n in range(3000)]
    with pytest.raises(ValueError, match="payload text 3000 is nested too deeply"):
        queue.enqueue_payload_texts("c", [*many, "[" * 5000 + "]" * 5000])
    assert queue.enqueue_payload_texts("c", ["[" * 150 + "]" * 150], conn=None)
    class Text(str):
        """A str subclass (a framework's safe-string type) is a str here."""

    assert queue.enqueue_payload_texts("c", [Text("[1]"), "[" * 250 + "]" * 250])
    with pytest.raises(TypeError, match="payload text 1 is bytes"):
        queue.enqueue_payload_texts("c", ["{}", b"{}"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="not one text"):
        queue.enqueue_payload_texts("c", "{}")
    for bad in ('{"n": 1,}', "NaN", '{"a": "\\u0000"}', '"a\x00b"', "1e131072", '"\\ud800"'):
        with pytest.raises((psycopg.DataError, Unstorable)):
            queue.enqueue_payload_texts("d", [*many, bad])
    assert queue.enqueue_payload_texts("d", []) == []
    assert not queue.has_jobs("d")


async def test_async_enqueue_payloads_writes_the_same_jobs(
    queue: Queue, aqueue: AsyncQueue, dsn: str
) -> None:
    ids = await aqueue.enqueue_payloads("c", AWKWARD, priority=2)
    expected = queue.enqueue_payloads("c", AWKWARD, priority=2)
    assert [r[1:] for r in rows(queue, ids)] == [r[1:] for r in rows(queue, expected)]
    async with await psycopg.AsyncConnection.connect(dsn) as own:
        ids = await aqueue.enqueue_payloads("t", [{}, {}], conn=own)
        assert not queue.has_jobs("t"), "not visible before the caller commits"
        await own.rollback()
    assert not queue.has_jobs("t") and rows(queue, ids) == []
    texts = await aqueue.enqueue_payload_texts("c", TEXTS[:2], priority=2)
    expected = queue.enqueue_payload_texts("c", TEXTS[:2], priority=2)
    assert [r[1:] for r in rows(queue, texts)] == [r[1:] for r in rows(queue, expected)]


def test_the_bulk_path_refuses_unstorable_text_as_every_enqueue_does(queue: Queue) -> None:
    """jsonb holds no \\u0000: the one-job enqueue, a batch and COPY all raise `Unstorable`,
    write nothing and leave the connection usable."""
    bad = {"bad": "\x00"}
    with pytest.raises(Unstorable, match="u0000"):
        queue.enqueue("c", bad)
    with pytest.raises(Unstorable, match="u0000"):
        queue.enqueue_many([JobSpec("c", {}), JobSpec("c", bad)])
    with pytest.raises(Unstorable, match="u0000"):
        queue.enqueue_payloads("c", [{"n": n} for n in range(6000)] + [bad])
    with pytest.raises(Unstorable, match="u0000"):
        queue.enqueue_copy([JobSpec("c", {}), JobSpec("c", bad)])
    assert not queue.has_jobs("c")
    assert len(queue.enqueue_payloads("c", [{}])) == 1


async def test_async_bulk_path_refuses_unstorable_text(queue: Queue, aqueue: AsyncQueue) -> None:
    bad = {"bad": "\x00"}
    with pytest.raises(Unstorable, match="u0000"):
        await aqueue.enqueue_payloads("c", [{}, bad])
    with pytest.raises(Unstorable, match="u0000"):
        await aqueue.enqueue_copy([JobSpec("c", {}), JobSpec("c", bad)])
    assert not queue.has_jobs("c")
    assert len(await aqueue.enqueue_payloads("c", [{}])) == 1


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_attempts", 2.5), ("max_attempts", True), ("max_attempts", 2**31),
     ("priority", 1.5), ("priority", False), ("priority", 2**31), ("priority", -(2**31) - 1)],
)  # fmt: skip
def test_every_path_refuses_an_option_that_is_no_int4(
    queue: Queue, option: str, value: Any
) -> None:
    """max_attempts and priority are int4 columns: a float, a bool or a number out of range is
    refused by every path before anything is sent (the one-job INSERT cast 2.5 to 3 and True
    to 1, COPY refused them in the database, a batch said "integer out of range")."""
    paths = [
        lambda: queue.enqueue("c", {}, **{option: value}),
        lambda: queue.enqueue_many([JobSpec("c", {}, **{option: value})]),
        lambda: queue.enqueue_copy([JobSpec("c", {}, **{option: value})]),
        lambda: queue.enqueue_payloads("c", [{}], **{option: value}),
    ]
    for path in paths:
        with pytest.raises(ValueError, match=option):
            path()
    assert not queue.has_jobs("c")


def test_enqueue_one_checks_and_writes_as_the_general_path(queue: Queue) -> None:
    one = queue.enqueue(
        "c", {"n": 2}, delay=timedelta(hours=1), priority=3, max_attempts=2, backoff_base=2,
        backoff_cap=7,
    )  # fmt: skip
    [general] = queue.enqueue_many(
        [JobSpec("c", {"n": 2}, delay=timedelta(hours=1), priority=3, max_attempts=2,
                 backoff_base=2, backoff_cap=7)]
    )  # fmt: skip
    [(_, *mine)], [(_, *theirs)] = rows(queue, [one]), rows(queue, [general])
    assert mine == theirs
    with pytest.raises(ValueError, match="max_attempts"):
        queue.enqueue("c", {}, max_attempts=0)
    with pytest.raises(ValueError, match="backoff_base"):
        queue.enqueue("c", {}, backoff_base=-1)
    with pytest.raises(ValueError, match="queue name"):
        queue.enqueue("", {})


async def test_async_enqueue_one_checks_and_writes_as_the_sync_one(
    queue: Queue, aqueue: AsyncQueue
) -> None:
    ids = [
        queue.enqueue("c", {"n": 1}, priority=2),
        await aqueue.enqueue("c", {"n": 1}, priority=2),
    ]
    first, second = rows(queue, ids)
    assert first[1:] == second[1:]
    with pytest.raises(ValueError, match="max_attempts"):
        await aqueue.enqueue("c", {}, max_attempts=0)


def test_edge_batch_onto_a_queue_with_one_due_job_is_silent(queue: Queue, dsn: str) -> None:
    queue.set_notify("edge")
    queue.enqueue("e", {}, delay=timedelta(hours=1))  # scheduled: not due, so no edge of its own
    with heard(dsn, queue.schema) as ears:
        queue.enqueue_many([JobSpec("e", {"n": n}) for n in range(300)])
        assert [n.payload for n in ears.notifies(timeout=0.4)] == ["e"], "nothing was due"
        queue.enqueue_many([JobSpec("e", {"n": n}) for n in range(300)])
        queue.enqueue_copy([JobSpec("e", {"n": n}) for n in range(300)])
        queue.enqueue("e", {})
        assert [n.payload for n in ears.notifies(timeout=0.4)] == [], "300 were due already"


def test_always_on_an_autocommit_connection_notifies_after_the_commit(
    queue: Queue, dsn: str
) -> None:
    """`Queue.enqueue` alone in its transaction sends the NOTIFY itself once its INSERT has
    committed; the setting that tells the trigger so ends with that transaction: a plain INSERT
    on the same connection next is notified by the trigger, and a scheduled job by nobody."""
    insert = sql.SQL("INSERT INTO {}.jobs (queue, payload) VALUES ('p', '{{}}')").format(
        sql.Identifier(queue.schema)
    )
    with heard(dsn, queue.schema) as ears:
        first = queue.enqueue("a", {})
        queue.enqueue("a", {}, delay=timedelta(hours=1))
        queue.conn.execute(insert)
        with psycopg.connect(dsn) as own:  # in the caller's transaction: the trigger's NOTIFY
            queue.enqueue("t", {}, conn=own)
        # the process's notifier sends "a" after its commit, maybe after the trigger's "p"
        assert sorted(n.payload for n in ears.notifies(timeout=0.4)) == ["a", "p", "t"]
        queue.set_notify("edge")
        queue.enqueue("e", {})
        queue.enqueue("e", {})
        assert [n.payload for n in ears.notifies(timeout=0.4)] == ["e"]
    assert rows(queue, [first])[0][3] == "ready"


async def test_async_always_notifies_after_the_commit(aqueue: AsyncQueue, dsn: str) -> None:
    with heard(dsn, aqueue.schema) as ears:
        await aqueue.enqueue("a", {})
        await aqueue.enqueue("b", {})
        assert [n.payload for n in ears.notifies(timeout=0.4)] == ["a", "b"]


def test_an_enqueue_alone_runs_no_trigger_and_any_other_insert_does(queue: Queue) -> None:
    """`Queue.enqueue` alone in its transaction decides its NOTIFY itself under every mode, so
    the jobs INSERT trigger does not fire for it, nor for `enqueue_many` of one queue's jobs
    due now; for any other batch, an enqueue in the caller's transaction and an application's
    own INSERT it fires as before (counted by the server's function statistics, flushed by the
    backend)."""
    own = queue.conn
    if own.info.server_version < 150000:
        pytest.skip("pg_stat_force_next_flush() needs PostgreSQL 15")
    own.execute("SET track_functions = 'pl'")
    count = sql.SQL(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions"
        " WHERE schemaname = %s AND funcname = 'jobs_after_change'"
    )

    def calls() -> int:
        own.execute("SELECT pg_stat_force_next_flush()")
        row = own.execute(count, [queue.schema]).fetchone()
        return int(row[0]) if row else 0

    before = calls()
    for _ in range(5):
        queue.enqueue("n", {})
    assert calls() == before, "an autocommit enqueue fires no trigger"
    queue.enqueue_many([JobSpec("n", {}), JobSpec("n", {})])
    queue.enqueue_many_detailed([JobSpec("n", {}, priority=2), JobSpec("n", {}, max_attempts=1)])
    assert calls() == before, "nor does a batch of one queue's jobs due now"
    queue.enqueue_many([JobSpec("n", {}), JobSpec("n", {}, delay=timedelta(0))])
    queue.enqueue_many([JobSpec("n", {}), JobSpec("m", {})])
    with own.transaction():
        queue.enqueue("n", {}, conn=own)
    own.execute(
        sql.SQL("INSERT INTO {}.jobs (queue, payload) VALUES ('n', '{{}}')").format(
            sql.Identifier(queue.schema)
        )
    )
    assert calls() == before + 4
    # under `edge` too: the statement probes the queue itself
    queue.set_notify("edge")
    queue.enqueue("n", {})
    queue.enqueue_many([JobSpec("n", {}), JobSpec("n", {})])
    assert calls() == before + 4


@pytest.mark.parametrize("autocommit", [True, False])
def test_a_connection_in_a_pipeline_is_refused_before_anything_is_sent(
    queue: Queue, dsn: str, autocommit: bool
) -> None:
    """In a caller's `conn.pipeline()`, a statement's rows come only at the pipeline's sync:
    the enqueue read no id and raised IndexError, yet its INSERT was sent and committed with
    the pipeline (a caller retrying on that error enqueued twice), and the one-INSERT path
    saw the connection idle, so its notify flag would have covered the caller's next INSERT.
    It is refused in one line, and nothing is written."""
    with psycopg.connect(dsn, autocommit=autocommit) as own:
        with own.pipeline(), pytest.raises(PgqError, match="pipeline"):
            queue.enqueue("piped", {}, conn=own)
        with own.pipeline(), pytest.raises(PgqError, match="pipeline"):
            queue.enqueue_many([JobSpec("piped", {}), JobSpec("piped", {})], conn=own)
        if not autocommit:
            own.commit()
    assert queue.jobs(queue="piped") == []


def test_the_edge_probe_reads_an_index_when_few_jobs_are_due(queue: Queue, dsn: str) -> None:
    """`enqueue_one_then_notify`'s `edge` probe as a generic plan (a prepared statement's from
    its sixth run) over a table of done jobs with few ready, and over one of scheduled jobs,
    each analyzed: a ready index, never a scan of the table (which would read every row)."""
    ident = sql.Identifier(queue.schema)
    text = queries.statement("enqueue_one_then_notify", queue.schema).decode()
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", text)
    params = ops.enqueue_job("p", {}, None, None, 5, 0, None, None, alone=True).params
    execute = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE probe({})").format(
        sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
    )
    queue.set_notify("edge")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for state in ("mostly done", "scheduled"):
            conn.execute(sql.SQL("TRUNCATE {}.jobs").format(ident))
            if state == "mostly done":
                queue.enqueue_many([JobSpec("p", {"n": n}) for n in range(2000)])
                conn.execute(
                    sql.SQL(
                        "UPDATE {}.jobs SET status = 'done', finished_at = now()"
                        " WHERE id % 50 <> 0"
                    ).format(ident)
                )
            else:
                later = timedelta(hours=1)
                queue.enqueue_many([JobSpec("p", {"n": n}, delay=later) for n in range(2000)])
            conn.execute(sql.SQL("ANALYZE {}.jobs").format(ident))
            conn.execute(sql.SQL("PREPARE probe AS {}").format(sql.SQL(numbered)))
            with conn.transaction(force_rollback=True):
                plan = "\n".join(str(r[0]) for r in conn.execute(execute).fetchall())
            conn.execute("DEALLOCATE probe")
            probe = plan[plan.index("SubPlan") :]
            assert re.search(r"Index (Only )?Scan using jobs_ready\w*_idx on jobs d", probe), plan
            assert "Seq Scan on jobs" not in plan, (state, plan)


def test_a_jobspec_is_made_as_dataclass_makes_it() -> None:
    """JobSpec's own __init__ (one __dict__ update) takes dataclass's signature and defaults,
    and the result is the same frozen value: equal, hashable, `replace`-able, naive run_at
    made aware."""
    import dataclasses
    import inspect

    @dataclasses.dataclass(frozen=True)
    class Plain:  # JobSpec's fields, with dataclass's own __init__
        queue: str
        payload: Any
        run_at: datetime | None = None
        delay: timedelta | None = None
        max_attempts: int = ops.DEFAULT_MAX_ATTEMPTS
        priority: int = 0
        unique_key: str | None = None
        depends_on: Any = ()
        backoff_base: float | None = None
        backoff_cap: float | None = None

    def defaults(cls: type) -> list[tuple[str, Any]]:
        return [(n, p.default) for n, p in inspect.signature(cls).parameters.items()]

    assert defaults(JobSpec) == defaults(Plain)
    assert inspect.signature(JobSpec).parameters["priority"].annotation == "int"
    spec = JobSpec("q", {"a": 1}, priority=3, depends_on=(1, 2))
    plain = Plain("q", {"a": 1}, priority=3, depends_on=(1, 2))
    assert dataclasses.asdict(spec) == dataclasses.asdict(plain)
    assert spec == JobSpec("q", {"a": 1}, priority=3, depends_on=(1, 2)) != JobSpec("q", 1)
    assert hash(JobSpec("q", 1)) == hash(JobSpec("q", 1))
    assert dataclasses.replace(spec, priority=4).priority == 4
    naive = JobSpec("q", 1, run_at=datetime(2026, 1, 1, 12))
    assert naive.run_at == datetime(2026, 1, 1, 12).astimezone()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.priority = 5  # type: ignore[misc]
    with pytest.raises(TypeError, match="payload"):
        JobSpec("q")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        JobSpec("q", 1, bogus=2)  # type: ignore[call-arg]


def test_a_jobspec_init_resolves_its_annotations_as_dataclass_does() -> None:
    """JobSpec's generated __init__ belongs to JobSpec's module, as dataclass's own does: its
    string annotations resolve there (`typing.get_type_hints`, `inspect.signature(...,
    eval_str=True)`, which frameworks use to read a constructor). Made in a namespace of its
    own, it had no module and raised NameError for 'Any'."""
    import inspect
    import typing

    from pgq_core.ops import spec as spec_module

    init = JobSpec.__init__
    assert init.__module__ == spec_module.__name__
    hints = typing.get_type_hints(init)
    assert hints["run_at"] == datetime | None and hints["payload"] is Any
    assert hints["return"] is type(None)
    signature = inspect.signature(JobSpec, eval_str=True)
    assert signature.parameters["priority"].annotation is int
    assert "_defaults" not in vars(spec_module), "nothing left in the module's namespace"


def due_specs(queue_name: str = "b") -> list[JobSpec]:
    return [
        JobSpec(queue_name, {"n": 1}),
        JobSpec(queue_name, {"n": 2}, priority=3, max_attempts=2),
        JobSpec(queue_name, [3], backoff_base=1.5, backoff_cap=60),
        JobSpec(queue_name, "four", priority=-1),
    ]


def test_a_batch_of_one_queue_due_now_writes_what_the_general_path_writes(
    queue: Queue,
) -> None:
    """`enqueue_batch` (a transaction of its own) is taken for a batch of one queue's jobs due
    now, and no other; it writes each job as `enqueue_plain` in a caller's transaction does,
    the ids ascending in the specs' order."""
    assert ops.enqueue_batch(due_specs()) is not None
    for other in (
        [*due_specs(), JobSpec("other", {})],
        [*due_specs(), JobSpec("b", {}, delay=timedelta(0))],
        [*due_specs(), JobSpec("b", {}, run_at=datetime.now(UTC))],
        [*due_specs(), JobSpec("b", {}, unique_key="k")],
        [*due_specs(), JobSpec("b", {}, depends_on=(1,))],
        [],
    ):
        assert ops.enqueue_batch(other) is None
    fast = queue.enqueue_many(due_specs())
    with queue.transaction():
        general = queue.enqueue_many(due_specs())
    assert fast == sorted(fast) and len(set(fast)) == 4 and general[0] > fast[-1]
    written, expected = rows(queue, fast), rows(queue, general)
    assert [r[1:] for r in written] == [r[1:] for r in expected]
    assert [r[2] for r in written] == [s.payload for s in due_specs()], "ids in the specs' order"
    assert {r[-1] for r in written} == {timedelta(0)}, "due at the transaction's now()"
    detailed = queue.enqueue_many_detailed(due_specs())
    assert [e.inserted for e in detailed] == [True] * 4
    assert [r[1:] for r in rows(queue, [e.id for e in detailed])] == [r[1:] for r in expected]


@pytest.mark.parametrize("mode", ["always", "edge", "off"])
def test_a_batch_due_now_notifies_after_its_commit_as_its_mode_says(
    queue: Queue, dsn: str, mode: str
) -> None:
    """The batch's statement decides its queue's NOTIFY once, and the producer sends it after
    the commit: under `always` each time, under `edge` only onto a queue with no due ready
    job (a scheduled one does not count), under `off` never."""
    queue.set_notify(mode)
    queue.enqueue("w", {}, delay=timedelta(hours=1))
    with heard(dsn, queue.schema) as ears:
        ears.notifies(timeout=0.2)  # anything the scheduled job left
        queue.enqueue_many([JobSpec("w", {"n": n}) for n in range(300)])
        first = [n.payload for n in ears.notifies(timeout=0.4)]
        queue.enqueue_many([JobSpec("w", {"n": n}) for n in range(300)])
        second = [n.payload for n in ears.notifies(timeout=0.4)]
    assert (first, second) == {
        "always": (["w"], ["w"]), "edge": (["w"], []), "off": ([], []),
    }[mode]  # fmt: skip


def test_a_batch_due_now_is_all_or_nothing(queue: Queue) -> None:
    """A spec Python refuses stops the batch before anything is sent; a payload the server
    refuses fails the one statement, and nothing of the batch is written."""
    before = queue.conn.execute(
        sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(queue.schema))
    ).fetchone()
    with pytest.raises(ValueError, match="priority"):
        queue.enqueue_many([*due_specs(), JobSpec("b", {}, priority=2**31)])
    with pytest.raises(ValueError):
        queue.enqueue_many([*due_specs(), JobSpec("", {})])
    with pytest.raises(Unstorable):
        queue.enqueue_many([*due_specs(), JobSpec("b", {"text": "a\x00b"})])
    after = queue.conn.execute(
        sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(queue.schema))
    ).fetchone()
    assert after == before
    assert queue.enqueue_many(due_specs())  # the connection is fine after


async def test_async_batch_due_now_writes_and_notifies(aqueue: AsyncQueue, dsn: str) -> None:
    await aqueue.set_notify("always")
    with heard(dsn, aqueue.schema) as ears:
        ids = await aqueue.enqueue_many(due_specs("ab"))
        assert [n.payload for n in ears.notifies(timeout=0.4)] == ["ab"]
    assert ids == sorted(ids) and len(ids) == 4
    detailed = await aqueue.enqueue_many_detailed(due_specs("ab"))
    assert all(e.inserted for e in detailed) and detailed[0].id > ids[-1]


def test_an_enqueue_a_trigger_skipped_a_row_of_says_so(queue: Queue) -> None:
    """An application's BEFORE INSERT trigger on jobs that returns NULL skips a row: the
    statement answers fewer rows than jobs, and which id is whose is unknown, so every enqueue
    path raises PgqError saying so. `enqueue_many` returned fewer ids than specs (for a batch
    of two queues, ids matched to the wrong specs), a keyed batch raised TypeError (the read's
    StopIteration ended the flow with None) and one job IndexError."""
    s = sql.Identifier(queue.schema)
    queue.conn.execute(
        sql.SQL(
            "CREATE FUNCTION {s}.skip_some() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF NEW.payload ? 'skip' THEN RETURN NULL; END IF; RETURN NEW; END $$"
        ).format(s=s)
    )
    queue.conn.execute(
        sql.SQL(
            "CREATE TRIGGER skip_some BEFORE INSERT ON {s}.jobs FOR EACH ROW"
            " EXECUTE FUNCTION {s}.skip_some()"
        ).format(s=s)
    )
    skipped = [JobSpec("q", {"a": 1}), JobSpec("q", {"skip": 1}), JobSpec("q", {"c": 1})]
    batches = {
        "due now": skipped,
        "two queues": [*skipped, JobSpec("r", {})],
        "a unique key": [*skipped, JobSpec("q", {}, unique_key="k")],
    }
    said = "trigger on jobs skipped some"
    for what, batch in batches.items():
        with pytest.raises(PgqError, match=said):
            queue.enqueue_many(batch)
            pytest.fail(what)
        with pytest.raises(PgqError, match=said), queue.transaction():
            queue.enqueue_many_detailed(batch)
    with pytest.raises(PgqError, match=said):
        queue.enqueue("q", {"skip": 1})
    with pytest.raises(PgqError, match=said), queue.transaction() as conn:
        queue.enqueue("q", {"skip": 1}, conn=conn)
    # the bulk path took an id for every job before its COPY: nothing of it stays
    count = sql.SQL("SELECT count(*) FROM {s}.jobs").format(s=s)
    before = queue.conn.execute(count).fetchone()
    with pytest.raises(PgqError, match=said):
        queue.enqueue_copy(skipped)
    with pytest.raises(PgqError, match=said):
        queue.enqueue_payloads("q", [{"a": 1}, {"skip": 1}])
    with pytest.raises(PgqError, match=said):
        queue.enqueue_payload_texts("q", ['{"skip": 1}'])
    with queue.transaction() as conn:
        with pytest.raises(PgqError, match=said):
            queue.enqueue_copy(skipped, conn=conn)
        queue.enqueue("q", {"kept": 1}, conn=conn)  # the caller's transaction goes on
    after = queue.conn.execute(count).fetchone()
    assert before is not None and after == (before[0] + 1,)
    ids = queue.enqueue_many([JobSpec("q", {"n": 1}), JobSpec("q", {"n": 2})])
    assert [r[2] for r in rows(queue, ids)] == [{"n": 1}, {"n": 2}], "no row skipped: as ever"
    assert len(queue.enqueue_copy([JobSpec("q", {"n": 3})])) == 1
