"""`pgq worker`: run a handler on the jobs of one or more queues until stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import click
import psycopg

from pgq_core.defaults import CONCURRENCY_MAX, LEASE_MAX
from pgq_core.errors import PgqError
from pgq_core.extras import require
from pgq_core.text import printable
from pgq_core.worker import Worker, catch_stop_signals, load_handler, run_until_stopped
from pgq_core.worker.policy import PREFETCH_CAP

from .failures import fail
from .options import at_most, lease_duration, queue_names
from .output import when
from .session import settings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
SWITCH_INTERVAL = 0.0005
WORKER_ID_MAX = 100
PREFETCH_MAX = 10_000
_WORKER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]*")


def _worker_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A name an operator can read and type: letters, digits and . _ : @ / - (no spaces or
    control characters), at most WORKER_ID_MAX characters."""
    if value is None:
        return None
    if len(value) > WORKER_ID_MAX or not _WORKER_ID.fullmatch(value):
        raise click.BadParameter(
            f"use letters, digits and . _ : @ / - (starting with a letter or digit), at most "
            f"{WORKER_ID_MAX} characters, not '{printable(value[:WORKER_ID_MAX])}'"
        )
    return value


class PrintableFormatter(logging.Formatter):
    """Each log record on one line with every control character escaped (a handler's error
    or a queue name must not drive the terminal or forge a log line); tracebacks keep their
    line breaks."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return printable(super().formatException(ei), multiline=True)

    def formatStack(self, stack_info: str) -> str:
        return printable(super().formatStack(stack_info), multiline=True)


def _log_to_stderr(log_level: str) -> None:
    log_handler = logging.StreamHandler(sys.stderr)
    log_handler.setFormatter(PrintableFormatter(LOG_FORMAT))
    logging.basicConfig(level=log_level.upper(), handlers=[log_handler])


def _supervise(
    burst: bool, log_level: str, reload_dirs: Sequence[Path], grace: timedelta
) -> NoReturn:
    """`--reload`: this command, without it, in a child restarted on change (reload.py)."""
    from . import reload

    if burst:
        raise click.UsageError("--reload runs until stopped: it does not go with --burst")
    if reload.available() is None:
        fail(reload.MISSING)
    _log_to_stderr(log_level)
    paths = list(reload_dirs) or [Path.cwd()]
    sys.exit(reload.run(sys.argv[1:], paths, grace.total_seconds()))


def _tell_retries_waiting(
    ctx: click.Context, worker_id: str, queues: Sequence[str], log: logging.Logger
) -> None:
    """A burst worker exits once nothing is due: say what it leaves for later retries."""
    try:
        with settings(ctx).queue() as q:
            waiting, first = q.retries_waiting(queues)
    except (PgqError, psycopg.Error) as exc:
        log.warning("worker %s: could not count the retries left waiting (%s)", worker_id, exc)
        return
    if waiting and first is not None:
        seconds = max(0.0, (first - datetime.now(UTC)).total_seconds())
        log.warning(
            "worker %s: exiting (--burst) with %d failed job(s) waiting for their retry, the "
            "first at %s (in %.0fs); run the worker again then, or without --burst",
            worker_id,
            waiting,
            when(first),
            seconds,
        )


@click.command("worker")
@click.argument("queues", nargs=-1, callback=queue_names)
@click.option(
    "--handler",
    "handler_spec",
    metavar="MODULE:CALLABLE",
    help="Function called with each job (plain or async def); MODULE importable from here.",
)
@click.option(
    "--tasks",
    "tasks_spec",
    metavar="MODULE:TASKS",
    help="A pgq_core.Tasks registry: each job runs the task it names. QUEUES default to the "
    "queues of its tasks.",
)
@click.option(
    "--concurrency", "-c", type=click.IntRange(1, CONCURRENCY_MAX), default=10, show_default=True,
    help="Jobs run at once (and the most jobs ever held).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0, PREFETCH_MAX),
    default=None,
    metavar="N",
    help="Jobs claimed ahead of the free slots, so a slot that frees starts the next at once "
    "(0: none). Default: sized from the handlers' run time against a round trip, at most "
    f"{PREFETCH_CAP}; none for long jobs.",
)
@click.option(
    "--lease", default="30s", show_default=True, callback=lease_duration,
    help="Lease per claim, 1s to 1d, e.g. 30s or 2m (bare numbers are seconds); heartbeats "
    "every third.",
)
@click.option("--burst", is_flag=True, help="Exit 0 once the queues are empty and nothing runs.")
@click.option(
    "--grace", default="30s", show_default=True, callback=at_most(LEASE_MAX),
    help="On SIGTERM/SIGINT, how long running jobs may finish before they are handed back.",
)
@click.option(
    "--poll-interval", default="1s", show_default=True, callback=at_most(timedelta(hours=1)),
    help="Polling fallback when idle (doubles up to 10x while the queues stay empty).",
)
@click.option(
    "--timeout",
    default=None,
    callback=at_most(LEASE_MAX),
    help="Fail a job whose handler runs longer than this (async handlers are cancelled, "
    "plain ones abandoned in their thread). Default: no limit.",
)
@click.option(
    "--statement-timeout", default="30s", show_default=True, callback=at_most(LEASE_MAX),
    help="Longest any worker statement may run before it is cancelled and retried.",
)
@click.option(
    "--lock-timeout", default="5s", show_default=True, callback=at_most(LEASE_MAX),
    help="Longest a worker statement may wait for a lock.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve this worker's Prometheus metrics on this port (0: any free port, logged).",
)
@click.option(
    "--metrics-addr",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port binds (0.0.0.0 for a Prometheus on another host).",
)
@click.option(
    "--worker-id",
    envvar="PGQ_WORKER_ID",
    callback=_worker_id,
    help="This process's id in the jobs table, their history and pg_stat_activity (or "
    "PGQ_WORKER_ID; default host:pid:random). A restart may reuse it (a pod or instance "
    "name); two processes running at once must not share it: one that reconnects hands back "
    "the jobs running under its id that it does not hold.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@click.option(
    "--reload",
    is_flag=True,
    help="For development: run the worker in a child process and restart it when a .py file "
    "changes (under the current directory, or each --reload-dir). Needs watchfiles "
    "(pip install 'pgq-fence[reload]').",
)
@click.option(
    "--reload-dir",
    "reload_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="With --reload: watch this directory instead of the current one (repeatable).",
)
@click.pass_context
def worker_command(
    ctx: click.Context,
    queues: tuple[str, ...],
    handler_spec: str | None,
    tasks_spec: str | None,
    concurrency: int,
    prefetch: int | None,
    lease: timedelta,
    burst: bool,
    grace: timedelta,
    poll_interval: timedelta,
    timeout: timedelta | None,
    statement_timeout: timedelta,
    lock_timeout: timedelta,
    metrics_port: int | None,
    metrics_addr: str,
    worker_id: str | None,
    log_level: str,
    reload: bool,
    reload_dirs: tuple[Path, ...],
) -> None:
    """Run a handler on the jobs of QUEUES until stopped.

    The handler gets a job context (id, queue, payload, fence, attempts, max_attempts, lost):
    returning completes the job, raising fails it (retried with backoff, dead after
    max_attempts). SIGTERM/SIGINT stops claiming, lets running jobs finish within --grace and
    hands the rest back; a second signal hands them back at once.
    """
    if (handler_spec is None) == (tasks_spec is None):
        raise click.UsageError("give --handler or --tasks (one of them)")
    if tasks_spec is None and not queues:
        raise click.UsageError("give at least one QUEUE")
    if reload_dirs and not reload:
        raise click.UsageError("--reload-dir goes with --reload")
    if reload:
        _supervise(burst, log_level, reload_dirs, grace)
    caught = catch_stop_signals()
    ctx.call_on_close(caught.restore)
    if tasks_spec is not None:
        from pgq_core.tasks import Tasks

        tasks = load_handler(tasks_spec)
        if not isinstance(tasks, Tasks):
            raise click.BadParameter(
                f"{tasks_spec} is a {type(tasks).__name__}, not a pgq_core.Tasks registry",
                param_hint="'--tasks'",
            )
        handler: Any = tasks
        queues = queues or tuple(tasks.queues)
    else:
        assert handler_spec is not None
        handler = load_handler(handler_spec)
    if not queues:
        raise click.UsageError("give at least one QUEUE")
    target = settings(ctx).target()
    if tasks_spec is not None:
        handler.use_database(target.dsn, target.schema)
    _log_to_stderr(log_level)
    metrics = None
    if metrics_port is not None:
        require("metrics", "--metrics-port")
        from pgq_core.worker.metrics import WorkerMetrics

        metrics = WorkerMetrics()
    worker = Worker(
        target.dsn,
        queues,
        handler,
        schema=target.schema,
        concurrency=concurrency,
        prefetch=prefetch,
        lease=lease,
        burst=burst,
        grace=grace.total_seconds(),
        poll_interval=max(poll_interval.total_seconds(), 0.01),
        timeout=timeout.total_seconds() if timeout is not None else None,
        statement_timeout=statement_timeout.total_seconds(),
        lock_timeout=lock_timeout.total_seconds(),
        metrics=metrics,
        worker_id=worker_id,
    )
    # Handlers run in threads beside the event loop: hand the GIL over within 0.5 ms (Python's
    # default is 5 ms), so a finished handler's result reaches the loop without a convoy.
    sys.setswitchinterval(SWITCH_INTERVAL)
    log = logging.getLogger("pgq.worker")
    if metrics is not None and metrics_port is not None:
        try:
            bound = metrics.serve(metrics_port, metrics_addr)
        except OSError as exc:
            raise click.UsageError(
                f"cannot serve metrics on {metrics_addr}:{metrics_port}: {exc.strerror}"
            ) from None
        log.info("worker %s: metrics on http://%s:%d/metrics", worker.id, metrics_addr, bound)

    def on_signal(name: str, count: int) -> None:
        if count > 1:
            log.info("received %s again: handing back running jobs now", name)
        else:
            log.info("received %s: finishing running jobs; send again to stop at once", name)

    asyncio.run(run_until_stopped(worker, on_signal, caught.received))
    if burst:
        _tell_retries_waiting(ctx, worker.id, queues, log)
    if worker.handlers_still_running():
        log.warning(
            "worker %s: exiting with %d handler(s) still running (told to stop, not returned)",
            worker.id,
            worker.handlers_still_running(),
        )
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)

