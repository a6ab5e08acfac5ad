"""pgq as a Django app: `INSTALLED_APPS = [..., "pgq_core.contrib.django"]` (the `django`
extra, Django 4.2+ on psycopg 3).

- `manage.py migrate` also brings pgq's schema (`PGQ_SCHEMA`) up to date on the queue's
  database (`apps.PgqConfig`, a `post_migrate` hook: after an upgrade of pgq the next `migrate`
  adds the new versions);
- `manage.py pgq_worker` runs a worker for the project's `Tasks`, logging through Django's
  logging (`management/commands/pgq_worker.py`);
- `conf.queue()` is a client on Django's own connection: a job enqueued through it (or with
  `conn=django.db.connection`) inside `transaction.atomic()` commits or rolls back with the
  block;
- `database.database_settings()` is a `DATABASES` entry for the database pgq finds (PGQ_DSN,
  else the embedded server), for a project that keeps both in one database.

Settings (all optional): `PGQ_DATABASE` (the alias of Django's database that holds the queue,
default `"default"`), `PGQ_DSN` (else that database's own connection parameters), `PGQ_SCHEMA`
(else the environment's PGQ_SCHEMA, else `pgq`), `PGQ_TASKS` (`"module:name"` of the `Tasks`
registry the worker runs, else the one found in the installed apps' `tasks` modules) and
`PGQ_QUEUES` (else every queue of that registry's tasks).

This package and `database` import no Django (a settings module may use them); `conf`, `apps`
and the command do, and only Django loads them.
"""
