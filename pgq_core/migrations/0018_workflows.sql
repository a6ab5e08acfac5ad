-- pgq schema, version 18: workflows. A job may depend on others (`depends_on`): it waits
-- (status 'waiting') until every parent is done, then is ready, in the transaction of the last
-- parent's completion; a parent that dies takes its waiting dependents with it, transitively
-- (last_error 'parent <id> died'); requeueing the parent brings them back to waiting.
--
--   job_deps (child, parent)   one row per dependency, written with the child (enqueue_after,
--                              sql/workflows.sql); only to jobs that existed before the child
--   jobs.parents_left          the child's parents not yet done: counted down, under the
--                              child's row lock, by each parent's completion; the last makes
--                              it ready. Still > 0 on a job that died of a parent (a job
--                              that died of its own attempts has none left): what a requeue
--                              of the parent brings back
--   jobs.has_children          set (on the parent's row, which the enqueue locks) when a
--                              dependent is enqueued: the trigger below fires only for these
--                              rows, so a job without dependents settles as before: no probe,
--                              no function call, only the trigger's WHEN test of one column
--
-- Why the enqueue writes the parent's row: a completion statement that waited for that row
-- re-reads it (READ COMMITTED) and so sees has_children set; the trigger then runs in a
-- statement of its own, whose fresh snapshot sees the new job_deps row. A worker's settle
-- statement skips a locked row (it reports it 'busy' and settles it again later). So no
-- dependency committed before its parent's completion is ever missed, and one committed after
-- it finds the parent done (and does not count it).
-- Two parents completed at once by two sessions: each locks the waiting children (in id
-- order, so they never deadlock) and counts itself off; the second waits for the first's
-- commit and counts from its result, so one of them sees the count reach 0.
-- A waiting job holds no unique key (the unique index covers ready and running jobs): a job
-- with dependencies has none (the API refuses both at once).
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_status_check
  CHECK (status IN ('waiting', 'ready', 'running', 'done', 'dead'));
ALTER TABLE {schema}.jobs ADD COLUMN parents_left int NOT NULL DEFAULT 0,
                          ADD COLUMN has_children boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN {schema}.jobs.parents_left IS
  'Parents (job_deps) not yet done: a waiting job is ready when it reaches 0.';
COMMENT ON COLUMN {schema}.jobs.has_children IS
  'A job depends on this one (job_deps.parent): its done or dead settles its dependents.';

CREATE TABLE {schema}.job_deps (
  child  bigint NOT NULL,
  parent bigint NOT NULL,
  PRIMARY KEY (child, parent)
);
-- A parent's children, for its completion or death (only parents with has_children look).
CREATE INDEX job_deps_parent_idx ON {schema}.job_deps (parent, child);
-- Waiting jobs per queue, for the dashboard's status list and the operator (no scan of done
-- rows); a claim never reads them (jobs_ready_idx is status = 'ready').
CREATE INDEX jobs_waiting_idx ON {schema}.jobs (queue, id) WHERE status = 'waiting';

-- The dependents of a parent whose status just changed (NEW.has_children):
--   done:  each waiting child counts it off; at 0 the child is ready ('unblocked' row);
--   dead:  its waiting descendants die, each naming its parent ('parent died' row);
--   from dead (a requeue): its descendants that died of a parent wait again, counted
--          afresh ('requeued' row); one that still has a dead parent dies again.
-- The descendants' own firings find nothing left to do (they are dead or waiting already).
CREATE FUNCTION {schema}.jobs_settle_dependents() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
DECLARE
  ids bigint[];
  parents bigint[];
BEGIN
  IF NEW.status = 'done' THEN
    PERFORM 1 FROM {schema}.jobs j
      WHERE j.id IN (SELECT d.child FROM {schema}.job_deps d WHERE d.parent = NEW.id)
        AND j.status = 'waiting'
      ORDER BY j.id
        FOR NO KEY UPDATE;
    WITH counted AS (
      UPDATE {schema}.jobs j
         SET parents_left = j.parents_left - 1,
             status = CASE WHEN j.parents_left <= 1 THEN 'ready' ELSE 'waiting' END,
             run_at = CASE WHEN j.parents_left <= 1 THEN greatest(j.run_at, now())
                           ELSE j.run_at END
       WHERE j.id IN (SELECT d.child FROM {schema}.job_deps d WHERE d.parent = NEW.id)
         AND j.status = 'waiting'
      RETURNING j.id, j.status, j.fence
    )
    INSERT INTO {schema}.job_events (job_id, event, fence, detail)
    SELECT id, 'unblocked', fence, pg_catalog.format('parent %s done, the last', NEW.id)
      FROM counted WHERE status = 'ready';
  ELSIF NEW.status = 'dead' THEN
    WITH RECURSIVE doomed(id, parent) AS (
      SELECT d.child, d.parent FROM {schema}.job_deps d
        JOIN {schema}.jobs j ON j.id = d.child AND j.status = 'waiting'
       WHERE d.parent = NEW.id
      UNION
      SELECT d.child, d.parent FROM doomed x
        JOIN {schema}.job_deps d ON d.parent = x.id
        JOIN {schema}.jobs j ON j.id = d.child AND j.status = 'waiting'
    )
    SELECT pg_catalog.array_agg(id ORDER BY id), pg_catalog.array_agg(parent ORDER BY id) INTO ids, parents
      FROM (SELECT DISTINCT ON (id) id, parent FROM doomed ORDER BY id, parent) one;
    IF ids IS NULL THEN
      RETURN NULL;
    END IF;
    PERFORM 1 FROM {schema}.jobs WHERE id = ANY(ids) ORDER BY id FOR NO KEY UPDATE;
    WITH killed AS (
      UPDATE {schema}.jobs j
         SET status = 'dead', finished_at = now(),
             last_error = pg_catalog.format('parent %s died', t.parent)
        FROM ROWS FROM (pg_catalog.unnest(ids), pg_catalog.unnest(parents)) AS t(id, parent)
       WHERE j.id = t.id AND j.status = 'waiting'
      RETURNING j.id, j.fence, j.last_error
    )
    INSERT INTO {schema}.job_events (job_id, event, fence, detail)
    SELECT id, 'parent died', fence, last_error FROM killed;
  ELSIF OLD.status = 'dead' THEN
    WITH RECURSIVE revived(id) AS (
      SELECT d.child FROM {schema}.job_deps d
        JOIN {schema}.jobs j ON j.id = d.child AND j.status = 'dead' AND j.parents_left > 0
       WHERE d.parent = NEW.id
      UNION
      SELECT d.child FROM revived x
        JOIN {schema}.job_deps d ON d.parent = x.id
        JOIN {schema}.jobs j ON j.id = d.child AND j.status = 'dead' AND j.parents_left > 0
    )
    SELECT pg_catalog.array_agg(id ORDER BY id) INTO ids FROM revived;
    IF ids IS NULL THEN
      RETURN NULL;
    END IF;
    PERFORM 1 FROM {schema}.jobs WHERE id = ANY(ids) ORDER BY id FOR NO KEY UPDATE;
    WITH back AS (
      UPDATE {schema}.jobs j
         SET status = 'waiting', attempts = 0, finished_at = NULL, lease_until = NULL,
             parents_left = (SELECT count(*) FROM {schema}.job_deps d
                               JOIN {schema}.jobs p ON p.id = d.parent
                              WHERE d.child = j.id AND p.status <> 'done')
       WHERE j.id = ANY(ids) AND j.status = 'dead' AND j.parents_left > 0
      RETURNING j.id, j.fence
    )
    INSERT INTO {schema}.job_events (job_id, event, fence, detail)
    SELECT id, 'requeued', fence, pg_catalog.format('with its ancestor %s', NEW.id) FROM back;
    -- a job brought back that still has a dead parent (not requeued) dies again
    WITH killed AS (
      UPDATE {schema}.jobs j
         SET status = 'dead', finished_at = now(),
             last_error = pg_catalog.format('parent %s died', p.id)
        FROM (SELECT DISTINCT ON (d.child) d.child, d.parent AS id
                FROM {schema}.job_deps d JOIN {schema}.jobs pj ON pj.id = d.parent
               WHERE d.child = ANY(ids) AND pj.status = 'dead'
               ORDER BY d.child, d.parent) p
       WHERE j.id = p.child AND j.status = 'waiting'
      RETURNING j.id, j.fence, j.last_error
    )
    INSERT INTO {schema}.job_events (job_id, event, fence, detail)
    SELECT id, 'parent died', fence, last_error FROM killed;
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER jobs_settle_dependents AFTER UPDATE OF status ON {schema}.jobs
FOR EACH ROW WHEN (NEW.has_children AND OLD.status IS DISTINCT FROM NEW.status
                   AND (NEW.status IN ('done', 'dead') OR OLD.status = 'dead'))
EXECUTE FUNCTION {schema}.jobs_settle_dependents();

-- A deleted job (prune, delete) takes its own dependencies along; a deleted parent's rows stay
-- with their child (which shows the parent as gone) until the child goes.
CREATE FUNCTION {schema}.jobs_forget_dependencies() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
BEGIN
  DELETE FROM {schema}.job_deps WHERE child IN (SELECT id FROM old_rows);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER jobs_forget_dependencies AFTER DELETE ON {schema}.jobs
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_forget_dependencies();
