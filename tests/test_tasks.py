"""The task API on a real server: arguments checked at enqueue (nothing inserted otherwise),
plain and async tasks dispatched by name by an in-process worker, unknown names failing their
job with a clear error while the worker goes on; enqueue inside SQLAlchemy's transaction."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support import make_worker, until

from pgq_core import (
    PgqError,
    Queue,
    TaskArgumentError,
    TaskError,
    Tasks,
    current_job,
    driver_connection,
    enqueue_in,
)

ran: list[tuple[str, Any]] = []
tasks = Tasks(queue="emails")


@tasks.task(max_attempts=8)
def send_email(to: str, subject: str, cc: list[str] | None = None) -> None:
    ran.append(("send_email", (to, subject, cc, threading.current_thread().name)))
    assert current_job().payload["task"] == "send_email"


@tasks.task(queue="hooks", max_attempts=2)
async def call_hook(url: str, **headers: str) -> None:
    await asyncio.sleep(0)
    ran.append(("call_hook", (url, headers, current_job().queue)))


def count(queue: Queue) -> int:
    row = queue.conn.execute(
        sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(queue.schema))
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_enqueue_stores_the_task_and_its_arguments_by_name(queue: Queue) -> None:
    job_id = send_email.enqueue("ada@example.com", subject="hi", conn=queue)
    job = queue.job(job_id)
    assert job.queue == "emails" and job.max_attempts == 8
    assert job.payload == {"task": "send_email", "args": {"to": "ada@example.com", "subject": "hi"}}
    hook = call_hook.enqueue(url="https://x", conn=queue, auth="t", unique_key="hook:1")
    stored = {"task": "call_hook", "args": {"url": "https://x", "auth": "t"}}
    assert queue.job(hook).payload == stored
    assert queue.job(hook).queue == "hooks"
    assert call_hook.enqueue(url="https://y", conn=queue, unique_key="hook:1") == hook


@pytest.mark.parametrize(
    ("args", "kwargs", "fragment"),
    [
        ((), {"to": "a"}, "missing a required argument: 'subject'"),
        (("a", "b", "c", "d"), {}, "too many positional arguments"),
        ((), {"to": "a", "subject": "b", "bcc": "c"}, "unexpected keyword argument 'bcc'"),
        ((), {"to": object(), "subject": "b"}, "argument 'to' cannot be stored as JSON"),
        ((), {"to": "a", "subject": float("nan")}, "argument 'subject' cannot be stored as JSON"),
    ],
)
def test_bad_arguments_are_refused_and_nothing_is_inserted(
    queue: Queue, args: tuple[Any, ...], kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(TaskArgumentError, match=fragment) as info:
        send_email.enqueue(*args, conn=queue, **kwargs)
    assert isinstance(info.value, TypeError) and "task send_email" in str(info.value)
    assert count(queue) == 0


def test_registering_bad_tasks_is_refused() -> None:
    registry = Tasks()
    registry.task(name="x")(lambda: None)
    with pytest.raises(PgqError, match="already registered"):
        registry.task(name="x")(lambda: None)
    with pytest.raises(PgqError, match="clashes with an option"):
        registry.task(lambda conn: None)
    with pytest.raises(PgqError, match="positional-only or \\*args"):
        registry.task(lambda *a: None)


def test_a_task_is_still_a_plain_function() -> None:
    ran.clear()
    with pytest.raises(PgqError, match="only available inside a running task"):
        send_email("a", "b")


async def test_a_worker_runs_plain_and_async_tasks_and_survives_unknown_names(
    dsn: str, schema: str, queue: Queue
) -> None:
    ran.clear()
    send_email.enqueue(to="ada@example.com", subject="hello", cc=["b@x"], conn=queue)
    unknown = queue.enqueue("emails", {"task": "send_sms", "args": {}}, max_attempts=1)
    not_a_task = queue.enqueue("emails", {"hello": 1}, max_attempts=1)
    stale_args = queue.enqueue(
        "emails", {"task": "send_email", "args": {"to": "a"}}, max_attempts=1
    )
    call_hook.enqueue(url="https://hooks.example.com", conn=queue, auth="t")
    worker = make_worker(dsn, schema, tasks, queues=tasks.queues)
    assert tasks.queues == ["emails", "hooks"]
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: len(ran) == 2 and worker.snapshot().failed == 3, what="all jobs")
        after = send_email.enqueue(to="later@example.com", subject="still up", conn=queue)
        await until(lambda: queue.job(after).status == "done", what="the worker kept going")
    finally:
        worker.stop(immediately=True)
        await asyncio.wait_for(task, 30)
    by_name = dict(ran[:2])
    to, subject, cc, thread = by_name["send_email"]
    assert (to, subject, cc) == ("ada@example.com", "hello", ["b@x"])
    assert thread.startswith("pgq-task")
    assert by_name["call_hook"] == ("https://hooks.example.com", {"auth": "t"}, "hooks")
    failed = queue.job(unknown)
    assert failed.status == "dead"
    assert failed.last_error is not None
    assert "unknown task 'send_sms' (known: call_hook, send_email)" in failed.last_error
    assert "not a task job" in (queue.job(not_a_task).last_error or "")
    assert "missing a required argument: 'subject'" in (queue.job(stale_args).last_error or "")


async def test_enqueue_async(aqueue: Any) -> None:
    job_id = await call_hook.enqueue_async(url="u", conn=aqueue)
    assert (await aqueue.job(job_id)).payload["task"] == "call_hook"
    with pytest.raises(TaskArgumentError):
        await call_hook.enqueue_async(conn=aqueue)


def test_unknown_task_error_type() -> None:
    assert issubclass(TaskError, PgqError)


# -- your framework's transaction -------------------------------------------------------------


def _sa_url(dsn: str) -> Any:
    from sqlalchemy.engine import make_url

    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return make_url("postgresql+psycopg://").set(
        username=info.get("user"),
        password=info.get("password"),
        host=info.get("host"),
        port=int(info["port"]) if info.get("port") else None,
        database=info.get("dbname"),
    )


@pytest.fixture
def engine(dsn: str) -> Any:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    eng = sqlalchemy.create_engine(_sa_url(dsn))
    yield eng
    eng.dispose()


@pytest.mark.parametrize("commit", [True, False])
def test_enqueue_in_a_sqlalchemy_session_commits_and_rolls_back_with_its_writes(
    engine: Any,
    queue: Queue,
    dsn: str,
    schema: str,
    commit: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    monkeypatch.setattr(tasks, "schema", schema)

    orders = f'"{schema}".orders'
    with engine.begin() as c:
        c.execute(text(f"CREATE TABLE {orders} (id int PRIMARY KEY)"))
    with Session(engine) as session:
        session.execute(text(f"INSERT INTO {orders} VALUES (42)"))
        job_id = enqueue_in(session, "emails", {"order": 42}, schema=schema)
        task_job = send_email.enqueue(to="a", subject="order 42", conn=session)
        task_job_2 = send_email.enqueue(to="b", subject="x", conn=session.connection())
        assert task_job_2 > task_job > job_id
        with Queue.connect(dsn, schema) as other:
            assert other.jobs() == []  # not visible before the commit
        session.commit() if commit else session.rollback()
    with engine.connect() as c:
        orders_left = c.execute(text(f"SELECT count(*) FROM {orders}")).scalar()
    assert orders_left == (1 if commit else 0)
    assert len(queue.jobs()) == (3 if commit else 0)


def test_driver_connection_refuses_what_it_cannot_use(engine: Any, conn: Any) -> None:
    assert driver_connection(conn) is conn
    with pytest.raises(PgqError, match="cannot enqueue through a int"):
        driver_connection(42)
    with engine.connect() as c:
        assert isinstance(driver_connection(c), psycopg.Connection)
