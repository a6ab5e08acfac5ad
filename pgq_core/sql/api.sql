-- The public batch API (`Queue.heartbeat`, `complete`, `fail`, `release`): what an application
-- holding jobs it claimed itself runs, by name. Each is the protocol's statement of the same
-- kind less its never-wait rule: it waits for a row lock another session holds, as a plain
-- UPDATE would, then writes each held row by id and fence (a row a heartbeat updated while it
-- waited is still written). Each writes its rows with its twin's fragment (protocol.sql):
-- `complete` as `settle_complete_and_claim`, `fail` as `settle_fail`, `heartbeat` as
-- `extend_leases`, `release` as `hand_back`. Rows not returned are lost: a stale fence, a fence
-- from before a promotion, or a job not running.

-- fragment: wait_held
-- As `lock_held`, waiting for a lock another session holds. The update after it finds each row
-- by id, not address: one updated since the statement began (a heartbeat) is still written.
mine AS (
  SELECT j.row, t.* FROM held t CROSS JOIN LATERAL (
    SELECT j.ctid AS row FROM {schema}.jobs j
     WHERE j.id = t.id AND j.fence = t.fence AND j.status = 'running'
       AND j.fence > (SELECT {schema}.fence_floor())
       FOR NO KEY UPDATE OF j) j
)

-- name: heartbeat
-- Extend the leases of many held jobs; the rows not returned are lost.
WITH {held_pairs}, {wait_held}
UPDATE {schema}.jobs j SET {lease_renewed}
  FROM mine m WHERE j.id = m.id AND j.fence = m.fence
RETURNING j.id, j.fence, j.lease_until;

-- name: complete
-- Settle many held jobs as done, each with its result (or NULL); the rows not returned are lost.
WITH held AS (SELECT * FROM ROWS FROM ({held_ids}, pg_catalog.unnest(%(results)s::jsonb[]))
                AS t(id, fence, result)
), {wait_held}, settled AS (
  UPDATE {schema}.jobs j SET {done_row}
    FROM mine m WHERE j.id = m.id AND j.fence = m.fence
  RETURNING j.id, j.fence, j.claimed_at, j.worker
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, claimed_at, claimed_by)
  SELECT id, 'completed', fence, %(worker)s, claimed_at,
         CASE WHEN worker IS DISTINCT FROM %(worker)s THEN worker END
    FROM settled
)
SELECT id, fence FROM settled;

-- name: fail
-- Settle many held jobs as failed: retry after `backoff`, or dead at max_attempts (never
-- `final`); the rows not returned are lost.
WITH held AS (
  SELECT *, false AS final FROM ROWS FROM ({held_ids}, pg_catalog.unnest(%(errors)s::text[]))
    AS t(id, fence, error)
), {wait_held}, settled AS (
  UPDATE {schema}.jobs j SET {dead_or_retry}
    FROM mine m WHERE j.id = m.id AND j.fence = m.fence
  RETURNING j.id, j.fence, j.status, j.run_at, m.error, j.claimed_at, j.worker
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
WITH {held_pairs}, {wait_held}, released AS (
  UPDATE {schema}.jobs j SET {ready_again}
    FROM mine m WHERE j.id = m.id AND j.fence = m.fence
  RETURNING j.id, j.fence, j.claimed_at, j.worker
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, worker, detail, claimed_at, claimed_by)
  SELECT id, 'released', fence, %(worker)s, %(reason)s, claimed_at,
         CASE WHEN worker IS DISTINCT FROM %(worker)s THEN worker END
    FROM released
)
SELECT id, fence FROM released;
