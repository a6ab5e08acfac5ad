"""Database work per job (`pgq bench --same-resources --db-work`): what one drain cost the
server, read before and after it on a connection of the run's throwaway database.

- **statement time**: `pg_stat_statements.total_exec_time` of every statement run in that
  database (the worker's, the baseline's, PgQueuer's: claims, settlements, heartbeats, LISTEN),
  with its calls and the WAL its statements wrote (`wal_bytes`, PostgreSQL 13+). Filtered by
  database, so other sessions on a shared server do not count; the meter's own reads are left
  out by their text. Needs `shared_preload_libraries = 'pg_stat_statements'` on the server (the
  bench restarts its embedded server so) and the right to `CREATE EXTENSION` it; without, the
  figures are None and `statement_stats_missing` says why.
- **WAL**: `pg_current_wal_lsn()` before and after, so every byte of WAL written meanwhile,
  commit records included, by every session of the server (on a shared server other sessions'
  writes count too; `pg_stat_wal` is no narrower). Works on any server.

The readings bracket the drain alone: the jobs were enqueued before, the bench's tally runs
after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from .common import BOOKKEEPING_TIMEOUT, CONNECT_TIMEOUT

CREATE_STATEMENT_STATS = "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
#: WAL position and this database's statement totals, less the meter's own statements.
READ_WITH_STATEMENTS = """
SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal,
       coalesce(sum(s.calls), 0) AS calls,
       coalesce(sum(s.total_exec_time), 0) AS exec_ms,
       coalesce(sum(s.wal_bytes), 0) AS statement_wal
  FROM pg_stat_statements s
 WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND s.query NOT LIKE '%pg_stat_statements%'"""
READ_WAL = "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal"
#: Why statement time is missing when the server has not loaded the extension.
NOT_PRELOADED = (
    "statement time missing: pg_stat_statements is not in this server's "
    "shared_preload_libraries (the bench's own embedded server has it; a --dsn server needs "
    "it set and a restart)"
)


@dataclass(frozen=True)
class Reading:
    wal: int
    calls: int | None
    exec_ms: float | None
    statement_wal: int | None


class DbWork:
    """The meter: one autocommit connection to the run's database."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        self.conn.execute(BOOKKEEPING_TIMEOUT)
        self.statement_stats_missing: str | None = None
        try:
            self.conn.execute(CREATE_STATEMENT_STATS)
            self.conn.execute(READ_WITH_STATEMENTS)
        except psycopg.Error as exc:
            text = str(exc)
            self.statement_stats_missing = (
                NOT_PRELOADED
                if "shared_preload_libraries" in text
                else "statement time missing: " + " ".join(text.split())
            )

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> DbWork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self) -> Reading:
        query = READ_WAL if self.statement_stats_missing else READ_WITH_STATEMENTS
        cur = self.conn.cursor(row_factory=dict_row)
        row = cur.execute(query).fetchone()
        assert row is not None
        if self.statement_stats_missing:
            return Reading(int(row["wal"]), None, None, None)
        return Reading(
            int(row["wal"]), int(row["calls"]), float(row["exec_ms"]), int(row["statement_wal"])
        )

    def per_job(self, start: Reading, jobs: int) -> dict[str, Any]:
        """The figures of the work since `start`, per job."""
        end = self.read()

        def each(a: float | None, b: float | None, scale: float = 1.0) -> float | None:
            return None if a is None or b is None else (b - a) * scale / jobs

        return {
            "statement_us_per_job": each(start.exec_ms, end.exec_ms, 1000.0),
            "statements_per_job": each(start.calls, end.calls),
            "statement_wal_bytes_per_job": each(start.statement_wal, end.statement_wal),
            "wal_bytes_per_job": each(start.wal, end.wal),
        }
