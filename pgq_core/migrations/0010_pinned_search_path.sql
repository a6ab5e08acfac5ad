-- pgq schema, version 10: every function pgq created resolves names in pg_catalog and its own
-- schema only.
-- A function without a pinned search_path resolves the unqualified names in its body (`||`,
-- `=`, `format`, `generate_series` ...) through the search_path of the session that calls it,
-- and a look-alike with a closer type match in a schema on that path wins over pg_catalog's:
-- `public.||(name, name)`, created by any role with CREATE on public, ran as the superuser
-- whose enqueue fired the jobs trigger (`TG_TABLE_SCHEMA || '_jobs'` is `name || unknown`).
-- Pinned to `pg_catalog, <schema>, pg_temp` (pg_temp last, so a temporary object never comes
-- first). ALTER ... SET replaces any earlier setting: applying it twice changes nothing. A
-- later migration that creates a function pins it in its CREATE (tests/test_search_path.py
-- checks every function of the schema).
ALTER FUNCTION {schema}.jobs_after_change() SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.claim_allowance(text, int, bigint[])
  SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.error_pattern(text) SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.error_group(text) SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.jobs_set_error_group() SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.job_events_partitions()
  SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.job_events_add_partitions(date, date, interval)
  SET search_path = pg_catalog, {schema}, pg_temp;
ALTER FUNCTION {schema}.job_events_drop_partition(text, interval, interval, int)
  SET search_path = pg_catalog, {schema}, pg_temp;
