"""The demo's handler and its producer: a realistic mix that shows every dashboard feature.

Job kinds (the payload's `kind` decides what the handler does):
  fast    finishes in tens to hundreds of milliseconds
  slow    runs for many seconds; the worker's heartbeats keep its lease alive
  flaky   fails now and then with a plausible error, then succeeds on a retry
  doomed  always fails: it dies after max_attempts
A schedule (`DEMO_SCHEDULES`) enqueues an uptime report every 15 seconds. `emails` is a
priority queue: password resets (priority 10) are claimed before receipts (5) and digests (0).
A "frozen worker" (`DemoProducer._freeze`) claims a job, stops heartbeating until its lease
expires and the reaper hands the job to a live worker, then wakes up and tries to complete
with its old fence: the write is rejected and recorded as stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg

from pgq_core import JobSpec, LeaseLost, PgqError, Queue
from pgq_core.worker import JobContext

#: one in-app worker per queue
DEMO_QUEUES = ("emails", "thumbnails", "reports", "webhooks")
#: periodic jobs (name, queue, cron in UTC, payload): the in-app workers enqueue each slot once
DEMO_SCHEDULES: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("uptime-report", "reports", "*/15 * * * * *", {"kind": "fast", "ms": 300, "report": "uptime"}),
)
FROZEN_WORKER = "frozen-worker:demo"


class HTTPError(Exception):
    """What a webhook or API call raises on a non-2xx answer."""


class SMTPError(Exception):
    """What sending an email raises when the mail server refuses or drops it."""


class ImageError(Exception):
    """What making a thumbnail raises on an image it cannot read."""


Failure = tuple[type[Exception], str]

#: Each queue fails the way its own work would: an email with the mail server's errors, a
#: webhook with its endpoint's.
ERRORS: dict[str, tuple[Failure, ...]] = {
    "emails": (
        (SMTPError, "421 4.7.0 smtp.example.com: too many connections, try again later"),
        (SMTPError, "451 4.3.0 smtp.example.com: temporary local problem"),
        (TimeoutError, "smtp.example.com:587 did not answer within 5s"),
    ),
    "webhooks": (
        (HTTPError, "503 Service Unavailable from https://hooks.example.com/orders"),
        (HTTPError, "429 Too Many Requests from https://hooks.example.com/orders"),
        (ConnectionResetError, "[Errno 104] Connection reset by peer (hooks.example.com)"),
    ),
    "thumbnails": (
        (ImageError, "cannot identify image file s3://media/uploads (truncated upload)"),
    ),
    "reports": ((TimeoutError, "the warehouse query was cancelled after 30s"),),
}
OTHER_ERRORS: tuple[Failure, ...] = ((RuntimeError, "the job failed"),)


def _raise_one(queue: str) -> None:
    kind, message = random.choice(ERRORS.get(queue, OTHER_ERRORS))
    raise kind(message)


async def handle(ctx: JobContext) -> None:
    """The demo handler (async def, so it runs on the worker's own loop)."""
    payload: dict[str, Any] = ctx.payload if isinstance(ctx.payload, dict) else {}
    kind = payload.get("kind", "fast")
    if kind == "slow":
        seconds = max(0.001, float(payload.get("seconds", 10)))
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds and not ctx.lost:
            step = min(100, int(100 * elapsed / seconds))
            ctx.progress(step, 100, f"step {step} of 100")
            await asyncio.sleep(0.2)
        return
    await asyncio.sleep(float(payload.get("ms", 150)) / 1000)
    if kind == "doomed" or (
        kind == "flaky" and random.random() < float(payload.get("fail_rate", 0.4))
    ):
        _raise_one(ctx.queue)


#: the emails queue's priorities, by template
EMAIL_PRIORITY = {"password-reset": 10, "receipt": 5, "welcome": 1, "digest": 0}


def _email(rng: random.Random) -> JobSpec:
    kind = "flaky" if rng.random() < 0.1 else "fast"
    template = rng.choice(list(EMAIL_PRIORITY))
    return JobSpec(
        "emails",
        {
            "kind": kind,
            "ms": rng.randint(40, 400),
            "to": f"user{rng.randint(1, 9999)}@example.com",
            "template": template,
        },
        priority=EMAIL_PRIORITY[template],
    )


def _thumbnail(rng: random.Random) -> JobSpec:
    return JobSpec(
        "thumbnails",
        {
            "kind": "fast",
            "ms": rng.randint(20, 120),
            "image": f"s3://media/uploads/{rng.randint(100000, 999999)}.jpg",
            "size": [320, 240],
        },
    )


def _report(rng: random.Random) -> JobSpec:
    return JobSpec(
        "reports",
        {
            "kind": "slow",
            "seconds": rng.randint(6, 24),
            "report": rng.choice(["monthly-revenue", "churn", "inventory", "cohorts"]),
            "account": rng.randint(1, 500),
        },
    )


def _webhook(rng: random.Random) -> JobSpec:
    doomed = rng.random() < 0.15
    return JobSpec(
        "webhooks",
        {
            "kind": "doomed" if doomed else "flaky",
            "ms": rng.randint(50, 300),
            "fail_rate": 0.5,
            "event": rng.choice(["order.paid", "order.shipped", "user.created"]),
            "endpoint": "https://hooks.example.com/orders",
        },
        max_attempts=3,
    )


def initial_jobs(rng: random.Random) -> list[JobSpec]:
    specs = [_email(rng) for _ in range(60)]
    specs += [_thumbnail(rng) for _ in range(150)]
    specs += [_report(rng) for _ in range(6)]
    specs += [_webhook(rng) for _ in range(24)]
    specs += [
        JobSpec(
            "emails",
            {"kind": "fast", "ms": 100, "template": "digest"},
            delay=timedelta(seconds=rng.randint(20, 120)),
        )
        for _ in range(15)
    ]
    return specs


class DemoProducer:
    """A thread that keeps a trickle of jobs coming and, now and then, plays a frozen worker."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        random_state: int = 7,
        *,
        tick: float = 1.0,
        freeze_every: int = 15,
        freeze_lease: timedelta = timedelta(seconds=8),
        wake_after: float = 20.0,
    ) -> None:
        """Every `freeze_every` ticks the frozen worker claims a report with `freeze_lease`
        and writes `wake_after` seconds later (longer than the lease plus a reaper pass)."""
        self.dsn = dsn
        self.schema = schema
        self.rng = random.Random(random_state)
        self.tick = tick
        self.freeze_every = freeze_every
        self.freeze_lease = freeze_lease
        self.wake_after = wake_after
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgq-demo-producer", daemon=True)

    def fill(self) -> int:
        """The initial jobs, and the demo's schedules (replaced if a previous demo left them)."""
        with Queue.connect(self.dsn, self.schema) as q:
            for name, queue, cron, payload in DEMO_SCHEDULES:
                q.add_schedule(name, queue, cron, payload, replace=True)
            return len(q.enqueue_many(initial_jobs(self.rng)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            with (
                contextlib.suppress(PgqError, psycopg.Error, OSError),
                Queue.connect(self.dsn, self.schema) as q,
            ):
                while not self._stop.is_set():
                    self._trickle(q, tick)
                    if tick % self.freeze_every == 3 % self.freeze_every:
                        self._freeze(q)
                    tick += 1
                    self._stop.wait(self.tick)
            self._stop.wait(2.0)

    def _trickle(self, q: Queue, tick: int) -> None:
        rng = self.rng
        specs = [_email(rng) for _ in range(rng.randint(1, 3))]
        if tick % 10 == 0:
            specs += [_thumbnail(rng) for _ in range(rng.randint(10, 30))]
        if tick % 7 == 0:
            specs.append(_report(rng))
        if tick % 2 == 0:
            specs.append(_webhook(rng))
        q.enqueue_many(specs)

    def _freeze(self, q: Queue) -> None:
        """Claim a report with a short lease, "freeze" past it, then write with the old fence."""
        jobs = q.claim("reports", 1, self.freeze_lease, FROZEN_WORKER)
        if not jobs:
            return
        job = jobs[0]
        threading.Thread(target=self._wake_late, args=(job.id, job.fence), daemon=True).start()

    def _wake_late(self, job_id: int, fence: int) -> None:
        if self._stop.wait(self.wake_after):
            return
        with (
            contextlib.suppress(PgqError, psycopg.Error, OSError),
            Queue.connect(self.dsn, self.schema) as q,
        ):
            try:
                q.complete(job_id, fence, worker=FROZEN_WORKER)
            except LeaseLost:
                q.record_stale([(job_id, fence)], FROZEN_WORKER, "complete")
