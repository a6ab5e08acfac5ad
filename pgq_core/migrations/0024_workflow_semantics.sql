-- pgq schema, version 24: workflows an operator can trust.
--
-- An operator's kill is final: an ancestor's requeue brings back only the dependents that died
-- of a parent (their latest history row is 'parent died'), never one the operator killed while
-- it waited; only its own requeue brings that one back.
--
-- A job brought back with its ancestor waits without its stale error ('parent N died').
--
-- Enqueueing children no longer holds their parent's row: `workflow_parents` marks a parent
-- (has_children) only on its first dependent, then takes the parent's key shared and reads
-- its status in a fresh snapshot. The parent's settling (done, dead, back from dead: the
-- trigger below) takes the same key exclusively before it reads the children. So either the
-- enqueue read the status after the settling committed (and counted the parent done, or made
-- the child dead), or the settling waits for the enqueue's commit and sees its children. A
-- claim of the parent takes neither: before, each enqueue locked the parent's row to its
-- commit and a claim skipped the parent meanwhile (up to 135 tries with 50 enqueuers).
-- The key is hashtextextended(jobs' oid as text, parent id): a collision only makes a settling
-- wait for an unrelated enqueue.

CREATE FUNCTION {schema}.workflow_parents(ids bigint[])
RETURNS TABLE (parent_id bigint, parent_status text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
DECLARE
  parent bigint;
  relation text := '{schema}.jobs'::pg_catalog.regclass::pg_catalog.oid::pg_catalog.text;
BEGIN
  -- a parent's first dependent marks it; the rest leave its row alone
  PERFORM 1 FROM {schema}.jobs j
    WHERE j.id = ANY(ids) AND NOT j.has_children
    ORDER BY j.id
      FOR NO KEY UPDATE;
  UPDATE {schema}.jobs j SET has_children = true WHERE j.id = ANY(ids) AND NOT j.has_children;
  FOR parent IN SELECT DISTINCT x FROM pg_catalog.unnest(ids) AS x ORDER BY x LOOP
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(
      pg_catalog.hashtextextended(relation, parent));
  END LOOP;
  -- a statement of its own: its snapshot sees every settling committed before the keys
  RETURN QUERY SELECT j.id, j.status FROM {schema}.jobs j WHERE j.id = ANY(ids);
END
$fn$;

CREATE OR REPLACE FUNCTION {schema}.jobs_settle_dependents() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
DECLARE
  ids bigint[];
  parents bigint[];
BEGIN
  -- the enqueues of this parent's children in flight commit first (each holds this key
  -- shared from its read of the parent's status to its commit): every child they wrote is
  -- seen by the statements below, which each take a fresh snapshot
  PERFORM pg_catalog.pg_advisory_xact_lock(
    pg_catalog.hashtextextended(TG_RELID::pg_catalog.text, NEW.id));
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
         AND (SELECT e.event FROM {schema}.job_events e WHERE e.job_id = j.id
               ORDER BY e.id DESC LIMIT 1) = 'parent died'
       WHERE d.parent = NEW.id
      UNION
      SELECT d.child FROM revived x
        JOIN {schema}.job_deps d ON d.parent = x.id
        JOIN {schema}.jobs j ON j.id = d.child AND j.status = 'dead' AND j.parents_left > 0
         AND (SELECT e.event FROM {schema}.job_events e WHERE e.job_id = j.id
               ORDER BY e.id DESC LIMIT 1) = 'parent died'
    )
    SELECT pg_catalog.array_agg(id ORDER BY id) INTO ids FROM revived;
    IF ids IS NULL THEN
      RETURN NULL;
    END IF;
    PERFORM 1 FROM {schema}.jobs WHERE id = ANY(ids) ORDER BY id FOR NO KEY UPDATE;
    WITH back AS (
      UPDATE {schema}.jobs j
         SET status = 'waiting', attempts = 0, finished_at = NULL, lease_until = NULL,
             last_error = NULL,
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

