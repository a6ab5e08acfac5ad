"""pgq's benchmarks: pgq against the seed's plain SQL (`seed.sql`), on throwaway servers.

Loaded only by `pgq bench` (and the scripts in `benchmarks/`), never by the queue
(`pgq_core`), the dashboard (`pgq_tui`) or any other `pgq` command. What the scripts and the
command use is exported here.
"""

from __future__ import annotations

from .command import run_command
from .common import QUEUE_NAME, Meter, payload, percentile, server, throwaway_schema
from .drain import Options, Phase, drain, drain_args, print_tables, refill, run_bench
from .handlers import noop_async, noop_sync
from .scale import ScaleOptions, print_scale, run_stats_scale
from .seed import (
    SEED_CLAIM,
    SEED_COMPLETE,
    SEED_ENQUEUE,
    SEED_INDEXES,
    SEED_LIMIT,
    SEED_TABLE,
    seed_connection,
    setup_seed,
)

__all__ = [
    "QUEUE_NAME",
    "SEED_CLAIM",
    "SEED_COMPLETE",
    "SEED_ENQUEUE",
    "SEED_INDEXES",
    "SEED_LIMIT",
    "SEED_TABLE",
    "Meter",
    "Options",
    "Phase",
    "ScaleOptions",
    "drain",
    "drain_args",
    "noop_async",
    "noop_sync",
    "payload",
    "percentile",
    "print_scale",
    "print_tables",
    "refill",
    "run_bench",
    "run_command",
    "run_stats_scale",
    "seed_connection",
    "server",
    "setup_seed",
    "throwaway_schema",
]
