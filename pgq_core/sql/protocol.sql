-- What producers and workers run, never waiting on a row lock; every write by a lease holder
-- matches id, fence, 'running' and a fence above fence_floor(). Why: docs/guides/protocol.md.

-- fragment: job_input
-- A batch's jobs (CTE `input`) from parallel arrays, the payloads as one JSON array; n: position.
input AS (
  SELECT * FROM ROWS FROM (
    pg_catalog.unnest(%(queues)s::text[]), pg_catalog.jsonb_array_elements(%(payloads)s::jsonb),
    pg_catalog.unnest(%(run_ats)s::timestamptz[]), pg_catalog.unnest(%(delays)s::interval[]),
    pg_catalog.unnest(%(max_attempts)s::int[]), pg_catalog.unnest(%(unique_keys)s::text[]),
    pg_catalog.unnest(%(priorities)s::int[]), pg_catalog.unnest(%(backoff_bases)s::float8[]),
    pg_catalog.unnest(%(backoff_caps)s::float8[]))
    WITH ORDINALITY AS t(q, p, r, d, m, k, pr, bb, bc, n)
)

-- fragment: held_ids
pg_catalog.unnest(%(ids)s::bigint[]), pg_catalog.unnest(%(fences)s::bigint[])

-- fragment: held_pairs
held AS (SELECT * FROM ROWS FROM ({held_ids}) AS t(id, fence))

-- fragment: lock_held
-- The held rows (CTE `held`) still ours, locked one by one by id, never waiting (CTE `mine`).
mine AS (
  SELECT j.row, t.* FROM held t CROSS JOIN LATERAL (
    SELECT j.ctid AS row FROM {schema}.jobs j
     WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
       AND j.fence > (SELECT {schema}.fence_floor())
       FOR NO KEY UPDATE OF j SKIP LOCKED) j
)

-- fragment: pinned
FROM mine m WHERE j.ctid = m.row AND j.id = m.id AND j.fence = m.fence

-- fragment: unsettled
-- The held jobs CTE `settled` left out: 'busy' if running (locked elsewhere), 'done' if done.
SELECT CASE j.status WHEN 'running' THEN 'busy' ELSE 'done' END, t.id, t.fence
  FROM held t CROSS JOIN LATERAL (SELECT j.status FROM {schema}.jobs j
    WHERE j.id = t.id AND j.fence = t.fence AND (j.status = 'done' OR j.status = 'running'
      AND j.fence > (SELECT {schema}.fence_floor())) LIMIT 1) j
 WHERE t.id NOT IN (SELECT id FROM settled)

-- fragment: claim_ready
-- The claim (CTE `claimed`) after CTE `settled`, under queue control (`gate`: paused, limit).
gate AS (
  SELECT CASE WHEN s.paused_at IS NOT NULL THEN 0 WHEN s.max_running IS NULL THEN %(limit)s
              ELSE {schema}.claim_allowance(%(queue)s, %(limit)s, ARRAY(SELECT id FROM settled))
         END AS n
    FROM {schema}.queue_settings s WHERE s.queue = %(queue)s
), claimed AS (
  UPDATE {schema}.jobs
     SET status = 'running', attempts = attempts + 1, claimed_at = clock_timestamp(),
         fence = greatest(fence + 1, (SELECT {schema}.fence_floor()) + 1), worker = %(worker)s,
         lease_until = clock_timestamp() + %(lease)s::interval, lease_length = %(lease)s::interval,
         progress_done = NULL, progress_total = NULL, progress_note = NULL, progress_at = NULL
   WHERE id = ANY(ARRAY(
     SELECT id FROM {schema}.jobs WHERE queue = %(queue)s AND status = 'ready' AND run_at <= now()
      ORDER BY priority DESC, run_at LIMIT coalesce((SELECT n FROM gate), %(limit)s)
        FOR UPDATE SKIP LOCKED))
  RETURNING id, queue, payload, fence, attempts, max_attempts, lease_until, trace, priority, run_at
)

-- fragment: dead_or_retry
-- A failed attempt (`m`: error, final): dead once {spent}, else ready again after its backoff.
status = CASE WHEN {spent} THEN 'dead' ELSE 'ready' END, lease_until = NULL, last_error = m.error,
finished_at = CASE WHEN {spent} THEN now() END,
run_at = CASE WHEN {spent} THEN now() ELSE now() + pg_catalog.make_interval(secs => least(
  coalesce(j.backoff_cap, %(cap)s::float8), coalesce(j.backoff_base, %(base)s::float8)
    * pg_catalog.power(2::float8, least(j.attempts, 62)::float8))
  * (1::float8 - %(jitter)s::float8 * random())) END

-- fragment: spent
j.attempts >= j.max_attempts OR m.final

-- fragment: done_row
status = 'done', lease_until = NULL, finished_at = now(), result = m.result

-- fragment: ready_again
status = 'ready', run_at = now(), lease_until = NULL, attempts = greatest(j.attempts - 1, 0)

-- fragment: lease_renewed
lease_until = clock_timestamp() + j.lease_length

-- fragment: lease_spent
-- An expired lease's attempts are spent, and it was taken on this timeline (`fl`: the floor).
j.attempts >= j.max_attempts AND j.fence > fl.f

-- fragment: into_history
INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail, claimed_at, traceback)

-- fragment: failover_detail
'failover: claimed on timeline ' || ((r.fence >> 32) + 1)::text
  || ', the primary is now on timeline ' || ((fl.f >> 32) + 1)::text
  || '; the attempt does not count'

-- name: enqueue
-- Many jobs, one round trip; a unique key held by a ready or running job makes no second job.
WITH {job_input}, plain AS (
  INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, priority, backoff_base,
                             backoff_cap, trace)
  SELECT q, p, coalesce(r, now() + coalesce(d, interval '0')), m, pr, bb, bc, %(trace)s::jsonb
    FROM input WHERE k IS NULL ORDER BY n
  RETURNING id, fence, NULL::text AS unique_key
), keyed AS (
  INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, unique_key, priority,
                             backoff_base, backoff_cap, trace)
  SELECT q, p, coalesce(r, now() + coalesce(d, interval '0')), m, k, pr, bb, bc, %(trace)s::jsonb
    FROM input WHERE k IS NOT NULL ORDER BY n
  ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('ready', 'running')
  DO NOTHING RETURNING id, fence, unique_key
), new_jobs AS (SELECT * FROM plain UNION ALL SELECT * FROM keyed)
SELECT id, true, unique_key FROM new_jobs
UNION ALL SELECT (SELECT j.id FROM {schema}.jobs j
                   WHERE j.unique_key = i.k AND j.status IN ('ready', 'running')), false, i.k
  FROM input i
 WHERE i.k IS NOT NULL AND i.k NOT IN (SELECT unique_key FROM keyed)
ORDER BY 1;

-- name: claim
-- SKIP LOCKED, under queue control: lease, attempts + 1, fence + 1 above the timeline's floor.
WITH settled AS (SELECT NULL::bigint AS id WHERE false), {claim_ready}
SELECT id, queue, payload, fence, attempts, max_attempts, lease_until, trace
  FROM claimed ORDER BY id;

-- name: settle_complete_and_claim
-- Complete held jobs and claim more, one round trip and one commit; then 'claimed' rows in order.
WITH held AS (SELECT * FROM ROWS FROM ({held_ids}, pg_catalog.unnest(%(results)s::jsonb[]))
                AS t(id, fence, result)
), {lock_held}, settled AS (
  UPDATE {schema}.jobs j SET {done_row} {pinned}
  RETURNING j.id, j.fence, j.claimed_at
), {claim_ready}, history AS ({into_history}
  SELECT id, 'completed', fence, %(worker)s, NULL, claimed_at, NULL FROM settled)
SELECT 'completed' AS outcome, id, fence, NULL::text AS queue, NULL::jsonb AS payload,
       NULL::int AS attempts, NULL::int AS max_attempts, NULL::timestamptz AS lease_until,
       NULL::jsonb AS trace FROM settled
UNION ALL SELECT u.*, NULL, NULL, NULL, NULL, NULL, NULL FROM ({unsettled}) u
UNION ALL (SELECT 'claimed', id, fence, queue, payload, attempts, max_attempts, lease_until,
                  trace FROM claimed ORDER BY priority DESC, run_at, id);

-- name: settle_fail
-- Fail held jobs (`dead_or_retry`), the traceback on the attempt's history row.
WITH held AS (
  SELECT * FROM ROWS FROM ({held_ids}, pg_catalog.unnest(%(errors)s::text[]),
    pg_catalog.unnest(%(finals)s::boolean[]), pg_catalog.unnest(%(tracebacks)s::text[]))
    AS t(id, fence, error, final, traceback)
), {lock_held}, settled AS (
  UPDATE {schema}.jobs j SET {dead_or_retry} {pinned}
  RETURNING j.id, j.fence, j.status, j.run_at, m.error, j.claimed_at, m.traceback
), history AS ({into_history}
  SELECT id, CASE status WHEN 'dead' THEN 'dead' ELSE 'failed' END, fence, %(worker)s,
         CASE status WHEN 'dead' THEN error ELSE error || ' (retry at ' || run_at::text || ')' END,
         claimed_at, traceback FROM settled)
SELECT 'failed' AS outcome, id, fence FROM settled UNION ALL {unsettled};

-- name: settle_snooze
-- Held jobs ready again in `delays` seconds, no attempt spent.
WITH held AS (SELECT * FROM ROWS FROM ({held_ids}, pg_catalog.unnest(%(delays)s::float8[]))
                AS t(id, fence, delay)
), {lock_held}, settled AS (
  UPDATE {schema}.jobs j SET status = 'ready', lease_until = NULL,
         attempts = greatest(j.attempts - 1, 0),
         run_at = now() + pg_catalog.make_interval(secs => m.delay) {pinned}
  RETURNING j.id, j.fence, j.claimed_at, j.run_at, m.delay
), history AS ({into_history}
  SELECT id, 'snoozed', fence, %(worker)s,
         'for ' || delay::text || 's (runs at ' || run_at::text || ')', claimed_at, NULL
    FROM settled)
SELECT 'snoozed' AS outcome, id, fence FROM settled UNION ALL {unsettled};

-- name: extend_leases
-- The heartbeat: every held lease renewed, progress written, `channel` notified if one moved.
WITH held AS (
  SELECT * FROM ROWS FROM ({held_ids}, pg_catalog.unnest(%(done)s::bigint[]),
    pg_catalog.unnest(%(total)s::bigint[]), pg_catalog.unnest(%(notes)s::text[]),
    pg_catalog.unnest(%(ages)s::float8[])) AS t(id, fence, done, total, note, age)
), {lock_held}, settled AS (
  UPDATE {schema}.jobs j SET {lease_renewed}, progress_done = coalesce(m.done, j.progress_done),
         progress_total = CASE WHEN m.done IS NULL THEN j.progress_total ELSE m.total END,
         progress_note  = CASE WHEN m.done IS NULL THEN j.progress_note ELSE m.note END,
         progress_at    = CASE WHEN m.done IS NULL THEN j.progress_at
                               ELSE clock_timestamp() - pg_catalog.make_interval(secs => m.age) END
   {pinned}
  RETURNING j.id, j.fence
)
SELECT 'extended' AS outcome, id, fence FROM settled
UNION ALL {unsettled} AND j.status = 'running'
UNION ALL SELECT 'noted', 0, pg_catalog.count(pg_catalog.pg_notify(%(channel)s::text, ''))
  FROM (SELECT 1 FROM settled LIMIT 1) moved
 WHERE %(channel)s::text IS NOT NULL;

-- name: hand_back
-- Unfinished held jobs handed back (`ready_again`). Rows: ('released' | 'busy', id, fence).
WITH {held_pairs}, {lock_held}, settled AS (
  UPDATE {schema}.jobs j SET {ready_again} {pinned}
  RETURNING j.id, j.fence, j.claimed_at
), history AS ({into_history}
  SELECT id, 'released', fence, %(worker)s, %(reason)s, claimed_at, NULL FROM settled)
SELECT 'released' AS outcome, id, fence FROM settled
UNION ALL {unsettled} AND j.status = 'running';

-- name: hand_back_orphans
-- After a reconnect: jobs running under this worker's id it does not hold, handed back.
WITH orphans AS (
  SELECT id FROM {schema}.jobs WHERE status = 'running' AND worker = %(worker)s
     AND id <> ALL(%(held)s::bigint[]) FOR NO KEY UPDATE SKIP LOCKED
), released AS (
  UPDATE {schema}.jobs j SET {ready_again} FROM orphans o
   WHERE j.id = o.id AND j.status = 'running' AND j.worker = %(worker)s
  RETURNING j.id, j.fence, j.claimed_at
), history AS ({into_history}
  SELECT id, 'released', fence, %(worker)s, 'claim reply lost: handed back unstarted',
         claimed_at, NULL FROM released)
SELECT id FROM released ORDER BY id;

-- name: hand_back_failed_over
-- After a promotion: up to `limit` jobs running under a fence at or below the floor, handed back.
WITH floor AS (SELECT {schema}.fence_floor() AS f), lost AS (
  SELECT id FROM {schema}.jobs WHERE status = 'running' AND fence <= (SELECT f FROM floor)
   LIMIT %(limit)s FOR NO KEY UPDATE SKIP LOCKED
), released AS (
  UPDATE {schema}.jobs j SET {ready_again} FROM lost l WHERE j.id = l.id
  RETURNING j.id, j.fence, j.worker, j.claimed_at
), history AS ({into_history}
  SELECT r.id, 'released', r.fence, r.worker, {failover_detail}, r.claimed_at, NULL
    FROM released r, floor fl)
SELECT (fl.f >> 32) + 1 AS timeline, r.id FROM floor fl LEFT JOIN released r ON true;

-- name: record_stale
-- A worker's write that matched nothing (its fence was stale), as history.
{into_history}
SELECT *, NULL, NULL FROM ROWS FROM (pg_catalog.unnest(%(ids)s::bigint[]),
  pg_catalog.unnest(%(events)s::text[]), pg_catalog.unnest(%(fences)s::bigint[]),
  pg_catalog.unnest(%(workers)s::text[]), pg_catalog.unnest(%(details)s::text[]));

-- name: reap
-- Expired leases back to ready (dead when spent), SKIP LOCKED; a pre-promotion lease handed back.
WITH floor AS (SELECT {schema}.fence_floor() AS f), reaped AS (
  UPDATE {schema}.jobs j SET status = CASE WHEN {lease_spent} THEN 'dead' ELSE 'ready' END,
         attempts = CASE WHEN j.fence > fl.f THEN j.attempts ELSE greatest(j.attempts - 1, 0) END,
         last_error = CASE WHEN {lease_spent} THEN 'lease expired on attempt ' || j.attempts::text
                           || ' of ' || j.max_attempts::text ELSE j.last_error END,
         finished_at = CASE WHEN {lease_spent} THEN now() END, run_at = now(), lease_until = NULL
    FROM floor fl
   WHERE j.id IN (SELECT id FROM {schema}.jobs WHERE status = 'running' AND lease_until < now()
                   LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
  RETURNING j.id, j.fence, j.status, j.worker, j.claimed_at, j.fence <= fl.f AS failed_over
), history AS ({into_history}
  SELECT r.id, CASE WHEN r.failed_over THEN 'released' WHEN r.status = 'dead' THEN 'dead'
                    ELSE 'reaped' END, r.fence, r.worker,
         CASE WHEN r.failed_over THEN {failover_detail} ELSE 'lease expired' END,
         r.claimed_at, NULL FROM reaped r, floor fl)
SELECT id, status FROM reaped ORDER BY id;
