"""Fingerprints of ranges: SHA-256 of the ids' sum and their count.

The fingerprint of a set of ids is the first 16 bytes of SHA-256 over the
sum of the ids (each read as a 32-byte little-endian integer) modulo 2**256,
written as 32 little-endian bytes, followed by the varint of their count.
The sum is a group: a storage keeps sums of parts (prefix sums, buckets) and
adds or subtracts them, never reading the ids again.

A database that cannot add 256-bit integers keeps an id as eight 32-bit
limbs (:func:`limbs`), sums every limb apart (``$inc``, ``$sum``: a sum of up
to 2**31 ids fits in 64 bits) and folds them back with :func:`from_limbs`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from .items import ID_SIZE
from .varint import encode_varint

__all__ = ["FINGERPRINT_SIZE", "MODULUS", "Accumulator", "fingerprint_of", "from_limbs", "id_int", "limbs"]

#: The size of a fingerprint, in bytes.
FINGERPRINT_SIZE = 16
#: Sums of ids are taken modulo this number.
MODULUS = 2**256
_LIMBS = struct.Struct("<8I")


def id_int(id: bytes) -> int:
    """The id read as a little-endian unsigned integer."""
    if len(id) != ID_SIZE:
        raise ValueError(f"id of {len(id)} bytes, not {ID_SIZE}")
    return int.from_bytes(id, "little")


def limbs(id: bytes) -> list[int]:
    """The id as eight unsigned 32-bit limbs, the least significant first."""
    if len(id) != ID_SIZE:
        raise ValueError(f"id of {len(id)} bytes, not {ID_SIZE}")
    return list(_LIMBS.unpack(id))


def from_limbs(values: Sequence[int]) -> int:
    """The sum of ``values[i] * 2**(32 i)`` modulo 2**256 (limbs of any size or sign)."""
    total = 0
    for i, value in enumerate(values):
        total += value << (32 * i)
    return total % MODULUS


def fingerprint_of(total: int, count: int) -> bytes:
    """The fingerprint of ``count`` ids whose sum is ``total`` (reduced modulo 2**256)."""
    data = (total % MODULUS).to_bytes(32, "little") + encode_varint(count)
    return hashlib.sha256(data).digest()[:FINGERPRINT_SIZE]


class Accumulator:
    """A sum of ids modulo 2**256 (:attr:`sum`) and how many went in (:attr:`count`)."""

    __slots__ = ("count", "sum")

    def __init__(self, total: int = 0, count: int = 0) -> None:
        #: The sum of the ids added (minus those removed), modulo 2**256.
        self.sum = total % MODULUS
        #: How many ids were added (minus those removed).
        self.count = count

    def add(self, id: bytes) -> None:
        """Add one id."""
        self.sum = (self.sum + id_int(id)) % MODULUS
        self.count += 1

    def remove(self, id: bytes) -> None:
        """Take one id out."""
        self.sum = (self.sum - id_int(id)) % MODULUS
        self.count -= 1

    def add_acc(self, other: Accumulator) -> None:
        """Add another accumulator's ids."""
        self.sum = (self.sum + other.sum) % MODULUS
        self.count += other.count

    def sub_acc(self, other: Accumulator) -> None:
        """Take another accumulator's ids out."""
        self.sum = (self.sum - other.sum) % MODULUS
        self.count -= other.count

    def fingerprint(self, count: int | None = None) -> bytes:
        """The 16-byte fingerprint of the sum, with ``count`` (default: :attr:`count`)."""
        return fingerprint_of(self.sum, self.count if count is None else count)

    def __repr__(self) -> str:
        return f"Accumulator(sum=0x{self.sum:064x}, count={self.count})"
