"""One headless dashboard on a real database, measured from inside: how long until the queues
table first holds rows, CPU share and memory while it idles, how long `q` takes to quit.

Run as a process of its own (`python -m pgq_bench.dashboard_probe DSN SCHEMA`, or this file
as a script) so that its memory is its own; it prints one JSON object. It reads only
pgq_tui's public constructor, so the same file measures an older checkout too.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

VIEW_KEYS = {"leases": "1", "jobs": "2", "errors": "5", "health": "6"}


def memory_mb() -> tuple[float, float]:
    """(resident now, peak resident) of this process, in MiB (Linux /proc)."""
    fields: dict[str, float] = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


async def probe(dsn: str, schema: str, idle: float, view: str, draw_limit: float) -> dict[str, Any]:
    from pgq_tui.app import DashboardApp
    from pgq_tui.pool import StaticPool
    from pgq_tui.source import PgSource
    from pgq_tui.widgets.queues_table import QueuesTable

    app = DashboardApp(
        PgSource(dsn, schema), StaticPool(()), database="bench", schema=schema, refresh=2.0
    )
    out: dict[str, Any] = {"view": view, "idle_seconds": idle}
    started = time.perf_counter()
    async with app.run_test(size=(160, 45)) as pilot:
        table = app.screen.query_one(QueuesTable)
        while not (app.polls and table.row_count):
            if time.perf_counter() - started > draw_limit:
                out["first_draw_seconds"] = None
                break
            await pilot.pause(0.02)
        else:
            await pilot.pause()
            out["first_draw_seconds"] = time.perf_counter() - started
        out["rows_in_queues_table"] = table.row_count
        if view in VIEW_KEYS:
            await pilot.press(VIEW_KEYS[view])
        await asyncio.sleep(min(5.0, idle))  # a first slow read of the view, then steady state
        cpu0, wall0, polls0 = time.process_time(), time.perf_counter(), app.polls
        await asyncio.sleep(idle)
        wall = time.perf_counter() - wall0
        out["idle_cpu_percent"] = 100 * (time.process_time() - cpu0) / wall
        out["polls_while_idle"] = app.polls - polls0
        out["poll_failures"] = app.poll_failures
        out["rss_mb"], out["peak_rss_mb"] = memory_mb()
        out["connection"] = app.connection
        quit_started = time.perf_counter()
        await pilot.press("q")
        for _ in range(3000):
            if not app.is_running:
                break
            await asyncio.sleep(0.01)
    out["quit_seconds"] = time.perf_counter() - quit_started
    return out


def main(argv: list[str]) -> None:
    dsn, schema = argv[0], argv[1]
    idle = float(argv[2]) if len(argv) > 2 else 20.0
    view = argv[3] if len(argv) > 3 else "leases"
    draw_limit = float(argv[4]) if len(argv) > 4 else 300.0
    print(json.dumps(asyncio.run(probe(dsn, schema, idle, view, draw_limit))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
