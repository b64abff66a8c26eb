"""The reconciliation aggregates' layout (SPEC G.3): records and buckets.

Beside each feed collection ``name`` the follower keeps one collection,
``name + "_feed_reconcile"`` (:func:`reconcile_name`), that holds three kinds
of documents, all read through one index ``(w, lv, b, r)``:

* a **record** per object a feed shows (``lv: 0``): its record of SPEC G.1,
  timestamp ``b`` (``dateModified`` in µs) and ID ``r`` (64 hex digits),
  the ID's eight 32-bit limbs ``l0``..``l7`` and ``n: 1``, the **views** it
  belongs to (``w``, a list: one per filter partition) and the version it
  was taken from (``v``: the document's ``public_modified``); an object no
  feed shows keeps a record with no view (``w: []``), so that an older
  version cannot come back;
* a **bucket** per view, level and slot of the ``(timestamp, ID)`` order
  (``lv`` 1 to :data:`LEVELS`, :data:`SHIFTS`): the count ``n`` and the limb sums
  ``l0``..``l7`` of the records whose timestamp has ``b = timestamp >>
  shift(lv)``; kept with ``$inc`` upserts only: adding a record adds its
  limbs, a record that leaves its bucket (a patched object moves to the
  head) subtracts them;
* the keeper's **state** (:data:`STATE_ID`): how far the aggregates are
  complete, its lease.

A view is the filter partition a feed request reads: ``r`` (real objects) or
``t`` (test objects), and for a scoped feed ``r:<field>=<value>``; a request
in ``mode=_all_`` reads the two of its scope. Each level is
:data:`FANOUT_BITS` bits coarser than the one below, so a bucket has at most
64 children: the prefix sum of any key is one range of buckets per level
plus the records of one fine bucket (:func:`prefix_ranges`).

Pure functions and constants: the follower writes with them
(:mod:`openprocurement_feed.commit.aggregates`), the storage reads with them
(:mod:`.reconcile`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from bson.min_key import MinKey
from pymongo import ASCENDING

from ..reconcile.fingerprint import limbs
from ..reconcile.records import is_feed_id, shown_record

#: The reconcile collection of feed collection ``name`` is ``name + suffix``.
RECONCILE_SUFFIX = "_feed_reconcile"
#: The keeper's state document's ``_id`` (no ``lv``: no query reads it as a
#: record or a bucket).
STATE_ID = MinKey()
#: Bits of a microsecond timestamp dropped by each bucket level, finest
#: first: 131 ms, 8.4 s, 9 min, 9.5 h, 25 days. The finest level decides
#: what a patch costs the keeper (a bucket at the head is written once per
#: write of the keeper, whatever the number of records it takes) and what a
#: range that cuts it reads (its records: about 9 at 72 changes/s, 131 in a
#: burst of 1,000/s); the top level, what a prefix reads of a long history
#: (ten years are 143 top buckets).
SHIFTS: tuple[int, ...] = (17, 23, 29, 35, 41)
#: Bits between two levels: a bucket has at most ``2**FANOUT_BITS`` children.
FANOUT_BITS = 6
#: The number of bucket levels (records are level 0).
LEVELS = len(SHIFTS)
#: The limb fields of a record or bucket.
LIMB_FIELDS: tuple[str, ...] = tuple(f"l{i}" for i in range(8))
#: The index every read of the collection walks.
INDEX_KEYS = [("w", ASCENDING), ("lv", ASCENDING), ("b", ASCENDING), ("r", ASCENDING)]
INDEX_NAME = "reconcile"
#: The document field whose value is a record's timestamp.
DATE_MODIFIED = "dateModified"
#: Real and test objects' views (``mode``).
REAL, TEST = "r", "t"

#: The layout's name, kept in the state's ``built``: aggregates built with
#: other levels are built again, and the storage never reads them.
LAYOUT = "levels:" + ",".join(str(bits) for bits in SHIFTS)

assert all(b - a == FANOUT_BITS for a, b in pairwise(SHIFTS))


def reconcile_name(collection_name: str) -> str:
    """The reconcile collection beside feed collection ``collection_name``."""
    return collection_name + RECONCILE_SUFFIX


def shift(level: int) -> int:
    """The bits bucket level ``level`` (1..:data:`LEVELS`) drops; 0 for records."""
    return SHIFTS[level - 1] if level else 0


def bucket_id(view: str, level: int, slot: int) -> str:
    """A bucket's ``_id``: after every object id (``~`` sorts after hex digits)."""
    return f"~{level}|{slot}|{view}"


def scope_view(mode: str, field: str, value: str) -> str:
    """The view of mode ``mode`` (``r``/``t``) in scope ``field = value``."""
    return f"{mode}:{field}={value}"


def request_views(mode: str, scope_field: str | None = None, scope_value: str | None = None) -> list[str]:
    """The views a feed request reads: its ``mode`` parameter as the feed
    reads it (``test``, ``_all_``, anything else: real objects), in its
    scope."""
    modes = [TEST] if mode == "test" else [REAL, TEST] if mode == "_all_" else [REAL]
    if scope_field is None:
        return modes
    return [scope_view(each, scope_field, str(scope_value)) for each in modes]


def lookup(doc: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path`` in ``doc`` (None when absent)."""
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def document_views(doc: Mapping[str, Any], scope_fields: Iterable[str]) -> list[str]:
    """The views a public document belongs to: its mode's, and its mode's
    in each scope whose field holds a string (a scoped feed compares the
    route's string with it)."""
    mode = TEST if doc.get("is_test") is True else REAL
    views = [mode]
    for name in scope_fields:
        value = lookup(doc, name)
        if isinstance(value, str):
            views.append(scope_view(mode, name, value))
    return views


@dataclass(frozen=True)
class Record:
    """What the keeper knows of one object: its record (None: no feed shows
    it), the views it belongs to and the version it was taken from."""

    id: str
    version: float
    timestamp: int | None = None
    rid: str = ""
    views: tuple[str, ...] = ()

    @property
    def shown(self) -> bool:
        """Whether a feed shows the object (it has a record)."""
        return self.timestamp is not None and bool(self.views)

    def document(self) -> dict[str, Any]:
        """The record's document in the reconcile collection."""
        doc: dict[str, Any] = {"_id": self.id, "lv": 0, "v": self.version, "w": list(self.views if self.shown else ())}
        if self.shown:
            doc.update({"b": self.timestamp, "r": self.rid, "n": 1})
            doc.update(zip(LIMB_FIELDS, limbs(bytes.fromhex(self.rid)), strict=True))
        return doc

    def same(self, other: Record | None) -> bool:
        """Whether ``other`` is in the same buckets with the same ID."""
        if other is None:
            return not self.shown
        if not self.shown:
            return not other.shown
        return (self.timestamp, self.rid, self.views) == (other.timestamp, other.rid, other.views)


def version_of(doc: Mapping[str, Any]) -> float:
    """A document's version: its ``public_modified`` (0 without one)."""
    value = doc.get("public_modified")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def record_of(doc: Mapping[str, Any], scope_fields: Iterable[str]) -> Record | None:
    """The :class:`Record` of a document as the feed shows it; None for an
    id that is not 32 hex digits (such a feed cannot be reconciled)."""
    object_id = doc.get("_id")
    if not isinstance(object_id, str) or not is_feed_id(object_id):
        return None
    version = version_of(doc)
    item = shown_record(object_id, doc.get(DATE_MODIFIED)) if doc.get("is_public") is True else None
    if item is None:
        return Record(object_id, version)
    return Record(object_id, version, item.timestamp, item.id.hex(), tuple(document_views(doc, scope_fields)))


def stored_record(doc: Mapping[str, Any]) -> Record:
    """The :class:`Record` of a record document."""
    views = tuple(doc.get("w") or ())
    if not views or not isinstance(doc.get("b"), int):
        return Record(doc["_id"], float(doc.get("v") or 0.0))
    return Record(doc["_id"], float(doc.get("v") or 0.0), int(doc["b"]), str(doc["r"]), views)


def record_limbs(record: Record) -> list[int]:
    """A shown record's limbs."""
    return limbs(bytes.fromhex(record.rid))


Delta = dict[tuple[str, int, int], list[int]]


def add_delta(deltas: Delta, record: Record, sign: int) -> None:
    """Add (``sign`` 1) or subtract (-1) a shown record to every bucket of
    every view it belongs to, in ``deltas`` (``(view, level, slot) → [n,
    l0..l7]``: coalesced per batch)."""
    assert record.timestamp is not None
    values = [sign, *(sign * limb for limb in record_limbs(record))]
    for view in record.views:
        for level in range(1, LEVELS + 1):
            key = (view, level, record.timestamp >> shift(level))
            total = deltas.get(key)
            if total is None:
                deltas[key] = list(values)
            else:
                for i, value in enumerate(values):
                    total[i] += value


def delta_updates(deltas: Delta) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(filter, update)`` of each bucket's ``$inc`` upsert (none for a
    delta that cancelled out)."""
    for (view, level, slot), values in deltas.items():
        if not any(values):
            continue
        increments = {"n": values[0], **dict(zip(LIMB_FIELDS, values[1:], strict=True))}
        yield (
            {"_id": bucket_id(view, level, slot)},
            {"$inc": increments, "$setOnInsert": {"w": view, "lv": level, "b": slot}},
        )


def emptied_buckets(deltas: Delta) -> list[str]:
    """The ids of the buckets a batch took records out of (a negative count
    delta): those that may be empty now, which the keeper deletes when they
    are (a bucket of count 0 also sums to 0)."""
    return [bucket_id(view, level, slot) for (view, level, slot), values in deltas.items() if values[0] < 0]


# -- reading --------------------------------------------------------------


def pad_id(prefix: bytes) -> str:
    """A bound's id prefix as the 64 hex digits records compare with (the
    missing bytes are zero bytes)."""
    return prefix.ljust(32, b"\0").hex()


def prefix_ranges(timestamp: int, rid: str) -> list[dict[str, Any]]:
    """The queries (without the view) whose documents sum to the prefix
    below key ``(timestamp, rid)``: the top level's buckets before the key's,
    at each lower level the siblings before the key's bucket inside its
    parent, the records of the key's fine bucket before its timestamp and
    those at its timestamp below ``rid``."""
    queries: list[dict[str, Any]] = [{"lv": LEVELS, "b": {"$lt": timestamp >> shift(LEVELS)}}]
    for level in range(LEVELS - 1, 0, -1):
        first = (timestamp >> shift(level + 1)) << FANOUT_BITS
        upto = timestamp >> shift(level)
        if upto > first:
            queries.append({"lv": level, "b": {"$gte": first, "$lt": upto}})
    first = (timestamp >> shift(1)) << shift(1)
    if timestamp > first:
        queries.append({"lv": 0, "b": {"$gte": first, "$lt": timestamp}})
    if rid.strip("0"):
        queries.append({"lv": 0, "b": timestamp, "r": {"$lt": rid}})
    return queries


def children_range(level: int, parent: int | None) -> dict[str, Any]:
    """The query (without the view) of level ``level``'s buckets inside
    ``parent`` (a slot of the level above; None at the top: all of them)."""
    if parent is None:
        return {"lv": level}
    if level == 0:
        return {"lv": 0, "b": {"$gte": parent << shift(1), "$lt": (parent + 1) << shift(1)}}
    return {"lv": level, "b": {"$gte": parent << FANOUT_BITS, "$lt": (parent + 1) << FANOUT_BITS}}


def sum_group(key: Any = None) -> dict[str, Any]:
    """The ``$group`` stage summing counts and limbs (by ``key``)."""
    stage: dict[str, Any] = {"_id": key, "n": {"$sum": "$n"}}
    stage.update({name: {"$sum": f"${name}"} for name in LIMB_FIELDS})
    return {"$group": stage}


def limb_values(doc: Mapping[str, Any]) -> Sequence[int]:
    """The limb sums of a group's or a bucket's document."""
    return [int(doc.get(name) or 0) for name in LIMB_FIELDS]
