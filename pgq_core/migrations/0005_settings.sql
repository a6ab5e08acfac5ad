-- pgq schema, version 5: settings, and when the jobs trigger sends NOTIFY.
-- `settings` holds one row per setting (name, value). `notify` (default 'always') says when
-- the jobs trigger wakes listeners:
--   always  once per queue per statement that leaves jobs ready now (as before)
--   edge    only when the queue had no other due ready job before the statement (its own
--           rows excluded through the transition table): a queue with work waiting stays
--           silent, so many producers stop taking the commit-time notify lock for nothing
--   off     never: workers find work by polling
-- The trigger reads the row on every statement, so a change applies at once. The function is
-- version 1's with only the NOTIFY part changed.
CREATE TABLE {schema}.settings (
  name  text PRIMARY KEY,
  value text NOT NULL,
  CONSTRAINT settings_notify_check CHECK (name <> 'notify' OR value IN ('always', 'edge', 'off'))
);
INSERT INTO {schema}.settings (name, value) VALUES ('notify', 'always');

CREATE OR REPLACE FUNCTION {schema}.jobs_after_change() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  mode text;
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NOT EXISTS (SELECT 1 FROM new_rows WHERE status <> 'running')
       AND NOT EXISTS (SELECT 1 FROM old_rows WHERE status = 'done') THEN
      RETURN NULL;  -- claims and heartbeats: nothing to count, nobody to wake
    END IF;
  END IF;
  IF TG_OP <> 'DELETE' THEN
    SELECT value INTO mode FROM {schema}.settings WHERE name = 'notify';
    IF coalesce(mode, 'always') = 'always' THEN
      PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', q.queue)
        FROM (SELECT DISTINCT queue FROM new_rows
               WHERE status = 'ready' AND run_at <= now()) q;
    ELSIF mode = 'edge' THEN
      -- only queues that had no due ready job before this statement: the statement's own
      -- rows (new_rows) do not count, so a burst onto a queue with work waiting is silent
      PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', q.queue)
        FROM (SELECT DISTINCT queue FROM new_rows
               WHERE status = 'ready' AND run_at <= now()) q
       WHERE NOT EXISTS (
         SELECT 1 FROM {schema}.jobs j
          WHERE j.queue = q.queue AND j.status = 'ready' AND j.run_at <= now()
            AND j.id NOT IN (SELECT id FROM new_rows));
    END IF;
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
