"""Items and bounds: the points of the ``(timestamp, id)`` order.

An item is a record of a set: a timestamp (unsigned 64 bits, never the
infinity value :data:`MAX_TIMESTAMP`) and a 32-byte id. Items sort by
timestamp, then by id byte after byte. A bound separates ranges: a timestamp
and a prefix of an id (0 to 32 bytes, the missing bytes read as zero bytes),
the exclusive upper end of a range.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ID_SIZE", "MAX_TIMESTAMP", "Bound", "Item"]

#: The size of an id, in bytes.
ID_SIZE = 32
#: The timestamp that stands for infinity (2**64 - 1): no item carries it.
MAX_TIMESTAMP = 2**64 - 1


@dataclass(frozen=True, order=True, slots=True)
class Item:
    """A record: ``timestamp`` (0 <= t < 2**64 - 1) and its 32-byte ``id``."""

    timestamp: int
    id: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.timestamp < MAX_TIMESTAMP:
            raise ValueError(f"item timestamp {self.timestamp} outside 0..2**64-2")
        if len(self.id) != ID_SIZE:
            raise ValueError(f"item id of {len(self.id)} bytes, not {ID_SIZE}")


@dataclass(frozen=True, order=True, slots=True)
class Bound:
    """The exclusive upper end of a range: a timestamp and an id prefix.

    The dataclass order compares the prefixes as they are written; the
    protocol's order, where missing bytes are zero bytes, is :meth:`key`'s.
    An item is below a bound in both orders alike (an id is 32 bytes).
    """

    timestamp: int
    id_prefix: bytes = b""

    def __post_init__(self) -> None:
        if not 0 <= self.timestamp <= MAX_TIMESTAMP:
            raise ValueError(f"bound timestamp {self.timestamp} outside 0..2**64-1")
        if len(self.id_prefix) > ID_SIZE:
            raise ValueError(f"bound id prefix of {len(self.id_prefix)} bytes, more than {ID_SIZE}")

    @classmethod
    def of_item(cls, item: Item) -> Bound:
        """The bound just at ``item`` (its whole id): the item is the first one above it."""
        return cls(item.timestamp, item.id)

    @property
    def is_infinity(self) -> bool:
        """Whether this is the bound at infinity (the end of the whole space)."""
        return self.timestamp == MAX_TIMESTAMP

    def key(self) -> tuple[int, bytes]:
        """The protocol's sort key: the timestamp and the prefix padded with zero bytes."""
        return (self.timestamp, self.id_prefix.ljust(ID_SIZE, b"\0"))

    def is_above(self, item: Item) -> bool:
        """Whether ``item`` lies below this bound (inside a range that ends here)."""
        return (item.timestamp, item.id) < (self.timestamp, self.id_prefix)
