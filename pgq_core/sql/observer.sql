-- The readers' statements, by name: stats, leases, jobs, a job and its history, error groups,
-- latency, health and metrics. They write nothing, and every list they return is bounded.
-- {schema} is the quoted schema identifier; %(name)s are bound parameters; {where} is a
-- filter built with psycopg.sql (pgq_core/filters.py), its values bound; {job_row} a fragment.

-- fragment: job_row
-- The columns of a job in a list (JobRow): last_error cut to its first `error_chars`
-- characters, with its whole size in bytes read from the stored value's header.
id, queue, status, attempts, max_attempts, fence, run_at, lease_until, worker,
pg_catalog.substr(last_error, 1, %(error_chars)s::int) AS last_error, queued_at, finished_at,
priority, unique_key, pg_catalog.octet_length(last_error) AS last_error_bytes

-- fragment: queue_parts
-- Per queue and source (CTE `parts`): ready (due now), scheduled, running, expiring, dead,
-- done, then its settings (paused, limit, paused at, by, why), then its waiting jobs
-- (migration 18); a paused or limited queue has a row even with no jobs. Reads the partial
-- indexes, queue_counts and queue_settings only; never scans done rows. Expiring: under a
-- third of its lease left (expired included), or under `soon` when given. A filter on `queue`
-- outside it reaches each branch's index: the planner pushes it through the UNION ALL.
parts AS (
  SELECT queue,
         count(*) FILTER (WHERE run_at <= now()) AS ready,
         count(*) FILTER (WHERE run_at > now())  AS scheduled,
         0::bigint AS running, 0::bigint AS expiring, 0::bigint AS dead,
         0::bigint AS done, 0::bigint AS completed,
         extract(epoch FROM now() - pg_catalog.min(run_at) FILTER (WHERE run_at <= now()))::float8
           AS oldest_due_seconds,
         NULL::timestamptz AS paused_at, NULL::text AS paused_by, NULL::text AS pause_reason,
         NULL::int AS max_running, 0::bigint AS waiting
    FROM {schema}.jobs WHERE status = 'ready' GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, count(*),
         count(*) FILTER (WHERE lease_until
                                < now() + coalesce(%(soon)s::interval, lease_length / 3::float8)),
         0, 0, 0, NULL, NULL, NULL, NULL, NULL, 0
    FROM {schema}.jobs WHERE status = 'running' GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, 0, 0, count(*), 0, 0, NULL, NULL, NULL, NULL, NULL, 0
    FROM {schema}.jobs WHERE status = 'dead' GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, count(*)
    FROM {schema}.jobs WHERE status = 'waiting' GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, 0, 0, 0, pg_catalog.sum(done)::bigint, pg_catalog.sum(completed)::bigint,
         NULL, NULL, NULL, NULL, NULL, 0
    FROM {schema}.queue_counts GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, 0, 0, 0, 0, 0, NULL, paused_at, paused_by, pause_reason, max_running, 0
    FROM {schema}.queue_settings
   WHERE paused_at IS NOT NULL OR max_running IS NOT NULL
)

-- fragment: queue_sums
-- A queue's row (QueueStats) from its `parts`.
queue,
pg_catalog.sum(ready)::bigint, pg_catalog.sum(scheduled)::bigint,
pg_catalog.sum(running)::bigint, pg_catalog.sum(expiring)::bigint,
pg_catalog.sum(dead)::bigint, pg_catalog.sum(done)::bigint,
pg_catalog.sum(completed)::bigint, pg_catalog.max(oldest_due_seconds),
pg_catalog.bool_or(paused_at IS NOT NULL), pg_catalog.max(max_running),
pg_catalog.max(paused_at), pg_catalog.max(paused_by), pg_catalog.max(pause_reason),
pg_catalog.sum(waiting)::bigint

-- name: stats
-- Every queue (`queue_parts`), one row per queue and source summed per queue: linear in the
-- number of queues (joining the per-source counts by queue made the planner nest loops over
-- them: 8 s for 5,000 queues). A window of the queues by name: `limit` of them (NULL: all)
-- from the `offset`th; each row also carries how many queues there are in all, so a view of
-- 5,000 queues gets only the rows it shows and can still say where they stand.
WITH {queue_parts}
SELECT {queue_sums}, count(*) OVER () AS queues_in_all
  FROM parts
 GROUP BY queue
 ORDER BY queue
OFFSET %(offset)s LIMIT %(limit)s;

-- name: queue_stats
-- The `stats` rows of the named queues only, in the same columns (without the count of all
-- queues): what an operator's action just changed, read again at once. The filter reaches
-- each branch's index by queue (ready, running, dead, waiting) or its small table; a queue
-- with no jobs and no settings has no row.
WITH {queue_parts}
SELECT {queue_sums}
  FROM parts
 WHERE queue = ANY(%(queues)s::text[])
 GROUP BY queue
 ORDER BY queue;

-- name: leases
-- Running jobs, the lease closest to expiry first, with the progress their handlers reported
-- (the note cut to `note_chars` characters).
SELECT id, queue, worker, fence, attempts, max_attempts, lease_until,
       extract(epoch FROM lease_until - now())::float8 AS seconds_left,
       extract(epoch FROM lease_length)::float8 AS lease_seconds,
       progress_done, progress_total, pg_catalog.left(progress_note, %(note_chars)s::int),
       progress_at
  FROM {schema}.jobs
 WHERE status = 'running'
 ORDER BY lease_until
 LIMIT %(limit)s;

-- name: workers
-- The live workers (their rows not expired), oldest first, at most `limit`; with the seconds
-- since each started and since its last beat, on the database's clock.
SELECT id, host, pid, queues, concurrency, version, started_at, beat_at, running, done, failed,
       extract(epoch FROM now() - started_at)::float8,
       extract(epoch FROM now() - beat_at)::float8
  FROM {schema}.workers
 WHERE expires_at > now()
 ORDER BY started_at, id
 LIMIT %(limit)s;

-- name: jobs
-- Browse jobs by queue and status, newest first; dead jobs by time of death, the latest first.
-- Of last_error only its first `error_chars` characters and its whole size in bytes (read from
-- the stored value's header, without reading the text), so a list never carries big errors.
-- Two branches, one of which a one-time filter skips, so each keeps an order an index serves
-- (id DESC) or a small sort does (the dead rows of a queue by finished_at).
SELECT * FROM (
  (SELECT {job_row}
     FROM {schema}.jobs
    WHERE %(status)s::text = 'dead' AND status = 'dead'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY finished_at DESC NULLS LAST, id DESC
    LIMIT %(limit)s)
  UNION ALL
  (SELECT {job_row}
     FROM {schema}.jobs
    WHERE %(status)s::text IS DISTINCT FROM 'dead'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
    ORDER BY id DESC
    LIMIT %(limit)s)
) listed
 ORDER BY CASE WHEN status = 'dead' AND %(status)s::text = 'dead' THEN finished_at END
          DESC NULLS LAST, id DESC;

-- name: job
-- One job, every column, and last_error's size in bytes.
SELECT id, queue, status, payload, run_at, attempts, max_attempts, lease_until, fence,
       last_error, queued_at, worker, claimed_at,
       extract(epoch FROM lease_length)::float8, finished_at, priority, result, unique_key,
       pg_catalog.octet_length(last_error),
       progress_done, progress_total, progress_note, progress_at
  FROM {schema}.jobs WHERE id = %(id)s;

-- name: history
-- One job's fence history, oldest first (the view job_history, migration 15, puts back the
-- rows an attempt no longer writes).
SELECT at, event, fence, worker, detail, traceback
  FROM {schema}.job_history WHERE job_id = %(id)s ORDER BY phase, at, seq;

-- name: job_preview
-- One job, every column, but of the payload only its first `chars` characters of JSON text and
-- its whole size in bytes, and of last_error its first `chars` characters (its size in bytes
-- before them), so a huge payload or error is never sent to be shown.
SELECT id, queue, status, NULL::jsonb, run_at, attempts, max_attempts, lease_until, fence,
       pg_catalog.substr(last_error, 1, %(chars)s::int), queued_at, worker, claimed_at,
       extract(epoch FROM lease_length)::float8, finished_at, priority, result, unique_key,
       pg_catalog.octet_length(last_error),
       progress_done, progress_total, progress_note, progress_at,
       pg_catalog.left(p.text, %(chars)s::int),
       pg_catalog.octet_length(p.text)
  FROM {schema}.jobs
 CROSS JOIN LATERAL (SELECT payload::text AS text OFFSET 0) AS p
 WHERE id = %(id)s;

-- name: job_preview_unread
-- `job_preview` for a role that may not read payloads or results (pgq's observer role): the
-- same columns, those two NULL and the preview's size -1.
SELECT id, queue, status, NULL::jsonb, run_at, attempts, max_attempts, lease_until, fence,
       pg_catalog.substr(last_error, 1, %(chars)s::int), queued_at, worker, claimed_at,
       extract(epoch FROM lease_length)::float8, finished_at, priority, NULL::jsonb, unique_key,
       pg_catalog.octet_length(last_error),
       progress_done, progress_total, progress_note, progress_at,
       ''::text, -1::bigint
  FROM {schema}.jobs
 WHERE id = %(id)s;

-- name: queue_has_jobs
-- Whether a queue has a job (ready, running or dead: each through its partial index) or had
-- one completed (queue_counts keeps its row after a prune). A paused or limited queue may have
-- none yet: queue control applies to the jobs to come.
SELECT EXISTS (SELECT 1 FROM {schema}.jobs WHERE queue = %(queue)s AND status = 'ready')
    OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE queue = %(queue)s AND status = 'running')
    OR EXISTS (SELECT 1 FROM {schema}.jobs WHERE queue = %(queue)s AND status = 'dead')
    OR EXISTS (SELECT 1 FROM {schema}.queue_counts WHERE queue = %(queue)s);

-- name: retries_waiting
-- Failed jobs of `queues` waiting for a retry later than now (ready, attempts used, run_at
-- ahead): how many, and the earliest run_at. What a burst worker leaves behind when it exits.
SELECT count(*), pg_catalog.min(run_at) FROM {schema}.jobs
 WHERE status = 'ready' AND queue = ANY(%(queues)s::text[]) AND attempts > 0 AND run_at > now();

-- ---------------------------------------------------------------------------- filters
-- {where} is a filter built by pgq_core/filters.py: a psycopg.sql composition over the alias
-- `j`, every value a bound parameter. The bulk statements take bounded batches in id order
-- (`after` is the last id of the previous batch), skip rows other sessions hold locked, check
-- each row's status again as they change it, and write its history row naming the operator
-- (`actor`) and the filter (`detail`). Each returns (last id looked at, ids changed).

-- name: jobs_filtered
-- Jobs matching a filter, newest first; last_error cut as in `jobs`.
SELECT {job_row}
  FROM {schema}.jobs j
 WHERE {where}
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: jobs_filtered_live
-- Jobs matching a filter that names only live statuses (ready, running, dead, failed) and
-- tests the payload, newest first. The planner cannot estimate a payload test, so the plain
-- form may walk the whole primary key looking for 50 matches; this one reads the live rows
-- through their partial indexes first (bounded by the live set) and sorts the few that match.
WITH matching AS MATERIALIZED (
  SELECT {job_row}
    FROM {schema}.jobs j
   WHERE {where}
)
SELECT * FROM matching ORDER BY id DESC LIMIT %(limit)s;

-- name: count_filtered
-- How many jobs match a filter: the exact count a bulk action's dry run reports.
SELECT count(*) FROM {schema}.jobs j WHERE {where};

-- name: errors
-- Failed jobs (ready again after an attempt, with its error; a requeued job, back at attempt 0,
-- is not failed) and dead ones, grouped by error_group (kept by trigger: the error's first line
-- with ids, numbers, quoted values and URLs normalized). `seen` is finished_at for dead jobs and
-- the failed attempt's claimed_at for failed ones. The example is the group's newest job, with
-- the first `error_chars` characters of its error and the error's whole size in bytes; the
-- pattern is computed from it alone.
WITH failing AS (
  SELECT id, queue, status, error_group,
         coalesce(finished_at, claimed_at, queued_at) AS seen
    FROM {schema}.jobs
   WHERE error_group IS NOT NULL
     AND (status = 'dead' OR (status = 'ready' AND attempts > 0))
     AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
     AND (%(since)s::interval IS NULL
          OR coalesce(finished_at, claimed_at, queued_at) >= now() - %(since)s::interval)
), groups AS (
  SELECT error_group,
         count(*) FILTER (WHERE status = 'dead') AS dead,
         count(*) FILTER (WHERE status = 'ready') AS failed,
         pg_catalog.min(seen) AS first_seen, pg_catalog.max(seen) AS last_seen,
         pg_catalog.array_agg(DISTINCT queue ORDER BY queue) AS queues,
         pg_catalog.max(id) AS example
    FROM failing GROUP BY 1
)
SELECT g.error_group AS error_group, {schema}.error_pattern(j.last_error) AS pattern,
       g.dead AS dead, g.failed AS failed, g.first_seen AS first_seen, g.last_seen AS last_seen,
       g.queues AS queues, g.example AS example_id,
       pg_catalog.substr(j.last_error, 1, %(error_chars)s::int) AS example_error,
       pg_catalog.octet_length(j.last_error) AS example_error_bytes
  FROM groups g JOIN {schema}.jobs j ON j.id = g.example
 ORDER BY g.dead + g.failed DESC, g.last_seen DESC
 LIMIT %(limit)s;

-- name: latency
-- Per queue, of its done jobs finished within `long` (and, of those, within `short`): how
-- many were read, and seconds of wait (claimed_at - run_at: from due to claimed, the last
-- attempt's) and of run (finished_at - claimed_at: claimed to done), p50, p95 and p99
-- (NULL without jobs). Done jobs only: a dead job's finished_at is when it was given up (a
-- reaped lease, a kill), not when a handler returned. Bounded: per queue, at most `cap` jobs,
-- the most recently finished (a window holding more says so: its count equals `cap`), read
-- from jobs_latency_idx by an index-only scan backward from now (migration 16).
-- Queues: those of `queues` (NULL: every queue that ever completed a job, from queue_counts),
-- by name, `limit` of them (NULL: all); each row also carries how many there are in all.
-- Seconds come from date_part (float8): extract() computes a numeric per row, which doubled
-- the statement's time over 80,000 rows. A negative duration (the clocks that wrote run_at,
-- claimed_at and finished_at disagree) counts as 0 in the percentiles; how many jobs had one
-- and the most negative (as seconds of skew, > 0) come after the percentiles, per window.
WITH named AS (
  SELECT q.queue FROM pg_catalog.unnest(%(queues)s::text[]) AS q(queue)
  UNION
  SELECT queue FROM {schema}.queue_counts WHERE %(queues)s::text[] IS NULL
), shown AS (
  SELECT queue, count(*) OVER () AS queues_in_all FROM named ORDER BY queue LIMIT %(limit)s
)
SELECT s.queue, s.queues_in_all, l.*
  FROM shown s
 CROSS JOIN LATERAL (
   SELECT count(*) FILTER (WHERE x.recent) AS jobs_short, count(*) AS jobs_long,
          pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[])
            WITHIN GROUP (ORDER BY greatest(x.wait, 0)) FILTER (WHERE x.recent) AS wait_short,
          pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[])
            WITHIN GROUP (ORDER BY greatest(x.wait, 0)) AS wait_long,
          pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[])
            WITHIN GROUP (ORDER BY greatest(x.run, 0)) FILTER (WHERE x.recent) AS run_short,
          pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[])
            WITHIN GROUP (ORDER BY greatest(x.run, 0)) AS run_long,
          count(*) FILTER (WHERE x.recent AND least(x.wait, x.run) < 0) AS skewed_short,
          count(*) FILTER (WHERE least(x.wait, x.run) < 0) AS skewed_long,
          greatest(-pg_catalog.min(least(x.wait, x.run)) FILTER (WHERE x.recent), 0)
            AS skew_short,
          greatest(-pg_catalog.min(least(x.wait, x.run)), 0) AS skew_long
     FROM (SELECT j.finished_at > now() - %(short)s::interval AS recent,
                  pg_catalog.date_part('epoch', j.claimed_at - j.run_at) AS wait,
                  pg_catalog.date_part('epoch', j.finished_at - j.claimed_at) AS run
             FROM {schema}.jobs j
            WHERE j.queue = s.queue AND j.status = 'done'
              AND j.finished_at > now() - %(long)s::interval
            ORDER BY j.finished_at DESC
            LIMIT %(cap)s) x
 ) l
 ORDER BY s.queue;

-- fragment: stuck_jobs
-- Running jobs stuck: alive (lease_until ahead: the worker still heartbeats; an expired lease
-- is the reaper's) and running (now - claimed_at) past the greatest of: `factor` times their
-- queue's p99 run time, when at least `min_done` done jobs give it (fewer: `factor` times the
-- longest of them, the one quantile so few can give); the longest run of those done jobs (a
-- queue whose rare jobs run long does not flag one that runs as long: a p99 of 1 s misses a
-- 0.75% tail of 10-minute jobs); and `floor` seconds. A negative run (clocks that disagree)
-- counts as 0. Only jobs already past the floor are looked at, and the p99 is computed
-- only for their queues, once per queue (`typical` is MATERIALIZED: inlined, the planner ran
-- the percentile once per running job: 850 ms instead of 12 for 200 of them in 4 queues of
-- 10,000 done jobs): as in `latency`, over the queue's done jobs finished within `window`, at
-- most `cap` of them, the most recent (index-only, jobs_latency_idx). The running rows come
-- through a partial index of running jobs. GREATEST skips a NULL p99.
WITH alive AS MATERIALIZED (
  SELECT id, queue, worker, claimed_at, lease_until,
         pg_catalog.date_part('epoch', now() - claimed_at) AS running_seconds
    FROM {schema}.jobs
   WHERE status = 'running' AND lease_until > now()
     AND claimed_at < now() - pg_catalog.make_interval(secs => %(floor)s::float8)
), typical AS MATERIALIZED (
  SELECT q.queue, l.p99, l.done, l.longest
    FROM (SELECT DISTINCT queue FROM alive) q
   CROSS JOIN LATERAL (
     SELECT pg_catalog.percentile_cont(0.99::float8) WITHIN GROUP (ORDER BY x.run) AS p99,
            count(*) AS done, pg_catalog.max(x.run) AS longest
       FROM (SELECT greatest(pg_catalog.date_part('epoch', j.finished_at - j.claimed_at), 0)
                    AS run
               FROM {schema}.jobs j
              WHERE j.queue = q.queue AND j.status = 'done'
                AND j.finished_at > now() - %(window)s::interval
              ORDER BY j.finished_at DESC
              LIMIT %(cap)s) x
   ) l
), stuck AS (
  SELECT a.id, a.queue, a.worker, a.claimed_at, a.lease_until, a.running_seconds, t.p99,
         t.done, greatest(CASE WHEN t.done >= %(min_done)s::bigint
                               THEN t.p99 ELSE t.longest END * %(factor)s::float8,
                          t.longest, %(floor)s::float8) AS threshold,
         t.longest
    FROM alive a JOIN typical t ON t.queue = a.queue
)

-- name: health_stuck
-- The stuck jobs (fragment stuck_jobs), the longest running first, at most `limit` of them;
-- each row also carries how many there are in all.
{stuck_jobs}
SELECT id, queue, worker, claimed_at, lease_until, running_seconds, p99, done, threshold,
       count(*) OVER () AS stuck_in_all, longest
  FROM stuck
 WHERE running_seconds > threshold
 ORDER BY running_seconds DESC, id
 LIMIT %(limit)s;

-- name: metrics_stuck
-- For the exporter, per queue with stuck jobs (fragment stuck_jobs): how many.
{stuck_jobs}
SELECT queue, count(*) FROM stuck WHERE running_seconds > threshold GROUP BY queue ORDER BY queue;

-- name: health_stranded
-- Waiting jobs that can never run, lowest id first, at most `limit`; each row also carries how
-- many there are in all. A parent is dead (its requeue would bring the job back if it died
-- waiting; a job requeued past a dead parent before version 24 did not), or more parents are
-- left than there are parents not done: a parent the job waits on is gone (deleted before it
-- was done; a done parent pruned since was counted off). Rows: (id, queue, the lowest dead
-- parent or NULL, parents left, parents not done found, total).
WITH stranded AS (
  SELECT w.id, w.queue, x.dead_parent, w.parents_left, x.not_done
    FROM {schema}.jobs w
   CROSS JOIN LATERAL (
     SELECT pg_catalog.min(p.id) FILTER (WHERE p.status = 'dead') AS dead_parent,
            pg_catalog.count(p.id) FILTER (WHERE p.status <> 'done') AS not_done
       FROM {schema}.job_deps d LEFT JOIN {schema}.jobs p ON p.id = d.parent
      WHERE d.child = w.id
   ) x
   WHERE w.status = 'waiting'
     AND (x.dead_parent IS NOT NULL OR w.parents_left > x.not_done)
)
SELECT id, queue, dead_parent, parents_left, not_done, count(*) OVER ()
  FROM stranded
 ORDER BY id
 LIMIT %(limit)s;

-- name: health_tables
-- Live and dead tuples, last (auto)vacuum and analyze, sizes of the queue's two big tables.
-- job_events is partitioned: its figures are the sums over its partitions, its times the
-- latest of any partition.
SELECT c.relname::text, pg_catalog.sum(t.n_live_tup)::bigint,
       pg_catalog.sum(t.n_dead_tup)::bigint,
       pg_catalog.max(t.last_vacuum), pg_catalog.max(t.last_autovacuum),
       pg_catalog.max(t.last_analyze), pg_catalog.max(t.last_autoanalyze),
       pg_catalog.sum(pg_catalog.pg_table_size(t.relid))::bigint,
       pg_catalog.sum(pg_catalog.pg_indexes_size(t.relid))::bigint,
       pg_catalog.sum(pg_catalog.pg_total_relation_size(t.relid))::bigint
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 CROSS JOIN LATERAL (SELECT c.oid AS relid WHERE c.relkind = 'r'
                     UNION ALL
                     SELECT relid FROM pg_catalog.pg_partition_tree(c.oid) WHERE isleaf) p
  JOIN pg_stat_user_tables t ON t.relid = p.relid
 WHERE n.nspname = %(schema)s AND c.relname IN ('jobs', 'job_events')
 GROUP BY c.relname
 ORDER BY c.relname;

-- name: health_xmin
-- The session holding back the xmin horizon longest (vacuum cannot remove rows it may still
-- see): the oldest open transaction with an xid or snapshot, this session aside.
SELECT a.pid, extract(epoch FROM now() - a.xact_start)::float8, a.state, a.datname,
       a.usename, a.application_name, pg_catalog.left(a.query, 80),
       greatest(pg_catalog.age(a.backend_xmin), pg_catalog.age(a.backend_xid))
  FROM pg_stat_activity a
 WHERE a.pid <> pg_backend_pid()
   AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
 ORDER BY a.xact_start NULLS LAST
 LIMIT 1;

-- name: health_notify
-- The share of the NOTIFY queue in use (0 to 1): near 1, notifications fail.
SELECT pg_notification_queue_usage();

-- name: health_lock_waits
-- Sessions waiting for a lock while they touch the jobs table (a relation lock on it not yet
-- granted, or a row lock: they hold the relation and wait on a transaction), longest first.
-- pg_locks.waitstart exists from PostgreSQL 14; before that the wait counts from state_change.
WITH jobs_rel AS (
  SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = %(schema)s AND c.relname = 'jobs'
), waiting AS (
  SELECT l.pid, l.locktype, l.mode,
         coalesce((pg_catalog.to_jsonb(l) ->> 'waitstart'::text)::timestamptz,
                  a.state_change) AS since,
         a.query
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
   WHERE NOT l.granted
     AND l.pid IN (SELECT pid FROM pg_locks WHERE relation = (SELECT oid FROM jobs_rel))
)
SELECT pid, locktype, mode, extract(epoch FROM now() - since)::float8,
       pg_catalog.pg_blocking_pids(pid), pg_catalog.left(query, 80)
  FROM waiting
 ORDER BY since;

-- name: metrics_leases
-- For the exporter, per queue with running jobs: the distinct workers holding them and the
-- leases already expired (awaiting the reaper). Reads the running rows only (jobs_running_idx).
SELECT queue, pg_catalog.count(DISTINCT worker), count(*) FILTER (WHERE lease_until < now())
  FROM {schema}.jobs
 WHERE status = 'running'
 GROUP BY queue
 ORDER BY queue;

-- name: metrics_activity
-- For the exporter, the server around the queue: worker processes connected to this database
-- (their statement connection shows as `pgq main <worker id>`), and the xmin horizon other
-- sessions hold back: seconds since the oldest transaction holding a snapshot began, and that
-- snapshot's age in transaction ids (this session excluded). While it is old, vacuum cannot
-- remove the dead rows every claim and completion leaves behind.
SELECT (SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database()
           AND pg_catalog.starts_with(application_name, 'pgq main ')),
       coalesce((SELECT extract(epoch FROM clock_timestamp() - pg_catalog.min(xact_start))::float8
                   FROM pg_stat_activity
                  WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()), 0),
       coalesce((SELECT pg_catalog.max(pg_catalog.age(backend_xmin)) FROM pg_stat_activity
                  WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()), 0)::bigint;

-- name: schedules
-- Every periodic job, by name.
SELECT name, queue, cron, payload, max_attempts, created_at, last_slot
  FROM {schema}.schedules ORDER BY name;

-- name: schedules_page
-- At most `limit` periodic jobs by name, after `after` (NULL: from the first), and how many
-- there are in all: a page of `pgq schedule list`.
SELECT name, queue, cron, payload, max_attempts, created_at, last_slot,
       (SELECT pg_catalog.count(*) FROM {schema}.schedules) AS total
  FROM {schema}.schedules
 WHERE %(after)s::text IS NULL OR name > %(after)s::text
 ORDER BY name LIMIT %(limit)s;

-- name: schedule
-- One periodic job by name (no row: none of that name).
SELECT name, queue, cron, payload, max_attempts, created_at, last_slot
  FROM {schema}.schedules WHERE name = %(name)s::text;
