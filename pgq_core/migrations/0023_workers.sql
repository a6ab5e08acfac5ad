-- Every live worker in view: each worker registers here when it starts and beats every few
-- seconds (`worker_beat`), saying what it runs and how it is doing, and deletes its row when it
-- stops (`worker_gone`). A row whose beats stopped (the process was killed, the host lost) is
-- no longer live once `expires_at` passes: readers never show it, and the next beat of any
-- worker deletes it. The table holds one small row per worker; its beats are HOT updates.
CREATE TABLE {schema}.workers (
  id          text        PRIMARY KEY,
  host        text        NOT NULL,
  pid         integer     NOT NULL,
  queues      text[]      NOT NULL,
  concurrency integer     NOT NULL,
  version     text        NOT NULL,
  started_at  timestamptz NOT NULL DEFAULT now(),
  beat_at     timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  running     integer     NOT NULL DEFAULT 0,
  done        bigint      NOT NULL DEFAULT 0,
  failed      bigint      NOT NULL DEFAULT 0
) WITH (fillfactor = 50);

COMMENT ON TABLE {schema}.workers IS
  'Live workers: registered at start, beaten every few seconds, gone once expires_at passes.';
