"""KeyedTable.sync_built: a row is built again only when its inputs changed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from pgq_tui.widgets.keyed_table import Column, KeyedTable, Row, plain


class TwoColumns(KeyedTable):
    COLUMNS: tuple[Column, ...] = (("name", "name", 10, 0), ("n", "n", 6, 0))


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield TwoColumns()


async def test_sync_built_builds_only_the_rows_whose_inputs_changed() -> None:
    built: list[str] = []

    def entry(name: str, n: int) -> tuple[str, object, Callable[[], Row]]:
        def build() -> Row:
            built.append(name)
            return name, [Text(name), Text(str(n))]

        return name, (name, n), build

    app = Host()
    async with app.run_test(size=(40, 10)) as pilot:
        table = app.query_one(TwoColumns)
        table.sync_built([entry("a", 1), entry("b", 2)])
        await pilot.pause()
        assert built == ["a", "b"]
        table.sync_built([entry("a", 1), entry("b", 3)])
        await pilot.pause()
        assert built == ["a", "b", "b"]
        assert plain(table.get_cell("b", "n")) == "3"
        table.sync_built([entry("b", 3)])  # a went away: forgotten, and built when it comes back
        table.sync_built([entry("a", 1), entry("b", 3)])
        await pilot.pause()
        assert built == ["a", "b", "b", "a"]
        assert [plain(table.get_cell(key, "n")) for key in ("a", "b")] == ["1", "3"]
        assert table.row_count == 2


class Twins(App[None]):
    def compose(self) -> ComposeResult:
        yield TwoColumns(id="batched")
        yield TwoColumns(id="one-by-one")


def _rows(names: list[str]) -> list[Row]:
    return [(name, [Text(name), Text(str(len(name)))]) for name in names]


async def test_many_rows_going_at_once_leave_the_table_as_one_by_one_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`sync` removes many rows in one pass (`BATCH_REMOVE`): rows, order, row indexes, cells
    and cursor end as `remove_row` of each would leave them."""
    from pgq_tui.widgets import keyed_table

    before = [f"r{n:02}" for n in range(40)]
    steps = [
        [*before[::3], "new1", "new2"],  # most go, a few stay: the cursor's row goes too
        ["new2", *before[::6], "new3"],  # fewer than BATCH_REMOVE go: one by one both
        [f"s{n}" for n in range(12)],  # all go
    ]
    app = Twins()
    async with app.run_test(size=(60, 60)) as pilot:
        batched = app.query_one("#batched", TwoColumns)
        one_by_one = app.query_one("#one-by-one", TwoColumns)
        for table in (batched, one_by_one):
            table.sync(_rows(before))
            table.move_cursor(row=35, animate=False)
        await pilot.pause()
        for names in steps:
            batched.sync(_rows(names))
            with monkeypatch.context() as m:
                m.setattr(keyed_table, "BATCH_REMOVE", 10**9)
                one_by_one.sync(_rows(names))
            await pilot.pause()
            for table in (batched, one_by_one):
                assert [str(r.key.value) for r in table.ordered_rows] == names
            assert batched.cursor_coordinate == one_by_one.cursor_coordinate
            assert batched.hover_coordinate == one_by_one.hover_coordinate
            assert batched.selected_key == one_by_one.selected_key
            for name in names:
                assert batched.get_row_index(name) == one_by_one.get_row_index(name)
                assert [plain(c) for c in batched.get_row(name)] == [name, str(len(name))]
            assert batched.row_count == one_by_one.row_count == len(names)
            assert batched.virtual_size == one_by_one.virtual_size
