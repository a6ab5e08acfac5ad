"""pgq's benchmarks: pgq against the baseline's plain SQL (`baseline.sql`), on throwaway servers.

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
    from .baseline import (
        BASELINE_CLAIM,
        BASELINE_COMPLETE,
        BASELINE_ENQUEUE,
        BASELINE_ENQUEUE_BATCH,
        BASELINE_INDEXES,
        BASELINE_LIMIT,
        BASELINE_TABLE,
        baseline_connection,
        read_result,
        setup_baseline,
        with_baseline_names,
    )
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
        drain_baseline,
        drain_pgq,
        fill_baseline,
        fill_pgq,
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

__all__ = [
    "BASELINE_CLAIM",
    "BASELINE_COMPLETE",
    "BASELINE_ENQUEUE",
    "BASELINE_ENQUEUE_BATCH",
    "BASELINE_INDEXES",
    "BASELINE_LIMIT",
    "BASELINE_TABLE",
    "FIXTURE_EVENTS",
    "FIXTURE_JOBS",
    "HANDLER_SPECS",
    "HISTORY_DAYS",
    "QUEUES",
    "QUEUE_NAME",
    "Meter",
    "Options",
    "Phase",
    "SameResourcesOptions",
    "ScaleOptions",
    "baseline_connection",
    "busy_percent",
    "cpu_ticks",
    "drain",
    "drain_args",
    "drain_baseline",
    "drain_pgq",
    "fill_baseline",
    "fill_fixture",
    "fill_pgq",
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
    "read_result",
    "refill",
    "run_bench",
    "run_command",
    "run_same_resources",
    "run_stats_scale",
    "server",
    "setup_baseline",
    "steal_percent",
    "throwaway_schema",
    "with_baseline_names",
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
            "drain_baseline",
            "fill_pgq",
            "fill_baseline",
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
            "BASELINE_CLAIM",
            "BASELINE_COMPLETE",
            "BASELINE_ENQUEUE",
            "BASELINE_ENQUEUE_BATCH",
            "BASELINE_INDEXES",
            "BASELINE_LIMIT",
            "BASELINE_TABLE",
            "baseline_connection",
            "read_result",
            "setup_baseline",
            "with_baseline_names",
        ),
        "baseline",
    ),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
