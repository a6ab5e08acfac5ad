"""KeyedTable.sync_built: a row is built again only when its inputs changed."""

from __future__ import annotations

from collections.abc import Callable

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
