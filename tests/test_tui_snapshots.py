"""Layout snapshots of every view, from fixed model objects (no database, frozen clock), at the
usual size, at 80x24 and at 160x45.

These are about layout only: the database behaviour is covered in test_tui_app.py and
test_tui_live.py. Update after an intended UI change:
pytest tests/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from tui_support.pilot import NARROW, SIZE, VIEWS, WIDE, sample_app, settle


def _steps(view: str) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await VIEWS[view](pilot)
        await settle(pilot)

    return run_before


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_view_layout(view: str, snap_compare: Callable[..., bool]) -> None:
    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=_steps(view))


@pytest.mark.slow  # the other sizes run in the full pass (.ci/run); the usual size runs always
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_view_layout_80x24(view: str, snap_compare: Callable[..., bool]) -> None:
    assert snap_compare(sample_app(), terminal_size=NARROW, run_before=_steps(view))


@pytest.mark.slow
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_view_layout_160x45(view: str, snap_compare: Callable[..., bool]) -> None:
    assert snap_compare(sample_app(), terminal_size=WIDE, run_before=_steps(view))


def test_read_only_header_layout(snap_compare: Callable[..., bool]) -> None:
    assert snap_compare(sample_app(read_only=True), terminal_size=SIZE, run_before=settle)
