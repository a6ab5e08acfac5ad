"""Every tunable of pgq in one place: defaults, batch sizes, list bounds and limits.

Each is a plain value read where it is used; the queues, the worker, the CLI and the dashboard
name them from here (`config` and `ops` re-export the ones they always offered).
"""

from __future__ import annotations

from datetime import timedelta

# -- connections and sessions

DEFAULT_SCHEMA = "pgq"
#: Seconds to wait for a connection when neither the DSN nor PGCONNECT_TIMEOUT says otherwise.
DEFAULT_CONNECT_TIMEOUT = 5
#: Statement and lock timeouts of the CLI's sessions unless the role, database or the operator
#: (--statement-timeout, PGQ_STATEMENT_TIMEOUT) set one.
DEFAULT_STATEMENT_TIMEOUT = timedelta(seconds=30)
DEFAULT_LOCK_TIMEOUT = timedelta(seconds=10)

# -- workers and names

#: Bounds of a worker's lease: under a second the heartbeat cannot keep up (jobs run twice);
#: over a day an expired lease is noticed too late to matter.
LEASE_MIN = timedelta(seconds=1)
LEASE_MAX = timedelta(days=1)
#: Jobs one worker runs at once (each holds a task and, for sync handlers, a thread).
CONCURRENCY_MAX = 1000
#: A queue name is the payload of NOTIFY (at most 7999 bytes) and a key of btree indexes
#: (a row holds at most 2704 bytes, incompressible names reach it first): 2 kB fits both.
NOTIFY_PAYLOAD_MAX_BYTES = 7999
QUEUE_NAME_MAX_BYTES = 2048

# -- jobs, batches and bounded lists

#: Specs per enqueue statement: a bigger batch goes in several, in one transaction.
ENQUEUE_CHUNK = 5000
#: Jobs per shared round at most (pgq_core/rounds.py): concurrent callers' payloads go in one
#: statement, so its size is theirs together; past a few dozen jobs a round saves no more.
SHARED_ROUND_JOBS = 100
#: Bytes of payload JSON per shared round at most (but for its leader's own job): its one
#: jsonb parameter stays far from the server's limits (a jsonb of 256 MB, a message of 1 GB,
#: past which the statement fails, or the connection drops, for every caller in it).
SHARED_ROUND_BYTES = 8 * 1024 * 1024
#: The largest result a job may store, as UTF-8 JSON text: a settlement carrying more would
#: travel and be written for longer than a lease may safely wait (docs: "Results").
RESULT_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_LEASE = timedelta(seconds=30)
#: Retry delay is min(cap, base * 2**attempts) seconds, less up to `jitter` of it at random.
BACKOFF_BASE = 1.0
BACKOFF_CAP = 3600.0
BACKOFF_JITTER = 0.25
#: The longest a job's own backoff base or cap may be (a year; the jobs table checks it too).
BACKOFF_MAX = 365 * 86400.0
REAP_BATCH = 1000
PRUNE_BATCH = 5000
#: Daily partitions of job_events kept ahead of today (UTC), and how long their creation may
#: wait for a lock (ATTACH holds the default partition: readers of the history wait on it).
PARTITIONS_AHEAD = 7
ENSURE_LOCK_TIMEOUT = timedelta(milliseconds=100)
#: Dropping a partition takes job_events exclusively: each try waits at most this long.
DROP_LOCK_TIMEOUT = timedelta(milliseconds=200)
DROP_ATTEMPTS = 5
#: The most bytes of UTF-8 a unique key may have: it is indexed (a btree entry holds ~2.7 kB).
UNIQUE_KEY_MAX_BYTES = QUEUE_NAME_MAX_BYTES
#: A job's parents and children shown (`show`, the dashboard): the lowest ids, and the totals
LINKS_LIMIT = 50
#: How often an enqueue looks again for the holder of a key it conflicted with, when the holder
#: committed (or finished) between the statements. Each round needs a new race to fail.
UNIQUE_ROUNDS = 5
#: Characters of a long text (last_error, an error group's example) that lists carry: the
#: server cuts it, so a list of big errors stays small; `job` and `job_preview` read it whole.
LIST_TEXT_CHARS = 1000
#: Characters of a progress note the leases list carries (the worker stores at most 200).
LEASE_NOTE_CHARS = 200
#: Live workers listed at most (`pgq workers`, the dashboard).
WORKERS_LIMIT = 500
#: Rows changed per statement by a bulk action over a filter.
BULK_BATCH = 1000
#: Latency percentiles (`latency`): the recent window, the default longer one, and the most
#: done jobs read per queue (the most recently finished): every view of them is bounded.
LATENCY_RECENT = timedelta(minutes=5)
LATENCY_WINDOW = timedelta(hours=1)
LATENCY_CAP = 20_000
#: A running job with a live lease is stuck past STUCK_FACTOR times its queue's p99 run time
#: (over LATENCY_WINDOW, at most LATENCY_CAP done jobs, as `latency` reads it), and never
#: before STUCK_FLOOR; at most STUCK_LIMIT of them are listed (`health_stuck`).
STUCK_FACTOR = 3.0
STUCK_FLOOR = timedelta(seconds=60)
STUCK_LIMIT = 100
#: a queue's p99 counts only over at least this many done jobs (fewer: its longest run and
#: the floor decide alone)
STUCK_MIN_DONE = 100
#: at most this many stranded jobs (`health_stranded`) are listed
STRANDED_LIMIT = 100
