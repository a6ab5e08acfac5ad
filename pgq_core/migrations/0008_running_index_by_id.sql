-- pgq schema, version 8: running rows indexed by id.
-- Version 6's running index was keyed by queue, so a worker's settle found its held rows by
-- reading every running row (and the planner, guessing few running rows, chose that over the
-- primary key): with 4 workers holding 50 jobs each, every settle read all 200 and compared
-- them with its 50 (9,950 rows thrown away per statement). Keyed by id, the held rows are
-- looked up exactly; counting running jobs per queue still reads the running rows only (few:
-- at most the workers' total concurrency), now with the queue from the index.
DROP INDEX {schema}.jobs_running_idx;
CREATE INDEX jobs_running_idx ON {schema}.jobs (id, queue) WHERE status = 'running';
