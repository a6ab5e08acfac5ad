-- pgq schema, version 4: priorities and results.
--   priority  higher is claimed first among due jobs of a queue (default 0); ties go to the
--             oldest run_at, as before
--   result    the JSON a handler returned, stored by the statement that completed the job
-- The claim walks jobs_ready_priority_idx in (priority DESC, run_at) order, so it never sorts
-- the ready set; the baseline's jobs_ready_idx stays for stats and plain-SQL readers.
ALTER TABLE {schema}.jobs ADD COLUMN priority int NOT NULL DEFAULT 0;
ALTER TABLE {schema}.jobs ADD COLUMN result jsonb;
CREATE INDEX jobs_ready_priority_idx ON {schema}.jobs (queue, priority DESC, run_at)
  WHERE status = 'ready';
