-- pgq schema, version 38: no BEFORE ROW INSERT trigger on jobs, so COPY inserts in batches.
-- PostgreSQL's COPY writes rows through heap_multi_insert (many rows per page lock and WAL
-- record) unless the table has a BEFORE or INSTEAD OF ROW INSERT trigger: then it inserts one
-- row at a time, whatever the trigger's WHEN says. jobs had two, both rare in effect: the
-- error group of an inserted row with an error (migration 2) and the check that a role that may
-- not write leases inserts no running or done job (migration 28). Both become AFTER ROW
-- triggers with the same WHEN: an AFTER ROW trigger whose WHEN is false queues nothing, and it
-- leaves COPY its batches. 100,000 jobs copied in: 39.3 MB of WAL before, 34.9 MB after.
-- The guarantees hold for INSERT, COPY and plain SQL, for every role (tests/test_roles.py,
-- tests/test_ops_cli.py):
-- 1. The check raises from the AFTER trigger, at the end of the inserting statement, which then
--    fails whole as before. Its dead-parent exception now sees the statement's own rows: the
--    parent named must also have a lower id than the job (ids come from the sequence, in
--    insertion order, to a role that may not name ids), so two jobs inserted dead cannot name
--    each other, as a BEFORE trigger could not see a later row of its statement.
-- 2. An inserted row with last_error and no matching error_group gets it by an UPDATE of that
--    row, with the owner's rights (a producer has no UPDATE on jobs; the function is reached
--    only as this trigger, for rows the statement inserted): `enqueue_after`'s dead children,
--    or an operator's plain SQL; a row written with its right group gets no second version.
--    The inserting statement's RETURNING (before its AFTER triggers) shows the value written.
--    The WHEN names no function: a trigger's WHEN is planned again at every statement's start,
--    and inlining error_group() there (parsing its SQL body) cost every one-job INSERT about
--    40 us of the backend's CPU (interleaved blocks of 2,000: 140 us against 100 us).
DROP TRIGGER jobs_error_group_insert ON {schema}.jobs;
DROP TRIGGER jobs_check_insert ON {schema}.jobs;

CREATE OR REPLACE FUNCTION {schema}.jobs_check_insert() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
BEGIN
  IF {schema}.may_write_leases() THEN
    RETURN NULL;
  END IF;
  IF NEW.status = 'dead' AND EXISTS (
       SELECT 1 FROM {schema}.jobs p
        WHERE p.status = 'dead'
          AND p.id < NEW.id
          AND NEW.last_error = 'parent ' || p.id::text || ' died'
          AND p.id = pg_catalog.substring(NEW.last_error, '^parent ([0-9]{{1,19}}) died$')::bigint)
  THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'role % may not insert a job as %: a producer enqueues jobs ready or waiting',
    current_user, NEW.status USING ERRCODE = 'insufficient_privilege';
END
$fn$;

CREATE TRIGGER jobs_check_insert AFTER INSERT ON {schema}.jobs
  FOR EACH ROW WHEN (NEW.status NOT IN ('ready', 'waiting'))
  EXECUTE FUNCTION {schema}.jobs_check_insert();

CREATE FUNCTION {schema}.jobs_group_inserted_error() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
BEGIN
  UPDATE {schema}.jobs SET error_group = {schema}.error_group(last_error)
   WHERE id = NEW.id AND error_group IS DISTINCT FROM {schema}.error_group(last_error);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER jobs_error_group_insert AFTER INSERT ON {schema}.jobs
  FOR EACH ROW WHEN (NEW.last_error IS NOT NULL)
  EXECUTE FUNCTION {schema}.jobs_group_inserted_error();

-- fire under any session_replication_role, as the other pgq triggers do (migration 26)
ALTER TABLE {schema}.jobs ENABLE ALWAYS TRIGGER jobs_check_insert;
ALTER TABLE {schema}.jobs ENABLE ALWAYS TRIGGER jobs_error_group_insert;
REVOKE EXECUTE ON FUNCTION {schema}.jobs_group_inserted_error() FROM PUBLIC;
