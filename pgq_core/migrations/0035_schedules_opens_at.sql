-- pgq schema, version 35: a scheduler pass reads only the schedules that are due.
-- Before, every worker read every schedule about once a second and worked out in Python which
-- were due: with 10,000 schedules that was most of an idle worker's CPU. Now each schedule
-- keeps `opens_at`, when its next slot may be enqueued (AHEAD of the slot at most), kept by
-- the statement that enqueues a slot; a pass reads the rows whose `opens_at` has come, by an
-- index, and the earliest `opens_at` and `last_slot` to come, by indexes, to know when to wake.
-- '-infinity' (a new row, or one changed by any other writer): due, so the next pass works it
-- out again; 'infinity': never (the expression never fires again, or cannot be read).
ALTER TABLE {schema}.schedules ADD COLUMN opens_at timestamptz NOT NULL DEFAULT '-infinity';
CREATE INDEX schedules_opens_at ON {schema}.schedules (opens_at);
CREATE INDEX schedules_last_slot ON {schema}.schedules (last_slot);

-- A writer that changes a schedule's cron, creation or last slot without saying when it opens
-- next (an operator's replace, plain SQL, an older pgq) leaves it due: no slot waits on a
-- stale `opens_at`.
CREATE FUNCTION {schema}.schedules_reopen() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema}, pg_temp AS $fn$
BEGIN
  NEW.opens_at := '-infinity';
  RETURN NEW;
END
$fn$;
CREATE TRIGGER schedules_reopen BEFORE UPDATE ON {schema}.schedules
  FOR EACH ROW
  WHEN (NEW.opens_at IS NOT DISTINCT FROM OLD.opens_at
        AND (NEW.cron IS DISTINCT FROM OLD.cron OR NEW.created_at IS DISTINCT FROM OLD.created_at
             OR NEW.last_slot IS DISTINCT FROM OLD.last_slot))
  EXECUTE FUNCTION {schema}.schedules_reopen();
ALTER TABLE {schema}.schedules ENABLE ALWAYS TRIGGER schedules_reopen;
REVOKE EXECUTE ON FUNCTION {schema}.schedules_reopen() FROM PUBLIC;
