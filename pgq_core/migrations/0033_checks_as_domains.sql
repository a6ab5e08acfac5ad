-- pgq schema, version 33: the per-column checks on jobs move into domains.
-- PostgreSQL reads every CHECK constraint of a table from its stored text and plans it again
-- for each INSERT or UPDATE statement (once per executor start, whatever the columns written):
-- a one-job enqueue paid for all four, about a fifth of its INSERT's server time, and so did
-- every claim and settle. A domain's check is read once per backend (the type cache) and runs
-- only where a statement writes that column. So max_attempts, the two backoffs and the three
-- progress columns take a domain each (the same base type: clients read int, float8, bigint
-- and text as before), with the same bounds under the old constraints' names; what spans two
-- columns stays a CHECK (status, and progress done <= total). Bad rows stay impossible for
-- every writer, COPY included.
-- No rewrite and no scan: each domain is attached without a constraint (a relabel: the table
-- keeps its files, no index covers these columns), then its check is added NOT VALID (rows
-- already there passed the old constraints; every new value is checked).
CREATE DOMAIN {schema}.job_max_attempts AS integer;
CREATE DOMAIN {schema}.job_backoff AS double precision;
CREATE DOMAIN {schema}.job_progress_done AS bigint;
CREATE DOMAIN {schema}.job_progress_total AS bigint;
CREATE DOMAIN {schema}.job_progress_note AS text;

ALTER TABLE {schema}.jobs
  ALTER COLUMN max_attempts TYPE {schema}.job_max_attempts,
  ALTER COLUMN backoff_base TYPE {schema}.job_backoff,
  ALTER COLUMN backoff_cap TYPE {schema}.job_backoff,
  ALTER COLUMN progress_done TYPE {schema}.job_progress_done,
  ALTER COLUMN progress_total TYPE {schema}.job_progress_total,
  ALTER COLUMN progress_note TYPE {schema}.job_progress_note;

ALTER DOMAIN {schema}.job_max_attempts
  ADD CONSTRAINT jobs_max_attempts_check CHECK (VALUE >= 1) NOT VALID;
ALTER DOMAIN {schema}.job_backoff
  ADD CONSTRAINT jobs_backoff_check CHECK (VALUE >= 0 AND VALUE <= 31536000) NOT VALID;
ALTER DOMAIN {schema}.job_progress_done
  ADD CONSTRAINT jobs_progress_check CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN {schema}.job_progress_total
  ADD CONSTRAINT jobs_progress_check CHECK (VALUE > 0) NOT VALID;
ALTER DOMAIN {schema}.job_progress_note
  ADD CONSTRAINT jobs_progress_check CHECK (pg_catalog.char_length(VALUE) <= 1000) NOT VALID;

ALTER TABLE {schema}.jobs
  DROP CONSTRAINT jobs_max_attempts_check,
  DROP CONSTRAINT jobs_backoff_check,
  DROP CONSTRAINT jobs_progress_check,
  ADD CONSTRAINT jobs_progress_order_check CHECK (progress_done <= progress_total) NOT VALID;
