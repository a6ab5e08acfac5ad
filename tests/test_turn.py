"""The turn on an `AsyncQueue`'s own connection (`TaskTurn`), without a database: one task at
a time, re-entered by its holder, handed first come first served, to tasks on other event
loops too, and never lost to a cancelled waiter."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pgq_core.queue_common import TaskTurn


async def test_one_holder_at_a_time_first_come_first_served_and_reentrant() -> None:
    turn = TaskTurn()
    order: list[str] = []

    async def hold(name: str, delay: float) -> None:
        async with turn:
            order.append(f"{name} in")
            async with turn:  # its holder enters again without waiting
                await asyncio.sleep(delay)
            order.append(f"{name} out")

    first = asyncio.create_task(hold("a", 0.05))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(hold(n, 0.01)) for n in ("b", "c")]
    await asyncio.gather(first, *rest)
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]


async def test_a_waiter_cancelled_before_its_turn_leaves_the_line() -> None:
    turn = TaskTurn()
    release = asyncio.Event()

    async def holder() -> None:
        async with turn:
            await release.wait()

    async def waiter() -> None:
        async with turn:
            pytest.fail("a cancelled waiter never holds the turn")

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(waiter())
    await asyncio.sleep(0.01)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    release.set()
    await held
    await asyncio.wait_for(turn.__aenter__(), 1)  # free at once
    await turn.__aexit__(None, None, None)


async def test_a_waiter_cancelled_once_handed_the_turn_hands_it_on() -> None:
    """The holder hands the turn to the first waiter, which is cancelled before it runs: the
    turn goes on to the next waiter, not lost with it."""
    turn = TaskTurn()
    got: list[str] = []

    async def take(name: str) -> None:
        async with turn:
            got.append(name)

    await turn.__aenter__()
    first = asyncio.create_task(take("first"))
    second = asyncio.create_task(take("second"))
    await asyncio.sleep(0.01)  # both wait
    await turn.__aexit__(None, None, None)  # handed to `first`, woken soon
    first.cancel()  # before it runs again
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)
    assert got == ["second"]


def test_tasks_on_two_event_loops_take_turns() -> None:
    """A task waiting on one loop for the turn a task on another loop holds wakes when that
    one ends."""
    turn = TaskTurn()
    entered = threading.Event()
    release = threading.Event()
    order: list[str] = []

    async def hold() -> None:
        async with turn:
            entered.set()
            await asyncio.to_thread(release.wait, 5)
            order.append("holder out")

    async def wait() -> None:
        async with turn:
            order.append("waiter in")

    holder = threading.Thread(target=asyncio.run, args=(hold(),))
    holder.start()
    assert entered.wait(5)
    waiter = threading.Thread(target=asyncio.run, args=(wait(),))
    waiter.start()
    release.set()
    holder.join(5)
    waiter.join(5)
    assert not waiter.is_alive(), "the waiter on the other loop was never woken"
    assert order == ["holder out", "waiter in"]
