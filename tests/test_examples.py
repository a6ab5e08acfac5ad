"""The recipes under examples/, run as their users would.

Each recipe's README is run as written (`run_readme`): its `sh` blocks, command by command, as
real processes on the suite's server and this test's schema (`recipe_env`), so a README cannot
drift from what works. On the embedded server (no PGQ_TEST_DSN) they run as the READMEs
promise, with no PGQ_DSN at all: they find the suite's embedded server through PGQ_HOME.
Beside that, each recipe's finer points go through its framework's own test client, with a
worker finishing the job (Django's through its management command).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from psycopg import sql
from psycopg.conninfo import make_conninfo
from support import TIMEOUT, free_port, make_worker

from pgq_core import Queue, Tasks

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"
]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


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


# ------------------------------------------------------------------ each README, run as written


def readme_commands(readme: Path) -> list[str]:
    """The commands of the README's `sh` blocks, in order: lines joined at a trailing
    backslash, comments dropped. A block in another language fails: every block is run."""
    found = []
    for match in FENCE.finditer(readme.read_text()):
        assert match.group(1) == "sh", f"{readme}: a ```{match.group(1)} block: nothing runs it"
        for line in match.group(2).replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                found.append(shlex.join(words))
    return found


#: the program a README's command starts -> the distribution that installs it
PROGRAMS = {"flask": "flask", "uvicorn": "uvicorn", "manage.py": "django", "curl": None}


def extra_distributions(extras: list[str]) -> set[str]:
    """The distributions these extras of pgq-fence require (and pgq-fence's own)."""
    names = {"pgq-fence"}
    for extra in extras:
        assert extra in EXTRAS, f"pyproject has no extra {extra!r}"
        for requirement in map(Requirement, EXTRAS[extra]):
            if requirement.name == "pgq-fence":
                names |= extra_distributions(sorted(requirement.extras))
            else:
                names.add(requirement.name.lower())
    return names


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode} before listening:\n{log.read_text()}")
        if time.monotonic() > deadline:
            pytest.fail(f"not listening on {port} after {TIMEOUT}s:\n{log.read_text()}")
        time.sleep(0.05)


@dataclass
class Started:
    command: str
    proc: subprocess.Popen[bytes]
    log: Path
    server: bool


@dataclass
class ReadmeRun:
    """What running a README left: each HTTP answer (by curl command) and each process's log."""

    answers: list[tuple[str, Any]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def recipe_env(dsn: str, schema: str, pg_home: Path, tmp_path: Path) -> dict[str, str]:
    """The recipes' processes' environment: this test's schema (PGQ_SCHEMA, and first on every
    connection's search path through PGOPTIONS, so the apps' own tables go there too); the
    server is PGQ_TEST_DSN's as PGQ_DSN, else the suite's embedded server found as a user's
    would be, with no PGQ_DSN: through PGQ_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQ_", "FLASK_", "DJANGO_"))}
    env.pop("PYTHONPATH", None)
    env.update(
        PGQ_SCHEMA=schema,
        PGOPTIONS=f"-c search_path={schema}",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    if os.environ.get("PGQ_TEST_DSN"):
        env.update(PGQ_DSN=dsn, PGQ_HOME=str(tmp_path / "pgq-home-unused"))
    else:
        env["PGQ_HOME"] = str(pg_home)
    return env


def run_readme(readme: Path, env: dict[str, str], tmp_path: Path) -> ReadmeRun:
    """Run `readme`'s commands as a user would, from the repository's root:

    - `pip install -e '.[EXTRAS]'` is checked, not run: every program a later command starts
      (flask, uvicorn, Django's manage.py) is in one of those extras;
    - `cd` moves on; a web server (`flask ... run`, `uvicorn`, `manage.py runserver`) and a
      worker (`pgq worker`, `manage.py pgq_worker`) start in the background, the server on a
      free port of 127.0.0.1 in place of the one it names; any other command runs to its end;
    - `curl` runs against that port; in its URL `/jobs/N` becomes the job the last answer
      named, and such a status request is repeated until the job is done (or dead);
    - at the end each worker gets SIGTERM and must exit 0, each server is stopped.
    """
    cwd, port, installed = ROOT, free_port(), {"pgq-fence"}
    run, started = ReadmeRun(), list[Started]()
    try:
        for command in readme_commands(readme):
            words = shlex.split(command)
            program = Path(words[1] if words[0] == "python" else words[0]).name
            if program in PROGRAMS and PROGRAMS[program] is not None:
                assert PROGRAMS[program] in installed, f"{command}: not in the extras installed"
            if words[:2] == ["pip", "install"]:
                extras = re.fullmatch(r"\.\[([\w,]+)\]", words[-1])
                assert words[2] == "-e" and extras, f"{command}: not an install of this clone"
                installed |= extra_distributions(extras.group(1).split(","))
            elif words[0] == "cd":
                cwd = (cwd / words[1]).resolve()
                assert cwd.is_dir(), command
            elif words[0] == "curl":
                run.answers.append((command, curl(words, port, run.answers, cwd, env)))
            else:
                server = program in ("flask", "uvicorn") or words[1:3] == ["manage.py", "runserver"]
                worker = words[:2] == ["pgq", "worker"] or words[1:3] == ["manage.py", "pgq_worker"]
                if server:
                    words = on_port(words, port)
                if not (server or worker):
                    done = subprocess.run(
                        words, cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                        check=False,
                    )
                    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr}"
                    run.logs[command] = done.stdout + done.stderr
                    continue
                log = tmp_path / f"process-{len(started)}.log"
                with log.open("wb") as out:
                    proc = subprocess.Popen(
                        words, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                started.append(Started(command, proc, log, server))
                if server:
                    wait_for_port(port, proc, log)
    finally:
        for each in started:
            if each.proc.poll() is None:
                os.killpg(each.proc.pid, signal.SIGTERM)
        for each in started:
            try:
                code = each.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(each.proc.pid, signal.SIGKILL)
                code = each.proc.wait(TIMEOUT)
            run.logs[each.command] = each.log.read_text()
            if not each.server:
                assert code == 0, f"{each.command}: exit {code}\n{run.logs[each.command]}"
    return run


def on_port(words: list[str], port: int) -> list[str]:
    """A web server's command with `port` of 127.0.0.1 in place of the one it names."""
    if words[1:3] == ["manage.py", "runserver"]:
        return [*words[:3], *[w for w in words[3:] if w.startswith("-")], f"127.0.0.1:{port}"]
    if "--port" in words:
        at = words.index("--port") + 1
        return [*words[:at], str(port), *words[at + 1 :]]
    return [*words, "--port", str(port)]


def curl(
    words: list[str], port: int, answers: list[tuple[str, Any]], cwd: Path, env: dict[str, str]
) -> Any:
    """Run the README's curl command on the server's port: its JSON answer. A request for a
    job's status is repeated until the job is done or dead."""
    words = [re.sub(r"^(https?://)?localhost:\d+", f"http://127.0.0.1:{port}", w) for w in words]
    status = any(re.search(r"/jobs/\d+", w) for w in words)
    if status:
        named = next((a["job"] for _, a in reversed(answers) if "job" in a), None)
        assert named is not None, f"{shlex.join(words)}: no answer before named a job"
        words = [re.sub(r"/jobs/\d+", f"/jobs/{named}", w) for w in words]
    deadline = time.monotonic() + TIMEOUT
    while True:
        done = subprocess.run(
            [*words, "--max-time", "10"], cwd=cwd, env=env, capture_output=True, text=True,
            timeout=30, check=False,
        )
        assert done.returncode == 0, f"{shlex.join(words)}: exit {done.returncode}\n{done.stderr}"
        try:
            answer = json.loads(done.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"{shlex.join(words)}: not JSON:\n{done.stdout}")
        if not status or answer.get("status") in ("done", "dead"):
            return answer
        if time.monotonic() > deadline:
            pytest.fail(f"{shlex.join(words)}: the job is still {answer.get('status')}")
        time.sleep(0.05)


def test_the_flask_readme_runs_as_written(recipe_env: dict[str, str], tmp_path: Path) -> None:
    run = run_readme(EXAMPLES / "flask_thumbs" / "README.md", recipe_env, tmp_path)
    (_, made), (_, status) = run.answers
    assert status == {
        "id": made["job"],
        "status": "done",
        "result": {"upload": made["upload"], "thumbnail": "thumbs/320/cat.jpg"},
        "error": None,
    }
    worker_log = run.logs["pgq worker --tasks flask_thumbs.app:tasks"]
    assert " started: queues thumbnails" in worker_log, worker_log
    assert " stopped: 1 done, 0 failed" in worker_log, worker_log


def test_the_fastapi_readme_runs_as_written(
    recipe_env: dict[str, str], tmp_path: Path
) -> None:
    run = run_readme(EXAMPLES / "fastapi_reports" / "README.md", recipe_env, tmp_path)
    (_, made), (_, status) = run.answers
    assert status == {
        "id": made["job"],
        "status": "done",
        "attempts": 1,
        "result": {"account": 42, "period": "week", "rows": 3},
    }
    worker_log = run.logs["pgq worker --tasks fastapi_reports.main:tasks"]
    assert " stopped: 1 done, 0 failed" in worker_log, worker_log


def test_the_django_readme_runs_as_written(
    recipe_env: dict[str, str], tmp_path: Path, queue: Queue
) -> None:
    """`manage.py migrate` makes the shop's tables (pgq's schema is this test's, up to date);
    `manage.py pgq_worker`, from pgq's Django app, logs its start and stop on its own."""
    run = run_readme(EXAMPLES / "django_shop" / "README.md", recipe_env, tmp_path)
    (_, made), (_, status) = run.answers
    assert status == {"id": made["job"], "status": "done", "result": "ada@example.com",
                      "error": None}
    assert queue.job(made["job"]).unique_key == f"welcome-{made['signup']}"
    worker_log = run.logs["python manage.py pgq_worker"]
    assert " INFO pgq.worker: worker " in worker_log and " started: queues welcome" in worker_log
    assert " stopped: 1 done, 0 failed" in worker_log, worker_log


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

    call_command("migrate", verbosity=0)  # the shop's tables (pgq's schema is up to date)
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
