-- pgq schema, version 21: fences that never repeat across a failover.
-- A fence was a per-row counter, and asynchronous replication can roll a row back: after a
-- promotion the new primary handed the counters that were ahead on the old one out again, so
-- two workers held one fence and the stale one's writes landed. Every promotion starts a new
-- WAL timeline, at once, and timelines only grow along a cluster's history; a fence now carries
-- its timeline in its high 32 bits:
--   * a claim (and a kill) sets fence = greatest(fence + 1, fence_floor() + 1), so every fence
--     handed out on timeline T is above (T - 1) << 32, above any handed out before the promotion;
--   * every write of a lease holder also checks fence > fence_floor(): a fence from an older
--     timeline writes nothing on the new primary, whatever the old primary had replicated;
--   * the workers' reaper hands rows running under such a fence back, the attempt not counted.
-- On timeline 1 the floor is 0 and fences count 1, 2, 3 as before. No row is rewritten: the
-- next claim of each row moves its fence past the floor, so no fence is ever lowered.
-- pg_current_wal_lsn and pg_walfile_name are executable by every role; the timeline is read
-- from the WAL position being written (pg_control_checkpoint's changes only at the next
-- checkpoint). On a standby the function raises, as every write there does.
CREATE OR REPLACE FUNCTION {schema}.fence_floor() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, {schema}, pg_temp
AS $fn$
  SELECT pg_catalog.int8shl(
           CAST(CAST(pg_catalog.textcat('x', pg_catalog.substr(
             pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8)) AS bit(32))
             AS bigint) - 1, 32)
$fn$;
COMMENT ON FUNCTION {schema}.fence_floor() IS
  'The lowest fence no claim on this timeline can hold: (timeline - 1) << 32. Claims hand out fences above it; a lease holder''s write with a fence at or below it matches nothing.';
