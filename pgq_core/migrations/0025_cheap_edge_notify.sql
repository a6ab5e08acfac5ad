-- pgq schema, version 25: the jobs trigger's `edge` probe reads at most a few index entries.
-- Same effects as version 7's. `edge` notifies a queue when the statement's own due ready rows
-- are all it has due: version 7 asked for a due ready job whose id was not among the
-- statement's rows (a hashed subplan over the transition table, the queue a join filter: the
-- planner walked jobs_ready_priority_idx by run_at alone), about 100 us of a one-job enqueue's
-- 300. Now, per queue, it counts the due ready jobs visible to it, at most n + 1 of them (n: the
-- statement's own, which an AFTER trigger sees), through jobs_ready_idx by (queue, run_at): a
-- one-job enqueue onto a busy queue reads two entries. Any more than n means another was due.
-- And `always` leaves the NOTIFY to the producer when a statement set pgq.notify_after_commit
-- for its transaction (`enqueue_one_then_notify`, run alone in its own transaction): the
-- producer sends it once that transaction has committed, in a transaction of its own that
-- waits for no WAL flush. A notifying commit holds PostgreSQL's instance-wide notify lock
-- through its WAL flush, so 16 producers committing one job each queued on it, one flush at a
-- time; a NOTIFY alone holds it for microseconds.
CREATE OR REPLACE FUNCTION {schema}.jobs_after_change() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
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
        IF current_setting('pgq.notify_after_commit', true) IS DISTINCT FROM 'on' THEN
          PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', q.queue)
            FROM (SELECT DISTINCT queue FROM new_rows
                   WHERE status = 'ready' AND run_at <= now()) q;
        END IF;
      ELSIF mode = 'edge' THEN
        -- only queues that had no due ready job before this statement: the statement's own
        -- rows (n per queue) are all the queue has due, so a burst onto a queue with work
        -- waiting is silent
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', q.queue)
          FROM (SELECT queue, count(*) AS n FROM new_rows
                 WHERE status = 'ready' AND run_at <= now() GROUP BY queue) q
         WHERE (SELECT count(*) FROM (
                  SELECT 1 FROM {schema}.jobs j
                   WHERE j.queue = q.queue AND j.status = 'ready' AND j.run_at <= now()
                   LIMIT q.n + 1) due) <= q.n;
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
