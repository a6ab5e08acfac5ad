"""The dashboard's truth in figures: NOTIFY to screen, and the lease countdown's error.

python benchmarks/dashboard_latency.py [--dsn DSN] [--notifies 60] [--countdown 25]

Runs the real app headless (App.run_test) over PgSource on a throwaway schema (the embedded
server unless --dsn or PGQ_DSN), and prints:
- NOTIFY to screen: an enqueue (its NOTIFY sent at commit) until the queues table shows the
  new ready count; `--notifies` samples, spaced randomly 50-400 ms apart; p50, p95, max.
- countdown error: an in-app worker holds a job with a 30 s lease (heartbeats every 10 s, each
  sending an empty-payload NOTIFY); every 50 ms for `--countdown` seconds,
  |shown time left - (lease_until - now())|
  read from the server; p50, p95, max; and after each heartbeat (the server's time left
  jumping up), how long until the screen is within 1 s again.
It reads the screen only through the tables, so it runs against older checkouts as well
(PYTHONPATH=that checkout) to compare before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import secrets
import statistics
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from pgq_core import Queue, migrate, resolve
from pgq_tui.launch import make_app
from pgq_tui.widgets.leases_table import LeasesTable
from pgq_tui.widgets.queues_table import QueuesTable

LEASE = timedelta(seconds=30)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def figures(name: str, unit: str, values: list[float], scale: float = 1.0) -> str:
    v = [x * scale for x in values]
    return (
        f"{name}: n={len(v)}  p50 {statistics.median(v):.0f}{unit}  p95 {pct(v, 95):.0f}{unit}"
        f"  max {max(v):.0f}{unit}"
    )


def ready_shown(app: Any, queue: str) -> int | None:
    table = app.dashboard.query_one(QueuesTable)
    if queue not in table.rows:
        return None
    return int(str(table.get_row(queue)[1]).replace(",", ""))


def left_shown(app: Any, job_id: int) -> float | None:
    table = app.dashboard.query_one(LeasesTable)
    if str(job_id) not in table.rows:
        return None
    cell = str(table.get_row(str(job_id))[2])
    match = re.search(r"(?:(\d+)m)?(\d+(?:\.\d+)?)s\s*$", cell)
    if not match:
        return None
    return float(match.group(1) or 0) * 60 + float(match.group(2))


async def until(pilot: Any, condition: Any, timeout: float = 10.0, step: float = 0.002) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await pilot.pause(step)


async def notify_latency(dsn: str, schema: str, samples: int) -> list[float]:
    app = make_app(dsn, schema, "bench", refresh=3600)  # polls by time never interfere
    took: list[float] = []
    with Queue.connect(dsn, schema) as queue:
        queue.enqueue("lat", {})
        async with app.run_test(size=(132, 40)) as pilot:
            await until(pilot, lambda: ready_shown(app, "lat") == 1)
            await pilot.pause(1.0)  # LISTEN is up
            for i in range(samples):
                started = time.monotonic()
                queue.enqueue("lat", {})
                await until(pilot, lambda n=i + 2: ready_shown(app, "lat") == n)
                took.append(time.monotonic() - started)
                await pilot.pause(random.uniform(0.05, 0.4))
    return took


async def countdown_error(dsn: str, schema: str, seconds: float) -> tuple[list[float], list[float]]:
    """(|error| of every sample, catch-up time after each heartbeat): a heartbeat is seen as
    the server's time left jumping up; caught up is the first sample within 1 s again."""

    async def hold(ctx: Any) -> None:
        while not ctx.lost:
            await asyncio.sleep(0.05)

    app = make_app(dsn, schema, "bench", refresh=2.0, handler=hold, lease=LEASE, grace=1.0)
    errors: list[float] = []
    catch_up: list[float] = []
    with Queue.connect(dsn, schema) as queue:
        job_id = queue.enqueue("held", {})
    truth = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    query = sql.SQL(
        "SELECT extract(epoch FROM lease_until - now())::float8 FROM {}.jobs WHERE id = %s"
    ).format(sql.Identifier(schema))
    try:
        async with app.run_test(size=(132, 40)) as pilot:
            await until(pilot, lambda: app.dashboard.query_one(QueuesTable).row_count > 0)
            app.dashboard.query_one(QueuesTable).move_cursor(row=0)
            await pilot.press("w")
            await until(pilot, lambda: left_shown(app, job_id) is not None, timeout=20)
            end = time.monotonic() + seconds
            last_truth: float | None = None
            beat_at: float | None = None
            while time.monotonic() < end:
                row = await (await truth.execute(query, (job_id,))).fetchone()
                shown = left_shown(app, job_id)
                now = time.monotonic()
                if shown is None or row is None or row[0] is None:
                    break
                true_left = float(row[0])
                if last_truth is not None and true_left > last_truth + 1:
                    beat_at = now
                last_truth = true_left
                error = abs(shown - true_left)
                errors.append(error)
                if beat_at is not None and error < 1:
                    catch_up.append(now - beat_at)
                    beat_at = None
                await pilot.pause(0.05)
            app.pool.stop_all(immediately=True)
            await app.pool.wait(5)
    finally:
        await truth.close()
    return errors, catch_up


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--notifies", type=int, default=60)
    parser.add_argument("--countdown", type=float, default=25.0)
    args = parser.parse_args()
    target = resolve(args.dsn, "pgq")
    schemas = [f"bench_dash_{secrets.token_hex(4)}" for _ in range(2)]
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        for schema in schemas:
            migrate(conn, schema)
    try:
        took = await notify_latency(target.dsn, schemas[0], args.notifies)
        print(figures("NOTIFY to screen", " ms", took, 1000))
        errors, catch_up = await countdown_error(target.dsn, schemas[1], args.countdown)
        print(figures("countdown error, every sample", " ms", errors, 1000))
        settled = [e for e in errors if e < 1]
        print(f"countdown samples within 1 s: {len(settled)} of {len(errors)}")
        if catch_up:
            print(
                f"heartbeats: {len(catch_up)}, shown within 1 s again after "
                + ", ".join(f"{c * 1000:.0f} ms" for c in catch_up)
            )
    finally:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    asyncio.run(main())
