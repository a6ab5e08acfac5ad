-- Every statement pgq runs against the queue, by name. The whole protocol is on this page.
-- {schema} is the quoted schema identifier; %(name)s are bound parameters.
-- Every write a lease holder makes checks `id, fence, status = 'running'`: a stale fence
-- matches zero rows, and the caller treats that as a lost lease.
-- Each transition writes its fence-history row in the same statement, one row per attempt: the
-- row that ends an attempt carries its claim time, the running attempt is the job's own row,
-- and the view job_history (migration 15) shows every transition.
-- The worker's settle statements (settle_*, extend_leases, hand_back) find held rows by id
-- through the running index (`id = ANY(ids)`: the cost follows the rows held, never the number
-- running in the whole fleet), lock them with SKIP LOCKED, and update each by the row address
-- (ctid) that lock pins.

-- name: enqueue
-- Insert many jobs in one round trip: parallel arrays, the payloads as one JSON array. Jobs
-- without a unique key are inserted as they are. A job with a key is inserted unless a ready
-- or running job holds the key (the partial unique index arbitrates, so racing producers make
-- one job): then nothing is inserted and the holder's id is looked up. The caller sends each
-- key at most once per statement. Rows: (id, true, key) per inserted job, in input order per
-- kind; (holder id, false, key) per duplicate. The holder id is NULL when the holder committed
-- after this statement's snapshot was taken: look it up again in a new statement.
WITH input AS (
  SELECT * FROM ROWS FROM (pg_catalog.unnest(%(queues)s::text[]),
                           pg_catalog.jsonb_array_elements(%(payloads)s::jsonb),
                           pg_catalog.unnest(%(run_ats)s::timestamptz[]),
                           pg_catalog.unnest(%(delays)s::interval[]),
                           pg_catalog.unnest(%(max_attempts)s::int[]),
                           pg_catalog.unnest(%(unique_keys)s::text[]),
                           pg_catalog.unnest(%(priorities)s::int[]),
                           pg_catalog.unnest(%(backoff_bases)s::float8[]),
                           pg_catalog.unnest(%(backoff_caps)s::float8[]))
    WITH ORDINALITY AS t(q, p, r, d, m, k, pr, bb, bc, n)
), plain AS (
  INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, priority, backoff_base,
                             backoff_cap)
  SELECT q, p, coalesce(r, now() + coalesce(d, interval '0')), m, pr, bb, bc
    FROM input WHERE k IS NULL ORDER BY n
  RETURNING id, fence, NULL::text AS unique_key
), keyed AS (
  INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, unique_key, priority,
                             backoff_base, backoff_cap)
  SELECT q, p, coalesce(r, now() + coalesce(d, interval '0')), m, k, pr, bb, bc
    FROM input WHERE k IS NOT NULL ORDER BY n
  ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
  DO NOTHING
  RETURNING id, fence, unique_key
), new_jobs AS (
  SELECT * FROM plain UNION ALL SELECT * FROM keyed
)
SELECT id, true, unique_key FROM new_jobs
UNION ALL
SELECT (SELECT j.id FROM {schema}.jobs j
         WHERE j.unique_key = i.k AND j.status IN ('ready', 'running')), false, i.k
  FROM input i
 WHERE i.k IS NOT NULL AND i.k NOT IN (SELECT unique_key FROM keyed)
ORDER BY 1;

-- name: enqueue_one
-- One job without a unique key (`Queue.enqueue`, the web-request path): what `enqueue` does for
-- it, without the arrays a batch needs. Rows: (id).
INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, priority, backoff_base,
                           backoff_cap)
VALUES (%(queue)s::text, %(payload)s::jsonb,
        coalesce(%(run_at)s::timestamptz, now() + coalesce(%(delay)s::interval, interval '0')),
        %(max_attempts)s::int, %(priority)s::int, %(backoff_base)s::float8,
        %(backoff_cap)s::float8)
RETURNING id;

-- name: unique_holders
-- The ready or running job holding each of `keys` (a key no job holds has no row).
SELECT unique_key, id FROM {schema}.jobs
 WHERE unique_key = ANY(%(keys)s::text[]) AND status IN ('ready', 'running');

-- name: claim
-- The seed's claim: a short transaction, SKIP LOCKED, lease, fence + 1, attempts + 1.
-- Queue control (`gate`): a paused queue claims nothing; a queue with max_running claims at
-- most max_running minus its jobs running now (claim_allowance, serialized per queue by an
-- advisory lock); a queue without settings costs one primary-key lookup. The jobs to claim are
-- locked first, as an array (`id = ANY(ARRAY(...))`): the claiming UPDATE then reads them by
-- primary key whatever the planner guesses of the gate's LIMIT.
WITH gate AS (
  SELECT CASE WHEN s.paused_at IS NOT NULL THEN 0
              WHEN s.max_running IS NULL THEN %(limit)s
              ELSE {schema}.claim_allowance(%(queue)s, %(limit)s, ARRAY[]::bigint[]) END AS n
    FROM {schema}.queue_settings s WHERE s.queue = %(queue)s
), claimed AS (
  UPDATE {schema}.jobs
     SET status       = 'running',
         attempts     = attempts + 1,
         fence        = fence + 1,
         lease_until  = clock_timestamp() + %(lease)s::interval,
         lease_length = %(lease)s::interval,
         claimed_at   = now(),
         worker       = %(worker)s
   WHERE id = ANY(ARRAY(
     SELECT id FROM {schema}.jobs
      WHERE queue = %(queue)s AND status = 'ready' AND run_at <= now()
      ORDER BY priority DESC, run_at
      LIMIT coalesce((SELECT n FROM gate), %(limit)s)
      FOR UPDATE SKIP LOCKED
   ))
  RETURNING id, queue, payload, fence, attempts, max_attempts, lease_until
)
SELECT id, queue, payload, fence, attempts, max_attempts, lease_until FROM claimed ORDER BY id;

-- name: settle_complete_and_claim
-- The worker's hot path, one statement (one round trip, one commit): complete finished jobs,
-- each checked against its own id + fence and storing its handler's result, and claim up to
-- `limit` more exactly as `claim` (highest priority first, then oldest run_at).
-- Never waits on a row lock: a held row another session has locked is skipped and reported
-- 'busy' (the worker settles it later). Rows: ('completed' | 'busy' | 'done', id, fence) per
-- held job ('done': our completion had already committed unseen; a job not reported is lost),
-- then ('claimed', job...) per claim, in the order they are to run (a worker that claims
-- ahead runs them in turn). Completions and claims touch disjoint rows.
-- Queue control as in `claim`; a limited queue's count of running jobs leaves out the jobs this
-- statement completes, so a worker at the limit takes the next job as it settles one.
WITH held AS (
  SELECT * FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
                           pg_catalog.unnest(%(fences)s::bigint[]),
                           pg_catalog.unnest(%(results)s::jsonb[]))
    AS t(id, fence, result)
), mine AS (
  SELECT j.ctid AS row, j.id, j.fence, t.result
    FROM {schema}.jobs j JOIN held t ON j.id = t.id AND j.fence = t.fence
   WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'running'
     FOR NO KEY UPDATE OF j SKIP LOCKED
), settled AS (
  UPDATE {schema}.jobs j
     SET status = 'done', lease_until = NULL, finished_at = now(), result = m.result
    FROM mine m
   WHERE j.ctid = m.row AND j.id = m.id AND j.fence = m.fence AND j.status = 'running'
  RETURNING j.id, j.fence, j.claimed_at
), gate AS (
  SELECT CASE WHEN s.paused_at IS NOT NULL THEN 0
              WHEN s.max_running IS NULL THEN %(limit)s
              ELSE {schema}.claim_allowance(%(queue)s, %(limit)s, ARRAY(SELECT id FROM settled))
         END AS n
    FROM {schema}.queue_settings s WHERE s.queue = %(queue)s
), claimed AS (
  UPDATE {schema}.jobs
     SET status       = 'running',
         attempts     = attempts + 1,
         fence        = fence + 1,
         lease_until  = clock_timestamp() + %(lease)s::interval,
         lease_length = %(lease)s::interval,
         claimed_at   = now(),
         worker       = %(worker)s
   WHERE id = ANY(ARRAY(
     SELECT id FROM {schema}.jobs
      WHERE queue = %(queue)s AND status = 'ready' AND run_at <= now()
      ORDER BY priority DESC, run_at
      LIMIT coalesce((SELECT n FROM gate), %(limit)s)
      FOR UPDATE SKIP LOCKED
   ))
  RETURNING id, queue, payload, fence, attempts, max_attempts, lease_until, priority, run_at
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, claimed_at)
  SELECT id, 'completed', fence, %(worker)s, claimed_at FROM settled
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
(SELECT 'claimed', id, fence, queue, payload, attempts, max_attempts, lease_until FROM claimed
  ORDER BY priority DESC, run_at, id);

-- name: settle_fail
-- The worker's failures: as `fail` (retry after backoff, or dead at max_attempts), but never
-- waiting on a row lock. Rows: ('failed' | 'busy' | 'done', id, fence) per held job ('done': a
-- handler that completed the job in its own transaction, which committed, then raised); one
-- not reported is lost. A job whose `final` is true dies at once (its handler raised DontRetry).
WITH held AS (
  SELECT * FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
                           pg_catalog.unnest(%(fences)s::bigint[]),
                           pg_catalog.unnest(%(errors)s::text[]),
                           pg_catalog.unnest(%(finals)s::boolean[]))
    AS t(id, fence, error, final)
), mine AS (
  SELECT j.ctid AS row, j.id, j.fence, t.error, t.final
    FROM {schema}.jobs j JOIN held t ON j.id = t.id AND j.fence = t.fence
   WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'running'
     FOR NO KEY UPDATE OF j SKIP LOCKED
), settled AS (
  UPDATE {schema}.jobs j
     SET status      = CASE WHEN j.attempts >= j.max_attempts OR m.final THEN 'dead'
                            ELSE 'ready' END,
         run_at      = CASE WHEN j.attempts >= j.max_attempts OR m.final THEN now()
                            ELSE now() + pg_catalog.make_interval(secs => least(
                                   coalesce(j.backoff_cap, %(cap)s::float8),
                                   coalesce(j.backoff_base, %(base)s::float8)
                                     * pg_catalog.power(2::float8, least(j.attempts, 62)::float8))
                                   * (1::float8 - %(jitter)s::float8 * random())) END,
         lease_until = NULL,
         last_error  = m.error,
         finished_at = CASE WHEN j.attempts >= j.max_attempts OR m.final THEN now() END
    FROM mine m
   WHERE j.ctid = m.row AND j.id = m.id AND j.fence = m.fence AND j.status = 'running'
  RETURNING j.id, j.fence, j.status, j.run_at, m.error, j.claimed_at
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail, claimed_at)
  SELECT id, CASE status WHEN 'dead' THEN 'dead' ELSE 'failed' END, fence, %(worker)s,
         CASE status WHEN 'dead' THEN error ELSE error || ' (retry at ' || run_at::text || ')' END,
         claimed_at
    FROM settled
)
SELECT 'failed', id, fence FROM settled
UNION ALL
SELECT CASE j.status WHEN 'running' THEN 'busy' ELSE 'done' END, t.id, t.fence
  FROM (SELECT id, fence FROM held WHERE id NOT IN (SELECT id FROM settled)) t
  JOIN {schema}.jobs j ON j.id = t.id AND j.fence = t.fence AND j.status IN ('running', 'done');

-- name: extend_leases
-- The worker's heartbeat: extend the leases of every held job, never waiting on a row lock.
-- Rows: ('extended' | 'busy', id, fence) per held job; one not reported is lost. When any lease
-- moved, `channel` (if given) gets a notification with an empty payload, delivered at commit,
-- so a dashboard shows the new lease at once (no queue is named '', so workers ignore it).
WITH held AS (
  SELECT * FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
                           pg_catalog.unnest(%(fences)s::bigint[])) AS t(id, fence)
), mine AS (
  SELECT j.ctid AS row, j.id, j.fence
    FROM {schema}.jobs j JOIN held t ON j.id = t.id AND j.fence = t.fence
   WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'running'
     FOR NO KEY UPDATE OF j SKIP LOCKED
), beat AS (
  UPDATE {schema}.jobs j
     SET lease_until = clock_timestamp() + j.lease_length
    FROM mine m
   WHERE j.ctid = m.row AND j.id = m.id AND j.fence = m.fence AND j.status = 'running'
  RETURNING j.id, j.fence
)
SELECT 'extended', id, fence FROM beat
UNION ALL
SELECT 'busy', t.id, t.fence
  FROM (SELECT id, fence FROM held WHERE id NOT IN (SELECT id FROM beat)) t
  JOIN {schema}.jobs j ON j.id = t.id AND j.fence = t.fence AND j.status = 'running'
UNION ALL
SELECT 'noted', 0, pg_catalog.count(pg_catalog.pg_notify(%(channel)s::text, ''))
  FROM (SELECT 1 FROM beat LIMIT 1) moved
 WHERE %(channel)s::text IS NOT NULL;

-- name: hand_back
-- The worker hands unfinished jobs back, claimable at once; the attempt does not count. Never
-- waits on a row lock. Rows: ('released' | 'busy', id, fence); one not reported is lost.
WITH held AS (
  SELECT * FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
                           pg_catalog.unnest(%(fences)s::bigint[])) AS t(id, fence)
), mine AS (
  SELECT j.ctid AS row, j.id, j.fence
    FROM {schema}.jobs j JOIN held t ON j.id = t.id AND j.fence = t.fence
   WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'running'
     FOR NO KEY UPDATE OF j SKIP LOCKED
), released AS (
  UPDATE {schema}.jobs j
     SET status = 'ready', run_at = now(), lease_until = NULL,
         attempts = greatest(j.attempts - 1, 0)
    FROM mine m
   WHERE j.ctid = m.row AND j.id = m.id AND j.fence = m.fence AND j.status = 'running'
  RETURNING j.id, j.fence, j.claimed_at
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail, claimed_at)
  SELECT id, 'released', fence, %(worker)s, %(reason)s, claimed_at FROM released
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
  RETURNING j.id, j.fence, j.claimed_at
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail, claimed_at)
  SELECT id, 'released', fence, %(worker)s, 'claim reply lost: handed back unstarted',
         claimed_at
    FROM released
)
SELECT id FROM released ORDER BY id;

-- name: heartbeat
-- Extend the leases of many held jobs; the rows not returned are lost.
UPDATE {schema}.jobs j
   SET lease_until = clock_timestamp() + j.lease_length
  FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
                  pg_catalog.unnest(%(fences)s::bigint[])) AS t(id, fence)
 WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
RETURNING j.id, j.fence, j.lease_until;

-- name: complete
-- Settle many held jobs as done, each with its result (or NULL); the rows not returned are lost.
WITH settled AS (
  UPDATE {schema}.jobs j
     SET status = 'done', lease_until = NULL, finished_at = now(), result = t.result
    FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]), pg_catalog.unnest(%(fences)s::bigint[]),
                    pg_catalog.unnest(%(results)s::jsonb[]))
      AS t(id, fence, result)
   WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
  RETURNING j.id, j.fence, j.claimed_at, j.worker
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, claimed_at, claimed_by)
  SELECT id, 'completed', fence, %(worker)s, claimed_at,
         CASE WHEN worker IS DISTINCT FROM %(worker)s THEN worker END
    FROM settled
)
SELECT id, fence FROM settled;

-- name: fail
-- Settle many held jobs as failed: retry after exponential backoff with jitter and a cap,
-- or dead at max_attempts; the rows not returned are lost. The backoff's base and cap are the
-- job's own (backoff_base, backoff_cap) where set, else `base` and `cap`.
WITH settled AS (
  UPDATE {schema}.jobs j
     SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
         run_at      = CASE WHEN j.attempts >= j.max_attempts THEN now()
                            ELSE now() + pg_catalog.make_interval(secs => least(
                                   coalesce(j.backoff_cap, %(cap)s::float8),
                                   coalesce(j.backoff_base, %(base)s::float8)
                                     * pg_catalog.power(2::float8, least(j.attempts, 62)::float8))
                                   * (1::float8 - %(jitter)s::float8 * random())) END,
         lease_until = NULL,
         last_error  = t.error,
         finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END
    FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]), pg_catalog.unnest(%(fences)s::bigint[]),
                    pg_catalog.unnest(%(errors)s::text[])) AS t(id, fence, error)
   WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
  RETURNING j.id, j.fence, j.status, j.run_at, t.error, j.claimed_at, j.worker
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail, claimed_at, claimed_by)
  SELECT id, CASE status WHEN 'dead' THEN 'dead' ELSE 'failed' END, fence, %(worker)s,
         CASE status WHEN 'dead' THEN error ELSE error || ' (retry at ' || run_at::text || ')' END,
         claimed_at, CASE WHEN worker IS DISTINCT FROM %(worker)s THEN worker END
    FROM settled
)
SELECT id, fence, status, run_at FROM settled;

-- name: release
-- Hand held jobs back, claimable at once; the attempt does not count. Rows not returned are lost.
WITH released AS (
  UPDATE {schema}.jobs j
     SET status = 'ready', run_at = now(), lease_until = NULL,
         attempts = greatest(j.attempts - 1, 0)
    FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
                    pg_catalog.unnest(%(fences)s::bigint[])) AS t(id, fence)
   WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
  RETURNING j.id, j.fence, j.claimed_at, j.worker
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail, claimed_at, claimed_by)
  SELECT id, 'released', fence, %(worker)s, %(reason)s, claimed_at,
         CASE WHEN worker IS DISTINCT FROM %(worker)s THEN worker END
    FROM released
)
SELECT id, fence FROM released;

-- name: record_stale
-- A worker reports a write of its that matched nothing: its fence was stale.
INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
SELECT * FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
                         pg_catalog.unnest(%(events)s::text[]),
                         pg_catalog.unnest(%(fences)s::bigint[]),
                         pg_catalog.unnest(%(workers)s::text[]),
                         pg_catalog.unnest(%(details)s::text[]));

-- name: reap
-- The seed's reaper: expired leases back to ready, or dead at max_attempts. SKIP LOCKED so
-- concurrent reapers (and a worker settling its job) never wait on each other.
WITH reaped AS (
  UPDATE {schema}.jobs
     SET status      = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'ready' END,
         run_at      = now(),
         lease_until = NULL,
         last_error  = CASE WHEN attempts >= max_attempts
                            THEN 'lease expired on attempt ' || attempts::text || ' of '
                                 || max_attempts::text
                            ELSE last_error END,
         finished_at = CASE WHEN attempts >= max_attempts THEN now() END
   WHERE id IN (
     SELECT id FROM {schema}.jobs
      WHERE status = 'running' AND lease_until < now()
      LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED
   )
  RETURNING id, fence, status, worker, claimed_at
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail, claimed_at)
  SELECT id, CASE status WHEN 'dead' THEN 'dead' ELSE 'reaped' END, fence, worker,
         'lease expired', claimed_at
    FROM reaped
)
SELECT id, status FROM reaped ORDER BY id;

-- name: requeue_ids
-- Operator: dead jobs back to ready with a fresh set of attempts. A dead job whose unique key a
-- ready or running job holds stays dead (reported 'key_held'), and of several dead jobs
-- sharing a key only the newest is requeued. Rows: ('requeued' | 'key_held', id).
WITH dead AS (
  SELECT id, unique_key FROM {schema}.jobs
   WHERE id = ANY(%(ids)s::bigint[]) AND status = 'dead'
), chosen AS (
  SELECT id FROM dead WHERE unique_key IS NULL
  UNION ALL
  (SELECT DISTINCT ON (unique_key) id FROM dead d
    WHERE unique_key IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs o
                       WHERE o.unique_key = d.unique_key AND o.status IN ('ready', 'running'))
    ORDER BY unique_key, id DESC)
), requeued AS (
  UPDATE {schema}.jobs
     SET status = 'ready', run_at = now(), attempts = 0, lease_until = NULL, finished_at = NULL
   WHERE id IN (SELECT id FROM chosen) AND status = 'dead'
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker)
  SELECT id, 'requeued', fence, %(actor)s FROM requeued
)
SELECT 'requeued', id FROM requeued
UNION ALL
SELECT 'key_held', id FROM dead WHERE id NOT IN (SELECT id FROM chosen)
ORDER BY 2;

-- name: requeue_queue
-- Operator: every dead job of one queue (or of all queues when queue is NULL), one statement;
-- unique keys are respected as in `requeue_ids`.
WITH dead AS (
  SELECT id, unique_key FROM {schema}.jobs
   WHERE status = 'dead' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
), chosen AS (
  SELECT id FROM dead WHERE unique_key IS NULL
  UNION ALL
  (SELECT DISTINCT ON (unique_key) id FROM dead d
    WHERE unique_key IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs o
                       WHERE o.unique_key = d.unique_key AND o.status IN ('ready', 'running'))
    ORDER BY unique_key, id DESC)
), requeued AS (
  UPDATE {schema}.jobs
     SET status = 'ready', run_at = now(), attempts = 0, lease_until = NULL, finished_at = NULL
   WHERE id IN (SELECT id FROM chosen) AND status = 'dead'
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker)
  SELECT id, 'requeued', fence, %(actor)s FROM requeued
)
SELECT 'requeued', id FROM requeued
UNION ALL
SELECT 'key_held', id FROM dead WHERE id NOT IN (SELECT id FROM chosen)
ORDER BY 2;

-- name: kill
-- Operator: ready or running jobs to dead. fence + 1, so a worker still running the job fails
-- its next write and gives the job up. A running job's attempt gets its 'claimed' row here
-- (the kill's own row names the operator and the next fence).
WITH victims AS (
  SELECT id, status AS was, fence, worker, claimed_at FROM {schema}.jobs
   WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('ready', 'running')
     FOR UPDATE
), killed AS (
  UPDATE {schema}.jobs j
     SET status = 'dead', fence = j.fence + 1, lease_until = NULL, finished_at = now(),
         last_error = %(reason)s
    FROM victims v
   WHERE j.id = v.id AND j.status IN ('ready', 'running')
  RETURNING j.id, j.fence, v.was, v.fence AS attempt, v.worker, v.claimed_at
), history AS (
  INSERT INTO {schema}.job_events (job_id, at, event, fence, worker, detail)
  SELECT id, claimed_at, 'claimed', attempt, worker, NULL FROM killed WHERE was = 'running'
  UNION ALL
  SELECT id, clock_timestamp(), 'killed', fence, %(actor)s, %(reason)s FROM killed
)
SELECT id FROM killed ORDER BY id;

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

-- name: ensure_partitions
-- The daily partitions of job_events from today (UTC) to `ahead` days later, each created if
-- missing (the function is in migration 9). Never waits on a lock longer than `lock_timeout`.
-- Rows: (day, 'created' | 'exists' | 'default holds rows' | 'overlaps' | 'locked'), or
-- (NULL, 'busy') when another session is at it.
SELECT day, outcome FROM {schema}.job_events_add_partitions(
  (now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date + %(ahead)s::int,
  %(lock_timeout)s::interval);

-- name: stats
-- Per queue: ready (due now), scheduled, running, expiring, dead, done, then its settings
-- (paused, limit, paused at, by, why); a paused or limited queue is listed even with no jobs.
-- Reads the partial indexes, queue_counts and queue_settings only; never scans done rows.
-- Expiring: under a third of its lease left (expired included), or under `soon` when given.
-- One row per queue and source, summed per queue: linear in the number of queues (joining the
-- per-source counts by queue made the planner nest loops over them: 8 s for 5,000 queues).
-- A window of the queues by name: `limit` of them (NULL: all) from the `offset`th; each row
-- also carries how many queues there are in all, so a view of 5,000 queues gets only the rows
-- it shows and can still say where they stand.
WITH parts AS (
  SELECT queue,
         count(*) FILTER (WHERE run_at <= now()) AS ready,
         count(*) FILTER (WHERE run_at > now())  AS scheduled,
         0::bigint AS running, 0::bigint AS expiring, 0::bigint AS dead,
         0::bigint AS done, 0::bigint AS completed,
         extract(epoch FROM now() - pg_catalog.min(run_at) FILTER (WHERE run_at <= now()))::float8
           AS oldest_due_seconds,
         NULL::timestamptz AS paused_at, NULL::text AS paused_by, NULL::text AS pause_reason,
         NULL::int AS max_running
    FROM {schema}.jobs WHERE status = 'ready' GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, count(*),
         count(*) FILTER (WHERE lease_until
                                < now() + coalesce(%(soon)s::interval, lease_length / 3::float8)),
         0, 0, 0, NULL, NULL, NULL, NULL, NULL
    FROM {schema}.jobs WHERE status = 'running' GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, 0, 0, count(*), 0, 0, NULL, NULL, NULL, NULL, NULL
    FROM {schema}.jobs WHERE status = 'dead' GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, 0, 0, 0, pg_catalog.sum(done)::bigint, pg_catalog.sum(completed)::bigint,
         NULL, NULL, NULL, NULL, NULL
    FROM {schema}.queue_counts GROUP BY queue
  UNION ALL
  SELECT queue, 0, 0, 0, 0, 0, 0, 0, NULL, paused_at, paused_by, pause_reason, max_running
    FROM {schema}.queue_settings
   WHERE paused_at IS NOT NULL OR max_running IS NOT NULL
)
SELECT queue,
       pg_catalog.sum(ready)::bigint, pg_catalog.sum(scheduled)::bigint,
       pg_catalog.sum(running)::bigint, pg_catalog.sum(expiring)::bigint,
       pg_catalog.sum(dead)::bigint, pg_catalog.sum(done)::bigint,
       pg_catalog.sum(completed)::bigint, pg_catalog.max(oldest_due_seconds),
       pg_catalog.bool_or(paused_at IS NOT NULL), pg_catalog.max(max_running),
       pg_catalog.max(paused_at), pg_catalog.max(paused_by), pg_catalog.max(pause_reason),
       count(*) OVER () AS queues_in_all
  FROM parts
 GROUP BY queue
 ORDER BY queue
OFFSET %(offset)s LIMIT %(limit)s;

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
-- Browse jobs by queue and status, newest first; dead jobs by time of death, the latest first.
-- Of last_error only its first `error_chars` characters and its whole size in bytes (read from
-- the stored value's header, without reading the text), so a list never carries big errors.
-- Two branches, one of which a one-time filter skips, so each keeps an order an index serves
-- (id DESC) or a small sort does (the dead rows of a queue by finished_at).
SELECT * FROM (
  (SELECT id, queue, status, attempts, max_attempts, fence, run_at, lease_until, worker,
          pg_catalog.substr(last_error, 1, %(error_chars)s::int) AS last_error, queued_at,
          finished_at, priority, unique_key,
          pg_catalog.octet_length(last_error) AS last_error_bytes
     FROM {schema}.jobs
    WHERE %(status)s::text = 'dead' AND status = 'dead'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    ORDER BY finished_at DESC NULLS LAST, id DESC
    LIMIT %(limit)s)
  UNION ALL
  (SELECT id, queue, status, attempts, max_attempts, fence, run_at, lease_until, worker,
          pg_catalog.substr(last_error, 1, %(error_chars)s::int) AS last_error, queued_at,
          finished_at, priority, unique_key,
          pg_catalog.octet_length(last_error) AS last_error_bytes
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
       pg_catalog.octet_length(last_error)
  FROM {schema}.jobs WHERE id = %(id)s;

-- name: history
-- One job's fence history, oldest first (the view job_history, migration 15, puts back the
-- rows an attempt no longer writes).
SELECT at, event, fence, worker, detail
  FROM {schema}.job_history WHERE job_id = %(id)s ORDER BY phase, at, seq;

-- name: session_limits
-- Bound every statement (and lock wait) of an operator's session. A limit the role, database
-- or server already sets is kept unless `force` (the operator asked for one explicitly).
SELECT pg_catalog.set_config('statement_timeout',
                  CASE WHEN %(force)s OR pg_catalog.current_setting('statement_timeout') = '0'
                       THEN %(statement_timeout)s
                       ELSE pg_catalog.current_setting('statement_timeout') END,
                  false),
       pg_catalog.set_config('lock_timeout',
                  CASE WHEN pg_catalog.current_setting('lock_timeout') = '0'
                       THEN %(lock_timeout)s ELSE pg_catalog.current_setting('lock_timeout') END,
                  false);

-- name: job_preview
-- One job, every column, but of the payload only its first `chars` characters of JSON text and
-- its whole size in bytes, and of last_error its first `chars` characters (its size in bytes
-- before them), so a huge payload or error is never sent to be shown.
SELECT id, queue, status, NULL::jsonb, run_at, attempts, max_attempts, lease_until, fence,
       pg_catalog.substr(last_error, 1, %(chars)s::int), queued_at, worker, claimed_at,
       extract(epoch FROM lease_length)::float8, finished_at, priority, result, unique_key,
       pg_catalog.octet_length(last_error), pg_catalog.left(p.text, %(chars)s::int),
       pg_catalog.octet_length(p.text)
  FROM {schema}.jobs
 CROSS JOIN LATERAL (SELECT payload::text AS text OFFSET 0) AS p
 WHERE id = %(id)s;


-- name: schedules
-- Every periodic job, by name.
SELECT name, queue, cron, payload, max_attempts, created_at, last_slot
  FROM {schema}.schedules ORDER BY name;

-- name: database_clock
-- The database's time now (not the transaction's): what a worker's scheduler computes slots
-- from, whatever its own host's clock says.
SELECT clock_timestamp();

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

-- name: enqueue_due_slot
-- A worker enqueues a schedule's due slot: `last_slot` advances to `slot` and the slot's job is
-- inserted in one statement, so each slot is enqueued once whatever the number of workers
-- (a second worker finds last_slot already there, and never waits: SKIP LOCKED) and even
-- after the slot's job finished. A slot before the schedule existed, or later than the
-- database's clock, is refused. The unique key `schedule:<name>:<slot>` guards the job as well.
-- Rows: the new job's id, or none.
WITH due AS (
  SELECT name FROM {schema}.schedules
   WHERE name = %(name)s::text AND (last_slot IS NULL OR last_slot < %(slot)s::timestamptz)
     AND %(slot)s::timestamptz >= created_at AND %(slot)s::timestamptz <= now()
     FOR UPDATE SKIP LOCKED
), advanced AS (
  UPDATE {schema}.schedules s SET last_slot = %(slot)s::timestamptz
    FROM due WHERE s.name = due.name
  RETURNING s.queue, s.payload, s.max_attempts
), new_jobs AS (
  INSERT INTO {schema}.jobs (queue, payload, max_attempts, unique_key)
  SELECT queue, payload, max_attempts, %(key)s::text FROM advanced
  ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
  DO NOTHING
  RETURNING id, fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, 'enqueued', fence, %(worker)s::text,
         'schedule ' || %(name)s::text || ' slot ' || %(slot)s::timestamptz::text
    FROM new_jobs
)
SELECT id FROM new_jobs;

-- ---------------------------------------------------------------------------- queue control

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
SELECT id, queue, status, attempts, max_attempts, fence, run_at, lease_until, worker,
       pg_catalog.substr(last_error, 1, %(error_chars)s::int) AS last_error, queued_at,
       finished_at, priority, unique_key,
       pg_catalog.octet_length(last_error) AS last_error_bytes
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
  SELECT id, queue, status, attempts, max_attempts, fence, run_at, lease_until, worker,
         pg_catalog.substr(last_error, 1, %(error_chars)s::int) AS last_error, queued_at,
         finished_at, priority, unique_key,
         pg_catalog.octet_length(last_error) AS last_error_bytes
    FROM {schema}.jobs j
   WHERE {where}
)
SELECT * FROM matching ORDER BY id DESC LIMIT %(limit)s;

-- name: count_filtered
-- How many jobs match a filter: the exact count a bulk action's dry run reports.
SELECT count(*) FROM {schema}.jobs j WHERE {where};

-- name: requeue_filtered
-- Operator: dead jobs matching a filter back to ready with fresh attempts, one batch.
WITH victims AS (
  SELECT j.id FROM {schema}.jobs j
   WHERE j.status = 'dead' AND j.id > %(after)s AND {where}
   ORDER BY j.id
   LIMIT %(batch)s
   FOR UPDATE SKIP LOCKED
), requeued AS (
  UPDATE {schema}.jobs j
     SET status = 'ready', run_at = now(), attempts = 0, lease_until = NULL, finished_at = NULL
    FROM victims v
   WHERE j.id = v.id AND j.status = 'dead'
  RETURNING j.id, j.fence
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail)
  SELECT id, 'requeued', fence, %(actor)s, %(detail)s FROM requeued
)
SELECT (SELECT pg_catalog.max(id) FROM victims), ARRAY(SELECT id FROM requeued ORDER BY id);

-- name: kill_filtered
-- Operator: ready or running jobs matching a filter to dead, fence + 1 (a worker still running
-- one fails its next write), one batch; a running job's attempt gets its 'claimed' row as in
-- `kill`.
WITH victims AS (
  SELECT j.id, j.status AS was, j.fence, j.worker, j.claimed_at FROM {schema}.jobs j
   WHERE j.status IN ('ready', 'running') AND j.id > %(after)s AND {where}
   ORDER BY j.id
   LIMIT %(batch)s
   FOR UPDATE SKIP LOCKED
), killed AS (
  UPDATE {schema}.jobs j
     SET status = 'dead', fence = j.fence + 1, lease_until = NULL, finished_at = now(),
         last_error = %(reason)s
    FROM victims v
   WHERE j.id = v.id AND j.status IN ('ready', 'running')
  RETURNING j.id, j.fence, v.was, v.fence AS attempt, v.worker, v.claimed_at
), history AS (
  INSERT INTO {schema}.job_events (job_id, at, event, fence, worker, detail)
  SELECT id, claimed_at, 'claimed', attempt, worker, NULL FROM killed WHERE was = 'running'
  UNION ALL
  SELECT id, clock_timestamp(), 'killed', fence, %(actor)s, %(detail)s FROM killed
)
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

-- ---------------------------------------------------------------------------- error groups

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

-- ---------------------------------------------------------------------------- health

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

-- name: claim_latency
-- Jobs claimed since `since`: how many, and seconds from enqueue to claim (p50, p99) and, of
-- those already done, from enqueue to done (p50, p99); with the time to pass as the next
-- `since`. Scans jobs: for benchmarks and soaks, whose table prune keeps small.
SELECT count(*),
       pg_catalog.percentile_cont(0.5::float8)
         WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - queued_at)::float8),
       pg_catalog.percentile_cont(0.99::float8)
         WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - queued_at)::float8),
       pg_catalog.percentile_cont(0.5::float8)
         WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - queued_at)::float8)
         FILTER (WHERE status = 'done'),
       pg_catalog.percentile_cont(0.99::float8)
         WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - queued_at)::float8)
         FILTER (WHERE status = 'done'),
       clock_timestamp()
  FROM {schema}.jobs
 WHERE claimed_at >= %(since)s;

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
-- the statement's time over 80,000 rows.
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
            WITHIN GROUP (ORDER BY x.wait) FILTER (WHERE x.recent) AS wait_short,
          pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[])
            WITHIN GROUP (ORDER BY x.wait) AS wait_long,
          pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[])
            WITHIN GROUP (ORDER BY x.run) FILTER (WHERE x.recent) AS run_short,
          pg_catalog.percentile_cont(ARRAY[0.5, 0.95, 0.99]::float8[])
            WITHIN GROUP (ORDER BY x.run) AS run_long
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
SELECT pg_catalog.set_config('statement_timeout', %(statement_timeout)s, true),
       pg_catalog.set_config('lock_timeout', %(lock_timeout)s, true);

-- name: backend_pid
-- The server process this statement runs in. A pooler hands each client a cancel key of its
-- own, so a process id that differs from the one the connection announced means a pooler.
SELECT pg_catalog.pg_backend_pid() AS pid;

-- name: schema_version
-- The newest migration applied to the schema (a worker refuses to run on an older one).
SELECT coalesce(pg_catalog.max(version), 0) FROM {schema}.schema_version;
