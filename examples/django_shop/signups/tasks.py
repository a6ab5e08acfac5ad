"""The shop's tasks, run by `python manage.py pgq_worker` (Django is set up first: the tasks
use the ORM)."""

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from pgq_core import Tasks

from .models import Signup

tasks = Tasks(queue="welcome", schema=settings.PGQ_SCHEMA)


@tasks.task(max_attempts=5, backoff_base=10, unique_key="welcome-{signup_id}")
def send_welcome(signup_id: int) -> str:
    """Send the welcome email once (the unique key: one job per signup while it waits)."""
    try:
        signup = Signup.objects.get(id=signup_id)
        # send_mail(..., [signup.email]) here
        Signup.objects.filter(id=signup_id).update(welcomed_at=timezone.now())
        return signup.email
    finally:
        close_old_connections()  # tasks run in the worker's threads, outside any request
