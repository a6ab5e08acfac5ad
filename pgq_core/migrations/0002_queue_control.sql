-- pgq schema, version 2: queue control (pause, a running limit) and error groups.
-- {schema} is replaced by the quoted schema identifier (psycopg.sql); nothing else is templated
-- (so a literal brace is written twice).

-- Per-queue settings. A queue without a row (or with every column NULL) runs unpaused and
-- unlimited; the claim statements look the queue up by primary key and nothing more.
--   paused_at, paused_by, pause_reason   set while the queue is paused: it claims nothing
--   max_running                          jobs of this queue running at once, across workers
CREATE TABLE {schema}.queue_settings (
  queue        text        PRIMARY KEY,
  paused_at    timestamptz,
  paused_by    text,
  pause_reason text,
  max_running  int,
  CONSTRAINT queue_settings_max_running_check CHECK (max_running >= 0)
);

-- How many of `want` jobs a claim on a limited queue may take: max_running minus the jobs of
-- the queue running now, not counting `settling` (the held jobs the same statement completes).
-- Race-free across workers: it takes a transaction-level advisory lock on (settings table,
-- queue), so limited claims of one queue run one at a time, and it is VOLATILE, so under READ
-- COMMITTED its count takes a fresh snapshot after the lock: it sees every claim committed by
-- the previous lock holder. Claims of unlimited queues never call it.
CREATE FUNCTION {schema}.claim_allowance(p_queue text, p_want int, p_settling bigint[])
RETURNS int LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  lock_key int;
  max_running int;
  running bigint;
BEGIN
  IF p_want <= 0 THEN
    RETURN 0;
  END IF;
  SELECT s.tableoid::int INTO lock_key FROM {schema}.queue_settings s WHERE s.queue = p_queue;
  PERFORM pg_advisory_xact_lock(coalesce(lock_key, 0), hashtext(p_queue));
  -- Read the limit again after the lock, in case it changed meanwhile.
  SELECT s.max_running INTO max_running FROM {schema}.queue_settings s WHERE s.queue = p_queue;
  IF max_running IS NULL THEN
    RETURN p_want;
  END IF;
  SELECT count(*) INTO running FROM {schema}.jobs j
   WHERE j.queue = p_queue AND j.status = 'running' AND j.id <> ALL(p_settling);
  RETURN greatest(0, least(p_want::bigint, max_running - running))::int;
END
$fn$;

-- Error groups: the first line of an error (exception type and message, at most 200
-- characters) with URLs, UUIDs, quoted values, hex words (0x..., or hex digits mixing digits and
-- letters) and numbers (3, 3.5, 1.2.3) replaced, so that errors that differ only in ids fall
-- into one group. `error_group` is its short id (12 hex digits of an
-- md5). Immutable SQL functions: inlined, and usable in indexes.
CREATE FUNCTION {schema}.error_pattern(error text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
           left(split_part(error, E'\n', 1), 200),
           '[a-z][a-z0-9+.-]*://[^\s''"<>]+', '<url>', 'gi'),
           '[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}', '<uuid>', 'gi'),
           '''[^'']*''|"[^"]*"', '<str>', 'g'),
           '\m(0x[0-9a-f]+|[0-9a-f]*([0-9][a-f]|[a-f][0-9])[0-9a-f]*)\M', '<n>', 'gi'),
           '[0-9]+(\.[0-9]+)*', '<n>', 'g')
$fn$;

CREATE FUNCTION {schema}.error_group(error text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT left(md5({schema}.error_pattern(error)), 12)
$fn$;

-- Each job's error group, kept by trigger whatever statement writes last_error (pgq's own or
-- an operator's plain SQL), so that grouping errors reads a column instead of normalizing every
-- error text on every look (about 7 us per error: 140 ms for 20,000 failed and dead jobs).
-- The trigger fires only on statements that set last_error (failures, reaps to dead, kills)
-- and on inserts that carry one: claims, heartbeats and completions never run it.
ALTER TABLE {schema}.jobs ADD COLUMN error_group text;

CREATE FUNCTION {schema}.jobs_set_error_group() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  NEW.error_group := {schema}.error_group(NEW.last_error);
  RETURN NEW;
END
$fn$;

CREATE TRIGGER jobs_error_group_insert BEFORE INSERT ON {schema}.jobs
  FOR EACH ROW WHEN (NEW.last_error IS NOT NULL)
  EXECUTE FUNCTION {schema}.jobs_set_error_group();
CREATE TRIGGER jobs_error_group_update BEFORE UPDATE OF last_error ON {schema}.jobs
  FOR EACH ROW WHEN (NEW.last_error IS DISTINCT FROM OLD.last_error)
  EXECUTE FUNCTION {schema}.jobs_set_error_group();

UPDATE {schema}.jobs SET error_group = {schema}.error_group(last_error)
 WHERE last_error IS NOT NULL AND status IN ('ready', 'dead');

-- Failed and dead jobs by error group: `pgq errors` groups them and `--error-group` finds one
-- group's jobs without reading the others. Failed jobs (ready again after an attempt, with its
-- error) by queue: `pgq jobs --status failed`. Both pay on failures only: claims, completions
-- and enqueues never enter them (no error, or a status outside the predicate).
CREATE INDEX jobs_error_group_idx ON {schema}.jobs (error_group)
  WHERE error_group IS NOT NULL AND (status = 'dead' OR (status = 'ready' AND attempts > 0));
CREATE INDEX jobs_failed_idx ON {schema}.jobs (queue, id)
  WHERE status = 'ready' AND attempts > 0 AND last_error IS NOT NULL;
