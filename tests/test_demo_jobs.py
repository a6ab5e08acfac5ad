"""The demo's handler on a real server: each queue fails the way its own work would."""

from __future__ import annotations

import asyncio

from support import TIMEOUT, make_worker

from pgq_cli.demo_jobs import DEMO_QUEUES, handle
from pgq_core import JobSpec, Queue


async def test_each_demo_queue_fails_with_errors_of_its_own_kind(
    dsn: str, schema: str, queue: Queue
) -> None:
    """A webhook job failed with 'smtp.example.com did not answer' and an email job with
    '503 Service Unavailable from https://hooks...': one list of errors served every queue
    (the test failed before)."""
    queue.enqueue_many(
        JobSpec(q, {"kind": "doomed", "ms": 0}, max_attempts=1)
        for q in DEMO_QUEUES
        for _ in range(20)
    )
    worker = make_worker(dsn, schema, handle, queues=list(DEMO_QUEUES), burst=True)
    await asyncio.wait_for(worker.run(), TIMEOUT)
    errors: dict[str, set[str]] = {}
    for job in queue.jobs(status="dead", limit=1000):
        assert job.last_error is not None
        errors.setdefault(job.queue, set()).add(job.last_error)
    assert set(errors) == set(DEMO_QUEUES)
    assert all("smtp" in e.lower() for e in errors["emails"]), errors["emails"]
    assert all("hooks.example.com" in e for e in errors["webhooks"]), errors["webhooks"]
    for q, seen in errors.items():
        others = {"emails": "smtp", "webhooks": "hooks."}
        for other, mark in others.items():
            if other != q:
                assert not any(mark in e.lower() for e in seen), (q, seen)
