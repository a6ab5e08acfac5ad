-- The producer's paths beside the protocol's `enqueue` (protocol.sql): one job without a
-- unique key, the same as a transaction of its own that leaves its NOTIFY until after its
-- commit (`Queue.enqueue` on an autocommit connection), the bulk path through COPY
-- (`Queue.enqueue_copy`, `pgq enqueue --file`), and the lookup of a unique key's holder.
-- {schema} is the quoted schema identifier; %(name)s are bound parameters.

-- name: enqueue_one
-- One job without a unique key, as `enqueue` inserts it, without a batch's arrays. Rows: (id).
INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, priority, backoff_base,
                           backoff_cap, trace)
VALUES (%(queue)s::text, %(payload)s::jsonb,
        coalesce(%(run_at)s::timestamptz, now() + coalesce(%(delay)s::interval, interval '0')),
        %(max_attempts)s::int, %(priority)s::int, %(backoff_base)s::float8,
        %(backoff_cap)s::float8, %(trace)s::jsonb)
RETURNING id;

-- fragment: notify_mode
-- The schema's notify setting (`always` when unset), read in the statement's snapshot.
coalesce((SELECT s.value FROM {schema}.settings s WHERE s.name = 'notify'), 'always')

-- fragment: wake_queue
-- The queue to notify once new job `j` has committed, or NULL: under `always` when it is due,
-- under `edge` when it is due and its queue had no other due ready job (the statement's
-- snapshot holds none of its own rows; the probe stops at the first due row, whatever its
-- plan). The setting is read once, in the statement's one snapshot.
CASE WHEN j.run_at <= now() THEN
  CASE {notify_mode}
    WHEN 'always' THEN j.queue
    WHEN 'edge' THEN CASE WHEN NOT EXISTS (
                                 SELECT 1 FROM {schema}.jobs d
                                  WHERE d.queue = j.queue AND d.status = 'ready'
                                    AND d.run_at <= now() AND d.id <> j.id)
                          THEN j.queue END
  END
END

-- name: enqueue_one_then_notify
-- `enqueue_one` as a transaction of its own (autocommit), deciding its NOTIFY itself under
-- every mode (`wake_queue`): it sets pgq.enqueue_decided for its transaction, so the jobs
-- INSERT trigger does not fire (migration 32), and returns the queue to notify, which the
-- producer sends once this has committed (`notify_committed`). Rows: (id, the queue to notify
-- or NULL). One INSERT, no CTE (a CTE's scan cost ~10 us of the backend's CPU).
INSERT INTO {schema}.jobs AS j (queue, payload, run_at, max_attempts, priority, backoff_base,
                                backoff_cap, trace)
SELECT %(queue)s::text, %(payload)s::jsonb,
       coalesce(%(run_at)s::timestamptz, now() + coalesce(%(delay)s::interval, interval '0')),
       %(max_attempts)s::int, %(priority)s::int, %(backoff_base)s::float8,
       %(backoff_cap)s::float8, %(trace)s::jsonb
  FROM (SELECT pg_catalog.set_config('pgq.enqueue_decided', 'on', true)) decided
RETURNING j.id, {wake_queue} AS wake;

-- name: enqueue_shared_then_notify
-- `enqueue_one_then_notify` for the jobs of several callers sharing one round (a transaction
-- of their own: pgq_core/rounds.py), from `enqueue`'s arrays without unique keys, each job's
-- trace context its own (`traces`, empty for none). Rows: (id, the queue to notify or NULL),
-- the ids ascending in the order of the arrays.
WITH {job_input}
INSERT INTO {schema}.jobs AS j (queue, payload, run_at, max_attempts, priority, backoff_base,
                                backoff_cap, trace)
SELECT q, p, coalesce(r, now() + coalesce(d, interval '0')), m, pr, bb, bc,
       (%(traces)s::jsonb[])[n::int]
  FROM input, (SELECT pg_catalog.set_config('pgq.enqueue_decided', 'on', true)) decided
 ORDER BY n
RETURNING j.id, {wake_queue} AS wake;

-- name: enqueue_batch_then_notify
-- `enqueue_plain` as a transaction of its own (autocommit) for a batch of one queue's jobs,
-- all due now, none with a unique key or dependencies (`Queue.enqueue_many`'s common case):
-- as `enqueue_one_then_notify`, it sets pgq.enqueue_decided, so the jobs INSERT trigger does
-- not fire (its transition table and statements cost ~0.4 ms of the server's ~4.4 ms per
-- 1,000 jobs), and decides the queue's NOTIFY itself, once (`wake`: uncorrelated, so an
-- InitPlan, over the statement's snapshot, which holds none of its own rows): under `always`,
-- or under `edge` when the queue had no due ready job. The producer sends it once this has
-- committed. run_at is the column's default, now(). Its input is `enqueue_plain`'s without the
-- queue, run_at and delay arrays it never fills: sharing that INSERT cost 4.25 ms against
-- 4.15 of server time per 1,000 jobs (EXPLAIN ANALYZE, medians of 25). Rows: (id, wake),
-- `wake` the same on each.
WITH input AS (
  SELECT * FROM ROWS FROM (
    pg_catalog.jsonb_array_elements(%(payloads)s::jsonb),
    pg_catalog.unnest(%(max_attempts)s::int[]), pg_catalog.unnest(%(priorities)s::int[]),
    pg_catalog.unnest(%(backoff_bases)s::float8[]), pg_catalog.unnest(%(backoff_caps)s::float8[]))
    WITH ORDINALITY AS t(p, m, pr, bb, bc, n)
)
INSERT INTO {schema}.jobs AS j (queue, payload, max_attempts, priority, backoff_base,
                                backoff_cap, trace)
SELECT %(queue)s::text, p, coalesce(m, %(max_attempt)s::int), coalesce(pr, %(priority)s::int),
       bb, bc, %(trace)s::jsonb
  FROM input, (SELECT pg_catalog.set_config('pgq.enqueue_decided', 'on', true)) decided
 ORDER BY n
RETURNING j.id, (SELECT CASE {notify_mode}
                          WHEN 'always' THEN true
                          WHEN 'edge' THEN NOT EXISTS (
                                             SELECT 1 FROM {schema}.jobs d
                                              WHERE d.queue = %(queue)s::text
                                                AND d.status = 'ready' AND d.run_at <= now())
                          ELSE false
                        END) AS wake;

-- name: notify_committed
-- The NOTIFY `enqueue_one_then_notify` left, in a transaction of its own: a hint, so its
-- commit waits for no WAL flush (lost in a crash, workers poll), and holds the notify lock only
-- for that short commit.
SELECT pg_catalog.set_config('synchronous_commit', 'off', true),
       pg_catalog.pg_notify(%(channel)s, %(queue)s);

-- name: notify_queues
-- The process notifier's round (pgq_core/notifier.py): one NOTIFY per queue marked by the
-- enqueues committed since its last round; a hint, so no WAL flush is waited for.
SELECT pg_catalog.pg_notify(%(channel)s, q)
  FROM (SELECT pg_catalog.set_config('synchronous_commit', 'off', true)) quick,
       pg_catalog.unnest(%(queues)s::text[]) q;

-- name: enqueue_plain
-- `enqueue` for a batch in which no job has a unique key (`enqueue_round` picks it): one
-- INSERT, in the batch's order, without `enqueue`'s CTEs for keyed jobs and their holders
-- (planning and scanning those cost ~1.2 ms of the server's ~7 ms per 1,000 jobs). A column
-- every job shares comes once, as `queue`, `max_attempt` or `priority`, its array empty
-- (psycopg writes an array's elements one by one, ~0.35 ms per 1,000). The jobs INSERT
-- trigger fires as for `enqueue`. Rows: (id), one per job.
WITH input AS (
  SELECT * FROM ROWS FROM (
    pg_catalog.unnest(%(queues)s::text[]), pg_catalog.jsonb_array_elements(%(payloads)s::jsonb),
    pg_catalog.unnest(%(run_ats)s::timestamptz[]), pg_catalog.unnest(%(delays)s::interval[]),
    pg_catalog.unnest(%(max_attempts)s::int[]), pg_catalog.unnest(%(priorities)s::int[]),
    pg_catalog.unnest(%(backoff_bases)s::float8[]), pg_catalog.unnest(%(backoff_caps)s::float8[]))
    WITH ORDINALITY AS t(q, p, r, d, m, pr, bb, bc, n)
)
INSERT INTO {schema}.jobs (queue, payload, run_at, max_attempts, priority, backoff_base,
                           backoff_cap, trace)
SELECT coalesce(q, %(queue)s::text), p, coalesce(r, now() + coalesce(d, interval '0')),
       coalesce(m, %(max_attempt)s::int), coalesce(pr, %(priority)s::int), bb, bc,
       %(trace)s::jsonb
  FROM input ORDER BY n
RETURNING id;

-- name: enqueue_copy_ids
-- The bulk path's first statement (`Queue.enqueue_copy`): `n` new job ids, and the run_at of
-- each of `delays` from the transaction's now() (as an enqueue computes it; the first is 0:
-- due now, as the column's default would set it). No id (NULL) when row-level security applies
-- to this role on jobs: COPY FROM refuses such a role, so the caller inserts instead
-- (row_security_active decides as COPY does: BYPASSRLS, or the owner without FORCE, copy).
-- The sequence is looked up once, in an InitPlan: as a joined subquery's column it was looked
-- up again for every id (4 buffer reads each; 100,000 ids took 1.5 s, now 0.1-0.2 s).
SELECT pg_catalog.array_agg(pg_catalog.nextval(
         (SELECT pg_catalog.pg_get_serial_sequence(%(jobs)s, 'id')::regclass))),
       ARRAY(SELECT now() + d FROM pg_catalog.unnest(%(delays)s::interval[]) WITH ORDINALITY
                                AS t(d, k) ORDER BY k)
  FROM pg_catalog.generate_series(
         1, CASE WHEN pg_catalog.row_security_active(%(jobs)s::text) THEN 0 ELSE %(n)s::int END
       ) i;

-- name: may_copy
-- Whether this role may take the bulk path: COPY names each job's id, so it needs INSERT on
-- jobs.id, which pgq's producer role does not hold (`pgq roles`), and COPY FROM refuses a role
-- that row-level security on jobs applies to.
SELECT pg_catalog.has_column_privilege(%(jobs)s::text, 'id', 'INSERT')
       AND NOT pg_catalog.row_security_active(%(jobs)s::text);

-- name: enqueue_copy
-- The bulk path's second: the jobs themselves, their ids and run_at given, through COPY (no
-- unique key, no dependencies; the jobs trigger fires once for the whole copy).
COPY {schema}.jobs (id, queue, payload, run_at, max_attempts, priority, backoff_base,
                    backoff_cap, trace) FROM STDIN;

-- name: unique_holders
-- The ready or running job holding each of `keys` (a key no job holds has no row): `enqueue`
-- returns a NULL holder for a key whose holder committed after its snapshot.
SELECT unique_key, id FROM {schema}.jobs
 WHERE unique_key = ANY(%(keys)s::text[]) AND status IN ('ready', 'running');
