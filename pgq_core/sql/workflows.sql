-- Workflows: jobs that depend on others (migration 18). A dependent waits (status 'waiting')
-- until every parent is done; the trigger jobs_settle_dependents (migration 18) makes it ready
-- in the transaction of the last parent's completion, whichever statement completes it, kills
-- it when a parent dies and brings it back when that parent is requeued. So the protocol's
-- statements are unchanged, and a job without dependents costs what it did.
-- {schema} is the quoted schema identifier; %(name)s are bound parameters.

-- name: enqueue_after
-- Insert jobs with dependencies in one round trip: `enqueue`'s arrays (`job_input`; unique
-- keys are NULL: a job with dependencies has none) and `trace`, and the dependencies as pairs
-- (the job's 1-based position in the arrays, the parent's id). `workflow_parents` (migration
-- 24) marks each parent has_children (its row locked only by its first dependent), takes its
-- key shared to this transaction's end and reads its status afresh, so a settling of it either
-- committed before (then it is done or dead here) or waits for this commit (then it counts
-- this job off, or kills it); a claim of the parent never waits for this. A
-- job waits on its parents not done; a job with a dead parent is inserted dead, naming it (a
-- requeue of the parent brings it back); a job whose parents are all done is ready. If any
-- parent does not exist, nothing is inserted.
-- Rows: ('job', id) per job, in input order; ('missing', parent id) per unknown parent.
WITH {job_input}, deps AS (
  SELECT DISTINCT n, parent
    FROM ROWS FROM (pg_catalog.unnest(%(dep_ns)s::bigint[]),
                    pg_catalog.unnest(%(dep_parents)s::bigint[])) AS t(n, parent)
), parents AS (
  SELECT parent_id AS id, parent_status AS status
    FROM {schema}.workflow_parents(ARRAY(SELECT DISTINCT parent FROM deps))
), missing AS (
  SELECT DISTINCT parent FROM deps WHERE parent NOT IN (SELECT id FROM parents)
), counted AS (
  SELECT d.n, count(*) FILTER (WHERE p.status <> 'done') AS waiting_on,
         pg_catalog.min(p.id) FILTER (WHERE p.status = 'dead') AS dead_parent
    FROM deps d JOIN parents p ON p.id = d.parent
   GROUP BY d.n
), new_jobs AS (
  INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, priority, backoff_base,
                             backoff_cap, trace, status, parents_left, last_error, finished_at)
  SELECT i.q, i.p, coalesce(i.r, now() + coalesce(i.d, interval '0')), i.m, i.pr, i.bb, i.bc,
         %(trace)s::jsonb,
         CASE WHEN c.dead_parent IS NOT NULL THEN 'dead'
              WHEN c.waiting_on > 0 THEN 'waiting' ELSE 'ready' END,
         coalesce(c.waiting_on, 0),
         'parent ' || c.dead_parent::text || ' died',
         CASE WHEN c.dead_parent IS NOT NULL THEN now() END
    FROM input i LEFT JOIN counted c ON c.n = i.n
   WHERE NOT EXISTS (SELECT FROM missing)
   ORDER BY i.n
  RETURNING id, fence, status, last_error
), history AS (
  INSERT INTO {schema}.job_events (job_id, event, fence, detail)
  SELECT id, 'parent died', fence, last_error FROM new_jobs WHERE status = 'dead'
), numbered AS (
  SELECT id, pg_catalog.row_number() OVER (ORDER BY id) AS n FROM new_jobs
), edges AS (
  INSERT INTO {schema}.job_deps (child, parent)
  SELECT b.id, d.parent FROM numbered b JOIN deps d ON d.n = b.n
)
SELECT 'job', id FROM new_jobs
UNION ALL
SELECT 'missing', parent FROM missing
ORDER BY 1, 2;

-- name: job_parents
-- A job's parents, at most `limit`, lowest id first: (id, queue, status), the status NULL for
-- a parent deleted since (pruned). Also how many there are in all.
SELECT d.parent, j.queue, j.status, count(*) OVER ()
  FROM {schema}.job_deps d LEFT JOIN {schema}.jobs j ON j.id = d.parent
 WHERE d.child = %(id)s
 ORDER BY d.parent
 LIMIT %(limit)s;

-- name: job_children
-- A job's dependents, at most `limit`, lowest id first: (id, queue, status), and how many there
-- are in all.
SELECT d.child, j.queue, j.status, count(*) OVER ()
  FROM {schema}.job_deps d JOIN {schema}.jobs j ON j.id = d.child
 WHERE d.parent = %(id)s
 ORDER BY d.child
 LIMIT %(limit)s;
