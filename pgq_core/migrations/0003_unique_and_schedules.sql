-- pgq schema, version 3: unique jobs and periodic jobs (schedules).
-- Independent of version 2: `migrate` applies every version not yet recorded, in order.
--
-- unique_key: while a job with a key is ready (due or scheduled) or running, no other job with
-- that key can exist; done and dead jobs do not hold their key. The `enqueue` statement uses
-- this index as its ON CONFLICT arbiter, so two producers racing with one key make one job.
-- A new nullable column without a default rewrites nothing; jobs without a key are not in the
-- index.

ALTER TABLE {schema}.jobs ADD COLUMN unique_key text;

CREATE UNIQUE INDEX jobs_unique_key_idx ON {schema}.jobs (unique_key)
  WHERE unique_key IS NOT NULL AND status IN ('ready', 'running');

-- One row per periodic job. Every worker enqueues due slots (`enqueue_due_slot`): the job of a
-- slot is inserted by the same statement that advances `last_slot` past it, so each slot is
-- enqueued once whatever the number of workers, even after its job finished. Cron times are
-- UTC.
CREATE TABLE {schema}.schedules (
  name         text        PRIMARY KEY,
  queue        text        NOT NULL,
  cron         text        NOT NULL,
  payload      jsonb       NOT NULL DEFAULT jsonb_build_object(),
  max_attempts int         NOT NULL DEFAULT 5,
  created_at   timestamptz NOT NULL DEFAULT now(),
  last_slot    timestamptz,
  CONSTRAINT schedules_max_attempts_check CHECK (max_attempts >= 1)
);
