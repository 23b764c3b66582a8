"""A mapping worked out on first use: for the per-pass tables most passes never read.

A pass with thousands of jobs waiting and nothing changed touches no pod: building, say, the table of which
pod holds each GPU on every pass would cost more than the decisions. ``Lazy`` builds it the first time a step
reads it, and at most once a pass (a pass's inputs do not change under it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lazy(Mapping[K, V]):
    def __init__(self, build: Callable[[], Mapping[K, V]]) -> None:
        self._build: Callable[[], Mapping[K, V]] | None = build
        self._table: Mapping[K, V] = {}

    def _get(self) -> Mapping[K, V]:
        if self._build is not None:
            self._table, self._build = self._build(), None
        return self._table

    @property
    def built(self) -> bool:
        return self._build is None

    def __getitem__(self, key: K) -> V:
        return self._get()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())
