"""A read-only JSON object in about half a dict's memory: its values in a tuple, its keys shared.

With 50,000 ParallelJobs waiting, each job's status is ten keys and two conditions of six: three dicts of
272 bytes each (a dict of six to ten keys has a 16-slot table), a third of what the operator keeps per
job. Every status and every condition repeats the same few key sets, so a :class:`JsonRecord` keeps only
its values (a tuple) and points at one shared key -> position table per key set: 136 bytes for a
condition, 168 for a status. It is a ``Mapping`` (``get``, ``in``, iteration in the original key order,
and equality with any mapping, dicts included), never mutated, and not JSON-serializable by ``json``: what
is written goes through ``StatusDraft``, which copies conditions into new dicts and patches only what
changed (an unchanged value is never sent).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

MAX_KEY_SETS = 1024  # distinct key sets given a shared table; beyond, a record has a table of its own
_TABLES: dict[tuple[str, ...], dict[str, int]] = {}


def _table(keys: tuple[str, ...]) -> dict[str, int]:
    table = _TABLES.get(keys)
    if table is None:
        table = {key: i for i, key in enumerate(keys)}
        if len(_TABLES) < MAX_KEY_SETS:
            _TABLES[keys] = table
    return table


class JsonRecord(Mapping[str, Any]):
    """A JSON object's keys and values, read-only. Build it with :func:`record`."""

    __slots__ = ("_table", "_values")

    def __init__(self, table: dict[str, int], values: tuple[Any, ...]) -> None:
        self._table = table
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[self._table[key]]

    def get(self, key: str, default: Any = None) -> Any:
        i = self._table.get(key)
        return default if i is None else self._values[i]

    def __contains__(self, key: object) -> bool:
        return key in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JsonRecord) and other._table is self._table:
            return self._values == other._values
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]  # equal to dicts, which are unhashable

    def __repr__(self) -> str:
        return repr(dict(self))


def record(mapping: Mapping[str, Any]) -> JsonRecord:
    """``mapping`` as a record (its values as they are: share or convert nested ones first)."""
    return JsonRecord(_table(tuple(mapping)), tuple(mapping.values()))
