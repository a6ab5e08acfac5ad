"""A DataTable kept in step with a keyed list of rows by editing cells, never rebuilding;
columns by priority: the least needed hide first when the table is narrow."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from rich.text import Text
from textual import events
from textual._two_way_dict import TwoWayDict
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, CellKey, RowKey

Cell = str | Text
Row = tuple[str, Sequence[Cell]]
#: (key, label, width or None to fit the widest cell, priority: 0 always shown, higher hides
#: sooner)
Column = tuple[str, str, int | None, int]
#: the width an auto-width column counts for when deciding what fits
AUTO_MIN = 16
#: from this many rows going at once, `KeyedTable` removes them in one pass
BATCH_REMOVE = 8


def plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def fitting(columns: Sequence[Column], width: int, padding: int = 1) -> list[Column]:
    """The columns that fit in `width` cells: the highest priority numbers drop first (the
    rightmost first among equals); priority 0 never drops."""
    shown = list(columns)

    def needed() -> int:
        return sum((w if w is not None else AUTO_MIN) + 2 * padding for _, _, w, _ in shown)

    while needed() > width:
        droppable = [c for c in shown if c[3] > 0]
        if not droppable:
            break
        worst = max(droppable, key=lambda c: (c[3], shown.index(c)))
        shown.remove(worst)
    return shown


class RowMemo:
    """The last row built for each key and what it was built from: the same inputs give back
    the same row object, which `KeyedTable.sync` passes over without reading a cell."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[object, Row]] = {}

    def row(self, key: str, inputs: object, build: Callable[..., Row], *args: Any) -> Row:
        """`build(*args)`, unless the row of `key` was built from equal `inputs`: that row."""
        kept = self._rows.get(key)
        if kept is not None and kept[0] == inputs:
            return kept[1]
        row = build(*args)
        self._rows[key] = (inputs, row)
        return row

    def keep(self, keys: Collection[str]) -> None:
        """Forget the rows of every other key."""
        for key in [k for k in self._rows if k not in keys]:
            del self._rows[key]


class KeyedTable(DataTable[Cell]):
    """Rows are identified by a string key.

    `sync` updates only the cells that changed, removes and adds only the rows that came or
    went, reorders to the given order, and keeps the cursor on the row it was on (by key), so
    numbers can change under an operator's cursor without the table jumping. A row given as
    the same cells object as last time (`RowMemo`) is not looked at at all.
    A column without a width fits its widest cell, also when a cell grows in place.
    Rows are given with a cell for every column of COLUMNS; hidden columns are skipped.
    """

    COLUMNS: tuple[Column, ...] = ()
    RIGHT: frozenset[str] = frozenset()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._filter = ""
        self._all_rows: list[Row] = []
        self._keys: list[str] = []
        self._shown: list[Column] = list(self.COLUMNS)
        #: the cells object each row on the table was last given (by key)
        self._given: dict[str, Sequence[Cell]] = {}
        self._memo = RowMemo()

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for key, label, width, _ in self._shown:
            header = Text(label, justify="right" if key in self.RIGHT else "left")
            self.add_column(header, key=key, width=width)

    @property
    def shown_columns(self) -> list[str]:
        """Keys of the columns shown now, in order."""
        return [c[0] for c in self._shown]

    def on_resize(self, event: events.Resize) -> None:
        shown = fitting(self.COLUMNS, event.size.width - 1, self.cell_padding)
        if shown == self._shown:
            return
        selected = self.selected_key
        self._shown = shown
        self.clear(columns=True)
        self._keys = []
        self._given = {}
        self._add_columns()
        self.sync(self._all_rows)
        if selected is not None and selected in self.rows:
            self.move_cursor(row=self.get_row_index(selected), animate=False, scroll=False)

    def set_filter(self, text: str) -> None:
        self._filter = text.lower()
        self.sync(self._all_rows)

    @property
    def total_rows(self) -> int:
        """Rows given to the last `sync`, before the filter (`row_count`: after it)."""
        return len(self._all_rows)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except CellDoesNotExist:
            return None
        return row_key.value

    def sync(self, rows: Sequence[Row]) -> None:
        self._all_rows = list(rows)
        if self._filter:
            rows = [
                (key, cells)
                for key, cells in rows
                if any(self._filter in plain(c).lower() for c in cells)
            ]
        selected = self.selected_key
        wanted = {key: cells for key, cells in rows}
        self._remove_rows([k for k in self._keys if k not in wanted])
        every = [c[0] for c in self.COLUMNS]
        shown = [every.index(c[0]) for c in self._shown]
        column_keys = [every[i] for i in shown]
        auto_width = {c[0] for c in self._shown if c[2] is None}
        existing = set(self._keys)
        given: dict[str, Sequence[Cell]] = {}
        for key, all_cells in rows:
            given[key] = all_cells
            if key in existing and self._given.get(key) is all_cells:
                continue
            cells = [self._align(every[i], all_cells[i]) for i in shown]
            if key in existing:
                current = self.get_row(key)
                for column, old, new in zip(column_keys, current, cells, strict=True):
                    if plain(old) != plain(new) or _style(old) != _style(new):
                        self.update_cell(key, column, new, update_width=column in auto_width)
            else:
                self.add_row(*cells, key=key)
        order = [key for key, _ in rows]
        if order != self._current_order():
            first = column_keys[0]
            # By the identity of each row's stored first cell: a cell may read unlike its key
            # (a queue name with control characters is shown escaped).
            position = {id(self.get_cell(key, first)): i for i, key in enumerate(order)}
            self.sort(first, key=lambda cell: position.get(id(cell), len(position)))
        self._keys = order
        self._given = given
        if selected is not None and selected in wanted:
            index = self.get_row_index(selected)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False, scroll=False)

    def sync_built(self, entries: Iterable[tuple[str, object, Callable[[], Row]]]) -> None:
        """`sync` the rows of (key, inputs, build) entries in order, each row built again only
        when its inputs differ from those of its key's last row (`RowMemo`)."""
        rows = [self._memo.row(key, inputs, build) for key, inputs, build in entries]
        self._memo.keep({key for key, _ in rows})
        self.sync(rows)

    def _remove_rows(self, keys: list[str]) -> None:
        """What `remove_row` of each key does, in one pass: it renumbers every row below the
        one it removes, so a page of rows replaced (another queue's jobs) took quadratic time.
        The cursor and hover are clamped once, at the end, as the last `remove_row` would."""
        if len(keys) < BATCH_REMOVE:
            for key in keys:
                self.remove_row(key)
            return
        gone = {RowKey(key) for key in keys}
        self._require_update_dimensions = True
        self.check_idle()
        kept = sorted(
            (index, key)
            for key in self._row_locations
            if key not in gone and (index := self._row_locations.get(key)) is not None
        )
        self._row_locations = TwoWayDict({key: i for i, (_, key) in enumerate(kept)})
        for row_key in gone:
            for column_key in self._data[row_key]:
                self._updated_cells.discard(CellKey(row_key, column_key))
            del self.rows[row_key]
            del self._data[row_key]
        self.cursor_coordinate = self.cursor_coordinate
        self.hover_coordinate = self.hover_coordinate
        self._update_count += 1
        self.refresh(layout=True)

    def _current_order(self) -> list[str]:
        rows = self.ordered_rows
        return [str(r.key.value) for r in rows]

    def _align(self, column: str, cell: Cell) -> Cell:
        if column in self.RIGHT:
            text = cell.copy() if isinstance(cell, Text) else Text(cell)
            text.justify = "right"
            return text
        return cell


def _style(cell: object) -> str:
    if isinstance(cell, Text):
        return f"{cell.style}|{[(s.start, s.end, str(s.style)) for s in cell.spans]}"
    return ""
