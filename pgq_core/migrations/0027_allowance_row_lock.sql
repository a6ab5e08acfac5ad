-- pgq schema, version 27: limited claims serialize on their queue's settings row, not on an
-- advisory lock. Any role, even one without a single grant, could compute the old key
-- (the settings table's oid, hashtext of the queue name) and hold it, stalling every claim of a
-- limited queue into its lock timeout. A row lock (FOR NO KEY UPDATE) needs SELECT and UPDATE
-- on queue_settings, which only the queue's owner and the roles it grants them to hold. The rest
-- is as before: claims of one limited queue run one at a time, and the count of running jobs
-- is read in a fresh snapshot after the lock, so it sees every claim the previous holder made.
CREATE OR REPLACE FUNCTION {schema}.claim_allowance(p_queue text, p_want int, p_settling bigint[])
RETURNS int LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
DECLARE
  max_running int;
  running bigint;
BEGIN
  IF p_want <= 0 THEN
    RETURN 0;
  END IF;
  SELECT s.max_running INTO max_running FROM {schema}.queue_settings s
   WHERE s.queue = p_queue FOR NO KEY UPDATE;
  IF max_running IS NULL THEN
    RETURN p_want;
  END IF;
  SELECT count(*) INTO running FROM {schema}.jobs j
   WHERE j.queue = p_queue AND j.status = 'running' AND j.id <> ALL(p_settling);
  RETURN greatest(0, least(p_want::bigint, max_running - running))::int;
END
$fn$;
