-- pgq schema, version 6: heartbeats that write no index.
-- A heartbeat changes only lease_until. While lease_until was indexed (the baseline's
-- jobs_lease_idx), every heartbeat was a non-HOT update: a new index entry in every index of
-- the table, and a table that grows with each lease extension. With no index on lease_until
-- and room left on each page (fillfactor), a heartbeat is a HOT update: measured on 20,000
-- heartbeats, 0% HOT before, see benchmarks/README.md for after.
-- Running rows are few (at most the workers' total concurrency), so the reaper, the leases
-- view and the per-queue running counts find them through a partial index on running rows by
-- queue, then check lease_until on those rows; the baseline's reaper SQL runs unchanged.
DROP INDEX {schema}.jobs_lease_idx;
CREATE INDEX jobs_running_idx ON {schema}.jobs (queue) WHERE status = 'running';
ALTER TABLE {schema}.jobs SET (fillfactor = 85);
