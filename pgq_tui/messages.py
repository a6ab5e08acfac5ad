"""Messages between the dashboard's parts. Workers that read the database post the data
messages to the app; screens post the request messages, which bubble up to the app (so no
screen imports the app). Only this module and the widgets and screens import Textual."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from pgq_core import JobRow, LatencyReport, Lease, QueueStats
from pgq_core.models import ErrorGroup, Health, ServerRole

from .state import JobsQuery, LogLine, Snapshot


@dataclass
class Polled(Message):
    """A full poll (stats, leases, jobs) landed."""

    snapshot: Snapshot


@dataclass
class PollFailed(Message):
    error: str
    disconnected: bool


@dataclass
class PrimaryChecked(Message):
    """Reading a standby: the primary answered (`role`), or `problem` says why not."""

    role: ServerRole | None
    problem: str


@dataclass
class LeasesPolled(Message):
    """Only the leases were read again, at `at` (app clock), e.g. to catch heartbeats."""

    leases: list[Lease]
    at: float


@dataclass
class JobsPolled(Message):
    """Only the Jobs view's rows were read again (a new queue or status was chosen)."""

    jobs: list[JobRow]
    jobs_query: JobsQuery
    at: float


@dataclass
class ActionRead(Message):
    """An action committed and what it touched was read again at once, at `at` (app clock):
    the stats of `queues` (a queue absent from `stats` has no jobs left), the Jobs view's rows
    for `jobs_query`, and the leases when the action could end some (None: not read)."""

    queues: list[str]
    stats: list[QueueStats]
    jobs: list[JobRow] | None
    jobs_query: JobsQuery
    leases: list[Lease] | None
    at: float


class Notified(Message):
    """A NOTIFY arrived: jobs became ready somewhere."""


@dataclass
class WorkerLogged(Message):
    """A log record of one of the app's own workers (posted from any thread)."""

    line: LogLine


@dataclass
class WorkerFailed(Message):
    """One of the app's workers ended with an error (posted from the workers' thread)."""

    text: str


class DashboardReady(Message):
    """The dashboard's widgets exist: the live loop may start."""


class RefreshRequested(Message):
    """A screen wants fresh data now (polls never overlap: it may run after the current one)."""


class JobsRequested(Message):
    """The Jobs view's queue or status changed: read its rows now, alone."""


@dataclass
class OpenJob(Message):
    job_id: int


@dataclass
class ErrorsPolled(Message):
    """The Errors view's groups were read."""

    groups: list[ErrorGroup]
    at: float


@dataclass
class LatencyPolled(Message):
    """The latency percentiles of the queues shown were read, at `at` (app clock)."""

    report: LatencyReport
    at: float


@dataclass
class HealthPolled(Message):
    """The Health view's readings were taken."""

    health: Health
    at: float


@dataclass
class SlowViewShown(Message):
    """The Errors or Health view was just shown: read it now (it is not read while hidden)."""

    view: str

