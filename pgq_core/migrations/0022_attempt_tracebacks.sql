-- A failed attempt keeps its traceback: `job_events.traceback` holds the stack the handler
-- raised with (bounded by the worker, the cut shown), on the row that ended the attempt
-- ('failed' or 'dead'). `detail` and the job's `last_error` keep the error line alone, so
-- error groups (`error_pattern`, the first line) group as before. `job_history` gains the
-- column last, so a reader of the old columns reads them unchanged.
ALTER TABLE {schema}.job_events ADD COLUMN traceback text;

COMMENT ON COLUMN {schema}.job_events.traceback IS
  'On a failed or dead row: the traceback the handler raised with, bounded (the cut shown).';

CREATE OR REPLACE VIEW {schema}.job_history AS
SELECT e.job_id, e.at, e.event, e.fence, e.worker, e.detail, 1 AS phase, e.id::numeric AS seq,
       e.traceback
  FROM {schema}.job_events e
UNION ALL
SELECT e.job_id, e.claimed_at, 'claimed', e.fence, coalesce(e.claimed_by, e.worker), NULL, 1,
       e.id - 0.5, NULL
  FROM {schema}.job_events e
 WHERE e.claimed_at IS NOT NULL
   AND NOT EXISTS (SELECT FROM {schema}.job_events c
                    WHERE c.job_id = e.job_id AND c.event = 'claimed' AND c.fence = e.fence)
UNION ALL
SELECT j.id, j.claimed_at, 'claimed', j.fence, j.worker, NULL, 1, NULL, NULL
  FROM {schema}.jobs j
 WHERE j.status = 'running'
   AND NOT EXISTS (SELECT FROM {schema}.job_events c
                    WHERE c.job_id = j.id AND c.event = 'claimed' AND c.fence = j.fence)
UNION ALL
SELECT j.id, j.queued_at, 'enqueued', 0, NULL, NULL, 0, 0, NULL
  FROM {schema}.jobs j
 WHERE NOT EXISTS (SELECT FROM {schema}.job_events c
                    WHERE c.job_id = j.id AND c.event = 'enqueued');
