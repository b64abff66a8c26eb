"""What a check reads of a crawler's copy, and what it reports.

:class:`Copy` is the seam between the reconcile client and a crawler's store:
a snapshot of the copy's records below the feed's horizon as a Negentropy
:class:`~openprocurement_feed.reconcile.storage.Storage` (read by position, in
the protocol's order), and the versions the copy holds of the objects a
check found different. :class:`MemoryCopy` is the copy as ``(id,
dateModified)`` pairs held in memory (a JSON-lines file, any crawler's own
store read whole); a database keeps its records in an index and streams
them (:mod:`openprocurement_feed.client.mirror`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..reconcile.records import is_feed_id, record_id, timestamp_us
from ..reconcile.storage import Storage, VectorStorage

__all__ = ["Copy", "CopySnapshot", "MemoryCopy", "ReconcileResult", "RoundReport", "read_store"]


class CopySnapshot(Protocol):
    """The copy as one check sees it: its records below ``until`` and the
    versions it holds, unchanged while the snapshot is open."""

    def storage(self) -> Storage:
        """The records below ``until``, sealed, in the protocol's order."""

    def versions(self, ids: Iterable[str]) -> dict[str, int]:
        """Object id → the microseconds of the version the copy holds, for
        those of ``ids`` it holds (at any timestamp, not only below ``until``)."""


@runtime_checkable
class Copy(Protocol):
    """A crawler's copy a check can read: :meth:`snapshot` opens a
    :class:`CopySnapshot` of the records below ``until``."""

    def snapshot(self, until: int) -> contextlib.AbstractContextManager[CopySnapshot]:
        """A consistent view of the copy for the rounds of one check."""


def read_store(store: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Object id (lower case) → the microseconds of its ``dateModified``;
    the last pair of an id wins.

    :raises ValueError: an id that is not 32 hexadecimal digits, or a
        ``dateModified`` that is not an ISO 8601 time with an offset.
    """
    held: dict[str, int] = {}
    for key, date_modified in store:
        if not isinstance(key, str) or not is_feed_id(key.lower()):
            raise ValueError(f"the id {key!r} is not 32 hexadecimal digits: it has no reconcile record")
        try:
            held[key.lower()] = timestamp_us(date_modified)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{key}: {error}") from None
    return held


class MemoryCopy:
    """A copy held in memory: object id → the microseconds of its version."""

    def __init__(self, held: dict[str, int]) -> None:
        self.held = held

    @classmethod
    def of(cls, store: Iterable[tuple[str, str]]) -> MemoryCopy:
        """The copy of ``(id, dateModified)`` pairs (see :func:`read_store`)."""
        return cls(read_store(store))

    @contextlib.contextmanager
    def snapshot(self, until: int) -> Iterator[_MemorySnapshot]:
        """The records below ``until`` in a sorted vector."""
        yield _MemorySnapshot(self.held, until)


class _MemorySnapshot:
    def __init__(self, held: dict[str, int], until: int) -> None:
        self.held = held
        self.until = until

    def storage(self) -> Storage:
        storage = VectorStorage()
        for key, timestamp in self.held.items():
            if timestamp < self.until:
                storage.insert(timestamp, record_id(key, timestamp))
        storage.seal()
        return storage

    def versions(self, ids: Iterable[str]) -> dict[str, int]:
        return {key: self.held[key] for key in ids if key in self.held}


@dataclass(frozen=True)
class RoundReport:
    """One round, as it ended: handed to ``on_round``.

    ``have`` / ``need`` count the ids found so far that only the copy /
    only the feed holds; the bytes are bodies, request and answer."""

    round: int
    sent: int
    received: int
    have: int
    need: int
    elapsed: float


@dataclass
class ReconcileResult:
    """What a reconciliation found.

    The lists hold object ids, sorted. ``objects`` keeps what the second
    read returned (object id → the object, None when it answered ``404``),
    so that a repair need not read those again. The bytes are HTTP bodies:
    the rounds' messages, the ``GET`` of the horizon, and apart from them
    the objects read once more (``recheck_bytes``).
    """

    endpoint: str
    until: int
    frame_size_limit: int
    feed_records: int
    copy_records: int
    missing: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    rounds: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    recheck_bytes: int = 0
    rechecked: int = 0
    elapsed: float = 0.0
    objects: dict[str, dict[str, Any] | None] = field(default_factory=dict, repr=False)

    @property
    def differences(self) -> int:
        """Missing, stale and extra objects (changed ones are not differences)."""
        return len(self.missing) + len(self.stale) + len(self.extra)

    @property
    def in_sync(self) -> bool:
        """True when the copy holds exactly the feed's set below ``until``."""
        return self.differences == 0

    def as_json(self) -> dict[str, Any]:
        """The result as ``verify --json`` prints it."""
        return {
            "in_sync": self.in_sync,
            "endpoint": self.endpoint,
            "until": self.until,
            "feed_records": self.feed_records,
            "copy_records": self.copy_records,
            "missing": self.missing,
            "stale": self.stale,
            "extra": self.extra,
            "changed": self.changed,
            "rounds": self.rounds,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "recheck_bytes": self.recheck_bytes,
            "elapsed": round(self.elapsed, 3),
        }
