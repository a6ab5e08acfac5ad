"""`pgq worker --reload`: a real supervisor process restarts its worker when the handler's file
changes; the new code runs, and a job running at the change goes back with its attempt not
counted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pgq_cli.cli import main
from pgq_cli.reload import child_arguments
from pgq_core import Queue

HANDLER_V1 = """
import time


def handle(ctx):
    if ctx.payload.get("hold"):
        while not ctx.lost:
            time.sleep(0.05)
        return None
    return "v1"
"""

HANDLER_V2 = """
def handle(ctx):
    return "version two"
"""


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


class Log:
    """The supervisor's stderr (the worker's too), read as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def text(self) -> str:
        return self.path.read_text(errors="replace")

    def count(self, fragment: str) -> int:
        return self.text().count(fragment)


@pytest.fixture
def supervisor(
    dsn: str, schema: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Log, Path]]:
    app = tmp_path / "app"
    app.mkdir()
    (app / "jobs_v.py").write_text(HANDLER_V1)
    log_path = tmp_path / "supervisor.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQ_")}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pgq_cli",
                "--dsn",
                dsn,
                "--schema",
                schema,
                "worker",
                "q",
                "--handler",
                "jobs_v:handle",
                "--reload",
                "--grace",
                "1s",
                "--poll-interval",
                "100ms",
            ],
            cwd=app,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        yield proc, Log(log_path), app
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.slow
def test_a_change_restarts_the_worker_on_the_new_code(
    supervisor: tuple[subprocess.Popen[bytes], Log, Path], queue: Queue
) -> None:
    proc, log, app = supervisor
    first = queue.enqueue("q", {})
    wait_for(lambda: queue.job(first).status == "done", "the first job")
    assert queue.job(first).result == "v1"
    held = queue.enqueue("q", {"hold": True})
    wait_for(lambda: queue.job(held).status == "running", "the held job to run")

    (app / "jobs_v.py").write_text(HANDLER_V2)
    wait_for(lambda: log.count("restarting the worker"), "the restart", timeout=30)
    wait_for(lambda: queue.job(held).status == "done", "the held job, run again")
    job = queue.job(held)
    assert (job.result, job.attempts) == ("version two", 1)  # the stopped attempt not counted
    events = [e.event for e in queue.history(held)]
    assert events == ["enqueued", "claimed", "released", "claimed", "completed"]
    after = queue.enqueue("q", {})
    wait_for(lambda: queue.job(after).status == "done", "a job after the restart")
    assert queue.job(after).result == "version two"
    assert "changed: jobs_v.py; restarting the worker" in log.text()
    pids = [int(p) for p in re.findall(r"worker started \(pid (\d+)\)", log.text())]
    assert len(pids) == 2

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_a_worker_that_cannot_start_waits_for_the_fix(
    supervisor: tuple[subprocess.Popen[bytes], Log, Path], queue: Queue
) -> None:
    proc, log, app = supervisor
    wait_for(lambda: log.count("worker started"), "the first worker")
    (app / "jobs_v.py").write_text("def handle(ctx):\n    return (\n")  # a syntax error
    wait_for(lambda: log.count("waiting for a change to restart"), "the broken worker to exit")
    assert proc.poll() is None  # the supervisor waits
    (app / "jobs_v.py").write_text(HANDLER_V2)
    job_id = queue.enqueue("q", {})
    wait_for(lambda: queue.job(job_id).status == "done", "the job, once the code is fixed")
    assert queue.job(job_id).result == "version two"


def test_reload_without_watchfiles_is_one_line_naming_pip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # import watchfiles: ImportError
    result = CliRunner().invoke(main, ["worker", "q", "--handler", "m:f", "--reload"])
    assert result.exit_code == 1
    assert result.output == (
        "pgq: error: pgq worker --reload needs the watchfiles package: "
        "pip install 'pgq-fence[reload]'\n"
    )


def test_reload_usage_errors() -> None:
    for args, fragment in [
        (["q", "--handler", "m:f", "--reload", "--burst"], "does not go with --burst"),
        (["q", "--handler", "m:f", "--reload-dir", "."], "--reload-dir goes with --reload"),
    ]:
        result = CliRunner().invoke(main, ["worker", *args])
        assert result.exit_code == 2 and fragment in result.output, result.output


def test_the_child_is_the_same_command_without_the_reload_options() -> None:
    argv = [
        "--dsn",
        "x",
        "worker",
        "q",
        "--reload",
        "--reload-dir",
        "src",
        "--handler",
        "m:f",
        "--reload-dir=lib",
        "--",
        "--reload",
    ]
    assert child_arguments(argv) == [
        "--dsn",
        "x",
        "worker",
        "q",
        "--handler",
        "m:f",
        "--",
        "--reload",
    ]
