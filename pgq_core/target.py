"""Where the queue is, found one way by every entry point: the CLI, `Queue.connect()`,
`AsyncQueue.connect()`, `Tasks` and `sqlalchemy_engine()`.

The server is `dsn`, else `PGQ_DSN`, else the embedded PostgreSQL under `PGQ_HOME` (started if
needed); the schema is `schema`, else `PGQ_SCHEMA`, else `pgq`. On the embedded server pgq
migrates the schema itself, since nobody else administers that server; a server you name is
migrated by `pgq migrate` (or `migrate()`), once and after upgrades.
"""

from __future__ import annotations

import psycopg

from .config import Target, connect_options, resolve
from .defaults import DEFAULT_LOCK_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT
from .migrate import migrate
from .ops import session_limits
from .queries import statement


def find_target(dsn: str | None = None, schema: str | None = None) -> Target:
    """The database and schema every `pgq` command would use: `dsn`, else PGQ_DSN, else the
    embedded server (started if needed, its schema migrated); `schema`, else PGQ_SCHEMA,
    else pgq."""
    target = resolve(dsn, schema)
    if target.embedded:
        limits = session_limits(DEFAULT_STATEMENT_TIMEOUT, DEFAULT_LOCK_TIMEOUT, force=False)
        with psycopg.connect(
            target.dsn, autocommit=True, **connect_options(target.dsn)
        ) as conn:
            conn.execute(statement(limits.name, target.schema), limits.params)
            migrate(conn, target.schema)
    return target
