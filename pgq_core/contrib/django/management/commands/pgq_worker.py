"""`manage.py pgq_worker`: a pgq worker for the project's tasks, on the queue's database, its
lines through Django's logging (logger `pgq`): start, each failure with its traceback, stop."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from pgq_core.contrib.django import conf
from pgq_core.errors import PgqError
from pgq_core.worker import Worker, run_until_stopped

#: Django's --verbosity -> the level of pgq's lines when the project's LOGGING sets none
LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configured(logger: logging.Logger | None) -> bool:
    """Whether a record of `logger` reaches a handler that writes (pgq's own loggers hold a
    NullHandler: silent unless the application configures logging)."""
    while logger is not None:
        if any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return True
        logger = logger.parent if logger.propagate else None
    return False


def log_somewhere(verbosity: int) -> None:
    """pgq's lines go where the project's LOGGING sends them; when it sends them nowhere
    (Django's default configures the `django` logger only), to stderr at the --verbosity
    level."""
    pgq = logging.getLogger("pgq")
    if configured(logging.getLogger("pgq.worker")):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    pgq.addHandler(handler)
    pgq.setLevel(LEVELS.get(verbosity, logging.INFO))


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "Run a pgq worker for the project's tasks (PGQ_TASKS, else the Tasks registry in the "
        "installed apps' tasks modules) until stopped: SIGTERM or Ctrl-C finishes the running "
        "jobs, a second one hands them back at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue", "-q", action="append", dest="queues", metavar="QUEUE",
            help="Work this queue (repeatable; default: PGQ_QUEUES, else the tasks' queues).",
        )
        parser.add_argument("--concurrency", type=int, default=10, help="Jobs run at once.")
        parser.add_argument("--burst", action="store_true", help="Exit once nothing is due.")

    def handle(
        self, *args: Any, queues: list[str] | None, concurrency: int, burst: bool, **options: Any
    ) -> None:
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        log_somewhere(int(options.get("verbosity", 1)))
        try:
            registry = conf.tasks_registry()
            dsn, schema = conf.dsn(), conf.schema()
            registry.use_database(dsn, schema)  # a task that enqueues reaches this database
            worker = Worker(
                dsn, queues or conf.queues(registry), registry, schema=schema,
                concurrency=concurrency, burst=burst,
            )
        except (ImproperlyConfigured, PgqError) as exc:
            raise CommandError(str(exc)) from None
        log = logging.getLogger("pgq.worker")

        def on_signal(name: str, count: int) -> None:
            if count > 1:
                log.info("received %s again: handing back running jobs now", name)
            else:
                log.info("received %s: finishing running jobs; send again to stop at once", name)

        try:
            asyncio.run(run_until_stopped(worker, on_signal))
        except PgqError as exc:
            raise CommandError(str(exc)) from None
