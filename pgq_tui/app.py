"""The pgq dashboard app: polling, LISTEN, connection state, actions and in-app workers.

All database I/O runs in Textual workers that post messages back; the UI never waits on the
network. Polls never overlap: a refresh asked for during a poll runs once it ends. A NOTIFY
polls at once (at most one poll per NOTIFY_GAP; notifications meanwhile are coalesced).
Leases are re-read every LEASE_REFRESH, since heartbeats move them without a NOTIFY.
The in-app workers run on the pool's own thread and loop (see pool.py).

The header names the host each poll read (a standby: how far behind) and, once the primary's
timeline or address changed under the dashboard, when ("primary changed 12:03:07 (timeline
2)"). A LISTEN the server refuses (a standby) or, reading a standby, a primary out of reach is
said once on the status line: the poll timer refreshes meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from textual import work
from textual.actions import ActionParseResult
from textual.actions import parse as parse_action
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.dom import DOMNode
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import get_current_worker

from pgq_core import JobRow, Lease, PgqError, QueueStats, QueueWindow, WorkerInfo
from pgq_core.config import first_line
from pgq_core.filters import ACTION_STATUSES, FilterError, JobFilter
from pgq_core.models import ServerRole
from pgq_core.text import describe_exception

from .host import Severity
from .latency import LATENCY_REFRESH, LatencyTrend
from .messages import (
    ActionRead,
    DashboardReady,
    ErrorsPolled,
    HealthPolled,
    JobsPolled,
    JobsRequested,
    LatencyPolled,
    LeasesPolled,
    Notified,
    OpenJob,
    Polled,
    PollFailed,
    PrimaryChecked,
    RefreshRequested,
    SlowViewShown,
    WorkerFailed,
    WorkerLogged,
)
from .pool import QUIT_GRACE, QUIT_HAND_BACK, Pool
from .scheduler import PollScheduler
from .screens.confirm import BulkConfirmScreen, ConfirmScreen
from .screens.dashboard import DashboardScreen
from .screens.help import HelpScreen
from .screens.job_detail import JobDetailScreen
from .source import Disconnected, ListenRefused, Source
from .state import (
    CONNECTED,
    CONNECTING,
    DISCONNECTED,
    ERRORS_LIMIT,
    JOBS_LIMIT,
    QUEUES_WINDOW,
    SLOW_REFRESH,
    HeaderState,
    JobsQuery,
    LogLine,
    Snapshot,
)
from .throughput import Throughput
from .widgets.status_header import StatusHeader
from .worker_log import WorkerLogHandler

#: One poll's reads: the queues' window, the leases (and when read), the Jobs view's rows, the
#: server, the live workers' rows.
Fetched = tuple[QueueWindow, list[Lease], float, list[JobRow], ServerRole | None, list[WorkerInfo]]

__all__ = ["DashboardApp", "Notified"]

#: at most one NOTIFY-driven poll per this many seconds (a burst of notifications is one poll)
NOTIFY_GAP = 0.05
#: how often the leases alone are read again (heartbeats extend leases without a NOTIFY)
LEASE_REFRESH = 0.5
WRITE_ACTIONS = frozenset(
    {"requeue_job", "requeue_queue", "kill_job", "start_worker", "stop_workers", "pause_queue"}
)
#: recorded as the pause reason of a queue paused with `p`
PAUSE_REASON = "paused from the dashboard"
#: how often countdowns, ages and the clock move on between reads
TICK = 0.25
SEVERITY_STYLE = {"information": "bold", "warning": "bold yellow", "error": "bold red"}


#: What the header says when a poll fails in a way nothing foresaw (not the database's refusal,
#: not a lost connection); the Log view keeps the exception.
POLL_FAILED = "the dashboard could not read the queues: an unexpected error (the Log view has it)"

class _Selecting(Protocol):
    def selected_job(self) -> tuple[int, str, str] | None: ...


class DashboardApp(App[None]):
    TITLE = "pgq"
    #: the default screen's styles load with the app's (Textual loads a screen's own CSS_PATH
    #: only for screens it pushes)
    CSS_PATH = ["app.tcss", "screens/dashboard.tcss"]
    ENABLE_COMMAND_PALETTE = True
    #: The footer shows keys in this order and cuts what does not fit: help and quit, the
    #: actions on the selected rows, filter and pause, then this app's own workers. Labels are
    #: short so that all of them fit at 80 columns (the footer is compact there).
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("r", "requeue_job", "Requeue"),
        Binding("R", "requeue_queue", "Req all"),
        Binding("k", "kill_job", "Kill"),
        Binding("p", "pause_queue", "Pause queue", show=False),
        Binding("slash", "filter", "Filter"),
        Binding("space", "pause", "Pause"),
        Binding("w", "start_worker", "Worker+"),
        Binding("W", "stop_workers", "Stop"),
    ]

    def __init__(
        self,
        source: Source,
        pool: Pool,
        *,
        database: str,
        schema: str,
        refresh: float = 2.0,
        timed_polls: bool = True,
        read_only: bool = False,
        listen: bool = True,
        clock: Callable[[], float] = time.time,
        blink: bool = True,
        throughput: Throughput | None = None,
        latency: LatencyTrend | None = None,
        start_workers: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.source = source
        self.pool = pool
        self.database = database
        self.schema = schema
        self.refresh_seconds = refresh
        #: False: poll only when asked (start, actions, NOTIFY), though `refresh` is still shown;
        #: for deterministic renders of what a user sees
        self.timed_polls = timed_polls
        #: a poll that takes longer counts as a lost connection (and the connection is reset)
        self.poll_timeout = max(10.0, 3 * min(refresh, 60.0))
        self.read_only = read_only
        self.listen = listen
        self.clock = clock
        self.blink = blink
        self.throughput = throughput or Throughput()
        #: each queue's p95 wait, read every LATENCY_REFRESH seconds at most (after a poll)
        self.latency = latency or LatencyTrend()
        #: which reads are in flight and when each last started: "poll", "leases", "latency",
        #: "primary", and "errors" / "health" (the slow views)
        self.scheduler = PollScheduler()
        self.connection = CONNECTING
        self.problem = ""
        #: every connection state the app went through, in order (tests read it)
        self.connection_history: list[str] = [CONNECTING]
        self.paused = False
        self.polls = 0
        self.poll_failures = 0
        self._debounce: Timer | None = None
        #: actions committed so far; the count when the poll in flight began; the last
        #: action's re-read rows (a poll begun before that action overlays them, as it read
        #: older rows)
        self._commits = 0
        self._poll_commits = 0
        self._touched: tuple[int, ActionRead] | None = None
        #: actions running (their call or their re-read): a NOTIFY meanwhile (most likely the
        #: action's own) polls after them; re-reads running: any refresh waits for them, so
        #: that their statements do not queue behind a poll's on the connection
        self._acting = 0
        self._touching = 0
        self._quitting = False
        self._log_handler = WorkerLogHandler(lambda line: self.post_message(WorkerLogged(line)))
        self._dashboard: DashboardScreen | None = None
        self.start_workers = tuple(start_workers)
        #: the first queue (by name) of the Queues view's window
        self.queues_offset = 0
        #: the server the last poll read, and the primary's timeline and address last seen
        self.server: ServerRole | None = None
        self._timeline: int | None = None
        self._primary_at: str | None = None
        #: "primary changed HH:MM:SS (timeline N)" once a failover was seen; the header's
        self.primary_changed = ""
        #: reading a standby: why the primary is out of reach (empty while it answers)
        self.writes_problem = ""
        #: the source reads a standby and asks the primary apart (`Source.primary` answered)
        self._reads_apart = False
        #: what the status line last said of LISTEN (each said once, until LISTEN works)
        self._listen_said = ""

    @property
    def _polling(self) -> bool:
        """A full poll is in flight (tests wait on it)."""
        return self.scheduler.running("poll")

    @property
    def _latency_reading(self) -> bool:
        return self.scheduler.running("latency")

    def get_default_screen(self) -> Screen[Any]:
        return self.dashboard

    @property
    def dashboard(self) -> DashboardScreen:
        if self._dashboard is None:
            self._dashboard = DashboardScreen()
        return self._dashboard

    def on_dashboard_ready(self, _: DashboardReady) -> None:
        """The dashboard screen's widgets exist: start the live loop."""
        if self.timed_polls:
            self.set_interval(self.refresh_seconds, self.request_refresh)
            self.set_interval(LEASE_REFRESH, self.refresh_leases)
        self.set_interval(TICK, self.tick)
        self._log_handler.attach()
        if self.listen:
            self.listen_loop()
        for queue in self.start_workers:
            self._start_worker(queue)
        self.request_refresh()

    async def on_unmount(self) -> None:
        """However the app ends (`q` has closed them already; an embedding host's exit or a
        test leaving `run_test` has not), its connections to the database are given up."""
        self._log_handler.detach()
        with contextlib.suppress(Exception):  # leaving anyway
            await asyncio.wait_for(self.source.close(), timeout=3)

    def alert(self, message: str, *, title: str = "", severity: Severity = "information") -> None:
        """Say something on the status line (never a toast over the tables): printable text,
        never markup, since it may quote the database."""
        text = f"{title}: {message}" if title else message
        style = SEVERITY_STYLE[severity]
        with contextlib.suppress(NoMatches):
            self.dashboard.say(text, style)
            screen = self.screen
            if isinstance(screen, JobDetailScreen):
                screen.say(text, style)

    def worker_failed(self, text: str) -> None:
        self.alert(text, title="worker stopped", severity="error")

    def on_worker_failed(self, message: WorkerFailed) -> None:
        self.worker_failed(message.text)

    def on_worker_logged(self, message: WorkerLogged) -> None:
        with contextlib.suppress(NoMatches):
            self.dashboard.add_log(message.line)

    def on_open_job(self, message: OpenJob) -> None:
        self.open_job(message.job_id)

    def on_refresh_requested(self, _: RefreshRequested) -> None:
        self.request_refresh()

    def on_jobs_requested(self, _: JobsRequested) -> None:
        self.refresh_jobs()

    # header ----------------------------------------------------------------------------
    def header_state(self) -> HeaderState:
        stale = self.dashboard.stale_for if self._dashboard is not None else None
        server = self.server if self.connection == CONNECTED else None
        return HeaderState(
            self.database,
            self.schema,
            self.connection,
            self.problem,
            self.paused,
            self.read_only,
            stale,
            host=server.address if server is not None else "",
            standby=server is not None and server.standby,
            lag=server.lag_seconds if server is not None else None,
            primary_changed=self.primary_changed,
            writes=self.writes_problem,
        )

    def lease_left(self, job_id: int) -> tuple[float, float | None] | None:
        data = self.dashboard.data
        lease = data.lease_of(job_id) if data is not None else None
        if data is None or lease is None:
            return None
        return data.seconds_left(lease, self.clock()), lease.lease_seconds

    def _sync_headers(self) -> None:
        state = self.header_state()
        now = self.clock()
        for screen in self.screen_stack:
            for header in screen.query(StatusHeader):
                header.show(state, now)

    def _set_connection(self, state: str, problem: str = "") -> None:
        self.problem = problem
        if state != self.connection:
            self.connection = state
            self.connection_history.append(state)
        self._sync_headers()

    # polling ---------------------------------------------------------------------------
    def request_refresh(self) -> None:
        if self.paused or self._quitting or self._touching:
            return  # an action's re-read asks for one when done
        try:
            jobs_query = self.dashboard.jobs_query()
        except NoMatches:  # tearing down
            return
        if not self.scheduler.start("poll", again=True):
            return  # one poll at a time: this one runs when the poll in flight ends
        self._poll_commits = self._commits
        self.poll(jobs_query)

    @work(group="poll", exit_on_error=False)
    async def poll(self, jobs_query: JobsQuery) -> None:
        """Posts exactly one Polled or PollFailed, whatever happens, so polling never stalls."""
        outcome: Message = PollFailed("poll interrupted", disconnected=False)
        fetch = asyncio.ensure_future(self._fetch(jobs_query))
        try:
            outcome = await self._await_fetch(fetch, jobs_query)
        finally:
            if not fetch.done():
                fetch.cancel()
            self.post_message(outcome)

    async def _await_fetch(
        self,
        fetch: asyncio.Future[Fetched],
        jobs_query: JobsQuery,
    ) -> Message:
        started = self.clock()
        done, _ = await asyncio.wait({fetch}, timeout=self.poll_timeout)
        if not done:
            # The next poll takes a new connection; the hung call unwinds on its own (psycopg
            # cancels it on the server, bounded) and its connection is closed when it ends.
            with contextlib.suppress(Exception):
                await self.source.reset()
            fetch.cancel()
            return PollFailed(f"no answer within {self.poll_timeout:g}s", disconnected=True)
        try:
            window, leases, leases_at, jobs, server, workers = fetch.result()
        except Disconnected as exc:
            return PollFailed(str(exc), disconnected=True)
        except PgqError as exc:
            return PollFailed(first_line(str(exc)), disconnected=False)
        except Exception as exc:  # noqa: BLE001 - never a traceback: say so and carry on
            # the header gets a plain sentence; the Log view keeps what went wrong
            detail = f"the dashboard's poll failed: {describe_exception(exc)}"
            self.post_message(WorkerLogged(LogLine(time.time(), "ERROR", detail)))
            return PollFailed(POLL_FAILED, disconnected=False)
        now = self.clock()
        return Polled(
            Snapshot(
                window.stats, leases, jobs, jobs_query, now, now - started, leases_at,
                window.offset, window.total, server, workers,
            )
        )

    async def _fetch(
        self, jobs_query: JobsQuery
    ) -> Fetched:
        """The queues of the window the Queues view shows (the server sends no others), and
        the server they were read from."""
        window = await self.source.stats_window(self.queues_offset, QUEUES_WINDOW)
        if not window.stats and window.offset:  # queues went away under the window
            self.queues_offset = 0
            window = await self.source.stats_window(0, QUEUES_WINDOW)
        leases = await self.source.leases(JOBS_LIMIT)
        leases_at = self.clock()  # `seconds_left` is the server's as the leases came back
        jobs = await self._jobs(jobs_query)
        server = await self.source.server()
        try:
            workers = await self.source.workers()
        except PgqError:  # a schema before version 23 has no workers table: none shown
            workers = []
        return window, leases, leases_at, jobs, server, workers

    def move_queues_window(self, offset: int) -> None:
        """The Queues view shows the queues from the `offset`th by name from the next poll
        (asked for now)."""
        if offset != self.queues_offset:
            self.queues_offset = offset
            self.request_refresh()

    async def _jobs(self, jobs_query: JobsQuery) -> list[JobRow]:
        """The Jobs view's rows: a queue by status, or the jobs a filter matches."""
        queue, status, where = jobs_query
        if where is not None:
            return await self.source.jobs_matching(where, JOBS_LIMIT)
        return await self.source.jobs(queue, status, JOBS_LIMIT)

    def refresh_leases(self) -> None:
        """Between polls, the leases alone (cheap: the running jobs' index, LIMIT rows)."""
        if self.paused or self._quitting or self._polling or self.connection != CONNECTED:
            return
        if self.scheduler.start("leases"):
            self.read_leases()

    @work(group="leases", exit_on_error=False)
    async def read_leases(self) -> None:
        try:
            leases = await asyncio.wait_for(self.source.leases(JOBS_LIMIT), self.poll_timeout)
        except Disconnected as exc:
            self._lost_connection(exc)
            return
        except (PgqError, TimeoutError):
            return  # the next full poll says what is wrong
        finally:
            self.scheduler.end("leases")
        self.post_message(LeasesPolled(leases, self.clock()))

    def on_leases_polled(self, message: LeasesPolled) -> None:
        if self.paused:
            return
        with contextlib.suppress(NoMatches):
            self.dashboard.show_leases(message.leases, message.at)
            screen = self.screen
            if isinstance(screen, JobDetailScreen):
                screen.tick(self.clock())

    def refresh_jobs(self) -> None:
        """The Jobs view's rows alone, now (a queue or status was just chosen)."""
        if self.paused or self._quitting:
            return
        with contextlib.suppress(NoMatches):
            self.read_jobs(self.dashboard.jobs_query())

    @work(group="jobs", exclusive=True, exit_on_error=False)
    async def read_jobs(self, jobs_query: JobsQuery) -> None:
        try:
            jobs = await asyncio.wait_for(self._jobs(jobs_query), self.poll_timeout)
        except Disconnected as exc:
            self._lost_connection(exc)
            return
        except (PgqError, TimeoutError):
            self.request_refresh()  # the full poll says what is wrong
            return
        self.post_message(JobsPolled(jobs, jobs_query, self.clock()))

    def _lost_connection(self, exc: Disconnected) -> None:
        """A read between polls found the connection gone: said at once, as a poll would
        say it; the next poll connects again."""
        with contextlib.suppress(NoMatches):
            self._set_connection(DISCONNECTED, str(exc))
        self.request_refresh()

    def on_jobs_polled(self, message: JobsPolled) -> None:
        if self.paused:
            return
        with contextlib.suppress(NoMatches):
            self.dashboard.show_jobs(message.jobs, message.jobs_query)

    # the Errors and Health views: read on their own, only while shown, at most every
    # SLOW_REFRESH seconds (at once when shown)
    def on_slow_view_shown(self, message: SlowViewShown) -> None:
        self.refresh_slow(force=True)

    def refresh_slow(self, force: bool = False) -> None:
        if self.paused or self._quitting or self._dashboard is None:
            return
        with contextlib.suppress(NoMatches):
            view = self.dashboard.active_view()
            if view in ("errors", "health") and self.scheduler.start(
                view, 0.0 if force else SLOW_REFRESH
            ):
                self.read_slow(view)

    @work(group="slow", exit_on_error=False)
    async def read_slow(self, view: str) -> None:
        try:
            if view == "errors":
                groups = await asyncio.wait_for(
                    self.source.errors(ERRORS_LIMIT), self.poll_timeout
                )
                self.post_message(ErrorsPolled(groups, self.clock()))
            else:
                health = await asyncio.wait_for(self.source.health(), self.poll_timeout)
                self.post_message(HealthPolled(health, self.clock()))
        except Disconnected as exc:
            self._lost_connection(exc)
        except (PgqError, TimeoutError) as exc:
            text = first_line(str(exc)) or "timed out"
            self.alert(text, title=f"{view} not read", severity="error")
        finally:
            self.scheduler.end(view)

    # latency: each shown queue's p95 wait, read in a worker of its own after a poll, at most
    # every LATENCY_REFRESH seconds (bounded: the queues of the window, 20,000 jobs each)
    def refresh_latency(self, queues: list[str]) -> None:
        if self.paused or self._quitting or not queues:
            return
        if self.scheduler.start("latency", LATENCY_REFRESH):
            self.read_latency(queues)

    @work(group="latency", exit_on_error=False)
    async def read_latency(self, queues: list[str]) -> None:
        try:
            report = await asyncio.wait_for(self.source.latency(queues), self.poll_timeout)
        except Disconnected as exc:
            self._lost_connection(exc)
            return
        except (PgqError, TimeoutError):
            return  # the column keeps its last figures; the next poll says what is wrong
        finally:
            self.scheduler.end("latency")
        self.post_message(LatencyPolled(report, self.clock()))

    def on_latency_polled(self, message: LatencyPolled) -> None:
        self.latency.observe(message.report, message.at)
        self.latency.keep(entry.queue for entry in message.report.queues)  # the window's only
        if not self.paused:
            with contextlib.suppress(NoMatches):
                self.dashboard.tick(self.clock())

    def on_errors_polled(self, message: ErrorsPolled) -> None:
        if not self.paused:
            with contextlib.suppress(NoMatches):
                self.dashboard.show_errors(message.groups, message.at)

    def on_health_polled(self, message: HealthPolled) -> None:
        if not self.paused:
            with contextlib.suppress(NoMatches):
                self.dashboard.show_health(message.health, message.at)

    def _poll_done(self) -> None:
        if self.scheduler.end("poll"):
            self.call_later(self.request_refresh)

    def on_polled(self, message: Polled) -> None:
        self._poll_done()
        self.polls += 1
        snapshot = message.snapshot
        if self._touched is not None and self._poll_commits < self._touched[0]:
            # begun before the last action committed: its rows of what it touched are older
            read = self._touched[1]
            jobs = read.jobs if read.jobs_query == snapshot.jobs_query else None
            snapshot = snapshot.with_touched(
                read.stats, jobs, read.jobs_query, read.leases, read.at
            )
        for stats in snapshot.stats:
            self.throughput.observe(stats.queue, stats.completed, snapshot.polled_at)
        self.refresh_latency([s.queue for s in snapshot.stats])
        self.server = snapshot.server
        server = snapshot.server
        if server is not None and not server.standby and not self._reads_apart:
            self._saw_primary(server)
        self.refresh_primary()
        with contextlib.suppress(NoMatches):  # a poll that lands while the app tears down
            self.dashboard.set_stale(None)
            self._set_connection(CONNECTED)
            if not self.paused:
                self.dashboard.show(snapshot)
                self.refresh_slow()
                if self.screen is not self.dashboard:
                    refresh = getattr(self.screen, "data_refreshed", None)
                    if refresh is not None:
                        refresh()

    # the primary: its timeline and address, and (reading a standby) whether it answers
    def _saw_primary(self, role: ServerRole) -> None:
        """A primary answered: a timeline or an address other than the last one seen means a
        failover happened meanwhile; the header says when (the app's clock, UTC)."""
        if self._timeline is not None and (
            role.timeline != self._timeline or role.address != self._primary_at
        ):
            at = time.strftime("%H:%M:%S", time.gmtime(self.clock()))
            self.primary_changed = f"primary changed {at} (timeline {role.timeline})"
        self._timeline, self._primary_at = role.timeline, role.address

    def refresh_primary(self) -> None:
        """Reading a standby, the primary is asked after a poll (at most once a refresh) where
        it is and which timeline it writes; otherwise the poll itself says so."""
        if self.paused or self._quitting:
            return
        if self.scheduler.start("primary", self.refresh_seconds):
            self.read_primary()

    @work(group="primary", exit_on_error=False)
    async def read_primary(self) -> None:
        role: ServerRole | None = None
        problem = ""
        try:
            role = await asyncio.wait_for(self.source.primary(), self.poll_timeout)
        except Disconnected as exc:
            problem = str(exc)
        except (PgqError, TimeoutError) as exc:
            problem = first_line(str(exc)) or f"no answer within {self.poll_timeout:g}s"
        finally:
            self.scheduler.end("primary")
        self.post_message(PrimaryChecked(role, problem))

    def on_primary_checked(self, message: PrimaryChecked) -> None:
        self._reads_apart = self._reads_apart or bool(message.role or message.problem)
        self.writes_problem = message.problem
        if message.role is not None and not message.role.standby:
            self._saw_primary(message.role)
        with contextlib.suppress(NoMatches):
            self._sync_headers()

    def on_poll_failed(self, message: PollFailed) -> None:
        self._poll_done()
        self.poll_failures += 1
        with contextlib.suppress(NoMatches):
            if message.disconnected:
                self._set_connection(DISCONNECTED, message.error)
            else:  # the server answered, with an error (e.g. the schema is not migrated)
                self._set_connection(CONNECTED, message.error)

    def stale_for(self, now: float) -> float | None:
        """The age of the data on screen when it should have been refreshed by now (the server
        is unreachable or a poll hangs); None while fresh, paused, or not polling by time."""
        data = self._dashboard.data if self._dashboard is not None else None
        if data is None or self.paused or not self.timed_polls:
            return None
        age = now - data.polled_at
        if age <= self.refresh_seconds:
            return None
        if self.connection != CONNECTED or age > 2 * self.refresh_seconds + 1:
            return age
        return None

    def tick(self) -> None:
        """Paused, only the clock and the age of the (frozen) data move on."""
        now = self.clock()
        with contextlib.suppress(NoMatches):
            dashboard = self.dashboard
            dashboard.set_stale(self.stale_for(now))
            self._sync_headers()
            if self.paused:
                dashboard.render_status_line()
            else:
                dashboard.tick(now)
                screen = self.screen
                if isinstance(screen, JobDetailScreen):
                    screen.tick(now)

    # LISTEN ----------------------------------------------------------------------------
    @work(group="listen", exit_on_error=False)
    async def listen_loop(self) -> None:
        """A dedicated connection LISTENs; every notification asks for a (debounced) refresh.
        A dropped link is retried with backoff; the poll timer keeps working meanwhile. A
        standby refuses LISTEN: that is said once, as is (reading a standby) a primary out of
        reach, until a notification comes again."""
        backoff = 0.5
        while True:
            try:
                async for _queue in self.source.notifications():
                    backoff = 0.5
                    self._listen_said = ""
                    self.post_message(Notified())
            except ListenRefused as exc:
                self._listen_off(str(exc))
            except Disconnected as exc:
                if self.writes_problem or (self.server is not None and self.server.standby):
                    self._listen_off(f"the primary is out of reach ({exc})")
            except Exception:  # noqa: BLE001 - anything else: retried alike
                pass
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _listen_off(self, why: str) -> None:
        """Say once (until LISTEN works again) that jobs are seen by polling alone."""
        text = f"live updates off: {why}; polling every {self.refresh_seconds:g} s"
        if not self._listen_said:
            self._listen_said = text
            self.alert(text, severity="warning")

    def on_notified(self, _: Notified) -> None:
        """At once, unless a poll started less than NOTIFY_GAP ago: then once the gap is over.
        A poll in flight takes one more afterwards, however many notifications came."""
        if self._debounce is not None or self._acting:
            return  # an action's end asks for a refresh
        wait = self.scheduler.wait("poll", NOTIFY_GAP)
        if wait <= 0:
            self.request_refresh()
        else:
            self._debounce = self.set_timer(wait, self._debounced_refresh)

    def _debounced_refresh(self) -> None:
        self._debounce = None
        self.request_refresh()

    # actions ---------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Read-only: the write actions stay in the footer, greyed out, and do not run. On a
        job's screen `w` (a worker on the queue the dashboard has selected) is not offered."""
        if self.read_only and action in WRITE_ACTIONS:
            return None
        return not (action == "start_worker" and isinstance(self.screen, JobDetailScreen))

    async def run_action(
        self,
        action: str | ActionParseResult,
        default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """Read-only: a key of a write action (r R k p w W) says it is refused, on the status
        line, rather than doing nothing (check_action alone stops it silently)."""
        destination, name, _ = parse_action(action) if isinstance(action, str) else action
        ours = destination == "app" or (
            not destination and (default_namespace is None or default_namespace is self)
        )
        if self.read_only and ours and name in WRITE_ACTIONS:
            self._refuse_read_only()
            return True
        return await super().run_action(action, default_namespace, namespaces)

    def _refuse_read_only(self) -> bool:
        """True (and says why) when an action must not run: read-only, or a dialog is open."""
        if isinstance(self.screen, (ConfirmScreen, HelpScreen)):
            return True
        if self.read_only:
            self.alert("read-only: actions are disabled", severity="warning")
        return self.read_only

    def _selected_job(self) -> tuple[int, str, str] | None:
        screen = self.screen
        if hasattr(screen, "selected_job"):
            selecting: _Selecting = screen
            return selecting.selected_job()
        return None

    def open_job(self, job_id: int) -> None:
        if isinstance(self.screen, JobDetailScreen):
            return
        self.push_screen(JobDetailScreen(job_id))

    def action_requeue_job(self) -> None:
        if self._refuse_read_only():
            return
        job = self._selected_job()
        if job is None:
            self.alert("select a dead job first (Jobs view, 2)", severity="warning")
            return
        job_id, status, _ = job
        if status != "dead":
            self.alert(
                f"job {job_id} is {status}: only dead jobs are requeued", severity="warning"
            )
            return
        self._act(
            self.source.requeue([job_id]),
            lambda ids: f"requeued job {job_id}" if ids else f"job {job_id} was no longer dead",
            [job[2]],
            moved=("dead", "ready"),
        )

    def action_requeue_queue(self) -> None:
        if self._refuse_read_only():
            return
        if self.screen is self.dashboard:
            target = self.dashboard.bulk_target()
            if target is not None:
                self._bulk("requeue", *target)
                return
        stats = self.dashboard.selected_stats()
        if stats is None:
            self.alert("select a queue first", severity="warning")
            return
        if not stats.dead:
            self.alert(f"queue {stats.queue} has no dead jobs", severity="information")
            return
        queue = stats.queue

        def answered(yes: bool | None) -> None:
            if yes:
                self._act(
                    self.source.requeue_dead(queue),
                    lambda ids: (
                        f"requeued {len(ids)} dead job{'s' if len(ids) != 1 else ''} of {queue}"
                    ),
                    [queue],
                    moved=("dead", "ready"),
                )
            else:
                self.dashboard.say("requeue cancelled", "grey62")

        self.push_screen(
            ConfirmScreen(
                f"Requeue every dead job of queue {queue}?",
                f"{stats.dead} dead job(s) go back to ready with a fresh set of attempts.",
            ),
            answered,
        )

    def action_kill_job(self) -> None:
        if self._refuse_read_only():
            return
        if self.screen is self.dashboard:
            target = self.dashboard.bulk_target()
            if target is not None:
                job = self._selected_job()
                single = job if job is not None and job[1] in ("ready", "running") else None
                self._bulk("kill", *target, single=single)
                return
        job = self._selected_job()
        if job is None:
            self.alert("select a job first (Leases 1 or Jobs 2)", severity="warning")
            return
        job_id, status, queue = job
        if status not in ("ready", "running"):
            self.alert(
                f"job {job_id} is {status}: only ready or running jobs are killed",
                severity="warning",
            )
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._act(
                    self.source.kill([job_id]),
                    lambda ids: (
                        f"killed job {job_id}" if ids else f"job {job_id} had already settled"
                    ),
                    [queue],
                    leases=True,
                    moved=(status, "dead"),
                )
            else:
                self.dashboard.say("kill cancelled", "grey62")

        self.push_screen(
            ConfirmScreen(
                f"Kill job {job_id} ({status}, queue {queue})?",
                "It becomes dead and its fence goes up by one: a worker still running it "
                "loses its lease at its next write.",
            ),
            answered,
        )

    def _bulk(
        self,
        action: str,
        where: JobFilter,
        what: str,
        single: tuple[int, str, str] | None = None,
    ) -> None:
        """R or k over every job `where` matches: count them exactly, ask (with the count),
        then act through the core's bulk action (bounded batches, fence-checked, the
        history names the operator and the filter)."""
        try:
            where.for_action(action)
        except FilterError as exc:
            self.alert(str(exc), severity="warning")
            return
        self._count_and_ask(action, where, what, single)

    @work(group="actions", exit_on_error=False)
    async def _count_and_ask(
        self, action: str, where: JobFilter, what: str, single: tuple[int, str, str] | None
    ) -> None:
        try:
            count = await asyncio.wait_for(
                self.source.count_matching(where, action), self.poll_timeout
            )
        except (Disconnected, PgqError, TimeoutError) as exc:
            self.alert(str(exc) or "timed out", title="count failed", severity="error")
            return
        statuses = " and ".join(ACTION_STATUSES[action])
        jobs = f"{count:,} job{'' if count == 1 else 's'}"
        if not count and single is None:
            self.alert(f"no {statuses} jobs {what}: nothing to {action}")
            return
        verb = "Requeue" if action == "requeue" else "Kill"
        if action == "requeue":
            effect = "go back to ready with a fresh set of attempts"
        else:
            effect = "become dead, fence + 1 (a worker still running one loses its lease)"
        detail = (
            f"{jobs} ({statuses} only) {what} {effect}, in batches; the history names you "
            "and the filter."
        )
        label = f"job {single[0]}" if single is not None else None

        def answered(answer: str | None) -> None:
            if answer == "all":
                self._act(
                    self.source.bulk(action, where),
                    lambda ids: (
                        f"{'requeued' if action == 'requeue' else 'killed'} {len(ids):,} "
                        f"job{'' if len(ids) == 1 else 's'} {what}"
                    ),
                    self._shown_queues(),  # any of them: the filter or group spans queues
                    leases=action == "kill",
                )
            elif answer == "one" and single is not None:
                job_id = single[0]
                self._act(
                    self.source.kill([job_id]),
                    lambda ids: (
                        f"killed job {job_id}" if ids else f"job {job_id} had already settled"
                    ),
                    [single[2]],
                    leases=True,
                    moved=(single[1], "dead"),
                )
            else:
                self.dashboard.say(f"{action} cancelled", "grey62")

        self.push_screen(
            BulkConfirmScreen(f"{verb} all {jobs} {what}?", detail, label), answered
        )

    def action_pause_queue(self) -> None:
        """`p`: pause the selected queue (its workers claim nothing), or resume a paused one
        (its workers are woken); asks first either way."""
        if self._refuse_read_only():
            return
        stats = self.dashboard.selected_stats()
        if stats is None:
            self.notify("select a queue first", severity="warning")
            return
        queue, paused = stats.queue, stats.paused

        async def toggle() -> list[int]:
            if paused:
                await self.source.resume_queue(queue)
            else:
                await self.source.pause_queue(queue, PAUSE_REASON)
            return []

        def answered(yes: bool | None) -> None:
            if yes:
                self._act(
                    toggle(),
                    lambda _: f"{'resumed' if paused else 'paused'} queue {queue}",
                    [queue],
                )
            else:
                self.dashboard.say(f"{'resume' if paused else 'pause'} cancelled", "grey62")

        if paused:
            title = f"Resume queue {queue}?"
            body = "Its workers claim again, woken at once."
        else:
            title = f"Pause queue {queue}?"
            body = (
                f"Its workers claim nothing until it is resumed; the {stats.running} running "
                "job(s) finish."
            )
        self.push_screen(ConfirmScreen(title, body), answered)

    def _shown_queues(self) -> list[str]:
        data = self.dashboard.data
        return [s.queue for s in data.stats] if data is not None else []

    def _act(
        self,
        call: Awaitable[list[int]],
        describe: Callable[[list[int]], str],
        queues: Sequence[str] = (),
        *,
        leases: bool = False,
        moved: tuple[str, str] | None = None,
    ) -> None:
        """Run an action; once it committed, the rows it touched (the stats of `queues`, the
        Jobs view's rows, with `leases` the leases) are read again in the same worker and
        shown at once, before the refresh it asks for brings the rest. `moved` (was, became):
        the jobs it returns all went from status `was` to `became` in `queues[0]`; the screen
        says so as soon as it committed, before the re-read confirms it."""
        self._run_action(call, describe, list(queues), leases, moved)

    @work(group="actions", exit_on_error=False)
    async def _run_action(
        self,
        call: Awaitable[list[int]],
        describe: Callable[[list[int]], str],
        queues: list[str],
        leases: bool,
        moved: tuple[str, str] | None,
    ) -> None:
        self._acting += 1
        try:
            try:
                ids = await call
            except (Disconnected, PgqError, ValueError) as exc:  # ValueError: a name refused
                self.alert(str(exc), title="action failed", severity="error")
                return
            self._commits += 1
            commit = self._commits
            if moved is not None and ids and queues:
                with contextlib.suppress(NoMatches):
                    self.dashboard.jobs_moved(queues[0], ids, *moved)
            self._touching += 1
            try:
                read = await self._read_touched(queues, leases)
            finally:
                self._touching -= 1
            if read is not None:
                self.post_message(read)
                self._touched = (commit, read)
            text = describe(ids)  # said with the rows, in the same frame
            self.alert(text)
            self.dashboard.say(text, "bold")
        finally:
            self._acting -= 1
            self.request_refresh()

    async def _read_touched(self, queues: list[str], leases: bool) -> ActionRead | None:
        """What an action touched, read again: its queues' stats, the Jobs view's rows and
        (`leases`) the leases, one bounded statement each. None when the read fails (the
        refresh that follows says why)."""
        try:
            jobs_query = self.dashboard.jobs_query()

            async def read() -> tuple[list[QueueStats], list[JobRow], list[Lease] | None]:
                stats = await self.source.queue_stats(queues) if queues else []
                jobs = await self._jobs(jobs_query)
                held = await self.source.leases(JOBS_LIMIT) if leases else None
                return stats, jobs, held

            stats, jobs, held = await asyncio.wait_for(read(), self.poll_timeout)
        except (Disconnected, PgqError, TimeoutError, NoMatches):
            return None
        return ActionRead(queues, stats, jobs, jobs_query, held, self.clock())

    def on_action_read(self, message: ActionRead) -> None:
        """Shown even while live updates are paused: it is the operator's own action."""
        with contextlib.suppress(NoMatches):
            self.dashboard.show_touched(message)
            screen = self.screen
            if screen is not self.dashboard:
                refresh = getattr(screen, "data_refreshed", None)
                if refresh is not None:
                    refresh()

    def action_start_worker(self) -> None:
        if self._refuse_read_only():
            return
        if not self.pool.can_start:
            self.alert("no handler: start with --handler MODULE:CALLABLE", severity="warning")
            return
        queue = self.dashboard.selected_queue()
        if queue is None:
            self.alert("select a queue first", severity="warning")
            return
        self._start_worker(queue)

    def _start_worker(self, queue: str) -> None:
        try:
            worker_id = self.pool.start(queue)
        except Exception as exc:  # noqa: BLE001 - shown, never raised
            self.alert(first_line(str(exc)), title="worker not started", severity="error")
            return
        self.dashboard.say(f"started worker {worker_id} on {queue}", "bold green")
        self.dashboard.tick(self.clock())  # the Workers view shows it now, not at the tick

    def action_stop_workers(self) -> None:
        if self._refuse_read_only():
            return
        asked = self.pool.stop_all()
        self.dashboard.say(
            f"stopping {asked} worker(s) gracefully" if asked else "no running workers", "yellow"
        )
        self.dashboard.tick(self.clock())

    def action_filter(self) -> None:
        """`/`: the current view's rows, or on a job, its history."""
        screen = self.screen
        if screen is self.dashboard or isinstance(screen, JobDetailScreen):
            screen.open_filter()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self._sync_headers()
        self.dashboard.say("live updates paused" if self.paused else "live updates resumed")
        if not self.paused:
            self.request_refresh()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.read_only))

    async def action_quit(self) -> None:
        """First `q`: workers stop gracefully for at most QUIT_GRACE, then at once, and the app
        exits (always, within QUIT_GRACE + QUIT_HAND_BACK + a few seconds). Second `q`: at once."""
        if self._quitting:
            self.pool.stop_all(immediately=True)
            self.exit()
            return
        self._quitting = True
        self._leave()

    @work(group="quit", exit_on_error=False)
    async def _leave(self) -> None:
        try:
            active = self.pool.active()
            if active:
                with contextlib.suppress(NoMatches):
                    self.dashboard.say(
                        f"stopping {active} worker(s): running jobs get {QUIT_GRACE:g}s"
                        " · q again quits now",
                        "yellow",
                    )
                self.pool.stop_all()
                if await self.pool.wait(QUIT_GRACE, cancel=False):
                    self.pool.stop_all(immediately=True)
                    await self.pool.wait(QUIT_HAND_BACK)
            self.pool.close()
            await self._end_reads()
            with contextlib.suppress(Exception):  # leaving anyway
                await asyncio.wait_for(self.source.close(), timeout=3)
        finally:
            self.exit()

    async def _end_reads(self) -> None:
        """Cancel this app's other workers (polls, LISTEN, actions) and give them a moment to
        unwind, so the source closes idle connections rather than busy ones."""
        me = get_current_worker()
        others = [w for w in self.workers if w is not me and not w.is_finished]
        for worker in others:
            worker.cancel()
        deadline = time.monotonic() + QUIT_HAND_BACK
        while any(not w.is_finished for w in others) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand(
            "Requeue job", "Requeue the selected dead job (r)", self.action_requeue_job
        )
        yield SystemCommand(
            "Requeue all dead",
            "Requeue every dead job of the selected queue (R)",
            self.action_requeue_queue,
        )
        yield SystemCommand(
            "Kill job", "Kill the selected job: dead, fence + 1 (k)", self.action_kill_job
        )
        yield SystemCommand(
            "Pause / resume queue",
            "Pause the selected queue, or resume it (p)",
            self.action_pause_queue,
        )
        yield SystemCommand(
            "Start worker", "Start a worker on the selected queue (w)", self.action_start_worker
        )
        yield SystemCommand("Stop workers", "Stop this app's workers (W)", self.action_stop_workers)
        yield SystemCommand("Filter", "Filter the rows of the current view (/)", self.action_filter)
        yield SystemCommand(
            "Pause / resume", "Pause or resume live updates (space)", self.action_pause
        )
        yield SystemCommand("Keys", "Show every key (?)", self.action_help)
