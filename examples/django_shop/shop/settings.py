"""The example shop's settings: one PostgreSQL database holds both the shop's tables and pgq's
schema, so a job is enqueued in the very transaction of the shop's writes.

That database is PGQ_DSN's, else pgq's embedded PostgreSQL (started if needed): nothing to
configure. `manage.py migrate` creates the shop's tables and pgq's schema (PGQ_SCHEMA, default
pgq); `manage.py pgq_worker` runs the shop's tasks (found in `signups/tasks.py`).
"""

import os

from pgq_core.contrib.django.database import database_settings

SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS = ["pgq_core.contrib.django", "signups"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django on psycopg 3, which pgq uses too: the job joins Django's own transaction.
DATABASES = {"default": database_settings()}

#: the schema pgq's tables live in (migrated by `manage.py migrate`)
PGQ_SCHEMA = os.environ.get("PGQ_SCHEMA", "pgq")
