"""`python manage.py pgq_worker`: a pgq worker for the shop's tasks, on Django's database."""

import asyncio
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection
from psycopg.conninfo import make_conninfo

from pgq_core.worker import Worker, run_until_stopped

from ...tasks import tasks


def database_dsn() -> str:
    """Django's default database as a libpq connection string."""
    db = connection.settings_dict
    params = {
        "dbname": db["NAME"],
        "user": db["USER"],
        "password": db["PASSWORD"],
        "host": db["HOST"],
        "port": str(db["PORT"] or ""),
        **{k: v for k, v in db["OPTIONS"].items() if isinstance(v, str)},
    }
    return make_conninfo(**{k: v for k, v in params.items() if v})


class Command(BaseCommand):
    help = "Run a pgq worker for the shop's tasks until stopped (SIGTERM or Ctrl-C)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=10)
        parser.add_argument("--burst", action="store_true", help="Exit once nothing is due.")

    def handle(self, *args: Any, concurrency: int, burst: bool, **options: Any) -> None:
        worker = Worker(
            database_dsn(),
            tasks.queues,
            tasks,
            schema=settings.PGQ_SCHEMA,
            concurrency=concurrency,
            burst=burst,
        )
        asyncio.run(run_until_stopped(worker))
