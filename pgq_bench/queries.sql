-- Statements only the benchmarks run (pgq_bench), by name, as pgq_core's are.
-- {schema} is the quoted schema identifier; %(name)s are bound parameters.

-- name: claim_latency
-- Jobs claimed since `since`: how many, and seconds from enqueue to claim (p50, p99) and, of
-- those already done, from enqueue to done (p50, p99); with the time to pass as the next
-- `since`. Scans jobs: for benchmarks and soaks, whose table prune keeps small.
SELECT count(*),
       pg_catalog.percentile_cont(0.5::float8)
         WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - queued_at)::float8),
       pg_catalog.percentile_cont(0.99::float8)
         WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - queued_at)::float8),
       pg_catalog.percentile_cont(0.5::float8)
         WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - queued_at)::float8)
         FILTER (WHERE status = 'done'),
       pg_catalog.percentile_cont(0.99::float8)
         WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - queued_at)::float8)
         FILTER (WHERE status = 'done'),
       clock_timestamp()
  FROM {schema}.jobs
 WHERE claimed_at >= %(since)s;
