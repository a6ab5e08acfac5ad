-- pgq schema, version 19: a running job's progress, as its handler last reported it.
-- `job.progress(done, total, note)` in a handler is kept in the worker's memory and written
-- by the heartbeat's own statement (`extend_leases`, sql/protocol.sql), fenced like every
-- lease holder's write (id + fence + status = 'running'), at most once a second per job.
-- progress_at is when the handler reported it (the worker sends its age; the server's clock).
-- A new claim clears all four: a retry starts from no progress. A finished job keeps the
-- last progress its attempt reported.
-- No index holds these columns, so a heartbeat that carries progress stays a HOT update
-- (migration 6); the note is bounded (the worker cuts it to 200 characters, the table
-- checks 1000) so a row keeps fitting on its page. The check is NOT VALID: the new columns
-- are empty, and a large table is not scanned to prove it (every write is checked).
ALTER TABLE {schema}.jobs
  ADD COLUMN progress_done bigint,
  ADD COLUMN progress_total bigint,
  ADD COLUMN progress_note text,
  ADD COLUMN progress_at timestamptz,
  ADD CONSTRAINT jobs_progress_check CHECK (
    (progress_done IS NULL OR progress_done >= 0)
    AND (progress_total IS NULL OR (progress_total > 0 AND progress_done <= progress_total))
    AND (progress_note IS NULL OR pg_catalog.char_length(progress_note) <= 1000)) NOT VALID;
