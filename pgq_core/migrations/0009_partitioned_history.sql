-- pgq schema, version 9: the fence history partitioned by day, so retention drops whole days.
-- {schema} is replaced by the quoted schema identifier (psycopg.sql); nothing else is templated.
-- Schema names are letters, digits and _ (config.check_schema), so `'{schema}.job_events'` is a
-- valid literal for a regclass.
--
-- `job_events` becomes a table partitioned by RANGE on `at`:
--   job_events_pYYYYMMDD  one day, UTC midnight to midnight, created ahead (today and 7 more) by
--                         job_events_add_partitions(): at migration, by every worker's reaper
--                         (hourly) and by `pgq prune`
--   job_events_legacy     an upgraded database's history, from the beginning to the migration:
--                         the old table itself, attached as it is (no rewrite; its primary key
--                         becomes (id, at) and one scan checks its rows are older than the
--                         bound). A fresh database has none.
--   job_events_default    whatever no other partition takes: a day not created in time, an
--                         explicit `at` far off, and the rows of jobs still present that
--                         `pgq prune` moved out of a day it dropped. An insert never fails for
--                         want of a partition.
-- The primary key is (id, at): a partitioned table's unique keys include the partition key. Ids
-- still come from job_events_id_seq and stay unique. A job's history is read by job_id through
-- the (job_id, id) index, on every partition.

ALTER TABLE {schema}.job_events RENAME TO job_events_legacy;
ALTER TABLE {schema}.job_events_legacy DROP CONSTRAINT job_events_pkey;
ALTER TABLE {schema}.job_events_legacy
  ADD CONSTRAINT job_events_legacy_pkey PRIMARY KEY (id, at);
ALTER INDEX {schema}.job_events_job_idx RENAME TO job_events_legacy_job_id_id_idx;

CREATE TABLE {schema}.job_events (LIKE {schema}.job_events_legacy INCLUDING DEFAULTS)
  PARTITION BY RANGE (at);
ALTER TABLE {schema}.job_events ADD CONSTRAINT job_events_pkey PRIMARY KEY (id, at);
CREATE INDEX job_events_job_idx ON {schema}.job_events (job_id, id);
ALTER SEQUENCE {schema}.job_events_id_seq OWNED BY {schema}.job_events.id;

-- The partitions of job_events: a daily or legacy one has its bounds (from_at NULL: from the
-- beginning), the default none.
CREATE FUNCTION {schema}.job_events_partitions()
RETURNS TABLE (name text, from_at timestamptz, to_at timestamptz, is_default boolean)
LANGUAGE sql STABLE AS $fn$
  SELECT c.relname::text,
         substring(b.bound FROM 'FROM \(''([^'']*)''\)')::timestamptz,
         substring(b.bound FROM 'TO \(''([^'']*)''\)')::timestamptz,
         b.bound = 'DEFAULT'
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
   CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
   WHERE i.inhparent = '{schema}.job_events'::regclass
   ORDER BY 3 NULLS LAST
$fn$;

-- One daily partition per day from p_first to p_last (UTC days), each made in a subtransaction:
-- CREATE TABLE then ATTACH, which takes SHARE UPDATE EXCLUSIVE on job_events (inserts and reads
-- go on) and ACCESS EXCLUSIVE on the default partition while it checks that the default holds
-- no row of that day (readers of the history wait that long; writers do not). Locks wait at
-- most p_lock_timeout: a day that cannot get them is 'locked' and the rest are left for the
-- next call. Idempotent; concurrent calls do not queue (the second answers 'busy').
-- Rows: (day, 'created' | 'exists' | 'default holds rows' | 'overlaps' | 'locked'), or one
-- (NULL, 'busy'). 'default holds rows': rows of that day went to the default partition before
-- the day existed; they stay there (prune deletes them row by row) and the day is skipped.
-- 'overlaps': another partition covers part of the day (the legacy one, when its rows reach
-- past the migration).
CREATE FUNCTION {schema}.job_events_add_partitions(
  p_first date, p_last date, p_lock_timeout interval DEFAULT '100 milliseconds'
) RETURNS TABLE (day date, outcome text)
LANGUAGE plpgsql SET lock_timeout = '100ms' AS $fn$
DECLARE
  nsp text;
  d date;
  part text;
BEGIN
  SELECT n.nspname INTO nsp FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE c.oid = '{schema}.job_events'::regclass;
  IF NOT pg_try_advisory_xact_lock(hashtext('pgq partitions ' || nsp)) THEN
    day := NULL;
    outcome := 'busy';
    RETURN NEXT;
    RETURN;
  END IF;
  PERFORM set_config('lock_timeout',
                     greatest(1, (extract(epoch FROM p_lock_timeout) * 1000)::bigint) || 'ms',
                     true);
  FOR d IN SELECT g::date FROM generate_series(p_first, p_last, interval '1 day') g LOOP
    day := d;
    part := 'job_events_p' || to_char(d, 'YYYYMMDD');
    IF to_regclass(format('%I.%I', nsp, part)) IS NOT NULL THEN
      outcome := 'exists';
    ELSE
      BEGIN
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.job_events INCLUDING DEFAULTS)',
                       nsp, part, nsp);
        EXECUTE format('ALTER TABLE %I.job_events ATTACH PARTITION %I.%I'
                       ' FOR VALUES FROM (%L) TO (%L)',
                       nsp, nsp, part, d::timestamp AT TIME ZONE 'UTC',
                       (d + 1)::timestamp AT TIME ZONE 'UTC');
        outcome := 'created';
      EXCEPTION
        WHEN lock_not_available THEN outcome := 'locked';
        WHEN check_violation THEN outcome := 'default holds rows';
        WHEN invalid_object_definition THEN outcome := 'overlaps';
      END;
    END IF;
    RETURN NEXT;
    EXIT WHEN outcome = 'locked';
  END LOOP;
END
$fn$;

-- Drop one partition that lies entirely before now() - p_older_than, keeping the history of
-- jobs still present: their rows go back in through job_events and land in the default
-- partition (no other partition covers their day any more). One transaction:
--   1. without blocking anyone, the rows to keep are found (those of jobs in `jobs`; a scan of
--      the partition, read-only) and the newest row id seen is noted;
--   2. job_events, the partition and the default are locked ACCESS EXCLUSIVE: tried p_attempts
--      times, each wait at most p_lock_timeout, pauses doubling from 0.1 s between tries;
--   3. DETACH; insert the rows found in 1 and any row newer than the newest seen (written by
--      hand since), each only if its job is still present; DROP.
-- Writers and readers of the history wait only for 3, whose work grows with the rows kept, not
-- with the partition's size. Nothing is lost: every pgq writer writes `at` = now, never into a
-- day before the cutoff; a job deleted meanwhile loses its rows as it should. Concurrent calls
-- for one partition do not queue: the second answers 'busy'. Row: (outcome, rows kept),
-- outcome 'dropped' | 'locked' | 'busy' | 'gone' (no such partition: another prune dropped
-- it) | 'too new' (not entirely before the cutoff).
CREATE FUNCTION {schema}.job_events_drop_partition(
  p_name text, p_older_than interval,
  p_lock_timeout interval DEFAULT '200 milliseconds', p_attempts int DEFAULT 5
) RETURNS TABLE (outcome text, kept bigint)
LANGUAGE plpgsql SET lock_timeout = '200ms' AS $fn$
DECLARE
  nsp text;
  ends timestamptz;
  fallback text;
  keep bigint[];
  newest bigint;
  attempt int := 1;
BEGIN
  SELECT n.nspname INTO nsp FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE c.oid = '{schema}.job_events'::regclass;
  kept := 0;
  IF NOT pg_try_advisory_xact_lock(hashtext('pgq drop ' || nsp || '.' || p_name)) THEN
    outcome := 'busy';
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT p.to_at INTO ends FROM {schema}.job_events_partitions() p
   WHERE p.name = p_name AND NOT p.is_default;
  IF NOT FOUND THEN
    outcome := 'gone';
    RETURN NEXT;
    RETURN;
  ELSIF ends > now() - p_older_than THEN
    outcome := 'too new';
    RETURN NEXT;
    RETURN;
  END IF;
  BEGIN
    EXECUTE format('SELECT (SELECT coalesce(max(id), 0) FROM %I.%I),'
                   ' ARRAY(SELECT e.id FROM %I.%I e'
                   '        WHERE EXISTS (SELECT 1 FROM %I.jobs j WHERE j.id = e.job_id))',
                   nsp, p_name, nsp, p_name, nsp)
      INTO newest, keep;
  EXCEPTION WHEN undefined_table THEN
    outcome := 'gone';
    RETURN NEXT;
    RETURN;
  END;
  PERFORM set_config('lock_timeout',
                     greatest(1, (extract(epoch FROM p_lock_timeout) * 1000)::bigint) || 'ms',
                     true);
  LOOP
    BEGIN
      EXECUTE format('LOCK TABLE ONLY %I.job_events IN ACCESS EXCLUSIVE MODE', nsp);
      PERFORM 1 FROM {schema}.job_events_partitions() p
        WHERE p.name = p_name AND NOT p.is_default;
      IF NOT FOUND THEN
        outcome := 'gone';
        RETURN NEXT;
        RETURN;
      END IF;
      EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', nsp, p_name);
      SELECT p.name INTO fallback FROM {schema}.job_events_partitions() p WHERE p.is_default;
      IF fallback IS NOT NULL THEN
        EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', nsp, fallback);
      END IF;
      EXIT;
    EXCEPTION WHEN lock_not_available THEN
      IF attempt >= p_attempts THEN
        outcome := 'locked';
        RETURN NEXT;
        RETURN;
      END IF;
    END;
    PERFORM pg_sleep(0.1 * 2 ^ (attempt - 1));
    attempt := attempt + 1;
  END LOOP;
  EXECUTE format('ALTER TABLE %I.job_events DETACH PARTITION %I.%I', nsp, nsp, p_name);
  EXECUTE format('INSERT INTO %I.job_events SELECT e.* FROM %I.%I e'
                 ' WHERE (e.id = ANY($1) OR e.id > $2)'
                 '   AND EXISTS (SELECT 1 FROM %I.jobs j WHERE j.id = e.job_id)',
                 nsp, nsp, p_name, nsp)
    USING keep, newest;
  GET DIAGNOSTICS kept = ROW_COUNT;
  EXECUTE format('DROP TABLE %I.%I', nsp, p_name);
  outcome := 'dropped';
  RETURN NEXT;
END
$fn$;

-- The privileges granted on the old table are granted on the new one (roles reading the
-- history through it keep reading). An upgraded database's history becomes the legacy
-- partition, bounded by now (the old table is locked since the rename, so no row of it is
-- newer) or, should an explicit `at` lie later, just past its newest row; the rest of that day
-- is that day's partition. An empty old table (a fresh database) is simply dropped.
DO $do$
DECLARE
  bound timestamptz;
  grant_ record;
BEGIN
  FOR grant_ IN
    SELECT a.privilege_type, a.is_grantable,
           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END AS grantee
      FROM pg_class c
     CROSS JOIN LATERAL aclexplode(c.relacl) a
      LEFT JOIN pg_roles r ON r.oid = a.grantee
     WHERE c.oid = '{schema}.job_events_legacy'::regclass AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT %s ON {schema}.job_events TO %s%s', grant_.privilege_type,
                   grant_.grantee,
                   CASE WHEN grant_.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
  END LOOP;
  IF NOT EXISTS (SELECT 1 FROM {schema}.job_events_legacy) THEN
    DROP TABLE {schema}.job_events_legacy;
    RETURN;
  END IF;
  bound := clock_timestamp();
  BEGIN
    EXECUTE format('ALTER TABLE {schema}.job_events ATTACH PARTITION {schema}.job_events_legacy'
                   ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
  EXCEPTION WHEN check_violation THEN
    SELECT max(at) + interval '1 microsecond' INTO bound FROM {schema}.job_events_legacy;
    EXECUTE format('ALTER TABLE {schema}.job_events ATTACH PARTITION {schema}.job_events_legacy'
                   ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
  END;
  EXECUTE format('CREATE TABLE {schema}.%I PARTITION OF {schema}.job_events'
                 ' FOR VALUES FROM (%L) TO (%L)',
                 'job_events_p' || to_char(bound AT TIME ZONE 'UTC', 'YYYYMMDD'), bound,
                 ((bound AT TIME ZONE 'UTC')::date + 1)::timestamp AT TIME ZONE 'UTC');
END
$do$;

CREATE TABLE {schema}.job_events_default PARTITION OF {schema}.job_events DEFAULT;

SELECT {schema}.job_events_add_partitions((now() AT TIME ZONE 'UTC')::date,
                                          (now() AT TIME ZONE 'UTC')::date + 7);
