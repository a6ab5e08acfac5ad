-- pgq schema, version 26: pgq's triggers fire under any session_replication_role.
-- A role or database set to `session_replication_role = replica` (a logical-replication
-- subscriber, a restore) skips ordinary triggers: the queue counts would drift, error groups
-- go unset and a finished parent would never release its children. ENABLE ALWAYS makes each
-- trigger whose function is pgq's own fire in every role, as the queue's invariants need.
DO $$
DECLARE
  t record;
BEGIN
  FOR t IN
    SELECT tg.tgname, tg.tgrelid::regclass AS rel
      FROM pg_catalog.pg_trigger tg
      JOIN pg_catalog.pg_proc p ON p.oid = tg.tgfoid
     WHERE NOT tg.tgisinternal
       AND tg.tgparentid = 0
       AND tg.tgenabled <> 'A'
       AND p.pronamespace = '{schema}'::regnamespace
  LOOP
    EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', t.rel, t.tgname);
  END LOOP;
END
$$;
