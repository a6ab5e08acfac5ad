-- The workers' own rows (`workers`, migration 23): each live worker beats its row every few
-- seconds and deletes it when it stops; the readers' statement is `workers` in observer.sql.
-- {schema} is the quoted schema identifier, %(name)s a bound parameter.

-- name: worker_beat
-- A worker is alive: its row in `workers` is written (made at its first beat) with what it runs
-- and its counts, live until now() + `ttl` seconds; rows whose beats stopped past their expiry
-- are deleted (another session deleting or beating one is never waited for).
WITH expired AS (
  DELETE FROM {schema}.workers
   WHERE id IN (SELECT id FROM {schema}.workers
                 WHERE expires_at < now() AND id <> %(id)s::text
                   FOR UPDATE SKIP LOCKED)
)
INSERT INTO {schema}.workers AS w (id, host, pid, queues, concurrency, version, expires_at,
                                   running, done, failed)
VALUES (%(id)s::text, %(host)s::text, %(pid)s::int, %(queues)s::text[], %(concurrency)s::int,
        %(version)s::text, now() + pg_catalog.make_interval(secs => %(ttl)s::float8),
        %(running)s::int, %(done)s::bigint, %(failed)s::bigint)
ON CONFLICT (id) DO UPDATE
   SET beat_at = now(), expires_at = excluded.expires_at, queues = excluded.queues,
       concurrency = excluded.concurrency, running = excluded.running, done = excluded.done,
       failed = excluded.failed;

-- name: worker_gone
-- A worker stops: its row goes.
DELETE FROM {schema}.workers WHERE id = %(id)s::text;
