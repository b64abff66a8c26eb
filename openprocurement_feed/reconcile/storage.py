"""Storages: what the protocol asks of a sorted set of items.

The protocol reads a set through five calls on positions in the sorted
order (:class:`Storage`), like the reference implementation: the size, one
item, the items of a range, the first position at or above a bound, and the
fingerprint of a range. A storage that keeps sums of its parts answers the
last one without reading the items (a database from its aggregates, the
vector from prefix sums).

:class:`VectorStorage` is the in-memory one: items inserted, then sealed
(sorted, checked for duplicates, prefix sums computed), then read.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

from .fingerprint import MODULUS, fingerprint_of
from .items import Bound, Item

__all__ = ["Storage", "VectorStorage"]


@runtime_checkable
class Storage(Protocol):
    """A sorted set of items read by position (0 .. size - 1)."""

    def size(self) -> int:
        """How many items the set holds."""

    def get_item(self, i: int) -> Item:
        """The item at position ``i``."""

    def iterate(self, begin: int, end: int) -> Iterator[Item]:
        """The items at positions ``begin`` .. ``end - 1``, in order (the caller may stop early)."""

    def find_lower_bound(self, begin: int, end: int, bound: Bound) -> int:
        """The first position in ``begin`` .. ``end`` whose item is not below ``bound`` (``end`` if none)."""

    def fingerprint(self, begin: int, end: int) -> bytes:
        """The fingerprint of the items at positions ``begin`` .. ``end - 1``."""


#: An item's place in the order: (timestamp, id), taken in C.
_sort_key: Callable[[Item], tuple[int, bytes]] = operator.attrgetter("timestamp", "id")


class VectorStorage:
    """A sorted list of items in memory, with prefix sums for O(1) fingerprints."""

    def __init__(self, items: Iterable[Item] = ()) -> None:
        self._pending: list[Item] = list(items)
        self._items: list[Item] = []
        self._keys: list[tuple[int, bytes]] = []
        self._prefix: list[int] = [0]
        self._sealed = False

    @classmethod
    def of(cls, items: Iterable[Item]) -> VectorStorage:
        """A sealed storage of ``items``."""
        storage = cls(items)
        storage.seal()
        return storage

    def insert(self, timestamp: int, id: bytes) -> None:
        """Add an item (before :meth:`seal`)."""
        self.insert_item(Item(timestamp, bytes(id)))

    def insert_item(self, item: Item) -> None:
        """Add an item (before :meth:`seal`)."""
        if self._sealed:
            raise RuntimeError("the storage is sealed: no item can be inserted")
        self._pending.append(item)

    def seal(self) -> None:
        """Sort the items and compute the prefix sums; raises ValueError on a duplicate item."""
        if self._sealed:
            raise RuntimeError("the storage is already sealed")
        items = sorted(self._pending, key=_sort_key)
        self._pending = []
        keys = [_sort_key(item) for item in items]
        for previous, current in itertools.pairwise(keys):
            if previous == current:
                raise ValueError(f"duplicate item: timestamp {current[0]}, id {current[1].hex()}")
        prefix = [0] * (len(items) + 1)
        total = 0
        from_bytes = int.from_bytes
        for i, (_, id) in enumerate(keys, 1):
            total = (total + from_bytes(id, "little")) % MODULUS
            prefix[i] = total
        self._items = items
        self._keys = keys
        self._prefix = prefix
        self._sealed = True

    @property
    def sealed(self) -> bool:
        """Whether :meth:`seal` ran."""
        return self._sealed

    def _check(self, begin: int, end: int) -> None:
        if not self._sealed:
            raise RuntimeError("the storage is not sealed: call seal() first")
        if not 0 <= begin <= end <= len(self._items):
            raise IndexError(f"bad range {begin}..{end} of a storage of {len(self._items)} items")

    def size(self) -> int:
        """How many items the set holds."""
        self._check(0, 0)
        return len(self._items)

    def get_item(self, i: int) -> Item:
        """The item at position ``i``."""
        self._check(i, i + 1)
        return self._items[i]

    def iterate(self, begin: int, end: int) -> Iterator[Item]:
        """The items at positions ``begin`` .. ``end - 1``."""
        self._check(begin, end)
        return iter(self._items[begin:end])

    def find_lower_bound(self, begin: int, end: int, bound: Bound) -> int:
        """The first position in ``begin`` .. ``end`` whose item is not below ``bound``."""
        self._check(begin, end)
        return bisect.bisect_left(self._keys, (bound.timestamp, bound.id_prefix), begin, end)

    def fingerprint(self, begin: int, end: int) -> bytes:
        """The fingerprint of positions ``begin`` .. ``end - 1``, from the prefix sums."""
        self._check(begin, end)
        return fingerprint_of(self._prefix[end] - self._prefix[begin], end - begin)

    def items(self) -> list[Item]:
        """All items, in order (a copy)."""
        self._check(0, 0)
        return list(self._items)

    def __len__(self) -> int:
        return self.size()
