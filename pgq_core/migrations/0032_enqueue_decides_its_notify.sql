-- pgq schema, version 32: a one-job enqueue that is its own transaction runs no trigger.
-- The jobs INSERT trigger (a PL/pgSQL statement trigger over a transition table) cost a
-- one-job enqueue about a sixth of its server time: firing it, its four SPI statements (are
-- there due ready rows, the notify setting, the `edge` probe, are there done rows). The
-- producer's own statement (`enqueue_one_then_notify`, run alone in an autocommit
-- transaction) now answers the same questions itself: the row it inserts is ready, so no
-- count changes, and it returns the queue to notify under `always`, or under `edge` when the
-- queue had no other due ready job; the producer sends that NOTIFY once the INSERT has
-- committed (as it did for `always` since version 25). It says so by setting
-- pgq.enqueue_decided for its transaction, and the trigger's WHEN skips a statement of a
-- transaction that set it. Any other INSERT (a batch, an enqueue inside the caller's
-- transaction, an application's own SQL, an older pgq) fires the trigger as before.
DROP TRIGGER jobs_after_insert ON {schema}.jobs;
CREATE TRIGGER jobs_after_insert AFTER INSERT ON {schema}.jobs
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT
  WHEN (pg_catalog.current_setting('pgq.enqueue_decided', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION {schema}.jobs_after_change();
ALTER TABLE {schema}.jobs ENABLE ALWAYS TRIGGER jobs_after_insert;
