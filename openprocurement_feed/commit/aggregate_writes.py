"""What one write of the reconciliation aggregates sends: the records that
changed, replacing their old versions, the buckets' deltas between them,
and the point the aggregates are complete up to once it is written (the
keeper, :mod:`.aggregates`, sends them in one transaction)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo import InsertOne, ReplaceOne, UpdateOne

from ..reconcile.records import micros
from ..store.buckets import Delta, Record, add_delta

__all__ = [
    "KeeperStats",
    "RecordWrites",
    "complete_point",
    "event_wall_us",
    "merge_newest",
    "now_us",
    "record_writes",
]


def now_us() -> int:
    """The local clock in µs since the epoch."""
    return time.time_ns() // 1000


class KeeperStats:
    """What a keeper did, for tests and benchmarks."""

    def __init__(self) -> None:
        self.batches = 0
        self.records = 0
        self.buckets = 0
        self.scanned = 0
        self.errors = 0
        self.last_error = ""
        #: old records read from the database (not found in memory)
        self.reads = 0
        self.swept = 0
        #: records of documents gone or no longer public, found by catch-ups
        self.vanished = 0


@dataclass
class RecordWrites:
    """The record writes of a batch and the buckets' deltas they make."""

    operations: list[Any] = field(default_factory=list)
    deltas: Delta = field(default_factory=dict)
    #: the records as stored after the write, by object id
    written: dict[str, Record] = field(default_factory=dict)
    #: records inserted or replaced (a version's bump alone is not counted)
    replaced: int = 0


def record_writes(changed: Mapping[str, Record], old: Mapping[str, Record]) -> RecordWrites:
    """The writes that take the stored records ``old`` to ``changed``: an
    older version than the one stored is skipped, a newer one in the same
    buckets only bumps the stored version, any other moves the record out
    of its old buckets and into its new ones."""
    writes = RecordWrites()
    for object_id, record in changed.items():
        before = old.get(object_id)
        if before is not None and before.version > record.version:
            continue  # an older version than the one kept
        if record.same(before):
            if before is not None and record.version > before.version:
                writes.operations.append(UpdateOne({"_id": object_id}, {"$set": {"v": record.version}}))
                writes.written[object_id] = record
            continue
        if before is not None and before.shown:
            add_delta(writes.deltas, before, -1)
        if record.shown:
            add_delta(writes.deltas, record, 1)
        document = record.document()
        if before is None:
            writes.operations.append(InsertOne(document))
        else:
            writes.operations.append(ReplaceOne({"_id": object_id}, document))
        writes.written[object_id] = record
        writes.replaced += 1
    return writes


def merge_newest(changed: dict[str, Record], records: Iterable[Record]) -> None:
    """Keep the newest version of each object in ``changed``."""
    for record in records:
        current = changed.get(record.id)
        if current is None or record.version >= current.version:
            changed[record.id] = record


def event_wall_us(event: Mapping[str, Any]) -> int | None:
    """An event's ``wallTime`` in µs (exactly), None without one."""
    wall = event.get("wallTime")
    return micros(wall) if isinstance(wall, datetime) else None


def complete_point(events: Sequence[Mapping[str, Any]], caught_up: bool, began: float) -> Any:
    """Up to when (µs, the database's clock) every change is in the
    aggregates once this batch is: a batch known caught up covers
    everything committed before its empty read (the database's time now,
    less the time since then and a margin); any other, its last event's
    time less a millisecond (its last millisecond may go on in the next
    batch). A ``$set`` expression."""
    walls = [wall for wall in (event_wall_us(event) for event in events) if wall is not None]
    if not caught_up and walls:
        return {"$literal": max(walls) - 1000}
    since_ms = int((time.monotonic() - began) * 1000) + 50
    return {"$multiply": [{"$subtract": [{"$toLong": "$$NOW"}, since_ms]}, 1000]}
