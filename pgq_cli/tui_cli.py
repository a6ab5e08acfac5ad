"""`pgq dashboard` and `pgq demo`: the Textual dashboard over a real database."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING

import click
import psycopg

from pgq_core import embedded, migrate, resolve
from pgq_core.config import Target, connect_options
from pgq_core.defaults import CONCURRENCY_MAX
from pgq_core.extras import require
from pgq_core.worker import load_handler

from .failures import OneLineUsageError, fail
from .options import FiniteFloatRange, lease_duration
from .session import command_name, settings

if TYPE_CHECKING:
    from pgq_tui.app import DashboardApp

DEMO_SCHEMA = "pgq_demo"



def leave_stuck_handlers(
    app: DashboardApp, target: Target, exit_now: Callable[[int], object] = os._exit
) -> None:
    """After the dashboard ended: if a handler ignored its stop (a sync one never returning),
    say so and exit at once rather than hang on its thread at interpreter exit. Exiting at once
    skips atexit, so this process's hold on the embedded server is dropped first."""
    stuck = app.pool.handlers_still_running()
    if stuck:
        click.echo(
            f"pgq: warning: {stuck} handler(s) told to stop did not return; exiting anyway",
            err=True,
        )
        if target.embedded:
            embedded.stop(embedded.default_home())
        sys.stdout.flush()
        sys.stderr.flush()
        exit_now(1 if app.return_code else 0)


@click.command("dashboard")
@click.option(
    "--handler",
    "handler_spec",
    metavar="MODULE:CALLABLE",
    help="Handler for workers started with `w` inside the dashboard.",
)
@click.option(
    "--refresh",
    type=FiniteFloatRange(min=0.1, max=3600),
    default=2.0,
    show_default=True,
    help="Seconds between polls (NOTIFY also refreshes at once).",
)
@click.option("--read-only", is_flag=True, help="Watch only: every action is disabled.")
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, CONCURRENCY_MAX),
    default=4,
    show_default=True,
    help="Concurrency of each worker started with `w`.",
)
@click.option(
    "--lease",
    default="30s",
    show_default=True,
    callback=lease_duration,
    help="Lease of workers started with `w`, 1s to 1d, e.g. 30s.",
)
@click.option(
    "--web",
    is_flag=True,
    help="Serve this dashboard to browsers instead (the web extra): each browser tab runs its "
    "own.",
)
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="With --web: the address to serve on (default 127.0.0.1:8080). Any non-loopback "
    "address needs the token printed at start (or PGQ_WEB_TOKEN) and is read-only unless "
    "--allow-actions.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="With --web on a non-loopback address: let browsers requeue, kill, pause and run "
    "workers.",
)
@click.pass_context
def dashboard_command(
    ctx: click.Context,
    handler_spec: str | None,
    refresh: float,
    read_only: bool,
    concurrency: int,
    lease: timedelta,
    web: bool,
    listen: str | None,
    allow_actions: bool,
) -> None:
    """Live view of queues, leases, jobs and workers, with operator actions (? for keys)."""
    if not web and (listen is not None or allow_actions):
        option = "--listen" if listen is not None else "--allow-actions"
        raise OneLineUsageError(f"{option} goes with --web")
    if read_only and allow_actions:
        raise OneLineUsageError("--read-only and --allow-actions contradict each other")
    require("tui", "the dashboard")
    if web:
        require("web", "pgq dashboard --web")
    from pgq_tui.launch import make_app

    handler = load_handler(handler_spec) if handler_spec else None
    target = settings(ctx).target()
    if web:
        options = SessionOptions(handler_spec, refresh, read_only, concurrency, lease)
        serve_web(
            target, listen, allow_actions=allow_actions, options=options,
            read_dsn=settings(ctx).read_dsn,
        )
        return
    app = make_app(
        target.dsn,
        target.schema,
        target.display,
        handler=handler,
        refresh=refresh,
        read_only=read_only,
        concurrency=concurrency,
        lease=lease,
        read_dsn=settings(ctx).read_dsn,
    )
    app.run()
    leave_stuck_handlers(app, target)


@dataclass(frozen=True)
class SessionOptions:
    """The dashboard options a browser session runs with."""

    handler_spec: str | None
    refresh: float
    read_only: bool
    concurrency: int
    lease: timedelta

    def command(self) -> str:
        """What textual-serve runs for each browser session: this Python's `pgq dashboard`
        with these options, never the DSN (the session finds it in its environment)."""
        args = [
            sys.executable, "-m", "pgq_cli", "dashboard",
            "--refresh", f"{self.refresh:g}",
            "--concurrency", str(self.concurrency),
            "--lease", f"{self.lease.total_seconds():g}s",
        ]
        if self.handler_spec:
            args += ["--handler", self.handler_spec]
        if self.read_only:
            args.append("--read-only")
        return shlex.join(args)


def serve_web(
    target: Target,
    listen: str | None,
    *,
    allow_actions: bool,
    options: SessionOptions,
    read_dsn: str | None = None,
) -> None:
    """`pgq dashboard --web`: serve the dashboard to browsers until Ctrl+C or SIGTERM. Bound
    to loopback unless --listen says otherwise; elsewhere a token is needed and the sessions
    are read-only unless --allow-actions."""
    from pgq_tui.web import (
        DEFAULT_LISTEN,
        TOKEN_ENV,
        DashboardServer,
        WebError,
        page_url,
        parse_listen,
        web_token,
    )

    try:
        where = parse_listen(listen or DEFAULT_LISTEN)
        token: str | None = None
        generated = False
        if not where.loopback or os.environ.get(TOKEN_ENV):
            token, generated = web_token(os.environ)
    except WebError as exc:
        raise OneLineUsageError(str(exc)) from None
    forced = not where.loopback and not allow_actions and not options.read_only
    if forced:
        options = replace(options, read_only=True)
    # The sessions inherit this environment: the DSN and schema reach them here, never on
    # their command line. The token stays in this process.
    os.environ["PGQ_SCHEMA"] = target.schema
    if target.embedded:
        os.environ.pop("PGQ_DSN", None)  # each session finds the same embedded server
    else:
        os.environ["PGQ_DSN"] = target.dsn
    if read_dsn is not None:
        os.environ["PGQ_READ_DSN"] = read_dsn  # the sessions read the standby too
    os.environ.pop(TOKEN_ENV, None)
    server = DashboardServer(options.command(), where, token=token)

    def announce() -> None:
        host = "HOST" if where.wildcard else None
        url = page_url(where, token if generated else None, host)
        if token is not None and not generated:
            url += f"?token=${TOKEN_ENV}"
        if forced:
            mode = "read-only (not on loopback: --allow-actions allows actions)"
        else:
            mode = "read-only" if options.read_only else "actions allowed"
        click.echo(f"pgq: dashboard of {target.display}, schema {target.schema}, for browsers")
        click.echo(f"pgq: {mode}; each browser tab runs its own dashboard; Ctrl+C stops")
        click.echo(f"pgq: open {url}")
        sys.stdout.flush()

    try:
        server.serve(announce=announce)
    except OSError as exc:
        fail(f"cannot serve on {where.netloc()}: {exc.strerror or exc}")


def demo_exit_hint(schema: str) -> str:
    """Where the demo's data is, and the commands to look at it again as this pgq was run."""
    pgq = command_name()
    return (
        f"demo data is in schema {schema}: "
        f"{pgq} --schema {schema} stats   (or {pgq} --schema {schema} dashboard)"
    )


@click.command("demo")
@click.option(
    "--refresh",
    type=FiniteFloatRange(min=0.1, max=3600),
    default=1.0,
    show_default=True,
    help="Seconds between polls.",
)
@click.option("--no-workers", is_flag=True, help="Fill the queues but start no workers.")
@click.pass_context
def demo_command(ctx: click.Context, refresh: float, no_workers: bool) -> None:
    """Fill demo queues with a realistic mix and open the dashboard with workers running.

    Uses the embedded server unless --dsn is given, and schema pgq_demo unless --schema is.
    """
    require("tui", "the demo's dashboard")
    from pgq_tui.launch import make_app

    from .demo_jobs import DEMO_QUEUES, DemoProducer, handle

    group = settings(ctx)
    schema = group.schema or os.environ.get("PGQ_SCHEMA") or DEMO_SCHEMA
    target = resolve(group.dsn, schema)
    with psycopg.connect(target.dsn, autocommit=True, **connect_options(target.dsn)) as conn:
        migrate(conn, target.schema)
    producer = DemoProducer(target.dsn, target.schema)
    producer.fill()
    producer.start()
    try:
        app = make_app(
            target.dsn,
            target.schema,
            target.display,
            handler=handle,
            refresh=refresh,
            concurrency=4,
            lease=timedelta(seconds=30),
            grace=3.0,
            start_workers=() if no_workers else list(DEMO_QUEUES),
        )
        app.run()
    finally:
        producer.stop()
    leave_stuck_handlers(app, target)
    click.echo(demo_exit_hint(target.schema))
    if app.return_code:
        fail("the dashboard ended with an error")
