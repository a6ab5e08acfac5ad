-- Every statement pgq runs against the queue, by name. The whole protocol is on this page.
-- {schema} is the quoted schema identifier; %(name)s are bound parameters.
-- Every write a lease holder makes checks `id, fence, status = 'running'`: a stale fence
-- matches zero rows, and the caller treats that as a lost lease.
-- Each transition writes its fence-history row in the same statement.

-- name: enqueue
-- Insert many jobs in one round trip: parallel arrays, the payloads as one JSON array.
WITH new_jobs AS (
  INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, priority)
  SELECT q, p, coalesce(r, now() + coalesce(d, interval '0')), m, pr
    FROM ROWS FROM (unnest(%(queues)s::text[]), jsonb_array_elements(%(payloads)s::jsonb),
                    unnest(%(run_ats)s::timestamptz[]), unnest(%(delays)s::interval[]),
                    unnest(%(max_attempts)s::int[]), unnest(%(priorities)s::int[]))
      AS t(q, p, r, d, m, pr)
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence)
  SELECT id, 'enqueued', fence FROM new_jobs
)
SELECT id FROM new_jobs ORDER BY id;

-- name: claim
-- The seed's claim: a short transaction, SKIP LOCKED, lease, fence + 1, attempts + 1.
WITH claimed AS (
  UPDATE {schema}.jobs
     SET status       = 'running',
         attempts     = attempts + 1,
         fence        = fence + 1,
         lease_until  = now() + %(lease)s::interval,
         lease_length = %(lease)s::interval,
         claimed_at   = now(),
         worker       = %(worker)s
   WHERE id IN (
     SELECT id FROM {schema}.jobs
      WHERE queue = %(queue)s AND status = 'ready' AND run_at <= now()
      ORDER BY priority DESC, run_at
      LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED
   )
  RETURNING id, queue, payload, fence, attempts, max_attempts, lease_until
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker)
  SELECT id, 'claimed', fence, %(worker)s FROM claimed
)
SELECT id, queue, payload, fence, attempts, max_attempts, lease_until FROM claimed ORDER BY id;

-- name: settle_complete_and_claim
-- The worker's hot path, one statement (one round trip, one commit): complete finished jobs,
-- each checked against its own id + fence and storing its handler's result, and claim up to
-- `limit` more exactly as `claim` (highest priority first, then oldest run_at).
-- Never waits on a row lock: a held row another session has locked is skipped and reported
-- 'busy' (the worker settles it later). Rows: ('completed' | 'busy' | 'done', id, fence) per
-- held job ('done': our completion had already committed unseen; a job not reported is lost),
-- then ('claimed', job...) per claim. Completions and claims touch disjoint rows.
WITH held AS (
  SELECT * FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(results)s::jsonb[])
    AS t(id, fence, result)
), mine AS (
  SELECT j.id, j.fence, t.result
    FROM {schema}.jobs j JOIN held t ON j.id = t.id AND j.fence = t.fence
   WHERE j.status = 'running'
     FOR NO KEY UPDATE OF j SKIP LOCKED
), settled AS (
  UPDATE {schema}.jobs j
     SET status = 'done', lease_until = NULL, finished_at = now(), result = m.result
    FROM mine m
   WHERE j.id = m.id AND j.fence = m.fence AND j.status = 'running'
  RETURNING j.id, j.fence
), claimed AS (
  UPDATE {schema}.jobs
     SET status       = 'running',
         attempts     = attempts + 1,
         fence        = fence + 1,
         lease_until  = now() + %(lease)s::interval,
         lease_length = %(lease)s::interval,
         claimed_at   = now(),
         worker       = %(worker)s
   WHERE id IN (
     SELECT id FROM {schema}.jobs
      WHERE queue = %(queue)s AND status = 'ready' AND run_at <= now()
      ORDER BY priority DESC, run_at
      LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED
   )
  RETURNING id, queue, payload, fence, attempts, max_attempts, lease_until
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker)
  SELECT id, 'completed', fence, %(worker)s FROM settled
  UNION ALL
  SELECT id, 'claimed', fence, %(worker)s FROM claimed
), unsettled AS (
  SELECT CASE j.status WHEN 'running' THEN 'busy' ELSE 'done' END AS outcome, t.id, t.fence
    FROM (SELECT * FROM held WHERE id NOT IN (SELECT id FROM settled)) t
    JOIN {schema}.jobs j ON j.id = t.id AND j.fence = t.fence AND j.status IN ('running', 'done')
)
SELECT 'completed', id, fence, NULL::text, NULL::jsonb, NULL::int, NULL::int, NULL::timestamptz
  FROM settled
UNION ALL
SELECT outcome, id, fence, NULL, NULL, NULL, NULL, NULL FROM unsettled
UNION ALL
SELECT 'claimed', id, fence, queue, payload, attempts, max_attempts, lease_until FROM claimed;

-- name: settle_fail
-- The worker's failures: as `fail` (retry after backoff, or dead at max_attempts), but never
-- waiting on a row lock. Rows: ('failed' | 'busy', id, fence) per held job; one not reported
-- is lost.
WITH held AS (
  SELECT * FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(errors)s::text[])
    AS t(id, fence, error)
), mine AS (
  SELECT j.id, j.fence, t.error
    FROM {schema}.jobs j JOIN held t ON j.id = t.id AND j.fence = t.fence
   WHERE j.status = 'running'
     FOR NO KEY UPDATE OF j SKIP LOCKED
), settled AS (
  UPDATE {schema}.jobs j
     SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
         run_at      = CASE WHEN j.attempts >= j.max_attempts THEN now()
                            ELSE now() + make_interval(secs => least(%(cap)s::float8,
                                   %(base)s::float8 * power(2, j.attempts))
                                   * (1 - %(jitter)s::float8 * random())) END,
         lease_until = NULL,
         last_error  = m.error,
         finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
    FROM mine m
   WHERE j.id = m.id AND j.fence = m.fence AND j.status = 'running'
  RETURNING j.id, j.fence, j.status, j.run_at, m.error
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, CASE status WHEN 'dead' THEN 'dead' ELSE 'failed' END, fence, %(worker)s,
         CASE status WHEN 'dead' THEN error ELSE error || ' (retry at ' || run_at || ')' END
    FROM settled
)
SELECT 'failed', id, fence FROM settled
UNION ALL
SELECT 'busy', t.id, t.fence
  FROM (SELECT id, fence FROM held WHERE id NOT IN (SELECT id FROM settled)) t
  JOIN {schema}.jobs j ON j.id = t.id AND j.fence = t.fence AND j.status = 'running';

-- name: extend_leases
-- The worker's heartbeat: extend the leases of every held job, never waiting on a row lock.
-- Rows: ('extended' | 'busy', id, fence) per held job; one not reported is lost.
WITH held AS (
  SELECT * FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS t(id, fence)
), mine AS (
  SELECT j.id, j.fence FROM {schema}.jobs j JOIN held t ON j.id = t.id AND j.fence = t.fence
   WHERE j.status = 'running'
     FOR NO KEY UPDATE OF j SKIP LOCKED
), beat AS (
  UPDATE {schema}.jobs j
     SET lease_until = now() + j.lease_length
    FROM mine m
   WHERE j.id = m.id AND j.fence = m.fence AND j.status = 'running'
  RETURNING j.id, j.fence
)
SELECT 'extended', id, fence FROM beat
UNION ALL
SELECT 'busy', t.id, t.fence
  FROM (SELECT id, fence FROM held WHERE id NOT IN (SELECT id FROM beat)) t
  JOIN {schema}.jobs j ON j.id = t.id AND j.fence = t.fence AND j.status = 'running';

-- name: hand_back
-- The worker hands unfinished jobs back, claimable at once; the attempt does not count. Never
-- waits on a row lock. Rows: ('released' | 'busy', id, fence); one not reported is lost.
WITH held AS (
  SELECT * FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS t(id, fence)
), mine AS (
  SELECT j.id, j.fence FROM {schema}.jobs j JOIN held t ON j.id = t.id AND j.fence = t.fence
   WHERE j.status = 'running'
     FOR NO KEY UPDATE OF j SKIP LOCKED
), released AS (
  UPDATE {schema}.jobs j
     SET status = 'ready', run_at = now(), lease_until = NULL,
         attempts = greatest(j.attempts - 1, 0)
    FROM mine m
   WHERE j.id = m.id AND j.fence = m.fence AND j.status = 'running'
  RETURNING j.id, j.fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, 'released', fence, %(worker)s, %(reason)s FROM released
)
SELECT 'released', id, fence FROM released
UNION ALL
SELECT 'busy', t.id, t.fence
  FROM (SELECT id, fence FROM held WHERE id NOT IN (SELECT id FROM released)) t
  JOIN {schema}.jobs j ON j.id = t.id AND j.fence = t.fence AND j.status = 'running';

-- name: hand_back_orphans
-- After a reconnect: jobs running under this worker's id that it does not hold were claimed
-- by a statement whose reply was lost. Hand them back at once, the attempt not counted.
WITH orphans AS (
  SELECT id FROM {schema}.jobs
   WHERE status = 'running' AND worker = %(worker)s AND id <> ALL(%(held)s::bigint[])
     FOR NO KEY UPDATE SKIP LOCKED
), released AS (
  UPDATE {schema}.jobs j
     SET status = 'ready', run_at = now(), lease_until = NULL,
         attempts = greatest(j.attempts - 1, 0)
    FROM orphans o
   WHERE j.id = o.id AND j.status = 'running' AND j.worker = %(worker)s
  RETURNING j.id, j.fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, 'released', fence, %(worker)s, 'claim reply lost: handed back unstarted'
    FROM released
)
SELECT id FROM released ORDER BY id;

-- name: heartbeat
-- Extend the leases of many held jobs; the rows not returned are lost.
UPDATE {schema}.jobs j
   SET lease_until = now() + j.lease_length
  FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS t(id, fence)
 WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
RETURNING j.id, j.fence, j.lease_until;

-- name: complete
-- Settle many held jobs as done, each with its result (or NULL); the rows not returned are lost.
WITH settled AS (
  UPDATE {schema}.jobs j
     SET status = 'done', lease_until = NULL, finished_at = now(), result = t.result
    FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(results)s::jsonb[])
      AS t(id, fence, result)
   WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
  RETURNING j.id, j.fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker)
  SELECT id, 'completed', fence, %(worker)s FROM settled
)
SELECT id, fence FROM settled;

-- name: fail
-- Settle many held jobs as failed: retry after exponential backoff with jitter and a cap,
-- or dead at max_attempts; the rows not returned are lost.
WITH settled AS (
  UPDATE {schema}.jobs j
     SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
         run_at      = CASE WHEN j.attempts >= j.max_attempts THEN now()
                            ELSE now() + make_interval(secs => least(%(cap)s::float8,
                                   %(base)s::float8 * power(2, j.attempts))
                                   * (1 - %(jitter)s::float8 * random())) END,
         lease_until = NULL,
         last_error  = t.error,
         finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
    FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(errors)s::text[]) AS t(id, fence, error)
   WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
  RETURNING j.id, j.fence, j.status, j.run_at, t.error
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, CASE status WHEN 'dead' THEN 'dead' ELSE 'failed' END, fence, %(worker)s,
         CASE status WHEN 'dead' THEN error ELSE error || ' (retry at ' || run_at || ')' END
    FROM settled
)
SELECT id, fence, status, run_at FROM settled;

-- name: release
-- Hand held jobs back, claimable at once; the attempt does not count. Rows not returned are lost.
WITH released AS (
  UPDATE {schema}.jobs j
     SET status = 'ready', run_at = now(), lease_until = NULL,
         attempts = greatest(j.attempts - 1, 0)
    FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS t(id, fence)
   WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
  RETURNING j.id, j.fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, 'released', fence, %(worker)s, %(reason)s FROM released
)
SELECT id, fence FROM released;

-- name: record_stale
-- A worker reports a write of its that matched nothing: its fence was stale.
INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
SELECT * FROM unnest(%(ids)s::bigint[], %(events)s::text[], %(fences)s::bigint[],
                     %(workers)s::text[], %(details)s::text[]);

-- name: reap
-- The seed's reaper: expired leases back to ready, or dead at max_attempts. SKIP LOCKED so
-- concurrent reapers (and a worker settling its job) never wait on each other.
WITH reaped AS (
  UPDATE {schema}.jobs
     SET status      = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
         run_at      = now(),
         lease_until = NULL,
         last_error  = CASE WHEN attempts >= max_attempts
                            THEN 'lease expired on attempt ' || attempts || ' of ' || max_attempts
                            ELSE last_error END,
         finished_at = CASE WHEN attempts >= max_attempts THEN now() END
   WHERE id IN (
     SELECT id FROM {schema}.jobs
      WHERE status = 'running' AND lease_until < now()
      LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED
   )
  RETURNING id, fence, status, worker
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, CASE status WHEN 'dead' THEN 'dead' ELSE 'reaped' END, fence, worker,
         'lease expired'
    FROM reaped
)
SELECT id, status FROM reaped ORDER BY id;

-- name: requeue_ids
-- Operator: dead jobs back to ready with a fresh set of attempts.
WITH requeued AS (
  UPDATE {schema}.jobs
     SET status = 'ready', run_at = now(), attempts = 0, lease_until = NULL, finished_at = NULL
   WHERE id = ANY(%(ids)s::bigint[]) AND status = 'dead'
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker)
  SELECT id, 'requeued', fence, %(actor)s FROM requeued
)
SELECT id FROM requeued ORDER BY id;

-- name: requeue_queue
-- Operator: every dead job of one queue (or of all queues when queue is NULL), one statement.
WITH requeued AS (
  UPDATE {schema}.jobs
     SET status = 'ready', run_at = now(), attempts = 0, lease_until = NULL, finished_at = NULL
   WHERE status = 'dead' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker)
  SELECT id, 'requeued', fence, %(actor)s FROM requeued
)
SELECT id FROM requeued ORDER BY id;

-- name: kill
-- Operator: ready or running jobs to dead. fence + 1, so a worker still running the job fails
-- its next write and gives the job up.
WITH killed AS (
  UPDATE {schema}.jobs
     SET status = 'dead', fence = fence + 1, lease_until = NULL, finished_at = now(),
         last_error = %(reason)s
   WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('ready', 'running')
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, 'killed', fence, %(actor)s, %(reason)s FROM killed
)
SELECT id FROM killed ORDER BY id;

-- name: prune
-- Delete up to `limit` done jobs finished before the cutoff, with their history.
WITH victims AS (
  SELECT id FROM {schema}.jobs
   WHERE status = 'done' AND finished_at < now() - %(older_than)s::interval
   ORDER BY finished_at
   LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM {schema}.jobs WHERE id IN (SELECT id FROM victims) RETURNING id
), history AS (
  DELETE FROM {schema}.job_events WHERE job_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone;

-- name: stats
-- Per queue: ready (due now), scheduled, running, expiring soon, dead, done. Reads the partial
-- indexes and queue_counts only; never scans done rows.
WITH ready AS (
  SELECT queue,
         count(*) FILTER (WHERE run_at <= now()) AS ready,
         count(*) FILTER (WHERE run_at > now())  AS scheduled,
         extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
           AS oldest_due_seconds
    FROM {schema}.jobs WHERE status = 'ready' GROUP BY queue
), running AS (
  SELECT queue, count(*) AS running,
         count(*) FILTER (WHERE lease_until < now() + %(soon)s::interval) AS expiring
    FROM {schema}.jobs WHERE status = 'running' GROUP BY queue
), dead AS (
  SELECT queue, count(*) AS dead FROM {schema}.jobs WHERE status = 'dead' GROUP BY queue
), counts AS (
  SELECT queue, sum(done)::bigint AS done, sum(completed)::bigint AS completed
    FROM {schema}.queue_counts GROUP BY queue
), queues AS (
  SELECT queue FROM ready UNION SELECT queue FROM running
  UNION SELECT queue FROM dead UNION SELECT queue FROM counts
)
SELECT q.queue,
       coalesce(r.ready, 0), coalesce(r.scheduled, 0), coalesce(ru.running, 0),
       coalesce(ru.expiring, 0), coalesce(d.dead, 0), coalesce(c.done, 0),
       coalesce(c.completed, 0), r.oldest_due_seconds
  FROM queues q
  LEFT JOIN ready r USING (queue) LEFT JOIN running ru USING (queue)
  LEFT JOIN dead d USING (queue) LEFT JOIN counts c USING (queue)
 ORDER BY q.queue;

-- name: leases
-- Running jobs, the lease closest to expiry first.
SELECT id, queue, worker, fence, attempts, max_attempts, lease_until,
       extract(epoch FROM lease_until - now())::float8 AS seconds_left,
       extract(epoch FROM lease_length)::float8 AS lease_seconds
  FROM {schema}.jobs
 WHERE status = 'running'
 ORDER BY lease_until
 LIMIT %(limit)s;

-- name: jobs
-- Browse jobs by queue and status, newest first (dead: most recently dead first).
SELECT id, queue, status, attempts, max_attempts, fence, run_at, lease_until, worker,
       last_error, queued_at, finished_at, priority
  FROM {schema}.jobs
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
   AND (%(status)s::text IS NULL OR status = %(status)s::text)
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: job
-- One job, every column.
SELECT id, queue, status, payload, run_at, attempts, max_attempts, lease_until, fence,
       last_error, queued_at, worker, claimed_at,
       extract(epoch FROM lease_length)::float8, finished_at, priority, result
  FROM {schema}.jobs WHERE id = %(id)s;

-- name: history
-- One job's fence history, oldest first.
SELECT at, event, fence, worker, detail
  FROM {schema}.job_events WHERE job_id = %(id)s ORDER BY id;

-- name: session_limits
-- Bound every statement (and lock wait) of an operator's session. A limit the role, database
-- or server already sets is kept unless `force` (the operator asked for one explicitly).
SELECT set_config('statement_timeout',
                  CASE WHEN %(force)s OR current_setting('statement_timeout') = '0'
                       THEN %(statement_timeout)s ELSE current_setting('statement_timeout') END,
                  false),
       set_config('lock_timeout',
                  CASE WHEN current_setting('lock_timeout') = '0'
                       THEN %(lock_timeout)s ELSE current_setting('lock_timeout') END,
                  false);

-- name: job_preview
-- One job, every column, but of the payload only its first `chars` characters of JSON text and
-- its whole size in bytes, so a huge payload is never sent to be shown.
SELECT id, queue, status, NULL::jsonb, run_at, attempts, max_attempts, lease_until, fence,
       last_error, queued_at, worker, claimed_at,
       extract(epoch FROM lease_length)::float8, finished_at, priority, result,
       left(p.text, %(chars)s), octet_length(p.text)
  FROM {schema}.jobs
 CROSS JOIN LATERAL (SELECT payload::text AS text OFFSET 0) AS p
 WHERE id = %(id)s;

-- name: metrics_leases
-- For the exporter, per queue with running jobs: the distinct workers holding them and the
-- leases already expired (awaiting the reaper). Reads the running rows only (jobs_lease_idx).
SELECT queue, count(DISTINCT worker), count(*) FILTER (WHERE lease_until < now())
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
           AND starts_with(application_name, 'pgq main ')),
       coalesce((SELECT extract(epoch FROM clock_timestamp() - min(xact_start))::float8
                   FROM pg_stat_activity
                  WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()), 0),
       coalesce((SELECT max(age(backend_xmin)) FROM pg_stat_activity
                  WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()), 0)::bigint;

-- name: table_sizes
-- Heap (with TOAST) and index bytes, live and dead tuples of the queue's two tables, from
-- pg_stat_user_tables (dead tuples are the statistics collector's estimate).
SELECT relname::text, pg_table_size(relid), pg_indexes_size(relid), n_live_tup, n_dead_tup
  FROM pg_stat_user_tables
 WHERE schemaname = %(schema)s AND relname IN ('jobs', 'job_events')
 ORDER BY relname;

-- name: claim_latency
-- Jobs claimed since `since`: how many, and seconds from enqueue to claim (p50, p99) and, of
-- those already done, from enqueue to done (p50, p99); with the time to pass as the next
-- `since`. Scans jobs: for benchmarks and soaks, whose table prune keeps small.
SELECT count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - queued_at)),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - queued_at)),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - queued_at))
         FILTER (WHERE status = 'done'),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - queued_at))
         FILTER (WHERE status = 'done'),
       clock_timestamp()
  FROM {schema}.jobs
 WHERE claimed_at >= %(since)s;

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

-- name: local_limits
-- Under a pooler in transaction mode (PGQ_POOLED): bound the rest of this transaction alone,
-- as the worker's session settings do on a direct connection (a session setting would stay on
-- a server session the pooler hands to other clients). Timeouts in milliseconds.
SELECT set_config('statement_timeout', %(statement_timeout)s, true),
       set_config('lock_timeout', %(lock_timeout)s, true);
