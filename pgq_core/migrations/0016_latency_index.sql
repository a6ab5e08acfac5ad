-- pgq schema, version 16: latency percentiles per queue from the jobs table alone.
-- `latency` (queries.sql) reads, per queue, the done jobs finished in the last hour (or the
-- window asked for), newest first, at most a bounded number of them: wait (claimed_at -
-- run_at, due to claimed) and run time (finished_at - claimed_at). Keyed by (queue,
-- finished_at) and carrying claimed_at and run_at, this index answers it with an index-only
-- scan backward from now, one range per queue, never reading a heap page the visibility map
-- marks all-visible (jobs_done_idx is keyed by finished_at alone, for prune: it would read
-- every queue's window and each row's heap page).
-- Done jobs only: a dead job's finished_at is when it was given up (a reaped lease, a kill),
-- not when a handler returned, so it is no run time.
-- The price: a completion already writes a new row version (its status changes), and now one
-- more index entry. Created in the migration's transaction, so on a large jobs table it holds
-- writes to jobs while it builds; to avoid that, build it beforehand with
--   CREATE INDEX CONCURRENTLY jobs_latency_idx ON <schema>.jobs (queue, finished_at)
--     INCLUDE (claimed_at, run_at) WHERE status = 'done';
-- and the migration finds it there (IF NOT EXISTS) and builds nothing.
CREATE INDEX IF NOT EXISTS jobs_latency_idx ON {schema}.jobs (queue, finished_at)
  INCLUDE (claimed_at, run_at) WHERE status = 'done';
