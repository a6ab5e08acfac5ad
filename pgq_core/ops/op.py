"""The `Op` type: one round trip as data, a named statement, its parameters and how to read
its rows. `Queue`, `AsyncQueue` and the worker run ops; they hold no SQL of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..filters import JobFilter

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
#: The rows of a `named` op: named tuples, read by column name.
NamedRows = list[Any]


@dataclass(frozen=True)
class Op(Generic[T]):
    """One round trip: run statement `name` with `params`, turn the rows into `T`."""

    name: str
    params: Mapping[str, Any]
    read: Callable[[Rows], T]
    #: For statements with a `{where}`: the filter that fills it (values bound, never spliced).
    where: JobFilter | None = None
    #: Rows arrive as named tuples (each column of the statement has a name of its own).
    named: bool = False


def read_ids(rows: Rows) -> list[int]:
    return [int(r[0]) for r in rows]


def read_nothing(rows: Rows) -> None:
    return None
