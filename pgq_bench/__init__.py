"""pgq's benchmarks: pgq against the seed's plain SQL (`seed.sql`), on throwaway servers.

Loaded only by `pgq bench` (and the scripts in `benchmarks/`), never by the queue
(`pgq_core`), the dashboard (`pgq_tui`) or any other `pgq` command. What the scripts and the
command use is exported here, each name importing its module on first use: the worker
processes of `pgq bench --same-resources` import `pgq_bench.handlers`, and should not pay
for the rest of the bench in their start-up time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .command import run_command
    from .common import (
        QUEUE_NAME,
        Meter,
        busy_percent,
        cpu_ticks,
        load_average,
        machine,
        payload,
        percentile,
        process_cpu,
        server,
        steal_percent,
        throwaway_schema,
    )
    from .drain import Options, Phase, drain, drain_args, print_tables, refill, run_bench
    from .handlers import HANDLER_SPECS, noop_async, noop_sync
    from .producers import produce
    from .same_resources import (
        SameResourcesOptions,
        drain_pgq,
        drain_seed,
        fill_pgq,
        fill_seed,
        print_same_resources,
        run_same_resources,
        worker_command,
    )
    from .scale import (
        FIXTURE_EVENTS,
        FIXTURE_JOBS,
        HISTORY_DAYS,
        QUEUES,
        ScaleOptions,
        fill_fixture,
        print_scale,
        run_stats_scale,
    )
    from .seed import (
        SEED_CLAIM,
        SEED_COMPLETE,
        SEED_ENQUEUE,
        SEED_ENQUEUE_BATCH,
        SEED_INDEXES,
        SEED_LIMIT,
        SEED_TABLE,
        seed_connection,
        setup_seed,
    )

__all__ = [
    "FIXTURE_EVENTS",
    "FIXTURE_JOBS",
    "HANDLER_SPECS",
    "HISTORY_DAYS",
    "QUEUES",
    "QUEUE_NAME",
    "SEED_CLAIM",
    "SEED_COMPLETE",
    "SEED_ENQUEUE",
    "SEED_ENQUEUE_BATCH",
    "SEED_INDEXES",
    "SEED_LIMIT",
    "SEED_TABLE",
    "Meter",
    "Options",
    "Phase",
    "SameResourcesOptions",
    "ScaleOptions",
    "busy_percent",
    "cpu_ticks",
    "drain",
    "drain_args",
    "drain_pgq",
    "drain_seed",
    "fill_fixture",
    "fill_pgq",
    "fill_seed",
    "load_average",
    "machine",
    "noop_async",
    "noop_sync",
    "payload",
    "percentile",
    "print_same_resources",
    "print_scale",
    "print_tables",
    "process_cpu",
    "produce",
    "refill",
    "run_bench",
    "run_command",
    "run_same_resources",
    "run_stats_scale",
    "seed_connection",
    "server",
    "setup_seed",
    "steal_percent",
    "throwaway_schema",
    "worker_command",
]

#: Where each exported name lives (a module of this package).
_HOME = {
    "run_command": "command",
    **dict.fromkeys(
        (
            "QUEUE_NAME",
            "Meter",
            "busy_percent",
            "cpu_ticks",
            "load_average",
            "machine",
            "payload",
            "percentile",
            "process_cpu",
            "server",
            "steal_percent",
            "throwaway_schema",
        ),
        "common",
    ),
    **dict.fromkeys(
        ("Options", "Phase", "drain", "drain_args", "print_tables", "refill", "run_bench"),
        "drain",
    ),
    **dict.fromkeys(("HANDLER_SPECS", "noop_async", "noop_sync"), "handlers"),
    "produce": "producers",
    **dict.fromkeys(
        (
            "SameResourcesOptions",
            "drain_pgq",
            "drain_seed",
            "fill_pgq",
            "fill_seed",
            "worker_command",
            "print_same_resources",
            "run_same_resources",
        ),
        "same_resources",
    ),
    **dict.fromkeys(
        (
            "FIXTURE_EVENTS",
            "FIXTURE_JOBS",
            "HISTORY_DAYS",
            "QUEUES",
            "ScaleOptions",
            "fill_fixture",
            "print_scale",
            "run_stats_scale",
        ),
        "scale",
    ),
    **dict.fromkeys(
        (
            "SEED_CLAIM",
            "SEED_COMPLETE",
            "SEED_ENQUEUE",
            "SEED_ENQUEUE_BATCH",
            "SEED_INDEXES",
            "SEED_LIMIT",
            "SEED_TABLE",
            "seed_connection",
            "setup_seed",
        ),
        "seed",
    ),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
