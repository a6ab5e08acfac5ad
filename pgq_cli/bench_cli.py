"""`pgq bench`: loads `pgq_bench` only when run, so no other command pays for it.

The benchmarks are not in the wheel: they run from a clone of the repository, whose editable
install (`pip install -e .`, setup.py) maps `pgq_bench` beside `pgq_cli`. `pgq --help` lists
`bench` only where `pgq_bench` can be imported.
"""

from __future__ import annotations

import importlib
import signal
from datetime import timedelta
from types import ModuleType
from typing import Any

import click

from .failures import fail
from .options import FiniteFloatRange, at_most, duration, lease_duration
from .session import settings


def _exit_on_terminate(signum: int, frame: object) -> None:
    """SIGTERM ends the run as an exception, so the bench's own server and schemas are
    stopped and dropped on the way out (the default action left its server running)."""
    raise SystemExit(128 + signum)


def load_bench() -> ModuleType:
    """`pgq_bench` as the environment has it (an editable install of a clone maps it, and so
    do the processes the benchmarks start); one line naming what to do when it has not."""
    try:
        return importlib.import_module("pgq_bench")
    except ModuleNotFoundError as exc:
        if exc.name != "pgq_bench":
            raise
        fail(
            "pgq bench runs from a clone of the repository (the benchmarks are not in "
            "the wheel): clone it and pip install -e . there"
        )


def _bench_levels(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    """`1,4,10,50` -> (1, 4, 10, 50): each a concurrency from 1 to 1000, each once."""
    try:
        levels = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of numbers: {value!r}") from None
    if not all(1 <= c <= 1000 for c in levels):
        raise click.BadParameter("each level must be from 1 to 1000")
    return tuple(dict.fromkeys(levels))


@click.command("bench")
@click.option(
    "--jobs",
    type=click.IntRange(1),
    default=None,
    help="Jobs per side (default 20,000; with --same-resources 10,000 per run; --pickup: the "
    "burst, 2,000).",
)
@click.option(
    "--workers",
    default=None,
    type=click.IntRange(1, 64),
    help="Worker processes per side (default 4); --failover: worker processes (default 3).",
)
@click.option(
    "--batch",
    default=10,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="The baseline's LIMIT: jobs per baseline claim (10 as the baseline writes it). The "
    "pgq_same_batch side runs pgq's worker with this concurrency, so the same claim size.",
)
@click.option(
    "--concurrency",
    default=None,
    type=click.IntRange(1, 1000),
    help="pgq's worker concurrency, hence its claim size, for the headline pgq side "
    "(ratio), its pickup latency and the variants (default 50); --pickup: the worker's "
    "(default 10); --failover: each worker's (default 10).",
)
@click.option(
    "--payload-bytes",
    default=100,
    show_default=True,
    type=click.IntRange(0, 10_000_000),
    help="Padding in each job's payload.",
)
@click.option(
    "--latency-samples",
    default=200,
    show_default=True,
    type=click.IntRange(1),
    help="Jobs enqueued one at a time for pickup latency (the default run, --pickup).",
)
@click.option(
    "--rounds",
    default=3,
    show_default=True,
    type=click.IntRange(1, 20),
    help="Drain rounds per side, interleaved; each side reports its median round.",
)
@click.option(
    "--stats-scale",
    is_flag=True,
    help="Instead: stats, leases and latency timing over a large history, sizes, prune.",
)
@click.option(
    "--done",
    "done_jobs",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(0),
    help="--stats-scale: done jobs (with history).",
)
@click.option(
    "--done-last-hour",
    default=None,
    type=click.IntRange(0),
    help="--stats-scale: of the done jobs, how many finished within the last hour (the "
    "latency() percentiles read them; default a tenth of --done: 100,000 of 1,000,000).",
)
@click.option(
    "--ready",
    "ready_jobs",
    default=10_000,
    show_default=True,
    type=click.IntRange(0),
    help="--stats-scale: ready jobs.",
)
@click.option(
    "--running",
    "running_jobs",
    default=1_000,
    show_default=True,
    type=click.IntRange(0),
    help="--stats-scale: running jobs.",
)
@click.option(
    "--dead",
    "dead_jobs",
    default=1_000,
    show_default=True,
    type=click.IntRange(0),
    help="--stats-scale: dead jobs.",
)
@click.option(
    "--repeat",
    default=200,
    show_default=True,
    type=click.IntRange(1),
    help="--stats-scale: calls timed per query.",
)
@click.option(
    "--queues",
    "view_queues",
    default=0,
    type=click.IntRange(0, 1_000_000),
    help="--stats-scale: instead, the human views over this many queues (5000): `pgq jobs`, "
    "`pgq errors` and the dashboard (first draw, idle CPU and RSS, quit).",
)
@click.option(
    "--big-errors",
    default=0,
    type=click.IntRange(0, 1_000_000),
    help="--stats-scale: instead (or as well as --queues), the human views over this many "
    "dead jobs with a --error-bytes last_error (10000).",
)
@click.option(
    "--error-bytes",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(1, 100_000_000),
    help="--big-errors: the size of each last_error.",
)
@click.option(
    "--idle",
    "idle_seconds",
    default=20.0,
    show_default=True,
    type=FiniteFloatRange(1, 3600),
    help="--queues/--big-errors: seconds the dashboard idles while measured.",
)
@click.option(
    "--python",
    "views_python",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="--queues/--big-errors: the Python that runs `pgq` and the dashboard (another "
    "checkout's venv measures that checkout); default this one.",
)
@click.option(
    "--same-resources",
    is_flag=True,
    help="Instead: the plain-SQL baseline (C threads, one process) against one "
    "`pgq worker --concurrency C` process, for each C of --concurrency-levels.",
)
@click.option(
    "--concurrency-levels",
    default="1,4,10,50",
    show_default=True,
    callback=_bench_levels,
    help="--same-resources: the values of C, comma-separated.",
)
@click.option(
    "--handler",
    "handler_kind",
    type=click.Choice(["sync", "async", "both"]),
    default="both",
    show_default=True,
    help="--same-resources, --pickup: pgq's handler, a plain function, an async def, or each.",
)
@click.option(
    "--peers",
    is_flag=True,
    help="--same-resources (implied): add PgQueuer at every C, one process with C consumers "
    "on asyncpg (needs the bench extra: pip install 'pgq-fence[bench]'; skipped without).",
)
@click.option(
    "--db-work",
    is_flag=True,
    help="--same-resources (implied): database work per job of every drain, in a throwaway "
    "database: statement time from pg_stat_statements (the embedded server is restarted with "
    "it; a --dsn server needs it preloaded) and WAL bytes.",
)
@click.option(
    "--pickup",
    is_flag=True,
    help="Instead: one idle `pgq worker` (--concurrency, default 10): pickup latency over "
    "--latency-samples jobs enqueued one at a time, and claimed-to-start times, idle and "
    "over a burst of --jobs (default 2,000); --handler sync|async|both.",
)
@click.option(
    "--producers",
    type=click.IntRange(1, 256),
    default=None,
    help="Instead: N producer threads (own connections) enqueueing one job per transaction, "
    "the baseline's INSERT against Queue.enqueue under each notify mode (--jobs per side, "
    "default 8,000; --rounds).",
)
@click.option(
    "--soak",
    default=None,
    callback=duration,
    help="Instead: a soak this long (e.g. 60m, 2m): a producer at --rate, 4 worker processes, "
    "prune every minute, a JSON line of sizes and latencies every minute (--json-lines).",
)
@click.option(
    "--rate",
    type=FiniteFloatRange(0.1, 100_000),
    default=None,
    help="--soak: jobs per second the producer enqueues (default 200).",
)
@click.option(
    "--json-lines",
    "json_lines",
    type=click.Path(dir_okay=False, writable=True),
    default="soak.jsonl",
    show_default=True,
    help="--soak: the results file (one JSON line per sample, then the summary).",
)
@click.option("--soak-sample", callback=duration, default="60s", hidden=True)
@click.option(
    "--lease",
    default="30s",
    show_default=True,
    callback=lease_duration,
    help="--failover: the workers' lease.",
)
@click.option(
    "--failover",
    is_flag=True,
    help="Instead: a Patroni cluster of two PostgreSQL 15 nodes and etcd on 127.0.0.1 (Debian's "
    "patroni and etcd-server), --workers `pgq worker` processes (default 3) at --concurrency "
    "(default 10) on its multi-host DSN making fenced writes, --jobs (default 5,000) and "
    "--failovers leader kills under load; then checks that no job was lost, no stale write "
    "landed, no fence had two holders, and claims came back within 10 s (exit 1 if not).",
)
@click.option(
    "--failovers",
    default=10,
    show_default=True,
    type=click.IntRange(1, 100),
    help="--failover: leader kills, each followed by the old node rejoining as a replica.",
)
@click.option(
    "--sync",
    "synchronous",
    is_flag=True,
    help="--failover: synchronous replication (Patroni's synchronous_mode, synchronous_commit "
    "on): no acknowledged commit may be lost, so no re-runs.",
)
@click.option(
    "--lag",
    default="200ms",
    show_default=True,
    callback=at_most(timedelta(seconds=10)),
    help="--failover: how far behind the standby is when the leader dies (its WAL senders "
    "stop this long before the kill): a network's replication lag, which loopback lacks.",
)
@click.option("--random-state", type=int, default=None, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with every figure.")
@click.pass_context
def bench_command(ctx: click.Context, /, **options: Any) -> None:
    """Benchmark pgq against a plain-SQL baseline on a throwaway server (embedded, or --dsn
    with throwaway schemas that are dropped afterwards).

    \b
    Drain sides, same server, same run, same number of processes:
      baseline        the plain-SQL baseline as written, claim --batch (LIMIT 10)
      pgq_same_batch  pgq's worker, concurrency --batch: same claim size as the baseline
      pgq             pgq's worker, concurrency --concurrency (its claim size)
    ratio = pgq drain / baseline drain; ratio_same_batch = pgq_same_batch / baseline.

    \b
    --same-resources: for each C, each side gets one process and C-way concurrency:
      baseline  the plain-SQL baseline, C threads in one process, claim LIMIT 10
      pgq       one `pgq worker --concurrency C --burst` process, no-op sync / async handler
    ratio = pgq drain / baseline drain at the same C, per handler.
      --peers    adds PgQueuer: one process, C consumers on asyncpg, batch 10
      --db-work  adds each drain's statement time and WAL per job

    \b
    --pickup: one idle `pgq worker`: enqueue commit to handler start, and claimed_at to
    handler start, idle and over a burst.

    \b
    --failover: a Patroni cluster whose leader is killed --failovers times under load
    (asynchronous, or --sync); every job and handler run accounted for afterwards."""
    obj = settings(ctx)
    bench = load_bench()
    signal.signal(signal.SIGTERM, _exit_on_terminate)
    bench.run_command(obj.dsn, obj.schema, **options)
