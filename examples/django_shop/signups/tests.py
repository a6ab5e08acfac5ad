"""The shop's own tests, with Django's test runner on the real database (`python manage.py
test`): Django makes a test database, `migrate` there creates pgq's schema too; each test gets
a pgq schema of its own (`pgq_core.testing.private_schema`) and runs the worker in burst mode.

TransactionTestCase, not TestCase: the worker reads on its own connections, which see only
what was committed.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management import call_command
from django.db import transaction
from django.test import TransactionTestCase, override_settings

from pgq_core import Queue
from pgq_core.contrib.django import conf
from pgq_core.testing import private_schema

from .models import Signup
from .tasks import send_welcome


@contextmanager
def own_pgq_schema() -> Iterator[Queue]:
    """A fresh pgq schema on Django's test database, the settings naming it, and a client."""
    with (
        private_schema(conf.dsn()) as where,
        override_settings(PGQ_SCHEMA=where.schema),
        where.queue() as queue,
    ):
        yield queue


class SignupTests(TransactionTestCase):
    def test_migrate_made_pgq_s_schema_in_the_test_database(self) -> None:
        with Queue.connect(conf.dsn(), conf.schema()) as queue:
            self.assertEqual(queue.jobs(limit=1), [])  # the schema exists, with no job

    def test_the_signup_and_its_job_commit_together(self) -> None:
        with own_pgq_schema() as queue:
            answer = self.client.post("/signup/", {"email": "ada@example.com"}).json()
            job = queue.job(answer["job"])
            self.assertEqual((job.queue, job.status), ("welcome", "ready"))
            self.assertEqual(job.unique_key, f"welcome-{answer['signup']}")

    def test_a_failed_block_leaves_neither_the_signup_nor_its_job(self) -> None:
        with own_pgq_schema() as queue:
            with self.assertRaises(RuntimeError), transaction.atomic():
                signup = Signup.objects.create(email="bob@example.com")
                send_welcome.enqueue(signup_id=signup.id, conn=conf.queue())
                raise RuntimeError("the payment failed")
            self.assertFalse(Signup.objects.exists())
            self.assertEqual(queue.jobs(limit=10), [])

    def test_the_worker_command_runs_the_job_and_logs_start_and_stop(self) -> None:
        with own_pgq_schema() as queue:
            answer = self.client.post("/signup/", {"email": "eve@example.com"}).json()
            with self.assertLogs("pgq", "INFO") as logs:
                call_command("pgq_worker", "--burst")
            job = queue.job(answer["job"])
            self.assertEqual((job.status, job.result), ("done", "eve@example.com"))
            self.assertIsNotNone(Signup.objects.get(id=answer["signup"]).welcomed_at)
            lines = "\n".join(logs.output)
            self.assertIn("started: queues welcome", lines)
            self.assertIn("stopped: 1 done, 0 failed", lines)

    def test_the_worker_command_logs_a_failure_with_its_traceback(self) -> None:
        with own_pgq_schema() as queue:
            job_id = send_welcome.enqueue(signup_id=404, conn=conf.queue())  # no such signup
            with self.assertLogs("pgq", "INFO") as logs:
                call_command("pgq_worker", "--burst")
            failures = [r for r in logs.records if r.levelname == "WARNING"]
            self.assertEqual(len(failures), 1, logs.output)
            self.assertIn(f"job {job_id}", failures[0].getMessage())
            self.assertIn("DoesNotExist", failures[0].getMessage())
            self.assertIn("Traceback (most recent call last)", failures[0].getMessage())
            self.assertEqual(queue.job(job_id).status, "ready")  # retried after its backoff
