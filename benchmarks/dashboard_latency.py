"""The dashboard's truth in figures: a key's effect on screen, NOTIFY to screen, and the
lease countdown's error.

python benchmarks/dashboard_latency.py [--dsn DSN] [--presses 20] [--notifies 60]
    [--countdown 25] [--code DIR]

Runs the real app headless (App.run_test) over PgSource on a throwaway schema (the embedded
server unless --dsn or PGQ_DSN), as a user runs it (a poll every 2 s, LISTEN on), and prints
the load average, then:
- key to screen: `R` then `y` (Pilot) on a queue of 5 dead jobs, from the `y` until the
  first frame the app draws (its `_display`, called headless too) with the queue's row at 0
  dead; and until the requeue's call returned (committed); `--presses` samples, the jobs made
  dead again between them; p50, p95, max.
- NOTIFY to screen: an enqueue (its NOTIFY sent at commit) until the queues table shows the
  new ready count; `--notifies` samples, spaced randomly 50-400 ms apart; p50, p95, max.
- countdown error: an in-app worker holds a job with a 30 s lease (heartbeats every 10 s, each
  sending an empty-payload NOTIFY); every 50 ms for `--countdown` seconds,
  |shown time left - (lease_until - now())|
  read from the server; p50, p95, max; and after each heartbeat (the server's time left
  jumping up), how long until the screen is within 1 s again.
Any of them is skipped with 0 samples. It reads the screen only through the tables and
wraps only the app's `_display` and its source's `requeue_dead`, so it runs against older
checkouts as well: `--code DIR` imports pgq_core and pgq_tui from DIR (e.g. `git archive main`
unpacked), ahead of this checkout's editable install.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import secrets
import statistics
import sys
import time
from datetime import timedelta
from typing import Any


def _code_first(argv: list[str]) -> None:
    """`--code DIR`: pgq_core and pgq_tui come from DIR, not from the editable install."""
    if "--code" not in argv:
        return
    code = os.path.abspath(argv[argv.index("--code") + 1])
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path.insert(0, code)


_code_first(sys.argv)

import psycopg  # noqa: E402 - after --code
from psycopg import sql  # noqa: E402

from pgq_core import JobSpec, Queue, migrate, resolve  # noqa: E402
from pgq_tui.launch import make_app  # noqa: E402
from pgq_tui.screens.confirm import ConfirmScreen  # noqa: E402
from pgq_tui.widgets.leases_table import LeasesTable  # noqa: E402
from pgq_tui.widgets.queues_table import QueuesTable  # noqa: E402

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


def dead_shown(app: Any, queue: str) -> int | None:
    table = app.dashboard.query_one(QueuesTable)
    if queue not in table.rows:
        return None
    return int(str(table.get_cell(queue, "dead")).replace(",", "") or 0)


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


def make_dead(queue: Queue, name: str, count: int) -> None:
    """`count` dead jobs in `name` (its ready ones claimed and failed on their last attempt)."""
    for job in queue.claim(name, count, worker="bench"):
        queue.fail(job.id, job.fence, "boom")


async def key_latency(dsn: str, schema: str, presses: int) -> tuple[list[float], list[float]]:
    """(y to the first frame showing 0 dead, y to the requeue committed) per press."""
    jobs = 5
    app = make_app(dsn, schema, "bench")  # as a user runs it: polls every 2 s, LISTEN on
    frames: list[tuple[float, int | None]] = []
    display = app._display

    def drawn(screen: Any, renderable: Any) -> None:
        display(screen, renderable)
        if renderable is not None:
            frames.append((time.monotonic(), dead_shown(app, "keys")))

    app._display = drawn  # type: ignore[method-assign]
    committed: list[float] = []
    requeue_dead = app.source.requeue_dead

    async def timed_requeue(queue: str) -> list[int]:
        ids: list[int] = await requeue_dead(queue)
        committed.append(time.monotonic())
        return ids

    app.source.requeue_dead = timed_requeue  # type: ignore[method-assign]
    to_screen: list[float] = []
    to_commit: list[float] = []
    with Queue.connect(dsn, schema) as queue:
        queue.enqueue_many([JobSpec("keys", {"n": i}, max_attempts=1) for i in range(jobs)])
        make_dead(queue, "keys", jobs)
        async with app.run_test(size=(132, 40)) as pilot:
            await until(pilot, lambda: dead_shown(app, "keys") == jobs)
            await pilot.pause(1.0)  # LISTEN is up
            for _ in range(presses):
                app.dashboard.query_one(QueuesTable).focus()
                await pilot.press("R")
                await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
                frames.clear()
                committed.clear()
                started = time.monotonic()
                await pilot.press("y")
                await until(pilot, lambda: any(dead == 0 for _, dead in frames) and committed)
                shown = next(at for at, dead in frames if dead == 0)
                to_screen.append(shown - started)
                to_commit.append(committed[0] - started)
                make_dead(queue, "keys", jobs)
                await until(pilot, lambda: dead_shown(app, "keys") == jobs)
                await pilot.pause(random.uniform(0.05, 0.4))
    return to_screen, to_commit


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
    parser.add_argument("--presses", type=int, default=20)
    parser.add_argument("--notifies", type=int, default=60)
    parser.add_argument("--countdown", type=float, default=25.0)
    parser.add_argument("--code", default=None, help="import pgq_core and pgq_tui from here")
    args = parser.parse_args()
    target = resolve(args.dsn, "pgq")
    schemas = [f"bench_dash_{secrets.token_hex(4)}" for _ in range(3)]
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        for schema in schemas:
            migrate(conn, schema)
    import pgq_tui

    print(f"code: {os.path.dirname(os.path.dirname(os.path.abspath(pgq_tui.__file__)))}")
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    try:
        if args.presses:
            to_screen, to_commit = await key_latency(target.dsn, schemas[2], args.presses)
            print(figures("R y to screen (first frame)", " ms", to_screen, 1000))
            print(figures("R y to committed", " ms", to_commit, 1000))
        if args.notifies:
            took = await notify_latency(target.dsn, schemas[0], args.notifies)
            print(figures("NOTIFY to screen", " ms", took, 1000))
        if args.countdown:
            errors, catch_up = await countdown_error(target.dsn, schemas[1], args.countdown)
            print(figures("countdown error, every sample", " ms", errors, 1000))
            settled = [e for e in errors if e < 1]
            print(f"countdown samples within 1 s: {len(settled)} of {len(errors)}")
            if catch_up:
                print(
                    f"heartbeats: {len(catch_up)}, shown within 1 s again after "
                    + ", ".join(f"{c * 1000:.0f} ms" for c in catch_up)
                )
        print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    finally:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    asyncio.run(main())
