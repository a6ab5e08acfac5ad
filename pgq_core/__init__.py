"""pgq_core: a job queue in one PostgreSQL table, with leases and fencing tokens."""

from .config import Target, mask, resolve
from .durations import parse_duration
from .errors import JobNotFound, LeaseLost, PgqError, SchemaMissing
from .fenced import fenced_write
from .migrate import migrate
from .models import Job, JobDetail, JobEvent, JobRow, Lease, QueueStats, Settled
from .ops import JobSpec
from .queue import AsyncQueue, Queue, channel, listen_statement, make_worker_id

__all__ = [
    "AsyncQueue",
    "Job",
    "JobDetail",
    "JobEvent",
    "JobNotFound",
    "JobRow",
    "JobSpec",
    "Lease",
    "LeaseLost",
    "PgqError",
    "Queue",
    "QueueStats",
    "SchemaMissing",
    "Settled",
    "Target",
    "channel",
    "fenced_write",
    "listen_statement",
    "make_worker_id",
    "mask",
    "migrate",
    "parse_duration",
    "resolve",
]
