"""The app's configuration: `manage.py migrate` also migrates pgq's schema."""

from __future__ import annotations

import sys
from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PgqConfig(AppConfig):  # type: ignore[misc]
    name = "pgq_core.contrib.django"
    label = "pgq"
    verbose_name = "pgq"

    def ready(self) -> None:
        post_migrate.connect(migrate_pgq, sender=self, dispatch_uid="pgq_core.migrate")


def migrate_pgq(using: str, verbosity: int = 1, **kwargs: Any) -> None:
    """After `manage.py migrate` on the queue's database: pgq's schema brought up to date
    (idempotent, under pgq's own lock: safe from many processes at once)."""
    from . import conf

    if using != conf.database_alias():
        return
    applied = conf.migrate_schema(using)
    if applied and verbosity >= 1:
        out = kwargs.get("stdout") or sys.stdout
        out.write(
            f"  pgq: schema {conf.schema()} migrated to version {applied[-1]} "
            f"({len(applied)} applied)\n"
        )
