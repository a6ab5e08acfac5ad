-- pgq schema, version 15: one history row per attempt, the same history.
-- Until now a job that ran once wrote three rows to job_events: enqueued, claimed, completed.
-- From here a plain enqueue writes none and a claim writes none: the row that ends an attempt
-- (completed, failed, dead, reaped, released) carries the attempt's `claimed_at` (and
-- `claimed_by`, the claiming worker, where another name ends it: `Queue.complete` called by
-- hand), and the running attempt is read from the job's own row. A job that ran once writes one row.
-- `job_history` puts the history back together, row for row what job_events held before:
--   * the rows job_events holds;
--   * 'claimed' (at the claim's time, the attempt's fence and worker) before each row that
--     ended an attempt, from its `claimed_at`;
--   * 'claimed' for the attempt running now, from the job's row;
--   * 'enqueued' (at queued_at, fence 0) for a job that has no written 'enqueued' row (a
--     schedule's jobs still write theirs, which name the schedule).
-- An operator's kill of a running job writes the attempt's 'claimed' row itself (with the
-- claim's time): the kill moves the fence on, and its row names the operator, not the worker.
-- Rows written before this version (and by workers of an older pgq still running) have no
-- `claimed_at` and have their own 'claimed' row; nothing is made twice.
-- Order a job's history by `ORDER BY job_id, phase, at, seq`.
ALTER TABLE {schema}.job_events ADD COLUMN claimed_at timestamptz,
                                 ADD COLUMN claimed_by text;

COMMENT ON COLUMN {schema}.job_events.claimed_at IS
  'On a row that ends an attempt: when that attempt was claimed. See the view job_history.';
COMMENT ON COLUMN {schema}.job_events.claimed_by IS
  'On a row that ends an attempt: the worker that claimed it, where not the row''s worker.';

CREATE VIEW {schema}.job_history AS
SELECT e.job_id, e.at, e.event, e.fence, e.worker, e.detail, 1 AS phase, e.id::numeric AS seq
  FROM {schema}.job_events e
UNION ALL
SELECT e.job_id, e.claimed_at, 'claimed', e.fence, coalesce(e.claimed_by, e.worker), NULL, 1,
       e.id - 0.5
  FROM {schema}.job_events e
 WHERE e.claimed_at IS NOT NULL
   AND NOT EXISTS (SELECT FROM {schema}.job_events c
                    WHERE c.job_id = e.job_id AND c.event = 'claimed' AND c.fence = e.fence)
UNION ALL
SELECT j.id, j.claimed_at, 'claimed', j.fence, j.worker, NULL, 1, NULL
  FROM {schema}.jobs j
 WHERE j.status = 'running'
   AND NOT EXISTS (SELECT FROM {schema}.job_events c
                    WHERE c.job_id = j.id AND c.event = 'claimed' AND c.fence = j.fence)
UNION ALL
SELECT j.id, j.queued_at, 'enqueued', 0, NULL, NULL, 0, 0
  FROM {schema}.jobs j
 WHERE NOT EXISTS (SELECT FROM {schema}.job_events c
                    WHERE c.job_id = j.id AND c.event = 'enqueued');

COMMENT ON VIEW {schema}.job_history IS
  'Each job''s fence history, one row per transition: ORDER BY job_id, phase, at, seq.';
