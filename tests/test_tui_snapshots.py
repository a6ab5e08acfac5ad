"""Layout snapshots of every view, from fixed model objects (no database, frozen clock).

These are about layout only: the database behaviour is covered in test_tui_app.py.
Update after an intended UI change: pytest tests/test_tui_snapshots.py --snapshot-update
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from pgq_tui.testing import SIZE, VIEWS, sample_app, settle


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_view_layout(view: str, snap_compare: Callable[..., bool]) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await VIEWS[view](pilot)
        await settle(pilot)

    assert snap_compare(sample_app(), terminal_size=SIZE, run_before=run_before)


def test_read_only_header_layout(snap_compare: Callable[..., bool]) -> None:
    assert snap_compare(sample_app(read_only=True), terminal_size=SIZE, run_before=settle)
