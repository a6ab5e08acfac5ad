"""The app's settings, read when used (a test's settings override applies), and what they
name: the queue's database and schema, the project's `Tasks` registry and its queues."""

from __future__ import annotations

import importlib
import importlib.util
import logging
from typing import Any

import psycopg
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from psycopg.conninfo import make_conninfo

from ...config import connect_options, schema_name
from ...errors import PgqError
from ...integrations import driver_connection
from ...migrate import migrate
from ...queue import Queue
from ...tasks import Tasks
from ...worker.runner import load_handler

log = logging.getLogger("pgq.django")


def database_alias() -> str:
    """`PGQ_DATABASE`: the alias of Django's database that holds the queue."""
    return str(getattr(settings, "PGQ_DATABASE", None) or "default")


def schema() -> str:
    """`PGQ_SCHEMA`, else the environment's PGQ_SCHEMA, else pgq."""
    return schema_name(getattr(settings, "PGQ_SCHEMA", None))


def django_dsn(alias: str | None = None) -> str:
    """The libpq connection string of Django's database `alias` (default: `PGQ_DATABASE`), as
    Django itself connects to it now (under `manage.py test`, the test database)."""
    wrapper = connections[alias or database_alias()]
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"pgq needs PostgreSQL: Django's database {wrapper.alias!r} is {wrapper.vendor}"
        )
    libpq = {option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults()}
    params = wrapper.get_connection_params()
    return make_conninfo(
        "", **{k: str(v) for k, v in params.items() if k in libpq and v not in (None, "")}
    )


def dsn() -> str:
    """`PGQ_DSN`, else the connection parameters of Django's database `PGQ_DATABASE`."""
    return str(getattr(settings, "PGQ_DSN", None) or django_dsn())


def queue(alias: str | None = None) -> Queue:
    """A queue client on Django's own connection `alias` (default: `PGQ_DATABASE`): inside
    `transaction.atomic()` what it enqueues commits or rolls back with the block; outside it
    commits at once, as Django's own writes do. Django on psycopg 3 only (PgqError else).
    It is for enqueueing: Django's connections load JSON as text, so a job read through it has
    its payload and result as JSON strings; read jobs with `Queue.connect(dsn(), schema())`."""
    return Queue(driver_connection(connections[alias or database_alias()]), schema())


def migrate_schema(alias: str | None = None) -> list[int]:
    """Bring pgq's schema up to date on the queue's database (`PGQ_DSN`, else Django's
    `alias`), on a connection of its own: the versions applied (empty: up to date)."""
    target = str(getattr(settings, "PGQ_DSN", None) or django_dsn(alias))
    with psycopg.connect(target, autocommit=True, **connect_options(target)) as conn:
        return migrate(conn, schema())


def tasks_registry() -> Tasks:
    """`PGQ_TASKS` ("module:name"), else the one `Tasks` registry found at module level in the
    installed apps' `tasks` modules. ImproperlyConfigured when there is none or several."""
    spec = getattr(settings, "PGQ_TASKS", None)
    if spec:
        try:
            found: Any = load_handler(str(spec))
        except PgqError as exc:
            raise ImproperlyConfigured(f"PGQ_TASKS: {exc}") from None
        if not isinstance(found, Tasks):
            raise ImproperlyConfigured(f"PGQ_TASKS {spec} is a {type(found).__name__}, not Tasks")
        return found
    registries: dict[int, tuple[str, Tasks]] = {}
    for app in apps.get_app_configs():
        name = f"{app.name}.tasks"
        if importlib.util.find_spec(name) is None:
            continue
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, Tasks):
                registries.setdefault(id(value), (f"{name}:{attr}", value))
    if len(registries) != 1:
        where = ", ".join(sorted(spec for spec, _ in registries.values())) or "none"
        raise ImproperlyConfigured(
            f"set PGQ_TASKS to the Tasks registry the worker runs (found in the installed "
            f"apps' tasks modules: {where})"
        )
    return next(iter(registries.values()))[1]


def queues(registry: Tasks) -> list[str]:
    """`PGQ_QUEUES`, else every queue `registry`'s tasks enqueue on."""
    named = getattr(settings, "PGQ_QUEUES", None)
    return [str(q) for q in named] if named else registry.queues
