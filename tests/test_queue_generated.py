"""`Queue` is generated from `AsyncQueue` (tools/async_to_sync.py): the file in the tree is what
the tool makes of the source today, and the tool turns async code into its sync twin."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "async_to_sync.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_queue_is_current() -> None:
    """Fails when pgq_core/queue_sync.py was edited by hand, or queue_async.py changed without
    running the tool."""
    done = subprocess.run(
        [sys.executable, str(TOOL), "--check"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert (ROOT / "pgq_core" / "queue_sync.py").read_text() == _tool().generate(
        (ROOT / "pgq_core" / "queue_async.py").read_text()
    )


def test_the_check_fails_on_a_stale_or_missing_file(tmp_path: Path) -> None:
    tool = _tool()
    tool.TARGET = tmp_path / "queue_sync.py"
    assert tool.main(["--check"]) == 1
    current = (ROOT / "pgq_core" / "queue_sync.py").read_text()
    tool.TARGET.write_text(current.replace('"""Every schedule, by name."""', '"""Schedules."""'))
    assert tool.main(["--check"]) == 1
    tool.TARGET.write_text(current)
    assert tool.main(["--check"]) == 0


def test_the_tool_turns_async_code_into_its_sync_twin() -> None:
    source = '''"""The async source."""

import asyncio
from collections.abc import AsyncIterator, Iterable


class AsyncQueue:
    async def __aenter__(self) -> AsyncQueue:
        return self

    async def first(self, conn: psycopg.AsyncConnection[Any]) -> int:
        # a comment stays
        target = await asyncio.to_thread(find, conn, 1)
        async with conn.transaction():
            rows = [r async for r in self.rows(target)]
        return (await self.count(rows))[0] + len(await self.more())

    async def rows(self, x: Iterable[int]) -> AsyncIterator[int]:
        """A docstring naming AsyncQueue stays as written."""
        for r in x:
            yield await session.arun(r)
'''
    expected = '''
from collections.abc import Iterable, Iterator


class Queue:
    def __enter__(self) -> Queue:
        return self

    def first(self, conn: psycopg.Connection[Any]) -> int:
        # a comment stays
        target = find(conn, 1)
        with conn.transaction():
            rows = [r for r in self.rows(target)]
        return self.count(rows)[0] + len(self.more())

    def rows(self, x: Iterable[int]) -> Iterator[int]:
        """A docstring naming AsyncQueue stays as written."""
        for r in x:
            yield session.run(r)
'''
    tool = _tool()
    assert tool.generate(source) == tool.HEADER + expected
