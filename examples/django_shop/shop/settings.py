"""The example shop's settings: one PostgreSQL database (DATABASE_DSN, else PGQ_DSN) that
holds both the app's tables and pgq's schema (PGQ_SCHEMA, default pgq), so a job can be
enqueued in the very transaction of the app's writes."""

import os

from psycopg.conninfo import conninfo_to_dict

SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS = ["signups"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_db = conninfo_to_dict(os.environ.get("DATABASE_DSN") or os.environ.get("PGQ_DSN", "dbname=shop"))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # on psycopg 3, which pgq uses too
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
        "OPTIONS": {k: v for k, v in _db.items() if k in ("options", "sslmode")},
    }
}

#: the schema pgq's tables live in (`pgq --schema ... migrate`)
PGQ_SCHEMA = os.environ.get("PGQ_SCHEMA", "pgq")
