"""pgq_core: a job queue in one PostgreSQL table, with leases and fencing tokens."""

from . import supported  # noqa: F401  (first: refuses an unsupported platform in one line)
from .config import Target, mask, resolve
from .durations import parse_duration
from .errors import (
    DontRetry,
    JobNotFound,
    LeaseLost,
    PgqError,
    ScheduleExists,
    SchemaMissing,
    Snooze,
    UnreadableValue,
    Unstorable,
)
from .extras import MissingExtra
from .fenced import fenced_write
from .integrations import driver_connection, enqueue_in, sqlalchemy_engine
from .migrate import migrate
from .models import (
    Enqueued,
    Job,
    JobDetail,
    JobEvent,
    JobLink,
    JobRow,
    Lease,
    QueueStats,
    QueueWindow,
    Schedule,
    Settled,
    WorkerInfo,
)
from .ops import JobSpec, LatencyReport, LatencyWindow, Percentiles, QueueLatency
from .queue import AsyncQueue, Queue, channel, listen_statement, make_worker_id
from .target import find_target
from .tasks import (
    Step,
    Task,
    TaskArgumentError,
    TaskError,
    TaskOptions,
    Tasks,
    achain,
    agroup,
    chain,
    current_job,
    group,
)

__all__ = [
    "AsyncQueue",
    "DontRetry",
    "Enqueued",
    "Job",
    "JobDetail",
    "JobEvent",
    "JobLink",
    "JobNotFound",
    "JobRow",
    "JobSpec",
    "LatencyReport",
    "LatencyWindow",
    "Lease",
    "LeaseLost",
    "MissingExtra",
    "Percentiles",
    "PgqError",
    "Queue",
    "QueueLatency",
    "QueueStats",
    "QueueWindow",
    "Schedule",
    "ScheduleExists",
    "SchemaMissing",
    "Settled",
    "Snooze",
    "Step",
    "Target",
    "Task",
    "TaskArgumentError",
    "TaskError",
    "TaskOptions",
    "Tasks",
    "UnreadableValue",
    "Unstorable",
    "WorkerInfo",
    "achain",
    "agroup",
    "chain",
    "channel",
    "current_job",
    "driver_connection",
    "enqueue_in",
    "fenced_write",
    "find_target",
    "group",
    "listen_statement",
    "make_worker_id",
    "mask",
    "migrate",
    "parse_duration",
    "resolve",
    "sqlalchemy_engine",
]
