"""The dashboard on the fixed sample state, and the key presses that reach each view.

Shared by the layout snapshot tests and scripts/screenshots.py, so both show the same thing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from textual import events
from textual.pilot import Pilot

from pgq_tui.app import DashboardApp
from pgq_tui.latency import LatencyTrend
from pgq_tui.pool import StaticPool
from pgq_tui.throughput import Throughput

from .sample import WORKERS, SampleSource, clock, warm, warm_latency

SIZE = (132, 38)
#: the small and the large terminal every view is also checked at
NARROW = (80, 24)
WIDE = (160, 45)
Steps = Callable[[Pilot[Any]], Awaitable[None]]


def sample_app(read_only: bool = False) -> DashboardApp:
    """Frozen clock, no LISTEN, no timed polls (though "every 1s" shows), no cursor blink;
    every number is a constant of `sample`."""
    return DashboardApp(
        SampleSource(),
        StaticPool(WORKERS),
        database="ops@db.example.com:5432/shop",
        schema="pgq",
        refresh=1,
        timed_polls=False,
        read_only=read_only,
        listen=False,
        clock=clock,
        blink=False,
        throughput=warm(Throughput()),
        latency=warm_latency(LatencyTrend()),
    )


async def settle(pilot: Pilot[Any]) -> None:
    """Wait until no poll is in flight and the screen has caught up."""
    app = pilot.app
    assert isinstance(app, DashboardApp)
    for _ in range(500):
        if app.polls and not app._polling and not app._latency_reading:
            break
        await pilot.pause(0.01)
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


async def _press(pilot: Pilot[Any], *keys: str) -> None:
    await settle(pilot)
    await pilot.press(*keys)
    await settle(pilot)


async def queues(pilot: Pilot[Any]) -> None:
    await _press(pilot, "down")


async def leases(pilot: Pilot[Any]) -> None:
    await _press(pilot, "1", "tab")


async def jobs(pilot: Pilot[Any]) -> None:
    await _press(pilot, "down", "down", "down", "enter")


async def job_detail(pilot: Pilot[Any]) -> None:
    await jobs(pilot)
    await _press(pilot, "down", "down", "enter")


async def workers(pilot: Pilot[Any]) -> None:
    await _press(pilot, "3")


async def confirm_requeue_all(pilot: Pilot[Any]) -> None:
    await _press(pilot, "down", "down", "down", "R")


async def confirm_kill(pilot: Pilot[Any]) -> None:
    await _press(pilot, "1", "tab", "down", "k")


async def log(pilot: Pilot[Any]) -> None:
    await _press(pilot, "4")


async def help_screen(pilot: Pilot[Any]) -> None:
    await _press(pilot, "question_mark")


async def filtered(pilot: Pilot[Any]) -> None:
    """The Jobs view's server-side filter being typed (prefilled with the queue and status)."""
    await jobs(pilot)
    await _press(pilot, "slash", *" error:503")


async def confirm_bulk(pilot: Pilot[Any]) -> None:
    """`R` over an applied filter: the bulk dialog, with its exact count."""
    await filtered(pilot)
    await _press(pilot, "enter", "R")


async def errors(pilot: Pilot[Any]) -> None:
    await _press(pilot, "5")


async def health(pilot: Pilot[Any]) -> None:
    await _press(pilot, "6")


VIEWS: dict[str, Steps] = {
    "queues": queues,
    "leases": leases,
    "jobs": jobs,
    "job-detail": job_detail,
    "workers": workers,
    "log": log,
    "confirm-requeue-all": confirm_requeue_all,
    "confirm-kill": confirm_kill,
    "confirm-bulk": confirm_bulk,
    "help": help_screen,
    "filter": filtered,
    "errors": errors,
    "health": health,
}


async def wait_for(
    pilot: Pilot[Any], condition: Callable[[], bool], what: str, timeout: float = 20.0
) -> None:
    """Let the app run until `condition` holds; AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


async def quit_with_q(pilot: Pilot[Any], presses: int = 1, timeout: float = 30.0) -> None:
    """Press `q` (`presses` times) and wait until the app has exited; AssertionError after
    `timeout`.

    Not `pilot.press("q")`: after a key it waits for the animator to go idle, and an app that
    exits meanwhile (the dashboard's quit ends in a worker) may leave that wait unanswered
    for ever."""
    app = pilot.app
    driver = app._driver
    assert driver is not None, "the app is not running"
    for _ in range(presses):
        key = events.Key("q", "q")
        key.set_sender(app)
        driver.send_message(key)
    deadline = time.monotonic() + timeout
    while app.return_code is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"q did not quit the app within {timeout:g}s")
        await asyncio.sleep(0.05)

