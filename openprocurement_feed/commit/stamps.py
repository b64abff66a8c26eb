"""Positions (cluster times) and the small helpers of backfill and recovery:
the next and previous position, the database's cluster time, a counter of
fresh positions, chunks of rows and a dict key for any ``_id``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from bson.timestamp import Timestamp
from pymongo.database import Database

from .errors import SequencerError

#: Documents read and written per round trip by backfill and recovery.
RESTAMP_CHUNK = 1000
MAX_INCREMENT = 2**32 - 1


def successor(position: Timestamp) -> Timestamp:
    """The next position after ``position``."""
    if position.inc < MAX_INCREMENT:
        return Timestamp(position.time, position.inc + 1)
    return Timestamp(position.time + 1, 0)


def predecessor(position: Timestamp) -> Timestamp:
    """The position just before ``position``."""
    if position.inc > 0:
        return Timestamp(position.time, position.inc - 1)
    return Timestamp(position.time - 1, MAX_INCREMENT)


def cluster_time(db: Database[Any]) -> Timestamp:
    """The database's current cluster (operation) time."""
    reply = db.command("ping")
    stamp = reply.get("operationTime") or (reply.get("$clusterTime") or {}).get("clusterTime")
    if not isinstance(stamp, Timestamp):
        raise SequencerError(
            "The database reports no cluster time: the commit-ordered feed needs a "
            "replica set or a sharded cluster (change streams)."
        )
    return stamp


class PositionCounter:
    """Hands out strictly increasing positions for backfill and recovery.

    A document's position is taken from its ``public_modified`` second (so a
    watermark offset read in commit order stays safe), never at or below
    ``floor`` and always below ``ceiling``.
    """

    def __init__(self, ceiling: Timestamp, floor: Timestamp | None = None) -> None:
        self.ceiling = ceiling
        self.last = floor

    def next(self, public_modified: Any) -> Timestamp:
        seconds = public_modified if isinstance(public_modified, (int, float)) else 0
        candidate = Timestamp(max(0, min(int(seconds), self.ceiling.time - 1)), 1)
        if self.last is not None and candidate <= self.last:
            candidate = successor(self.last)
        if candidate >= self.ceiling:
            raise SequencerError(f"no free position below {self.ceiling} for a backfilled document")
        self.last = candidate
        return candidate


def hashable(value: Any) -> Any:
    """A dict key for a document ``_id`` of any BSON type."""
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


def chunks(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
