-- pgq schema, version 28: what a role may do is what its grants say, and nothing more
-- (`pgq roles`, pgq_core/sql/roles.sql, docs/guides/roles.md).
--
-- 1. The schema's own bookkeeping runs with its owner's rights (SECURITY DEFINER, search_path
--    pinned as every pgq function is): the jobs triggers that keep queue_counts, settle a
--    parent's children and forget a deleted job's edges, the read of a workflow's parents
--    (which marks each parent has_children), a limited queue's allowance (which locks its
--    settings row) and the history partitions' upkeep. So a producer needs no UPDATE on jobs
--    (UPDATE on any column would let it lock every job row with SELECT ... FOR UPDATE, and the
--    claims skip locked rows: a stalled queue), a worker no UPDATE on queue_settings, and
--    neither any grant on queue_counts. A trigger function cannot be called but as a trigger,
--    so its rights reach no one who may not write the table; the others are callable only by
--    the roles granted EXECUTE on them (below: no longer PUBLIC).
-- 2. No function of the schema is executable by PUBLIC: `pgq roles` grants each role EXECUTE
--    on exactly those its statements call.
-- 3. A role that may not write a lease (no UPDATE on jobs.lease_until: a producer) may insert
--    a job only as ready or waiting, or dead when it names a parent that is dead (what an
--    enqueue with depends_on does for a dead parent); never running or done. Its column grants
--    already keep it from naming a lease, a fence, attempts or a worker.
-- 4. Edges are made only with their child: such a role's row in job_deps, or in job_events
--    without a worker (the 'parent died' line of such an enqueue), must name a job this very
--    transaction wrote, as the enqueue with depends_on writes its jobs, their edges and that
--    line in one statement. Checked by AFTER ROW triggers, which run once the statement is
--    over and so see the jobs it inserted. A row is this transaction's when it is visible and
--    its xmin is still in progress (only the writer sees such a row; subtransactions
--    included). So a producer cannot make another queue's job wait on its own, nor write
--    history for a job it did not enqueue.
-- A later CREATE OR REPLACE of any function below must keep SECURITY DEFINER (it resets to
-- INVOKER when left out): tests/test_roles.py runs each role and fails if one is lost.
ALTER FUNCTION {schema}.jobs_after_change() SECURITY DEFINER;
ALTER FUNCTION {schema}.jobs_settle_dependents() SECURITY DEFINER;
ALTER FUNCTION {schema}.jobs_forget_dependencies() SECURITY DEFINER;
ALTER FUNCTION {schema}.workflow_parents(bigint[]) SECURITY DEFINER;
ALTER FUNCTION {schema}.claim_allowance(text, int, bigint[]) SECURITY DEFINER;
ALTER FUNCTION {schema}.job_events_add_partitions(date, date, interval) SECURITY DEFINER;
ALTER FUNCTION {schema}.job_events_drop_partition(text, interval, interval, int)
  SECURITY DEFINER;

-- Whether the row whose xmin is `x`, which the caller can see, was written by the caller's own
-- transaction or one of its subtransactions: that xid is still in progress (another
-- transaction's uncommitted row is never visible). `x` is made 64-bit as the xid nearest the
-- current transaction's (the same modulo-2^32 window PostgreSQL compares xids in).
CREATE FUNCTION {schema}.written_here(x xid) RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
  SELECT full_xid >= 3 AND coalesce(
           pg_catalog.pg_xact_status(CAST(CAST(full_xid AS text) AS xid8)) = 'in progress',
           false)
    FROM (SELECT near + CASE WHEN near - cur > 2147483648 THEN -4294967296
                             WHEN cur - near > 2147483648 THEN 4294967296 ELSE 0 END
                   AS full_xid, cur
            FROM (SELECT (cur >> 32 << 32) + CAST(CAST(x AS text) AS bigint) AS near, cur
                    FROM (SELECT CAST(CAST(pg_catalog.pg_current_xact_id() AS text) AS bigint)
                                   AS cur) c) n) v
$fn$;

-- Whether job `p_id` is a row the caller's transaction wrote. With the owner's rights: xmin
-- is a column no column grant reaches. Tells the caller about its own writes only.
CREATE FUNCTION {schema}.job_written_here(p_id bigint) RETURNS boolean
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
  SELECT coalesce((SELECT {schema}.written_here(j.xmin) FROM {schema}.jobs j
                    WHERE j.id = p_id), false)
$fn$;

-- May the current role write leases (UPDATE on jobs.lease_until)? Such a role can already
-- make any job anything, so the checks below leave it alone (operators, workers, the owner).
CREATE FUNCTION {schema}.may_write_leases() RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
  SELECT pg_catalog.has_column_privilege('{schema}.jobs'::regclass, 'lease_until', 'UPDATE')
$fn$;

CREATE FUNCTION {schema}.jobs_check_insert() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
BEGIN
  IF {schema}.may_write_leases() THEN
    RETURN NEW;
  END IF;
  IF NEW.status = 'dead' AND EXISTS (
       SELECT 1 FROM {schema}.jobs p
        WHERE p.status = 'dead'
          AND NEW.last_error = 'parent ' || p.id::text || ' died'
          AND p.id = pg_catalog.substring(NEW.last_error, '^parent ([0-9]{{1,19}}) died$')::bigint)
  THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'role % may not insert a job as %: a producer enqueues jobs ready or waiting',
    current_user, NEW.status USING ERRCODE = 'insufficient_privilege';
END
$fn$;

CREATE TRIGGER jobs_check_insert BEFORE INSERT ON {schema}.jobs
  FOR EACH ROW WHEN (NEW.status NOT IN ('ready', 'waiting'))
  EXECUTE FUNCTION {schema}.jobs_check_insert();

CREATE FUNCTION {schema}.job_deps_check_insert() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
BEGIN
  IF {schema}.may_write_leases() THEN
    RETURN NULL;
  END IF;
  IF NOT {schema}.job_written_here(NEW.child) THEN
    RAISE EXCEPTION 'role % may not add a dependency to job %: edges are made only by the '
      'enqueue of their child', current_user, NEW.child USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER job_deps_check_insert AFTER INSERT ON {schema}.job_deps
  FOR EACH ROW EXECUTE FUNCTION {schema}.job_deps_check_insert();

CREATE FUNCTION {schema}.job_events_check_insert() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
BEGIN
  IF {schema}.may_write_leases() THEN
    RETURN NULL;
  END IF;
  IF NEW.event <> 'parent died' OR NOT {schema}.job_written_here(NEW.job_id)
     OR NOT EXISTS (SELECT 1 FROM {schema}.jobs j WHERE j.id = NEW.job_id AND j.status = 'dead')
  THEN
    RAISE EXCEPTION 'role % may not write history for job %: only its enqueue does',
      current_user, NEW.job_id USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END
$fn$;

CREATE TRIGGER job_events_check_insert AFTER INSERT ON {schema}.job_events
  FOR EACH ROW WHEN (NEW.worker IS NULL)
  EXECUTE FUNCTION {schema}.job_events_check_insert();

-- fire under any session_replication_role, as the other pgq triggers do (migration 26)
ALTER TABLE {schema}.jobs ENABLE ALWAYS TRIGGER jobs_check_insert;
ALTER TABLE {schema}.job_deps ENABLE ALWAYS TRIGGER job_deps_check_insert;
ALTER TABLE {schema}.job_events ENABLE ALWAYS TRIGGER job_events_check_insert;

-- No function is PUBLIC's but those that read nothing: the error grouping (called by the jobs
-- trigger that sets error_group, as whoever writes last_error) and the two checks' helpers.
-- A later migration that creates a function revokes it from PUBLIC likewise (PUBLIC's
-- default EXECUTE cannot be revoked per schema); tests/test_roles.py checks.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {schema}.error_pattern(text), {schema}.error_group(text),
  {schema}.written_here(xid), {schema}.job_written_here(bigint), {schema}.may_write_leases()
  TO PUBLIC;
