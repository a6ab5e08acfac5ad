"""pgq's Django app (`pgq_core.contrib.django`) on the real database: the example shop's own
Django tests through Django's test runner, `migrate` bringing pgq's schema up to date, the
worker command's errors, and `pgq_core` importable without Django."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgq_core import migrate
from pgq_core.contrib.django.database import database_settings
from pgq_core.migrate import latest_version

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "examples" / "django_shop"

#: a Django project in one script: the app alone, on the database PGQ_DSN names
PROJECT = """
import sys
import django
from django.conf import settings
from django.core.management import execute_from_command_line
from pgq_core.contrib.django.database import database_settings

settings.configure(
    INSTALLED_APPS=["pgq_core.contrib.django"],
    DATABASES={"default": database_settings()},
    USE_TZ=True,
    **dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a and a.startswith("PGQ_")),
)
django.setup()
execute_from_command_line(["manage.py", *[a for a in sys.argv[1:] if not a.startswith("PGQ_")]])
"""


def environment(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQ_", "DJANGO_"))}
    env.pop("PYTHONPATH", None)
    env["PGQ_DSN"] = dsn
    return env


def project(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`manage.py ARGS` of the one-script project (PGQ_ARGS set its settings)."""
    return subprocess.run(
        [sys.executable, "-c", PROJECT, *args], env=environment(dsn), capture_output=True,
        text=True, timeout=120, check=False,
    )


@pytest.mark.slow
def test_the_shop_s_django_tests_pass_with_django_s_test_runner(own_database: str) -> None:
    """`manage.py test`: Django makes its test database on the real server, `migrate` there
    creates pgq's schema, and the shop's tests enqueue in Django's transactions and run
    `manage.py pgq_worker` (examples/django_shop/signups/tests.py)."""
    done = subprocess.run(
        [sys.executable, "manage.py", "test", "signups", "--noinput", "-v", "2"],
        cwd=SHOP, env=environment(own_database), capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ran 5 tests" in done.stderr and "\nOK" in done.stderr, done.stderr
    assert f"pgq: schema pgq migrated to version {latest_version()}" in done.stdout, done.stdout


def test_migrate_brings_pgq_s_schema_up_to_date_and_then_does_nothing(own_database: str) -> None:
    schema = f"dj_{secrets.token_hex(4)}"
    first = project(own_database, "migrate", f"PGQ_SCHEMA={schema}")
    assert first.returncode == 0, first.stderr
    assert f"pgq: schema {schema} migrated to version {latest_version()}" in first.stdout
    with psycopg.connect(own_database, autocommit=True) as conn:
        assert migrate(conn, schema) == []  # all applied by Django's migrate
        version = conn.execute(
            sql.SQL("SELECT max(version) FROM {}.schema_version").format(sql.Identifier(schema))
        ).fetchone()
    assert version == (latest_version(),)
    again = project(own_database, "migrate", f"PGQ_SCHEMA={schema}")
    assert again.returncode == 0, again.stderr
    assert "pgq:" not in again.stdout, again.stdout


@pytest.mark.slow
def test_the_worker_command_without_tasks_says_so_in_one_line(own_database: str) -> None:
    for args, says in (
        ((), "set PGQ_TASKS to the Tasks registry the worker runs"),
        (("PGQ_TASKS=nowhere.at.all:tasks",), "PGQ_TASKS: cannot import handler module"),
        (("PGQ_TASKS=os:sep",), "is not callable"),
    ):
        done = project(own_database, "pgq_worker", "--burst", *args)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("CommandError: "), done.stderr
        assert says in done.stderr, done.stderr


def test_database_settings_name_the_dsn_s_server_and_pass_the_rest_to_psycopg() -> None:
    entry = database_settings(
        "host=db.example port=5433 dbname=shop user=ada password=s3cret sslmode=require"
        " options='-c search_path=shop'"
    )
    assert entry == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop", "USER": "ada", "PASSWORD": "s3cret", "HOST": "db.example",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "require", "options": "-c search_path=shop"},
    }


def test_pgq_core_and_the_settings_helper_import_no_django() -> None:
    code = (
        "import sys, pgq_core, pgq_core.queue, pgq_core.worker, pgq_core.contrib.django,"
        " pgq_core.contrib.django.database;"
        "bad = [m for m in sys.modules if m.split('.')[0] == 'django'];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
