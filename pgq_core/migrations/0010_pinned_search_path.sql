-- pgq schema, version 10: every function pgq created resolves names in pg_catalog and its own
-- schema only.
-- A function without a pinned search_path resolves the unqualified names in its body (`||`,
-- `=`, `format`, `generate_series` ...) through the search_path of the session that calls it,
-- and a look-alike with a closer type match in a schema on that path wins over pg_catalog's:
-- `public.||(name, name)`, created by any role with CREATE on public, ran as the superuser
-- whose enqueue fired the jobs trigger (`TG_TABLE_SCHEMA || '_jobs'` is `name || unknown`).
--
-- The procedural functions are pinned to `pg_catalog, <schema>, pg_temp` (pg_temp last, so a
-- temporary object never comes first). ALTER ... SET replaces any earlier setting: applying it
-- twice changes nothing.
ALTER FUNCTION {schema}.jobs_after_change() SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.jobs_set_error_group() SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.claim_allowance(text, int, bigint[])
  SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.job_events_partitions()
  SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.job_events_add_partitions(date, date, interval)
  SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.job_events_drop_partition(text, interval, interval, int)
  SET search_path = pg_catalog, {schema}, pg_temp;

-- The two error-group SQL functions stay inlinable (a function with a SET clause never is:
-- pinned, the error group of a text cost 7.7 times as much on PostgreSQL 15 and 2.7 times on
-- 18; benchmarks/README.md): their bodies name every function by schema and use no operator,
-- so they resolve the same on any search_path. Same results as version 2's.
CREATE OR REPLACE FUNCTION {schema}.error_pattern(error text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
           pg_catalog.regexp_replace(pg_catalog.regexp_replace(
           pg_catalog.left(pg_catalog.split_part(error, E'\n', 1), 200),
           '[a-z][a-z0-9+.-]*://[^\s''"<>]+', '<url>', 'gi'),
           '[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}', '<uuid>', 'gi'),
           '''[^'']*''|"[^"]*"', '<str>', 'g'),
           '\m(0x[0-9a-f]+|[0-9a-f]*([0-9][a-f]|[a-f][0-9])[0-9a-f]*)\M', '<n>', 'gi'),
           '[0-9]+(\.[0-9]+)*', '<n>', 'g')
$fn$;

CREATE OR REPLACE FUNCTION {schema}.error_group(error text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT pg_catalog.left(pg_catalog.md5({schema}.error_pattern(error)), 12)
$fn$;
