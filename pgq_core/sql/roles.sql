-- pgq's roles (`pgq roles`, docs/guides/roles.md): four NOLOGIN group roles per schema, each
-- granted exactly what the statements it runs need, column by column, and nothing more.
-- A role's grants are its `roles_<kind>` sections applied in turn after `roles_revoke` (so
-- applying them again, as `pgq migrate` does for the roles that exist, leaves exactly these):
-- producer: roles_base, roles_producer
-- worker:   roles_base, roles_producer, roles_worker (handlers enqueue; schedules enqueue)
-- observer: roles_base, roles_observer
-- operator: roles_base, roles_producer, roles_observer, roles_operator
-- Table-level grants are never used: a column added by a later migration is nobody's until it
-- is named here (tests/test_roles.py fails until every column is placed or left out on
-- purpose). The schema's bookkeeping (queue counts, a parent's children, a limited queue's
-- allowance, history partitions) runs as the schema's owner (migration 28).
-- {schema} is the quoted schema identifier and {role} the quoted role; no parameters.

-- name: role_exists
SELECT pg_catalog.count(*) > 0 FROM pg_catalog.pg_roles WHERE rolname = %(role)s;

-- name: roles_of_schema
-- The roles `pgq roles` made for a schema, by the comment it left on each: (role, kind).
SELECT r.rolname, pg_catalog.substring(d.description, '^pgq ([a-z]+) role of schema ')
  FROM pg_catalog.pg_roles r
  JOIN pg_catalog.pg_shdescription d
    ON d.objoid = r.oid AND d.classoid = 'pg_catalog.pg_authid'::pg_catalog.regclass
 WHERE d.description ~ '^pgq (producer|worker|operator|observer) role of schema '
   AND pg_catalog.substring(d.description, '^pgq [a-z]+ role of schema (.*)$')
       = %(schema)s::text
 ORDER BY 1;

-- name: role_create
CREATE ROLE {role} NOLOGIN;

-- name: role_comment
COMMENT ON ROLE {role} IS {comment};

-- name: role_grant
GRANT {role} TO {member};

-- name: roles_revoke
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM {role};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {schema} FROM {role};
REVOKE ALL ON SCHEMA {schema} FROM {role};

-- name: roles_base
-- Every role: the schema, its version (each session checks it) and the settings it reads.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT (version, name, applied_at) ON {schema}.schema_version TO {role};
GRANT SELECT (name, value) ON {schema}.settings TO {role};
GRANT EXECUTE ON FUNCTION {schema}.fence_floor() TO {role};

-- name: roles_producer
-- Enqueue in every form but COPY (its ids are given, and a role that may write ids can take
-- the ones the sequence will hand out next): ready or waiting (dead for a dead parent),
-- never a lease, fence, attempts or worker (migration 28 checks the status). Reads no
-- payload: RETURNING and the unique keys' lookups need these columns only.
GRANT SELECT (id, queue, status, run_at, unique_key, fence, last_error)
  ON {schema}.jobs TO {role};
GRANT INSERT (queue, payload, run_at, max_attempts, priority, backoff_base, backoff_cap, trace,
              unique_key, status, parents_left, last_error, finished_at)
  ON {schema}.jobs TO {role};
GRANT USAGE ON SEQUENCE {schema}.jobs_id_seq, {schema}.job_events_id_seq TO {role};
GRANT INSERT (child, parent) ON {schema}.job_deps TO {role};
GRANT INSERT (job_id, event, fence, detail) ON {schema}.job_events TO {role};
GRANT EXECUTE ON FUNCTION {schema}.workflow_parents(bigint[]) TO {role};

-- name: roles_worker
-- Claim, heartbeat, settle, hand back, reap, run schedules, keep the worker registry.
GRANT SELECT (id, queue, payload, status, run_at, attempts, max_attempts, lease_until, fence,
              last_error, queued_at, worker, claimed_at, lease_length, finished_at,
              error_group, unique_key, priority, result, backoff_base, backoff_cap,
              parents_left, has_children, progress_done, progress_total, progress_note,
              progress_at, trace, ctid)
  ON {schema}.jobs TO {role};
GRANT UPDATE (status, run_at, attempts, lease_until, fence, last_error, worker, claimed_at,
              lease_length, finished_at, result, progress_done, progress_total, progress_note,
              progress_at)
  ON {schema}.jobs TO {role};
GRANT INSERT (job_id, event, fence, worker, detail, claimed_at, claimed_by, traceback)
  ON {schema}.job_events TO {role};
GRANT SELECT (queue, paused_at, max_running) ON {schema}.queue_settings TO {role};
GRANT SELECT (name, queue, cron, payload, max_attempts, created_at, last_slot, opens_at)
  ON {schema}.schedules TO {role};
GRANT UPDATE (last_slot, opens_at) ON {schema}.schedules TO {role};
GRANT SELECT (id, host, pid, queues, concurrency, version, started_at, beat_at, expires_at,
              running, done, failed)
  ON {schema}.workers TO {role};
GRANT INSERT (id, host, pid, queues, concurrency, version, started_at, beat_at, expires_at,
              running, done, failed)
  ON {schema}.workers TO {role};
GRANT UPDATE (host, pid, queues, concurrency, version, beat_at, expires_at, running, done,
              failed)
  ON {schema}.workers TO {role};
GRANT DELETE ON {schema}.workers TO {role};
GRANT EXECUTE ON FUNCTION {schema}.claim_allowance(text, int, bigint[]),
  {schema}.job_events_add_partitions(date, date, interval) TO {role};

-- name: roles_observer
-- Read everything but what a job carries: no payload or result. A schedule's payload is the
-- operators' configuration, not a producer's data: readable (`pgq schedule list` shows it).
GRANT SELECT (id, queue, status, run_at, attempts, max_attempts, lease_until, fence,
              last_error, queued_at, worker, claimed_at, lease_length, finished_at,
              error_group, unique_key, priority, backoff_base, backoff_cap, parents_left,
              has_children, progress_done, progress_total, progress_note, progress_at, trace)
  ON {schema}.jobs TO {role};
GRANT SELECT (id, job_id, at, event, fence, worker, detail, claimed_at, claimed_by, traceback)
  ON {schema}.job_events TO {role};
GRANT SELECT (child, parent) ON {schema}.job_deps TO {role};
GRANT SELECT (queue, shard, done, completed) ON {schema}.queue_counts TO {role};
GRANT SELECT (queue, paused_at, paused_by, pause_reason, max_running)
  ON {schema}.queue_settings TO {role};
GRANT SELECT (name, queue, cron, payload, max_attempts, created_at, last_slot)
  ON {schema}.schedules TO {role};
GRANT SELECT ON {schema}.job_history TO {role};
GRANT SELECT (id, host, pid, queues, concurrency, version, started_at, beat_at, expires_at,
              running, done, failed)
  ON {schema}.workers TO {role};
GRANT EXECUTE ON FUNCTION {schema}.job_events_partitions() TO {role};

-- name: roles_operator
-- Requeue, kill, delete, pause and limits, schedules, settings, prune; reads payloads.
GRANT SELECT (payload, result) ON {schema}.jobs TO {role};
GRANT UPDATE (status, run_at, attempts, lease_until, fence, last_error, worker, claimed_at,
              lease_length, finished_at, parents_left)
  ON {schema}.jobs TO {role};
GRANT DELETE ON {schema}.jobs TO {role};
GRANT INSERT (job_id, at, event, fence, worker, detail) ON {schema}.job_events TO {role};
GRANT DELETE ON {schema}.job_events TO {role};
GRANT SELECT (id, job_id, at), DELETE ON {schema}.job_events_default TO {role};
GRANT INSERT (queue, paused_at, paused_by, pause_reason, max_running)
  ON {schema}.queue_settings TO {role};
GRANT UPDATE (paused_at, paused_by, pause_reason, max_running)
  ON {schema}.queue_settings TO {role};
GRANT INSERT (name, queue, cron, payload, max_attempts) ON {schema}.schedules TO {role};
GRANT UPDATE (queue, cron, payload, max_attempts, last_slot) ON {schema}.schedules TO {role};
GRANT DELETE ON {schema}.schedules TO {role};
GRANT INSERT (name, value), UPDATE (value) ON {schema}.settings TO {role};
GRANT DELETE ON {schema}.workers TO {role};
GRANT EXECUTE ON FUNCTION {schema}.job_events_add_partitions(date, date, interval),
  {schema}.job_events_drop_partition(text, interval, interval, int) TO {role};
