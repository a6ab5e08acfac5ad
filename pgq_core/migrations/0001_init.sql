-- pgq schema, version 1.
-- {schema} is replaced by the quoted schema identifier (psycopg.sql); nothing else is templated.
--
-- `jobs` keeps the plain-SQL baseline's columns, names, types, defaults and status values exactly, so an
-- operator can follow that baseline's SQL in psql. The extra columns are:
--   queued_at     when the job was enqueued
--   worker        who holds (or last held) the lease
--   claimed_at    when the current lease was taken
--   lease_length  the lease length the holder asked for (heartbeats extend by this much)
--   finished_at   when the job reached done or dead

CREATE TABLE {schema}.jobs (
  id           bigserial   PRIMARY KEY,
  queue        text        NOT NULL,
  payload      jsonb       NOT NULL,
  status       text        NOT NULL DEFAULT 'ready', -- ready | running | done | dead
  run_at       timestamptz NOT NULL DEFAULT now(),
  attempts     int         NOT NULL DEFAULT 0,
  max_attempts int         NOT NULL DEFAULT 5,
  lease_until  timestamptz,
  fence        bigint      NOT NULL DEFAULT 0,
  last_error   text,
  queued_at    timestamptz NOT NULL DEFAULT now(),
  worker       text,
  claimed_at   timestamptz,
  lease_length interval,
  finished_at  timestamptz,
  CONSTRAINT jobs_status_check CHECK (status IN ('ready', 'running', 'done', 'dead')),
  CONSTRAINT jobs_max_attempts_check CHECK (max_attempts >= 1)
);

-- The baseline's two partial indexes: claiming, and the lease check.
CREATE INDEX jobs_ready_idx ON {schema}.jobs (queue, run_at) WHERE status = 'ready';
CREATE INDEX jobs_lease_idx ON {schema}.jobs (lease_until) WHERE status = 'running';
-- Stats count dead jobs per queue, and operators list them newest first, without touching
-- done rows.
CREATE INDEX jobs_dead_idx ON {schema}.jobs (queue, id) WHERE status = 'dead';
-- Prune finds old done jobs without a scan.
CREATE INDEX jobs_done_idx ON {schema}.jobs (finished_at) WHERE status = 'done';

-- Fence history: one row per transition of a job, written by the statement that makes it.
-- event: enqueued | claimed | completed | failed | reaped | dead | requeued | killed | released | stale
CREATE TABLE {schema}.job_events (
  id       bigserial   PRIMARY KEY,
  job_id   bigint      NOT NULL,
  at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  event    text        NOT NULL,
  fence    bigint      NOT NULL,
  worker   text,
  detail   text
);
CREATE INDEX job_events_job_idx ON {schema}.job_events (job_id, id);

-- Done jobs per queue, kept by trigger so stats never count done rows. Sharded by backend (64
-- shards) so concurrent completions rarely queue on one counter row; `completed` only ever
-- grows (prune lowers `done`, not `completed`), so a reader can derive throughput from it.
CREATE TABLE {schema}.queue_counts (
  queue     text   NOT NULL,
  shard     int    NOT NULL,
  done      bigint NOT NULL DEFAULT 0,
  completed bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, shard)
);

-- Keeps queue_counts exact whatever statement moves a job into or out of 'done' (pgq's own or
-- an operator's plain SQL), and wakes listeners when a statement leaves jobs ready now. The
-- payload of a notification is the queue name; a notification is only a hint (an UPDATE that
-- touches ready rows without changing them may send one more). No joins: a done count per
-- queue is the done rows after the statement minus those before it.
CREATE FUNCTION {schema}.jobs_after_change() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NOT EXISTS (SELECT 1 FROM new_rows WHERE status <> 'running')
       AND NOT EXISTS (SELECT 1 FROM old_rows WHERE status = 'done') THEN
      RETURN NULL;  -- claims and heartbeats: nothing to count, nobody to wake
    END IF;
  END IF;
  IF TG_OP <> 'DELETE' THEN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', q.queue)
      FROM (SELECT DISTINCT queue FROM new_rows
             WHERE status = 'ready' AND run_at <= now()) q;
  END IF;
  IF TG_OP = 'INSERT' THEN
    INSERT INTO {schema}.queue_counts AS c (queue, shard, done, completed)
      SELECT queue, pg_backend_pid() % 64, count(*), count(*)
        FROM new_rows WHERE status = 'done' GROUP BY queue
      ON CONFLICT (queue, shard) DO UPDATE
        SET done = c.done + excluded.done, completed = c.completed + excluded.completed;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO {schema}.queue_counts AS c (queue, shard, done, completed)
      SELECT queue, pg_backend_pid() % 64, sum(d), greatest(sum(d), 0)
        FROM (SELECT queue, 1 AS d FROM new_rows WHERE status = 'done'
              UNION ALL
              SELECT queue, -1 FROM old_rows WHERE status = 'done') x
       GROUP BY queue HAVING sum(d) <> 0
      ON CONFLICT (queue, shard) DO UPDATE
        SET done = c.done + excluded.done, completed = c.completed + excluded.completed;
  ELSE
    INSERT INTO {schema}.queue_counts AS c (queue, shard, done, completed)
      SELECT queue, pg_backend_pid() % 64, -count(*), 0
        FROM old_rows WHERE status = 'done' GROUP BY queue
      ON CONFLICT (queue, shard) DO UPDATE SET done = c.done + excluded.done;
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER jobs_after_insert AFTER INSERT ON {schema}.jobs
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_after_change();
CREATE TRIGGER jobs_after_update AFTER UPDATE ON {schema}.jobs
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_after_change();
CREATE TRIGGER jobs_after_delete AFTER DELETE ON {schema}.jobs
  REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_after_change();
