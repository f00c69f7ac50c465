"""PriorityQueue (Volcano's util.PriorityQueue) over a less function or, faster, a sort key."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class _LessItem(Generic[T]):
    __slots__ = ("item", "less")

    def __init__(self, item: T, less: Callable[[T, T], bool]) -> None:
        self.item = item
        self.less = less

    def __lt__(self, other: _LessItem[T]) -> bool:
        return self.less(self.item, other.item)


class PriorityQueue(Generic[T]):
    """A min-heap: pop returns the item that is "less" than all others.

    With `key`, items are ordered by key(item) computed at push time. That is exact for Volcano's
    actions because an item's order only changes while it is popped (its job is being allocated),
    and it is pushed back afterwards.
    """

    __slots__ = ("_heap", "_key", "_less", "_seq")

    def __init__(self, less: Callable[[T, T], bool], key: Callable[[T], Any] | None = None) -> None:
        self._less = less
        self._key = key
        self._heap: list[Any] = []
        self._seq = itertools.count()

    def push(self, item: T) -> None:
        if self._key is not None:
            heapq.heappush(self._heap, (self._key(item), next(self._seq), item))
        else:
            heapq.heappush(self._heap, _LessItem(item, self._less))

    def pop(self) -> T | None:
        if not self._heap:
            return None
        entry = heapq.heappop(self._heap)
        if self._key is not None:
            return entry[2]  # type: ignore[no-any-return]
        return entry.item  # type: ignore[no-any-return]

    def empty(self) -> bool:
        return not self._heap

    def __len__(self) -> int:
        return len(self._heap)

    def clone(self) -> PriorityQueue[T]:
        pq: PriorityQueue[T] = PriorityQueue(self._less, self._key)
        pq._heap = list(self._heap)
        pq._seq = itertools.count(next(self._seq))
        return pq
