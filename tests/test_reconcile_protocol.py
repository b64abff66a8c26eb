"""The protocol's parts: fingerprints, the vector storage, and what the responder asks a storage."""

from __future__ import annotations

import hashlib
import os
import random
import re
from collections.abc import Iterator

import pytest

from openprocurement_feed.reconcile import (
    Accumulator,
    Bound,
    Item,
    Negentropy,
    VectorStorage,
    from_limbs,
    id_int,
    limbs,
)
from openprocurement_feed.reconcile.fingerprint import MODULUS, fingerprint_of
from openprocurement_feed.reconcile.negentropy import minimal_bound


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


# Fingerprints of whole sets as the reference JavaScript computes them
# (NegentropyStorageVector.fingerprint(0, size) of hoytech/negentropy).
KNOWN_FINGERPRINTS = [
    ("empty", [], "7f9c9e31ac8256ca2f258583df262dbc"),
    ("one", [(12345, b"\xee" * 32)], "d5530eded759c1cb5749aacb9bc66bb2"),
    ("carry past 2**256", [(1, b"\xff" * 32), (2, b"\x01" + b"\x00" * 31)], "58cc2f44d3a27866874701fbad573da9"),
    (
        "three",
        [(1, b"\x00" * 31 + b"\x01"), (2, b"\x80" + b"\x00" * 31), (3, b"\xab" * 32)],
        "acf49085bb3b325e59e713fc611b4234",
    ),
    ("200", [(1000 + i, _sha(f"id-{i}")) for i in range(200)], "dffe3867b9204e7cef5985b5438051fd"),
]


@pytest.mark.parametrize(("name", "items", "expected"), KNOWN_FINGERPRINTS, ids=[k[0] for k in KNOWN_FINGERPRINTS])
def test_fingerprints_match_the_reference(name: str, items: list[tuple[int, bytes]], expected: str) -> None:
    storage = VectorStorage.of(Item(t, id) for t, id in items)
    assert storage.fingerprint(0, storage.size()).hex() == expected
    accumulator = Accumulator()
    for _, id in items:
        accumulator.add(id)
    assert accumulator.fingerprint().hex() == expected
    assert accumulator.count == len(items)


def test_accumulator_adds_and_subtracts() -> None:
    ids = [os.urandom(32) for _ in range(50)]
    whole = Accumulator()
    for id in ids:
        whole.add(id)
    head = Accumulator()
    for id in ids[:20]:
        head.add(id)
    tail = Accumulator(whole.sum, whole.count)
    tail.sub_acc(head)
    expected = Accumulator()
    for id in ids[20:]:
        expected.add(id)
    assert (tail.sum, tail.count) == (expected.sum, expected.count)
    tail.add_acc(head)
    assert tail.fingerprint() == whole.fingerprint()
    for id in ids[20:]:
        whole.remove(id)
    assert whole.fingerprint() == head.fingerprint()
    assert whole.fingerprint(count=7) == fingerprint_of(head.sum, 7)
    assert "count=20" in repr(whole)


def test_limbs_fold_back_whatever_their_sign() -> None:
    ids = [os.urandom(32) for _ in range(30)] + [b"\xff" * 32]
    assert limbs(b"\x01\x00\x00\x00\x02" + b"\x00" * 27) == [1, 2, 0, 0, 0, 0, 0, 0]
    sums = [sum(column) for column in zip(*(limbs(id) for id in ids), strict=True)]
    assert from_limbs(sums) == sum(id_int(id) for id in ids) % MODULUS
    # A database that subtracts a record that left its bucket may hold negative limb sums.
    removed = ids[:10]
    diff = [s - sum(column) for s, column in zip(sums, zip(*(limbs(id) for id in removed), strict=True), strict=True)]
    assert from_limbs(diff) == sum(id_int(id) for id in ids[10:]) % MODULUS
    with pytest.raises(ValueError, match="id of 31 bytes"):
        limbs(b"\x00" * 31)
    with pytest.raises(ValueError, match="id of 33 bytes"):
        id_int(b"\x00" * 33)


def test_items_and_bounds_check_their_fields() -> None:
    with pytest.raises(ValueError, match="item timestamp"):
        Item(2**64 - 1, b"\x00" * 32)
    with pytest.raises(ValueError, match="item timestamp"):
        Item(-1, b"\x00" * 32)
    with pytest.raises(ValueError, match="item id of 31 bytes"):
        Item(1, b"\x00" * 31)
    with pytest.raises(ValueError, match="bound id prefix of 33 bytes"):
        Bound(1, b"\x00" * 33)
    with pytest.raises(ValueError, match="bound timestamp"):
        Bound(2**64)
    item = Item(5, b"\x10" * 32)
    assert Bound(5, b"\x10" * 32).is_above(item) is False
    assert Bound(5, b"\x11").is_above(item) is True
    assert Bound(5).is_above(item) is False
    assert Bound(6).is_above(item) is True
    assert Bound.of_item(item) == Bound(5, b"\x10" * 32)
    assert Bound(5, b"\x01").key() == Bound(5, b"\x01\x00").key()


def test_vector_storage() -> None:
    ids = sorted(os.urandom(32) for _ in range(10))
    storage = VectorStorage()
    for id in reversed(ids):
        storage.insert(7, id)
    storage.insert(3, ids[0])
    with pytest.raises(RuntimeError, match="not sealed"):
        storage.size()
    storage.seal()
    assert storage.sealed and len(storage) == 11
    assert storage.get_item(0) == Item(3, ids[0])
    assert [item.id for item in storage.iterate(1, 11)] == ids
    assert storage.find_lower_bound(0, 11, Bound(7)) == 1
    assert storage.find_lower_bound(0, 11, Bound(7, ids[4][:32])) == 5
    assert storage.find_lower_bound(0, 11, Bound(8)) == 11
    assert storage.find_lower_bound(2, 11, Bound(0)) == 2
    assert storage.items()[0] == Item(3, ids[0])
    with pytest.raises(RuntimeError, match="sealed"):
        storage.insert(1, ids[0])
    with pytest.raises(RuntimeError, match="already sealed"):
        storage.seal()
    with pytest.raises(IndexError, match=re.escape("bad range 5..12 of a storage of 11 items")):
        storage.fingerprint(5, 12)
    with pytest.raises(IndexError, match=re.escape("bad range 11..12")):
        storage.get_item(11)
    duplicate = VectorStorage([Item(1, ids[0]), Item(1, ids[0])])
    with pytest.raises(ValueError, match="duplicate item: timestamp 1"):
        duplicate.seal()


def test_minimal_bound() -> None:
    a = Item(5, b"\x01\x02\x03" + b"\x00" * 29)
    b = Item(5, b"\x01\x02\x07" + b"\x00" * 29)
    assert minimal_bound(a, b) == Bound(5, b"\x01\x02\x07")
    assert minimal_bound(a, Item(9, a.id)) == Bound(9)


def test_sessions_have_one_role() -> None:
    negentropy = Negentropy(VectorStorage.of([]))
    negentropy.initiate()
    with pytest.raises(RuntimeError, match="already called"):
        negentropy.initiate()
    with pytest.raises(RuntimeError, match="reconcile_initiator"):
        negentropy.reconcile(b"\x61")


class CountingStorage:
    """A vector storage that counts what the protocol asks and the items it hands out."""

    def __init__(self, items: list[Item]) -> None:
        self.inner = VectorStorage.of(items)
        self.calls: dict[str, int] = {}
        self.items_read = 0
        self.largest_iterate = 0

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def size(self) -> int:
        self._count("size")
        return self.inner.size()

    def get_item(self, i: int) -> Item:
        self._count("get_item")
        self.items_read += 1
        return self.inner.get_item(i)

    def iterate(self, begin: int, end: int) -> Iterator[Item]:
        self._count("iterate")
        self.largest_iterate = max(self.largest_iterate, end - begin)
        for item in self.inner.iterate(begin, end):
            self.items_read += 1
            yield item

    def find_lower_bound(self, begin: int, end: int, bound: Bound) -> int:
        self._count("find_lower_bound")
        return self.inner.find_lower_bound(begin, end, bound)

    def fingerprint(self, begin: int, end: int) -> bytes:
        self._count("fingerprint")
        return self.inner.fingerprint(begin, end)


def _items(n: int, seed: int) -> list[Item]:
    rng = random.Random(seed)
    return [Item(rng.randrange(10**15, 2 * 10**15), rng.randbytes(32)) for _ in range(n)]


def test_an_in_sync_check_reads_no_items() -> None:
    """Equal sets: the responder answers the 16 fingerprints from the storage's sums alone."""
    items = _items(10_000, 1)
    storage = CountingStorage(items)
    query = Negentropy(VectorStorage.of(items)).initiate()
    answer = Negentropy(storage).reconcile(query)
    assert answer == b"\x61"
    assert storage.items_read == 0
    assert storage.calls == {"size": 1, "find_lower_bound": 15, "fingerprint": 16}


def test_the_responder_reads_only_bucket_edges_and_small_ranges() -> None:
    """A round over 30,000 items with a few differences reads a few hundred items, never a whole range."""
    items = _items(30_000, 2)
    theirs = items[:15_000] + items[15_010:]
    storage = CountingStorage(items)
    initiator = Negentropy(VectorStorage.of(theirs))
    responder = Negentropy(storage)
    message: bytes | None = initiator.initiate()
    need: list[bytes] = []
    rounds = 0
    while message is not None:
        answer = responder.reconcile(message)
        message, _, new_need = initiator.reconcile_initiator(answer)
        need += new_need
        rounds += 1
    assert sorted(need) == sorted(item.id for item in items[15_000:15_010])
    assert storage.largest_iterate < 32
    assert storage.items_read < 1000
    assert set(storage.calls) <= {"size", "get_item", "iterate", "find_lower_bound", "fingerprint"}


def test_a_limited_id_list_answer_stops_reading_at_the_limit() -> None:
    """An empty initiator asks for everything: the responder reads only what fits in its frame."""
    storage = CountingStorage(_items(10_000, 3))
    answer = Negentropy(storage, frame_size_limit=4096).reconcile(Negentropy(VectorStorage.of([])).initiate())
    assert len(answer) <= 4096
    assert storage.items_read < 4096 // 32 + 2
