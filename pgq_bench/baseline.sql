-- The baseline's SQL, by name: the one home of the statements `pgq bench` runs as "baseline",
-- a plain-SQL job queue. Not pgq's SQL (that is pgq_core/sql/): this is the classic SKIP
-- LOCKED design pgq is measured against, exactly as the bench runs it. The statements are
-- unqualified; they run on connections whose search_path is the baseline's throwaway schema.
-- Placeholders are psycopg's: the design's $1 is %(queue)s (claim) or %(id)s (complete), $2 is
-- %(fence)s, and its `LIMIT 10` is %(limit)s (10 unless `pgq bench --batch` says otherwise).

-- name: table
-- The baseline's table, verbatim.
CREATE TABLE jobs (
  id           bigserial   PRIMARY KEY,
  queue        text        NOT NULL,
  payload      jsonb       NOT NULL,
  status       text        NOT NULL DEFAULT 'ready', -- ready | running | done | dead
  run_at       timestamptz NOT NULL DEFAULT now(),
  attempts     int         NOT NULL DEFAULT 0,
  max_attempts int         NOT NULL DEFAULT 5,
  lease_until  timestamptz,
  fence        bigint      NOT NULL DEFAULT 0,
  last_error   text
);

-- name: ready_index
-- The baseline's first partial index, verbatim.
CREATE INDEX jobs_ready_idx ON jobs (queue, run_at) WHERE status = 'ready';

-- name: lease_index
-- The baseline's second partial index, verbatim.
CREATE INDEX jobs_lease_idx ON jobs (lease_until) WHERE status = 'running';

-- name: enqueue
-- The design shows no INSERT; this is the plain one, one job per statement.
INSERT INTO jobs (queue, payload) VALUES (%(queue)s, %(payload)s);

-- name: enqueue_batch
-- The plain batch INSERT: many jobs of one queue in one statement, their payloads an array.
INSERT INTO jobs (queue, payload) SELECT %(queue)s, p FROM unnest(%(payloads)s::jsonb[]) p;

-- name: claim
-- The baseline's claim, one short transaction.
UPDATE jobs
SET status      = 'running',
    attempts    = attempts + 1,
    fence       = fence + 1,
    lease_until = now() + interval '30 seconds'
WHERE id IN (
  SELECT id FROM jobs
  WHERE queue = %(queue)s AND status = 'ready' AND run_at <= now()
  ORDER BY run_at
  LIMIT %(limit)s
  FOR UPDATE SKIP LOCKED
)
RETURNING id, payload, fence;

-- name: complete
-- The baseline's completion: one UPDATE (and transaction) per job.
UPDATE jobs
SET status = 'done', lease_until = NULL
WHERE id = %(id)s AND fence = %(fence)s AND status = 'running';
