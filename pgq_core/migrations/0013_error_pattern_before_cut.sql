-- Error groups normalise before they cut: the first line's ids, numbers, quoted values and URLs
-- are replaced first, and the pattern is cut to 200 characters after. Cutting first (version 2)
-- split one error into many groups once its first line ran past 200 characters: a longer id
-- moved the cut. Only the first 4,000 characters of an error are read (a 1 MB first line is
-- not normalised whole on every write). As in version 10, every call names its schema and
-- no SET clause pins a path, so the function stays inlinable and no user object can stand in.
CREATE OR REPLACE FUNCTION {schema}.error_pattern(error text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
  SELECT pg_catalog.left(
           pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
           pg_catalog.regexp_replace(pg_catalog.regexp_replace(
             pg_catalog.split_part(pg_catalog.substr(error, 1, 4000), E'\n', 1),
             '[a-z][a-z0-9+.-]*://[^\s''"<>]+', '<url>', 'gi'),
             '[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}', '<uuid>',
             'gi'),
             '''[^'']*''|"[^"]*"', '<str>', 'g'),
             '\m(0x[0-9a-f]+|[0-9a-f]*([0-9][a-f]|[a-f][0-9])[0-9a-f]*)\M', '<n>', 'gi'),
             '[0-9]+(\.[0-9]+)*', '<n>', 'g'),
           200)
$fn$;

-- The groups of the errors already stored, where the new pattern differs (the trigger keeps
-- the column from now on; this statement does not set last_error, so it does not fire).
UPDATE {schema}.jobs SET error_group = {schema}.error_group(last_error)
 WHERE last_error IS NOT NULL AND status IN ('ready', 'dead')
   AND error_group IS DISTINCT FROM {schema}.error_group(last_error);
