"""`pgq roles`: pgq's NOLOGIN group roles for the schema (producer, worker, operator,
observer), created idempotently with exactly their column grants, and granted to logins.

Loaded only when run (see `LazyGroup.LAZY` in cli.py). The grants themselves are
pgq_core/sql/roles.sql's; `--print` shows the statements and changes nothing.
"""

from __future__ import annotations

import click

from pgq_core import roles
from pgq_core.text import printable

from .group import PgqGroup
from .session import settings

_PREFIX = click.option(
    "--prefix",
    default=None,
    help="Role names are PREFIX_producer, PREFIX_worker, ... (default: the schema's name).",
)
_PRINT = click.option(
    "--print", "show", is_flag=True, help="Print the SQL it would run and change nothing."
)


@click.group("roles", cls=PgqGroup)
def roles_group() -> None:
    """pgq's roles for this schema: producer, worker, operator and observer.

    Each is a NOLOGIN group role with column-level grants on the schema and nothing more;
    grant one to a login with `pgq roles grant KIND LOGIN`. `pgq migrate` applies the grants
    again to the roles that exist, so a new column is granted as documented.
    """


@roles_group.command("create")
@click.argument("kinds", nargs=-1, type=click.Choice(roles.KINDS))
@_PREFIX
@_PRINT
@click.pass_context
def create_command(
    ctx: click.Context, kinds: tuple[str, ...], prefix: str | None, show: bool
) -> None:
    """Create the roles (all four unless KINDS are named), or grant an existing one anew."""
    schema = settings(ctx).target().schema
    chosen = kinds or roles.KINDS
    if show:
        with settings(ctx).connect() as conn:
            for kind in chosen:
                role = roles.role_name(schema, kind, prefix)
                for step in roles.create_statements(schema, kind, role):
                    click.echo(f"{step.as_string(conn)};")
        return
    with settings(ctx).connect() as conn:
        done = roles.create(conn, schema, chosen, prefix)
    for kind, role, created in done:
        click.echo(f"{kind}: {role} {'created' if created else 'exists, grants applied again'}")


@roles_group.command("grant")
@click.argument("kind", type=click.Choice(roles.KINDS))
@click.argument("login")
@_PREFIX
@_PRINT
@click.pass_context
def grant_command(
    ctx: click.Context, kind: str, login: str, prefix: str | None, show: bool
) -> None:
    """Grant KIND's role to LOGIN (an existing role that logs in)."""
    schema = settings(ctx).target().schema
    with settings(ctx).connect() as conn:
        if show:
            role = roles.role_name(schema, kind, prefix)
            click.echo(f"{roles.grant_statement(schema, role, login).as_string(conn)};")
            return
        role = roles.grant(conn, schema, kind, login, prefix)
    click.echo(f"granted {role} to {login}")


@roles_group.command("list")
@click.pass_context
def list_command(ctx: click.Context) -> None:
    """The roles `pgq roles create` made for this schema, by kind."""
    schema = settings(ctx).target().schema
    with settings(ctx).connect() as conn:
        found = roles.of_schema(conn, schema)
    if not found:
        click.echo(f"no pgq roles for schema {schema}: run `pgq roles create`")
    for role, kind in found:
        click.echo(f"{kind}: {printable(role)}")
