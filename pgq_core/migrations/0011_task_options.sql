-- pgq schema, version 11: each job's own retry backoff.
--   backoff_base  seconds: a failed attempt n is retried after min(cap, base * 2^n) seconds,
--                 less up to a quarter of it at random (the fail statements compute run_at)
--   backoff_cap   seconds: the longest wait between two attempts
-- NULL (the default) is the settling worker's own value, as before this version: its
-- retry_base (1 s unless set) and a cap of an hour. A job enqueued with its own values keeps
-- them in its row, so `SELECT backoff_base, backoff_cap FROM jobs` shows how it is retried.
-- Adding nullable columns rewrites nothing.
ALTER TABLE {schema}.jobs ADD COLUMN backoff_base float8;
ALTER TABLE {schema}.jobs ADD COLUMN backoff_cap float8;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_backoff_check
  CHECK (backoff_base BETWEEN 0 AND 31536000 AND backoff_cap BETWEEN 0 AND 31536000) NOT VALID;
