-- pgq schema, version 7: the jobs trigger does only the work a statement needs.
-- Same effects as version 5's (NOTIFY per the `notify` setting; queue_counts for rows entering
-- or leaving `done`), but each part first asks its transition table whether it has anything
-- to do, so an enqueue pays for neither the done counter nor, when no row is due, the setting
-- lookup: measured on one connection, the trigger cost an enqueue about 70 us, now about 6
-- (benchmarks/README.md, "Many producers").
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
  -- nested, not AND-ed: a DELETE's trigger has no new_rows to name
  IF TG_OP <> 'DELETE' THEN
    IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'ready' AND run_at <= now()) THEN
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
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'done') THEN
      INSERT INTO {schema}.queue_counts AS c (queue, shard, done, completed)
        SELECT queue, pg_backend_pid() % 64, count(*), count(*)
          FROM new_rows WHERE status = 'done' GROUP BY queue
        ON CONFLICT (queue, shard) DO UPDATE
          SET done = c.done + excluded.done, completed = c.completed + excluded.completed;
    END IF;
  ELSIF TG_OP = 'UPDATE' THEN
    IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'done')
       OR EXISTS (SELECT 1 FROM old_rows WHERE status = 'done') THEN
      INSERT INTO {schema}.queue_counts AS c (queue, shard, done, completed)
        SELECT queue, pg_backend_pid() % 64, sum(d), greatest(sum(d), 0)
          FROM (SELECT queue, 1 AS d FROM new_rows WHERE status = 'done'
                UNION ALL
                SELECT queue, -1 FROM old_rows WHERE status = 'done') x
         GROUP BY queue HAVING sum(d) <> 0
        ON CONFLICT (queue, shard) DO UPDATE
          SET done = c.done + excluded.done, completed = c.completed + excluded.completed;
    END IF;
  ELSIF EXISTS (SELECT 1 FROM old_rows WHERE status = 'done') THEN
    INSERT INTO {schema}.queue_counts AS c (queue, shard, done, completed)
      SELECT queue, pg_backend_pid() % 64, -count(*), 0
        FROM old_rows WHERE status = 'done' GROUP BY queue
      ON CONFLICT (queue, shard) DO UPDATE SET done = c.done + excluded.done;
  END IF;
  RETURN NULL;
END
$fn$;
