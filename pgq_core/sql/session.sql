-- The session's own statements, by name: the bounds an operator's session or a pooled
-- transaction sets on itself, which server process it reached (a pooler tells itself apart by
-- that), the schema's version and the database's clock. None reads or writes a job.
-- {schema} is the quoted schema identifier; %(name)s are bound parameters.

-- name: session_limits
-- Bound every statement (and lock wait) of an operator's session. A limit the role, database
-- or server already sets is kept unless `force` (the operator asked for one explicitly).
SELECT pg_catalog.set_config('statement_timeout',
                  CASE WHEN %(force)s OR pg_catalog.current_setting('statement_timeout') = '0'
                       THEN %(statement_timeout)s
                       ELSE pg_catalog.current_setting('statement_timeout') END,
                  false),
       pg_catalog.set_config('lock_timeout',
                  CASE WHEN pg_catalog.current_setting('lock_timeout') = '0'
                       THEN %(lock_timeout)s ELSE pg_catalog.current_setting('lock_timeout') END,
                  false);

-- name: session_settings
-- What pgq's own sessions need whatever the role or database sets (on a direct connection; a
-- pooled one begins each transaction READ COMMITTED instead): read committed, so a claim
-- skips or re-reads a row another session changed instead of failing with 40001 (repeatable
-- read, serializable); dates and intervals in the forms pgq reads; and no idle-session
-- timeout (PostgreSQL 14+) ending a worker's connection between its statements.
SELECT pg_catalog.set_config('default_transaction_isolation', 'read committed', false),
       pg_catalog.set_config('DateStyle', 'ISO, MDY', false),
       pg_catalog.set_config('IntervalStyle', 'postgres', false),
       CASE WHEN pg_catalog.current_setting('idle_session_timeout', true) IS NOT NULL
            THEN pg_catalog.set_config('idle_session_timeout', '0', false) END;

-- name: local_limits
-- Under a pooler in transaction mode (PGQ_POOLED): bound the rest of this transaction alone,
-- as the worker's session settings do on a direct connection (a session setting would stay on
-- a server session the pooler hands to other clients). Timeouts in milliseconds.
SELECT pg_catalog.set_config('statement_timeout', %(statement_timeout)s, true),
       pg_catalog.set_config('lock_timeout', %(lock_timeout)s, true);

-- name: backend_pid
-- The server process this statement runs in. A pooler hands each client a cancel key of its
-- own, so a process id that differs from the one the connection announced means a pooler.
SELECT pg_catalog.pg_backend_pid() AS pid;

-- name: schema_version
-- The newest migration applied to the schema (a worker refuses to run on an older one), and
-- the database's encoding (a worker refuses SQL_ASCII, as `pgq migrate` does).
SELECT coalesce(pg_catalog.max(version), 0), pg_catalog.current_setting('server_encoding')
  FROM {schema}.schema_version;

-- name: server_role
-- The server this session reached: its address (NULL over a Unix socket), whether it is a
-- standby (in recovery), how far it is behind its primary, and a primary's WAL timeline.
-- Lag: 0 while replay has caught up with what the standby received, else the age of the last
-- transaction replayed (it grows while the primary is gone); NULL on a primary. The timeline
-- is the current WAL file's (a promotion changes it at once); NULL on a standby, where
-- pg_walfile_name raises. Every function here is executable by any role.
SELECT pg_catalog.host(pg_catalog.inet_server_addr()) AS host,
       pg_catalog.inet_server_port() AS port,
       pg_catalog.pg_is_in_recovery() AS standby,
       CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN NULL
            WHEN pg_catalog.pg_last_wal_receive_lsn() IS NOT NULL
             AND pg_catalog.pg_last_wal_receive_lsn() <= pg_catalog.pg_last_wal_replay_lsn()
              THEN 0::float8
            ELSE greatest(0, extract(epoch FROM
                   pg_catalog.now() - pg_catalog.pg_last_xact_replay_timestamp()))::float8
       END AS lag_seconds,
       CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL
            ELSE CAST(CAST(pg_catalog.textcat('x', pg_catalog.substr(
                   pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))
                   AS bit(32)) AS bigint)
       END AS timeline;

-- name: read_only_session
-- A reader's session (--read-dsn) writes nothing: every transaction starts read-only.
SELECT pg_catalog.set_config('default_transaction_read_only', 'on', false);

-- name: drop_schema
-- A private test schema (`pgq_core.testing.private_schema`) and everything in it, once its
-- test is over.
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- name: database_clock
-- The database's time now (not the transaction's): a worker's scheduler computes slots from it.
SELECT clock_timestamp();

-- name: open_transaction
-- Reads nothing: run on a caller's connection not in autocommit and idle, it makes psycopg
-- begin the caller's transaction, so the transaction block the queue opens next is a savepoint
-- in it (undone alone on a failure), not a transaction psycopg would begin and commit itself.
SELECT 1;
