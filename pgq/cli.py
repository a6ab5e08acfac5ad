"""`pgq`: the command line over pgq_core (queue operations) and pgq_tui (the dashboard)."""

from __future__ import annotations

import click
import psycopg
from rich.console import Console
from rich.table import Table

from pgq_core import migrate as run_migrate

from .context import PgqGroup, Settings, echo_json, settings


@click.group(cls=PgqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--dsn",
    envvar="PGQ_DSN",
    help="PostgreSQL server to use (or PGQ_DSN). Default: the embedded server under PGQ_HOME.",
)
@click.option(
    "--schema", envvar="PGQ_SCHEMA", default=None, help="Schema of the queue (or PGQ_SCHEMA; default pgq)."
)
@click.version_option(package_name="pgq")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, schema: str | None) -> None:
    """A job queue in one PostgreSQL table, with leases, fencing tokens and a dashboard."""
    ctx.obj = Settings(dsn, schema)


@main.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the queue's schema (idempotent; safe from many processes at once)."""
    target = settings(ctx).target()
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        applied = run_migrate(conn, target.schema)
    if applied:
        click.echo(f"schema {target.schema}: applied version(s) {', '.join(map(str, applied))}")
    else:
        click.echo(f"schema {target.schema}: up to date")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Ready, scheduled, running, expiring, dead and done jobs per queue."""
    with settings(ctx).queue() as q:
        rows = q.stats()
    if as_json:
        echo_json([r.to_dict() for r in rows])
        return
    table = Table(title=f"pgq · {settings(ctx).target().display}")
    for col in ("queue", "ready", "scheduled", "running", "expiring", "dead", "done", "oldest due"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    for r in rows:
        oldest = "" if r.oldest_due_seconds is None else f"{r.oldest_due_seconds:.1f}s"
        table.add_row(
            r.queue, str(r.ready), str(r.scheduled), str(r.running), str(r.expiring),
            str(r.dead), str(r.done), oldest,
        )
    Console().print(table)
