"""What `pgq bench` runs once its options are parsed: pick the mode, run it on a throwaway
server, print tables or JSON. The click command itself lives in `pgq.cli` and imports this
package only when it runs, so no other `pgq` command loads the bench."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from pgq_core.config import check_schema

from .common import server
from .drain import Options, print_tables, run_bench
from .producers import ProducersOptions, print_producers, run_producers
from .same_resources import SameResourcesOptions, print_same_resources, run_same_resources
from .scale import ScaleOptions, print_scale, run_stats_scale
from .soak import SoakOptions, print_soak, run_soak

#: --jobs when not given: per side in the default run, per run with --same-resources.
DEFAULT_JOBS = 20_000
DEFAULT_SAME_RESOURCES_JOBS = 10_000
DEFAULT_PRODUCERS_JOBS = 8_000
#: --handler both: the pgq side runs once with each.
HANDLER_KINDS = {"sync": ("sync",), "async": ("async",), "both": ("sync", "async")}


def run_command(
    dsn: str | None,
    schema: str | None,
    *,
    jobs: int | None,
    workers: int,
    batch: int,
    concurrency: int,
    payload_bytes: int,
    latency_samples: int,
    rounds: int,
    stats_scale: bool,
    done_jobs: int,
    ready_jobs: int,
    running_jobs: int,
    dead_jobs: int,
    repeat: int,
    same_resources: bool,
    concurrency_levels: tuple[int, ...],
    handler_kind: str,
    producers: int | None = None,
    soak: timedelta | None = None,
    rate: float = 200.0,
    json_lines: str = "soak.jsonl",
    soak_sample: timedelta | None = None,
    as_json: bool = False,
) -> None:
    """`pgq bench` with its parsed options: the default run, --stats-scale or --same-resources.

    `schema` is only checked: every run uses throwaway schemas of its own."""
    modes = [stats_scale, same_resources, producers is not None, soak is not None]
    if sum(modes) > 1:
        raise click.UsageError(
            "--stats-scale, --same-resources, --producers and --soak are separate runs: pick one"
        )
    if soak is not None and soak.total_seconds() <= 0:
        raise click.UsageError("--soak must be longer than 0s")
    if schema:
        check_schema(schema)
    console = Console(stderr=as_json)

    def say(message: str) -> None:
        console.print(f"[dim]· {message}[/dim]")

    result: dict[str, Any]
    with server(dsn) as (target, embedded):
        if soak is not None:
            sample = (soak_sample or timedelta(minutes=1)).total_seconds()
            soak_opts = SoakOptions(soak.total_seconds(), rate, max(sample, 1.0), Path(json_lines))
            result = run_soak(target, embedded, soak_opts, say)
        elif producers is not None:
            total = jobs or DEFAULT_PRODUCERS_JOBS
            popts = ProducersOptions(producers, total, payload_bytes, rounds)
            result = run_producers(target, embedded, popts, say)
        elif stats_scale:
            scale = ScaleOptions(done_jobs, ready_jobs, running_jobs, dead_jobs, repeat)
            result = run_stats_scale(target, embedded, scale, say)
        elif same_resources:
            opts = SameResourcesOptions(
                jobs=jobs or DEFAULT_SAME_RESOURCES_JOBS,
                levels=concurrency_levels,
                handlers=HANDLER_KINDS[handler_kind],
                batch=batch,
                payload_bytes=payload_bytes,
            )
            result = run_same_resources(target, embedded, opts, say)
        else:
            result = run_bench(
                target,
                embedded,
                Options(
                    jobs or DEFAULT_JOBS,
                    workers,
                    batch,
                    concurrency,
                    payload_bytes,
                    latency_samples,
                    rounds,
                ),
                say,
            )
    if as_json:
        click.echo(json.dumps(result, default=str, indent=2))
    elif soak is not None:
        print_soak(result, say)
    elif producers is not None:
        print_producers(result, console)
    elif stats_scale:
        print_scale(result, console)
    elif same_resources:
        print_same_resources(result, console)
    else:
        print_tables(result, console)
