"""`pgq`: the command line over pgq_core (queue operations) and pgq_tui (the dashboard).

This module is the group, its global options and the table of commands; each command lives in
the module of its family (enqueue_cli, jobs_cli, queue_cli, schedule_cli, latency_cli,
maintenance_cli, worker_cli, tui_cli, metrics_cli, bench_cli, db_cli, roles_cli) and is
imported only when run, so `pgq --help` stays fast and loads no heavy module. What they print
for humans goes through `output`; what they share is in `options` (option types and
validators), `session` (the database target and bounded sessions), `failures` (error lines and
exit codes) and `group` (the group's error handling).

Every command reaches the database through pgq_core's `Queue`; none holds SQL. Commands that
print data take `--json`; bad input is one `pgq: error: ...` line (exit 2 for usage, 1 for
runtime failures), never a traceback.

Invariants: text from the database reaches the terminal only as `rich.text.Text` through
`pgq_core.text.printable` (never as markup, never a control character); `--json` prints the
raw values.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
from datetime import timedelta

import click

from pgq_core.config import check_dsn

from .group import PgqGroup
from .options import at_most
from .session import Settings

#: The longest --statement-timeout, as for a worker's (PostgreSQL itself refuses more than
#: 2^31 - 1 ms, 24.8 days, with a bare "invalid value").
STATEMENT_TIMEOUT_MAX = timedelta(days=1)


class LazyGroup(PgqGroup):
    """Every command is imported when run (or asked for its help), not at start-up; `pgq --help`
    lists them by their short help here. One module per command family."""

    #: name -> (module, attribute, short help)
    LAZY: dict[str, tuple[str, str, str]] = {
        "enqueue": (
            "pgq_cli.enqueue_cli",
            "enqueue_command",
            (
                "Add a job to QUEUE with PAYLOAD_JSON (default {}; - reads it from stdin), or one"
                " job per line of --file."
            ),
        ),
        "jobs": (
            "pgq_cli.jobs_cli",
            "jobs_command",
            "List jobs matching a filter, newest first (payloads are shown by `pgq show`).",
        ),
        "workers": (
            "pgq_cli.queue_cli",
            "workers_command",
            "The live workers: queues, concurrency, jobs running, done and failed, last beat.",
        ),
        "show": (
            "pgq_cli.jobs_cli",
            "show_command",
            "Every column of one job, its payload and its fence history.",
        ),
        "requeue": (
            "pgq_cli.jobs_cli",
            "requeue_command",
            (
                "Dead jobs back to ready with fresh attempts: by id, every dead job of a queue "
                "(--queue Q --dead, --all-queues --dead), or the dead jobs matching a filter."
            ),
        ),
        "kill": (
            "pgq_cli.jobs_cli",
            "kill_command",
            (
                "Ready or running jobs to dead (fence + 1: a worker still running one loses its "
                "lease): by id, or those matching a filter."
            ),
        ),
        "delete": (
            "pgq_cli.jobs_cli",
            "delete_command",
            "Delete dead and done jobs matching a filter, with their history, in batches.",
        ),
        "errors": (
            "pgq_cli.jobs_cli",
            "errors_command",
            (
                "Failed and dead jobs grouped by their error with ids, numbers, quoted values and"
                " URLs normalized; act on a group with `pgq requeue/kill --error-group GROUP`."
            ),
        ),
        "pause": (
            "pgq_cli.queue_cli",
            "pause_command",
            "Stop QUEUE's workers from claiming (running jobs finish); `pgq resume` undoes it.",
        ),
        "resume": (
            "pgq_cli.queue_cli",
            "resume_command",
            "Let QUEUE's workers claim again, and wake them (the queue's notification).",
        ),
        "limit": (
            "pgq_cli.queue_cli",
            "limit_command",
            "At most N jobs of QUEUE run at once, across all workers (`none`: no limit).",
        ),
        "stats": (
            "pgq_cli.queue_cli",
            "stats_command",
            "Ready, scheduled, waiting, running, expiring, dead and done jobs per queue.",
        ),
        "latency": (
            "pgq_cli.latency_cli",
            "latency_command",
            "Wait and run-time p50/p95/p99 per queue over 5m and --since, from done jobs.",
        ),
        "schedule": (
            "pgq_cli.schedule_cli",
            "schedule_group",
            "Periodic jobs: add, list, remove or run a cron schedule.",
        ),
        "roles": (
            "pgq_cli.roles_cli",
            "roles_group",
            "pgq's roles for this schema: producer, worker, operator and observer.",
        ),
        "migrate": (
            "pgq_cli.maintenance_cli",
            "migrate_command",
            "Create or upgrade the queue's schema (idempotent; safe from many processes at once).",
        ),
        "prune": (
            "pgq_cli.maintenance_cli",
            "prune_command",
            (
                "Delete old done jobs and their history, in bounded batches; drop the days of "
                "history that lie entirely before the cutoff, keeping the history of jobs still "
                "present."
            ),
        ),
        "reap": (
            "pgq_cli.maintenance_cli",
            "reap_command",
            (
                "Expired leases back to ready (or dead at max attempts), in batches until none is"
                " left."
            ),
        ),
        "config": (
            "pgq_cli.maintenance_cli",
            "config_group",
            "Show the schema's settings, or change one (`pgq config notify edge`).",
        ),
        "health": (
            "pgq_cli.maintenance_cli",
            "health_command",
            (
                "Table bloat and vacuum, the oldest transaction holding back vacuum, NOTIFY queue"
                " use, lock waits on jobs, and stuck jobs"
            ),
        ),
        "worker": (
            "pgq_cli.worker_cli",
            "worker_command",
            "Run a handler on the jobs of QUEUES until stopped.",
        ),
        "dashboard": (
            "pgq_cli.tui_cli",
            "dashboard_command",
            "Live view of queues, leases, jobs and workers, with operator actions (? for keys).",
        ),
        "demo": (
            "pgq_cli.tui_cli",
            "demo_command",
            "Fill demo queues with a realistic mix and open the dashboard with workers running.",
        ),
        "metrics": (
            "pgq_cli.metrics_cli",
            "metrics_command",
            "Serve Prometheus metrics of the queue, read from the database on every scrape.",
        ),
        "bench": (
            "pgq_cli.bench_cli",
            "bench_command",
            "Benchmark pgq against a plain-SQL baseline on a throwaway server.",
        ),
        "psql": (
            "pgq_cli.db_cli",
            "psql_command",
            "Open psql on the queue's database (the embedded server too).",
        ),
        "dsn": (
            "pgq_cli.db_cli",
            "dsn_command",
            "Print the DSN of the queue's database, password included, for your own programs.",
        ),
    }

    #: name -> the package it runs from a clone of the repository (not in the wheel): listed
    #: only where that package can be imported, though run anywhere it says what to do
    FROM_A_CLONE: dict[str, str] = {"bench": "pgq_bench"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        hidden = {
            name
            for name, package in self.FROM_A_CLONE.items()
            if importlib.util.find_spec(package) is None
        }
        return sorted({*super().list_commands(ctx), *self.LAZY} - hidden)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.LAZY:
            module, attribute, _ = self.LAZY[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            # start-up's objects (modules, classes, functions) live until exit: no collection
            # walks them again (~15 ms of `pgq enqueue --file` reading 20,000 lines)
            gc.freeze()
            self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            if name in self.LAZY and name not in self.commands:
                placeholder = click.Command(name, help=self.LAZY[name][2])
                rows.append((name, placeholder.get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dsn",
    envvar="PGQ_DSN",
    help="PostgreSQL server to use (or PGQ_DSN). Default: the embedded server under PGQ_HOME.",
)
@click.option(
    "--schema",
    envvar="PGQ_SCHEMA",
    default=None,
    help="Schema of the queue (or PGQ_SCHEMA; default pgq).",
)
@click.option(
    "--statement-timeout",
    envvar="PGQ_STATEMENT_TIMEOUT",
    callback=at_most(STATEMENT_TIMEOUT_MAX),
    help="Longest any one statement may run, e.g. 30s; 0 for none (or PGQ_STATEMENT_TIMEOUT). "
    "Default: the role's own, else 30s.",
)
@click.option(
    "--pooled",
    is_flag=True,
    envvar="PGQ_POOLED",
    help="The DSN goes through a pooler in transaction mode (PgBouncer), or PGQ_POOLED=1: no "
    "prepared statements, no session settings, LISTEN only on --listen-dsn.",
)
@click.option(
    "--listen-dsn",
    envvar="PGQ_LISTEN_DSN",
    help="A direct connection (not pooled) for LISTEN, or PGQ_LISTEN_DSN. Pooled without one, "
    "workers and the dashboard poll alone.",
)
@click.option(
    "--read-dsn",
    envvar="PGQ_READ_DSN",
    help="A standby to read from (or PGQ_READ_DSN): stats, jobs, show, errors, latency, health, "
    "metrics and the dashboard's polls; writes still go to --dsn.",
)
@click.version_option(package_name="pgq-fence")
@click.pass_context
def main(
    ctx: click.Context,
    dsn: str | None,
    schema: str | None,
    statement_timeout: timedelta | None,
    pooled: bool,
    listen_dsn: str | None,
    read_dsn: str | None,
) -> None:
    """A job queue in one PostgreSQL table, with leases, fencing tokens and a dashboard."""
    # pgq_core reads both from the environment, and the processes pgq starts inherit them
    if pooled:
        os.environ["PGQ_POOLED"] = "1"
    if listen_dsn:
        check_dsn(listen_dsn)
        os.environ["PGQ_LISTEN_DSN"] = listen_dsn
    if read_dsn:
        check_dsn(read_dsn)
    ctx.obj = Settings(dsn, schema, statement_timeout, read_dsn or None)
