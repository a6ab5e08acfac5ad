"""The background tasks (worker/background.py) alone, without a database: a fake `call`
answers the reaper and refuses the rest (the tasks retry a refused statement later), and a
fake heartbeater decides when its first beat is."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import pytest
from support import FakeCall, until

from pgq_core.worker.background import Background
from pgq_core.worker.link import Transient


class FirstBeat:
    """The heartbeater's one duty here: hold work back until its first beat."""

    def __init__(self) -> None:
        self.beat = asyncio.Event()

    async def after_first_beat(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await self.beat.wait()
        except BaseException:
            work.close()
            raise
        await work


def refused(op: Any) -> Any:
    raise Transient("not in this test")


async def test_the_listener_waits_for_the_first_beat_and_every_task_ends_on_stop() -> None:
    listening = asyncio.Event()
    beats: list[float] = []

    async def listener() -> None:
        listening.set()
        await asyncio.Event().wait()

    async def beat() -> None:
        while True:
            beats.append(asyncio.get_running_loop().time())
            await asyncio.sleep(0.01)

    heart = FirstBeat()
    background = Background()
    background.start(heart, listener(), FakeCall(refused), 60.0, "w", beat())  # type: ignore[arg-type]
    await until(lambda: len(beats) >= 2, what="the worker's row beaten")
    assert not listening.is_set(), "no listener before the heartbeat's first round trip"
    heart.beat.set()
    await asyncio.wait_for(listening.wait(), 5)
    await background.stop(timeout=1.0)
    assert all(task.done() for task in background._tasks)
    count = len(beats)
    await asyncio.sleep(0.03)
    assert len(beats) == count, "nothing beats after stop"


async def test_the_reaper_runs_every_interval_and_says_what_it_reaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    call = FakeCall(refused, reap=[(4, "ready"), (5, "dead")])
    background = Background()
    with caplog.at_level(logging.INFO, "pgq.worker"):
        background.start(FirstBeat(), asyncio.sleep(0), call, 0.01, "w")  # type: ignore[arg-type]
        await until(lambda: ["reap"] in call.names, what="a reap")
        await background.stop(timeout=1.0)
    assert "worker w: reaped 2 expired lease(s), 1 dead" in caplog.text


async def test_stop_lets_chores_finish_within_the_timeout_then_cancels_them() -> None:
    background = Background()
    ended: list[str] = []

    async def chore(name: str, seconds: float) -> None:
        try:
            await asyncio.sleep(seconds)
            ended.append(name)
        except asyncio.CancelledError:
            ended.append(f"{name} cancelled")
            raise

    background.chore(chore("quick", 0.01))
    background.chore(chore("slow", 60.0))
    await background.stop(timeout=0.2)
    assert ended == ["quick", "slow cancelled"], "every chore has ended when stop returns"
