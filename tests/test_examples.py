"""The recipes under examples/, run as their users would: a request through the framework's
own test client enqueues a job, and a worker finishes it (Django's through its management
command)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from support import TIMEOUT, make_worker

from pgq_core import Queue, Tasks

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(autouse=True)
def importable() -> Iterator[None]:
    for where in (EXAMPLES, EXAMPLES / "django_shop"):
        if str(where) not in sys.path:
            sys.path.insert(0, str(where))
    yield


def drain(dsn: str, schema: str, tasks: Tasks) -> None:
    """A burst worker on the recipe's tasks, run to the end."""
    worker = make_worker(dsn, schema, tasks, queues=tasks.queues, burst=True)
    asyncio.run(asyncio.wait_for(worker.run(), TIMEOUT))


def in_schema(dsn: str, schema: str) -> str:
    """`dsn` with the schema first on the search path (the recipes' own tables go there)."""
    return make_conninfo(dsn, options=f"-c search_path={schema}")


def test_fastapi_recipe(dsn: str, schema: str, queue: Queue) -> None:
    from fastapi.testclient import TestClient
    from fastapi_reports.main import create_app, tasks

    with TestClient(create_app(dsn, schema)) as client:
        job_id = client.post("/reports/42", params={"period": "week"}).json()["job"]
        assert client.post("/reports/42").json()["job"] == job_id  # one at a time per account
        assert client.get(f"/jobs/{job_id}").json()["status"] == "ready"
        drain(dsn, schema, tasks)
        assert client.get(f"/jobs/{job_id}").json() == {
            "id": job_id,
            "status": "done",
            "attempts": 1,
            "result": {"account": 42, "period": "week", "rows": 3},
        }
        assert client.get("/jobs/999999").status_code == 404
    job = queue.job(job_id)
    assert (job.queue, job.max_attempts) == ("reports", 4)
    assert job.payload["timeout"] == 120


def test_flask_recipe(dsn: str, schema: str, queue: Queue, conn: Any) -> None:
    from flask_thumbs.app import create_app, tasks

    client = create_app(in_schema(dsn, schema), schema).test_client()  # it makes its table
    made = client.post("/uploads", json={"image": "cat.jpg"}).get_json()
    refused = client.post("/uploads", json={"image": "notes.txt"}).get_json()
    uploads = conn.execute(
        sql.SQL("SELECT id, image FROM {}.uploads ORDER BY id").format(sql.Identifier(schema))
    ).fetchall()
    assert uploads == [(made["upload"], "cat.jpg"), (refused["upload"], "notes.txt")]
    assert client.get(f"/jobs/{made['job']}").get_json()["status"] == "ready"

    drain(dsn, schema, tasks)
    assert client.get(f"/jobs/{made['job']}").get_json() == {
        "id": made["job"],
        "status": "done",
        "result": {"upload": made["upload"], "thumbnail": "thumbs/320/cat.jpg"},
        "error": None,
    }
    bad = queue.job(refused["job"])
    assert (bad.status, bad.attempts) == ("dead", 1)  # dont_retry_on=ValueError
    assert client.get("/jobs/999999").status_code == 404


def test_django_recipe(dsn: str, schema: str, queue: Queue) -> None:
    """Enqueued inside `transaction.atomic()` on Django's own connection: the job commits with
    the signup, or neither exists; `manage.py pgq_worker` runs it."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "shop.settings"
    os.environ["PGQ_DSN"] = in_schema(dsn, schema)
    os.environ["PGQ_SCHEMA"] = schema
    try:
        import django

        django.setup()
    finally:
        for name in ("DJANGO_SETTINGS_MODULE", "PGQ_DSN", "PGQ_SCHEMA"):
            os.environ.pop(name, None)
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test import Client
    from signups.models import Signup
    from signups.tasks import send_welcome

    with connection.schema_editor() as editor:
        editor.create_model(Signup)
    answer = Client().post("/signup/", {"email": "ada@example.com"}).json()
    job = queue.job(answer["job"])
    assert (job.queue, job.status, job.unique_key) == (
        "welcome", "ready", f"welcome-{answer['signup']}"
    )

    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = Signup.objects.create(email="bob@example.com")
        send_welcome.enqueue(signup_id=rolled_back.id, conn=connection)
        raise RuntimeError("the payment failed")
    assert not Signup.objects.filter(email="bob@example.com").exists()
    assert [j.id for j in queue.jobs(limit=10)] == [answer["job"]]  # the job rolled back too

    call_command("pgq_worker", "--burst")
    job = queue.job(answer["job"])
    assert (job.status, job.result) == ("done", "ada@example.com")
    assert Signup.objects.get(id=answer["signup"]).welcomed_at is not None
    connection.close()


def test_a_django_connection_on_another_database_is_refused() -> None:
    from pgq_core import PgqError, driver_connection

    class SQLiteConnection:  # what matters of django.db.connection on SQLite
        vendor = "sqlite"

        def ensure_connection(self) -> None:
            raise AssertionError("not reached")

    with pytest.raises(PgqError, match="Django's sqlite database: pgq needs PostgreSQL"):
        driver_connection(SQLiteConnection())
    with pytest.raises(PgqError, match="cannot enqueue through a object"):
        driver_connection(object())


def test_flask_recipe_runs_as_its_docstring_says(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`flask --app flask_thumbs.app run` with only the environment: no KeyError for a missing
    setting, no table to create by hand (it returned 500: relation "uploads" does not exist)."""
    from flask_thumbs.app import create_app

    monkeypatch.setenv("PGQ_DSN", in_schema(dsn, schema))
    monkeypatch.setenv("PGQ_SCHEMA", schema)
    client = create_app().test_client()
    made = client.post("/uploads", json={"image": "dog.png"})
    assert made.status_code == 200, made.get_data(as_text=True)
    job = made.get_json()["job"]
    assert client.get(f"/jobs/{job}").get_json()["status"] == "ready"
