"""Bounded memory of the items already handed to the handler."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


def item_key(item: dict[str, Any]) -> Hashable:
    """The identity of one version of a feed item: ``(id, dateModified)``.

    An item without ``dateModified`` (a feed with other default fields) is
    identified by its whole content, so two different versions never share a
    key: a duplicate may slip through, a change is never dropped.
    """
    if "dateModified" in item:
        return (item.get("id"), item["dateModified"])
    return (item.get("id"), json.dumps(item, sort_keys=True, default=str))


class SeenItems:
    """The last ``capacity`` item versions handled, least recently seen
    evicted first (an LRU over :func:`item_key`).

    ``evicted`` counts versions forgotten to stay within ``capacity``: while it
    is 0, nothing handled in this process can be delivered twice.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.evicted = 0
        self._keys: OrderedDict[Hashable, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, item: dict[str, Any]) -> bool:
        return item_key(item) in self._keys

    def seen(self, item: dict[str, Any]) -> bool:
        """True if this version was handled already (and refresh it)."""
        key = item_key(item)
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        return False

    def add(self, item: dict[str, Any]) -> None:
        """Remember that this version was handled."""
        key = item_key(item)
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)
            self.evicted += 1

    def fresh(self, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """The items of a page not handled yet (repeats inside the page
        dropped too), and how many were dropped. Nothing is remembered:
        call :meth:`add` once the handler has returned."""
        kept: list[dict[str, Any]] = []
        keys: set[Hashable] = set()
        for item in items:
            key = item_key(item)
            if key in keys or self.seen(item):
                continue
            keys.add(key)
            kept.append(item)
        return kept, len(items) - len(kept)
