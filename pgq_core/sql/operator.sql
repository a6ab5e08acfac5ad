-- The operator's statements, by name: requeue, kill, pause and limits, bulk actions by filter,
-- schedules, prune and the history's partitions, settings. Each acts on jobs no worker holds,
-- or moves the fence on (kill) so that the worker holding one loses it at its next write.
-- {schema} is the quoted schema identifier; %(name)s are bound parameters; {where} is a
-- filter built with psycopg.sql (pgq_core/filters.py), its values bound.

-- fragment: requeue_dead
-- The requeue of the dead jobs in a CTE `dead` (id, unique_key, superseded), after it: a job
-- whose unique key a ready or running job holds stays dead ('key_held'); of several sharing a
-- key only the newest goes back (`superseded`: a newer one a later batch of the same requeue
-- reaches). A job with a parent dead, or gone while the job still counted it (it never
-- succeeded), that is not requeued with it stays dead ('parent_dead' | 'parent_gone', naming
-- the lowest such parent): it would wait for ever. Ends with the CTE `history`; the rows
-- (`requeue_rows`) follow it.
-- A requeued job is ready, unless it depends on jobs (migration 18: `parents_left` > 0, as it
-- stays on a job that died waiting): then it waits again on its parents not done, counted
-- afresh (a dead parent included when it is requeued in the same statement: then both run in
-- order; a requeue leaves a job whose parent is dead, or gone before it was done, dead:
-- `orphaned`, migration 24).
orphaned AS (
  SELECT DISTINCT ON (x.child) x.child AS id, x.parent,
         CASE WHEN p.id IS NULL THEN 'parent_gone' ELSE 'parent_dead' END AS why
    FROM {schema}.job_deps x
    JOIN {schema}.jobs c ON c.id = x.child
    LEFT JOIN {schema}.jobs p ON p.id = x.parent
   WHERE x.child IN (SELECT id FROM dead)
     AND (p.status = 'dead' OR (p.id IS NULL AND c.parents_left > 0))
     AND x.parent NOT IN (SELECT id FROM dead)
   ORDER BY x.child, x.parent
), chosen AS (
  SELECT id FROM dead WHERE unique_key IS NULL AND id NOT IN (SELECT id FROM orphaned)
  UNION ALL
  (SELECT DISTINCT ON (unique_key) id FROM dead d
    WHERE unique_key IS NOT NULL AND NOT superseded AND id NOT IN (SELECT id FROM orphaned)
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs o
                       WHERE o.unique_key = d.unique_key AND o.status IN ('ready', 'running'))
    ORDER BY unique_key, id DESC)
), requeued AS (
  UPDATE {schema}.jobs j
     SET parents_left = CASE WHEN j.parents_left > 0 THEN coalesce(
           (SELECT count(*) FROM {schema}.job_deps d LEFT JOIN {schema}.jobs p ON p.id = d.parent
             WHERE d.child = j.id AND p.status IS DISTINCT FROM 'done'), 0) ELSE 0 END,
         status = CASE WHEN j.parents_left > 0 AND coalesce(
           (SELECT count(*) FROM {schema}.job_deps d LEFT JOIN {schema}.jobs p ON p.id = d.parent
             WHERE d.child = j.id AND p.status IS DISTINCT FROM 'done'), 0) > 0
           THEN 'waiting' ELSE 'ready' END,
         run_at = now(), attempts = 0, lease_until = NULL, finished_at = NULL
   WHERE id IN (SELECT id FROM chosen) AND status = 'dead'
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, 'requeued', fence, %(actor)s, %(detail)s::text FROM requeued
)

-- fragment: requeue_rows
-- Rows: ('requeued' | 'key_held' | 'parent_dead' | 'parent_gone', id, that parent or NULL).
SELECT 'requeued', id, NULL::bigint FROM requeued
UNION ALL
SELECT 'key_held', id, NULL FROM dead
 WHERE id NOT IN (SELECT id FROM chosen) AND id NOT IN (SELECT id FROM orphaned)
UNION ALL
SELECT why, id, parent FROM orphaned

-- fragment: kill_victims
-- `kill`'s body: the jobs of CTE `victims` (locked: id, was, fence, worker, claimed_at, detail)
-- to dead, last_error the `reason`, fence + 1 above the timeline's floor (CTE `killed`); a
-- running one's attempt gets its 'claimed' row, and each its 'killed' row naming the operator.
killed AS (
  UPDATE {schema}.jobs j
     SET status = 'dead', lease_until = NULL, finished_at = now(),
         fence = greatest(j.fence + 1, (SELECT {schema}.fence_floor()) + 1),
         last_error = %(reason)s
    FROM victims v
   WHERE j.id = v.id AND j.status IN ('waiting', 'ready', 'running')
  RETURNING j.id, j.fence, v.was, v.fence AS attempt, v.worker, v.claimed_at, v.detail
), history AS (
  INSERT INTO {schema}.job_events (job_id, at, event, fence, worker, detail)
  SELECT id, claimed_at, 'claimed', attempt, worker, NULL FROM killed WHERE was = 'running'
  UNION ALL
  SELECT id, clock_timestamp(), 'killed', fence, %(actor)s, detail FROM killed
)

-- name: requeue_ids
-- Operator: dead jobs back to ready with a fresh set of attempts. A dead job whose unique key a
-- ready or running job holds stays dead (reported 'key_held'), and of several dead jobs
-- sharing a key only the newest is requeued. Rows as `requeue_rows`.
WITH dead AS (
  SELECT id, unique_key, false AS superseded FROM {schema}.jobs
   WHERE id = ANY(%(ids)s::bigint[]) AND status = 'dead'
), {requeue_dead}
{requeue_rows}
ORDER BY 2;

-- name: kill
-- Operator: waiting, ready or running jobs to dead (a job's waiting dependents die with it:
-- migration 18's trigger). Final: an ancestor's requeue brings back only jobs that died of a
-- parent (migration 24), so only the job's own requeue brings it back. fence + 1, so a worker still running the job fails
-- its next write and gives the job up. A running job's attempt gets its 'claimed' row here
-- (the kill's own row names the operator and the next fence).
WITH victims AS (
  SELECT id, status AS was, fence, worker, claimed_at, %(reason)s::text AS detail
    FROM {schema}.jobs
   WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('waiting', 'ready', 'running')
     FOR UPDATE
), {kill_victims}
SELECT id FROM killed ORDER BY id;

-- name: pause
-- Operator: the queue claims nothing from now on (claims already running finish). Pausing a
-- paused queue records the new operator and reason.
INSERT INTO {schema}.queue_settings AS s (queue, paused_at, paused_by, pause_reason)
VALUES (%(queue)s, now(), %(actor)s, %(reason)s)
ON CONFLICT (queue) DO UPDATE
   SET paused_at = now(), paused_by = excluded.paused_by, pause_reason = excluded.pause_reason
RETURNING paused_at;

-- name: resume
-- Operator: the queue claims again. Wakes its workers with the queue's notification (sent at
-- commit, as the jobs trigger sends it). Row: when it had been paused (NULL: it was not).
WITH was AS (
  SELECT paused_at FROM {schema}.queue_settings WHERE queue = %(queue)s
), resumed AS (
  UPDATE {schema}.queue_settings
     SET paused_at = NULL, paused_by = NULL, pause_reason = NULL
   WHERE queue = %(queue)s
)
SELECT (SELECT paused_at FROM was),
       pg_catalog.pg_notify(%(channel)s::text, %(queue)s::text) IS NULL;

-- name: set_limit
-- Operator: at most `max_running` jobs of the queue run at once (NULL: no limit). Wakes the
-- queue's workers, since a higher limit lets them claim. Row: the limit before.
WITH was AS (
  SELECT max_running FROM {schema}.queue_settings WHERE queue = %(queue)s
), set AS (
  INSERT INTO {schema}.queue_settings AS s (queue, max_running)
  VALUES (%(queue)s, %(max_running)s)
  ON CONFLICT (queue) DO UPDATE SET max_running = excluded.max_running
)
SELECT (SELECT max_running FROM was),
       pg_catalog.pg_notify(%(channel)s::text, %(queue)s::text) IS NULL;

-- name: requeue_filtered
-- Operator: one batch of the dead jobs matching a filter (`pgq requeue --queue Q --dead` is the
-- filter queue=Q status=dead) back to ready with fresh attempts, as `requeue_ids` (the
-- `requeue_dead` fragment); the next batch starts after the last id looked at. Rows as
-- `requeue_rows`, and ('last', the highest id looked at, NULL: NULL when none was left).
WITH batch AS (
  SELECT j.id, j.unique_key FROM {schema}.jobs j
   WHERE j.status = 'dead' AND j.id > %(after)s AND {where}
   ORDER BY j.id
   LIMIT %(batch)s
   FOR UPDATE SKIP LOCKED
), dead AS (
  SELECT b.id, b.unique_key,
         b.unique_key IS NOT NULL AND EXISTS (
           SELECT FROM {schema}.jobs j
            WHERE j.unique_key = b.unique_key AND j.status = 'dead'
              AND j.id > (SELECT pg_catalog.max(id) FROM batch) AND {where}) AS superseded
    FROM batch b
), {requeue_dead}
SELECT 'last', (SELECT pg_catalog.max(id) FROM batch), NULL::bigint
UNION ALL
{requeue_rows}
ORDER BY 2;

-- name: kill_filtered
-- Operator: waiting, ready or running jobs matching a filter to dead, fence + 1 (a worker still running
-- one fails its next write), one batch; a running job's attempt gets its 'claimed' row as in
-- `kill`.
WITH victims AS (
  SELECT j.id, j.status AS was, j.fence, j.worker, j.claimed_at, %(detail)s::text AS detail
    FROM {schema}.jobs j
   WHERE j.status IN ('waiting', 'ready', 'running') AND j.id > %(after)s AND {where}
   ORDER BY j.id
   LIMIT %(batch)s
   FOR UPDATE SKIP LOCKED
), {kill_victims}
SELECT (SELECT pg_catalog.max(id) FROM victims), ARRAY(SELECT id FROM killed ORDER BY id);

-- name: delete_filtered
-- Operator: dead or done jobs matching a filter deleted with their history, one batch. As in
-- `prune`, the history is looked for from the batch's first enqueue to a day after its last
-- end (a dead job without finished_at: to the end of time).
WITH victims AS (
  SELECT j.id FROM {schema}.jobs j
   WHERE j.status IN ('dead', 'done') AND j.id > %(after)s AND {where}
   ORDER BY j.id
   LIMIT %(batch)s
   FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM {schema}.jobs j USING victims v
   WHERE j.id = v.id AND j.status IN ('dead', 'done')
  RETURNING j.id, least(j.queued_at, j.finished_at) AS began,
            greatest(j.queued_at, coalesce(j.finished_at, 'infinity')) AS ended
), history AS (
  DELETE FROM {schema}.job_events
   WHERE job_id IN (SELECT id FROM gone)
     AND at >= (SELECT pg_catalog.min(began) FROM gone)
     AND at < (SELECT pg_catalog.max(ended) + interval '1 day' FROM gone)
)
SELECT (SELECT pg_catalog.max(id) FROM victims), ARRAY(SELECT id FROM gone ORDER BY id);

-- name: add_schedule
-- A new periodic job; with `replace`, an existing one of that name is changed instead (its
-- last slot kept). No row: the name exists and `replace` was not given.
INSERT INTO {schema}.schedules AS s (name, queue, cron, payload, max_attempts)
VALUES (%(name)s::text, %(queue)s::text, %(cron)s::text, %(payload)s::jsonb,
        %(max_attempts)s::int)
ON CONFLICT (name) DO UPDATE
   SET queue = excluded.queue, cron = excluded.cron, payload = excluded.payload,
       max_attempts = excluded.max_attempts
 WHERE %(replace)s::boolean
RETURNING name;

-- name: remove_schedule
DELETE FROM {schema}.schedules WHERE name = %(name)s::text RETURNING name;

-- name: run_schedule
-- Enqueue a schedule's job now, outside its slots (no unique key, `last_slot` untouched).
WITH new_jobs AS (
  INSERT INTO {schema}.jobs (queue, payload, max_attempts)
  SELECT queue, payload, max_attempts FROM {schema}.schedules WHERE name = %(name)s::text
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, detail)
  SELECT id, 'enqueued', fence, 'schedule ' || %(name)s::text || ' run now' FROM new_jobs
)
SELECT id FROM new_jobs;

-- name: ensure_partitions
-- The daily partitions of job_events from today (UTC) to `ahead` days later, each created if
-- missing, never waiting on a lock past `lock_timeout`. Rows: (day, 'created' | 'exists' |
-- 'default holds rows' | 'overlaps' | 'locked'), or (NULL, 'busy') if another session is at it.
SELECT day, outcome FROM {schema}.job_events_add_partitions(
  (now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date + %(ahead)s::int,
  %(lock_timeout)s::interval);

-- name: prune
-- Delete up to `limit` done jobs finished before the cutoff, with their history. A job's
-- history lies between its enqueue and its end (the `at` of its last transition is at most a
-- statement's length after finished_at); the history is looked for from the batch's first
-- enqueue to a day after its last end, so only the daily partitions of those days (and the
-- default one, for days without their own) are read. A row later than that (a worker's stale
-- report a day after the job ended) goes with its day's partition. Rows before
-- `dropping_before` (the end of the partitions this prune drops next) are left to the drop.
-- The victims are deleted by primary key (`id = ANY(ARRAY(...))`): as `id IN (victims)` the
-- planner hashed them against a scan of the whole table, once per batch.
WITH victims AS (
  SELECT id FROM {schema}.jobs
   WHERE status = 'done' AND finished_at < now() - %(older_than)s::interval
   ORDER BY finished_at
   LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM {schema}.jobs WHERE id = ANY(ARRAY(SELECT id FROM victims))
  RETURNING id, least(queued_at, finished_at) AS began, greatest(queued_at, finished_at) AS ended
), history AS (
  DELETE FROM {schema}.job_events
   WHERE job_id IN (SELECT id FROM gone)
     AND at >= (SELECT greatest(pg_catalog.min(began), %(dropping_before)s::timestamptz) FROM gone)
     AND at < (SELECT pg_catalog.max(ended) + interval '1 day' FROM gone)
)
SELECT count(*) FROM gone;

-- name: event_partitions_before
-- The partitions of job_events that lie entirely before the cutoff (the default never does),
-- oldest first: what a prune drops.
SELECT name, from_at, to_at FROM {schema}.job_events_partitions()
 WHERE NOT is_default AND to_at <= now() - %(older_than)s::interval
 ORDER BY to_at;

-- name: drop_event_partition
-- Drop one partition of job_events entirely before the cutoff; the history of jobs still
-- present moves to the default partition, in the same transaction (the function is in
-- migration 9: job_events is held exclusively only while the kept rows move). Row:
-- ('dropped' | 'locked' | 'busy' | 'gone' | 'too new', rows kept).
SELECT outcome, kept FROM {schema}.job_events_drop_partition(
  %(name)s::text, %(older_than)s::interval, %(lock_timeout)s::interval, %(attempts)s::int);

-- name: prune_default_orphans
-- After a prune dropped partitions: the default partition's rows before `dropping_before` of
-- jobs no longer present (a pruned job's rows a dropped day had moved there, or its rows of a
-- day that never had a partition). The default is small: rows of live jobs from dropped days.
WITH gone AS (
  DELETE FROM {schema}.job_events_default e
   WHERE e.at < %(dropping_before)s::timestamptz
     AND NOT EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.id = e.job_id)
  RETURNING 1
)
SELECT count(*) FROM gone;

-- name: settings
-- The schema's settings (migration 5): name and value, e.g. ('notify', 'always').
SELECT name, value FROM {schema}.settings ORDER BY name;

-- name: set_notify
-- When the jobs trigger sends NOTIFY: 'always' (once per queue per statement that makes jobs
-- ready now), 'edge' (only if the queue had no other due ready job before the statement) or
-- 'off' (workers poll). Read by the trigger on every statement, so it applies at once.
INSERT INTO {schema}.settings (name, value) VALUES ('notify', %(mode)s)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value
RETURNING value;

-- The workers' schedulers (pgq_core/worker/scheduler.py): periodic jobs' due slots.
-- name: due_schedules
-- The schedules whose next slot may be enqueued now (`opens_at` come, by its index), earliest
-- first and in random order among equals (workers waking together take different rows):
-- each one's name, cron, created_at and last_slot (no payload).
SELECT name, cron, created_at, last_slot FROM {schema}.schedules
 WHERE opens_at <= pg_catalog.now()
 ORDER BY opens_at, pg_catalog.random() LIMIT %(limit)s::int;

-- name: schedules_clock
-- The database's time, the next `opens_at` to come and the next slot enqueued ahead to come
-- due (each by its index; NULL: none), and whether a slot enqueued ahead came due after
-- `before` (NULL: no).
SELECT pg_catalog.now(),
       (SELECT pg_catalog.min(opens_at) FROM {schema}.schedules
         WHERE opens_at > pg_catalog.now() AND opens_at < 'infinity'),
       (SELECT pg_catalog.min(last_slot) FROM {schema}.schedules
         WHERE last_slot > pg_catalog.now()),
       EXISTS (SELECT FROM {schema}.schedules
                WHERE last_slot > %(before)s::timestamptz AND last_slot <= pg_catalog.now());

-- name: schedules_opens
-- When each schedule's next slot may be enqueued ('infinity': never), written only while the
-- row is still as the pass read it (cron, created_at, last_slot) and skipping a row another
-- worker holds (never waiting).
WITH seen AS (
  SELECT s.name, i.opens FROM {schema}.schedules s
    JOIN ROWS FROM (pg_catalog.unnest(%(names)s::text[]), pg_catalog.unnest(%(crons)s::text[]),
                    pg_catalog.unnest(%(created)s::timestamptz[]),
                    pg_catalog.unnest(%(lasts)s::timestamptz[]),
                    pg_catalog.unnest(%(opens)s::timestamptz[]))
      AS i (name, cron, created_at, last_slot, opens) USING (name)
   WHERE s.cron = i.cron AND s.created_at = i.created_at
     AND s.last_slot IS NOT DISTINCT FROM i.last_slot
     FOR UPDATE OF s SKIP LOCKED
)
UPDATE {schema}.schedules s SET opens_at = seen.opens FROM seen WHERE s.name = seen.name
RETURNING s.name;

-- name: enqueue_due_slots
-- Each (name, slot) due: `last_slot` advances to it, `opens_at` to when the slot after it may
-- be enqueued ('-infinity': not known, the next pass works it out), and its job is inserted, in
-- one statement, so a slot is enqueued once whatever the workers (a row another holds is
-- skipped: a later pass sees it). A slot may be enqueued up to `ahead` before it is due: its
-- job's run_at is the slot, so it is claimed no earlier. A slot before its schedule or later
-- than the clock plus `ahead`, or worked out from a cron the row no longer has, is refused;
-- the unique key `schedule:<name>:<slot>` guards it too.
-- Rows: (name, slot, new id or NULL) per slot advanced.
WITH due AS (
  SELECT name, i.slot, i.key, i.opens FROM {schema}.schedules s
    JOIN ROWS FROM (pg_catalog.unnest(%(names)s::text[]), pg_catalog.unnest(%(slots)s::timestamptz[]),
                    pg_catalog.unnest(%(keys)s::text[]), pg_catalog.unnest(%(crons)s::text[]),
                    pg_catalog.unnest(%(opens)s::timestamptz[]))
      AS i (name, slot, key, cron, opens) USING (name)
   WHERE (s.last_slot IS NULL OR s.last_slot < i.slot) AND (i.cron IS NULL OR s.cron = i.cron)
     AND i.slot >= s.created_at AND i.slot <= pg_catalog.now() + %(ahead)s::interval
     FOR UPDATE OF s SKIP LOCKED
), advanced AS (
  UPDATE {schema}.schedules s SET last_slot = due.slot, opens_at = due.opens
    FROM due WHERE s.name = due.name
  RETURNING s.name, s.queue, s.payload, s.max_attempts, due.slot, due.key
), new_jobs AS (
  INSERT INTO {schema}.jobs (queue, payload, max_attempts, unique_key, run_at)
  SELECT queue, payload, max_attempts, key, GREATEST(slot, pg_catalog.now())
    FROM advanced
  ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
  DO NOTHING RETURNING id, fence, unique_key
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT n.id, 'enqueued', n.fence, %(worker)s::text,
         'schedule ' || a.name || ' slot ' || a.slot::text
    FROM new_jobs n JOIN advanced a ON a.key = n.unique_key
)
SELECT a.name, a.slot, n.id FROM advanced a LEFT JOIN new_jobs n ON n.unique_key = a.key;
