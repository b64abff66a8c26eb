"""The reconcile keeper's state document: one type for its writer (the
keeper, ``commit/aggregates.py``) and its reader (the endpoint's storage,
``store/reconcile.py``).

The document lives in a feed's reconcile collection under
:data:`~.buckets.STATE_ID`. Its fields:

* ``owner``: the keeper holding the lease;
* ``lease``: when that lease ends, ms since the epoch by the database's
  clock (the keeper renews it well before);
* ``built``: the aggregates' layout once a build has finished;
* ``wall``: the point the aggregates are complete up to, µs since the epoch
  by the database's clock;
* ``foreign``: a public document whose id is not 32 hex digits was seen
  (the feed cannot be reconciled);
* ``applied``: the database's time of the last write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..reconcile.records import micros
from .buckets import LAYOUT

__all__ = [
    "APPLIED",
    "BUILT",
    "FOREIGN",
    "KEEPER_ALIVE_SECONDS",
    "LEASE",
    "LEASE_SECONDS",
    "OWNER",
    "STATE_FIELDS",
    "WALL",
    "KeeperState",
]

#: The state document's fields (the module's docstring says what each holds).
OWNER = "owner"
LEASE = "lease"
BUILT = "built"
WALL = "wall"
FOREIGN = "foreign"
APPLIED = "applied"

#: How long a lease holds without a renewal (a keeper renews it after a
#: third of it).
LEASE_SECONDS = 30.0
#: Seconds past its lease's end before a reader takes a keeper for stopped:
#: a lease more (a build's first read of a large collection may hold the
#: keeper past one renewal).
KEEPER_ALIVE_SECONDS = 2 * LEASE_SECONDS
#: The fields a reader needs (a projection).
STATE_FIELDS = (OWNER, LEASE, BUILT, WALL, FOREIGN)


@dataclass(frozen=True)
class KeeperState:
    """The keeper's state as read from its document (all fields optional:
    a keeper that never ran has no document)."""

    owner: str | None = None
    #: ms since the epoch
    lease: int | None = None
    built: bool = False
    #: µs since the epoch
    wall: int | None = None
    foreign: bool = False

    @classmethod
    def from_document(cls, doc: Mapping[str, Any] | None) -> KeeperState:
        """The state of a state document (None: no document)."""
        if not doc:
            return cls()
        lease = doc.get(LEASE)
        if isinstance(lease, datetime):
            lease = micros(lease) // 1000
        wall = doc.get(WALL)
        owner = doc.get(OWNER)
        return cls(
            owner=owner if isinstance(owner, str) else None,
            lease=lease if isinstance(lease, int) and not isinstance(lease, bool) else None,
            built=doc.get(BUILT) == LAYOUT,
            wall=wall if isinstance(wall, int) and not isinstance(wall, bool) else None,
            foreign=bool(doc.get(FOREIGN)),
        )

    @property
    def complete(self) -> int | None:
        """The point (µs) the aggregates are complete up to; None before a
        build has finished."""
        return self.wall if self.built else None

    def alive(self, now_us: int) -> bool:
        """Whether a keeper held the lease within :data:`KEEPER_ALIVE_SECONDS`
        of ``now_us`` (the database's clock, µs)."""
        return self.lease is not None and (self.lease + int(KEEPER_ALIVE_SECONDS * 1000)) * 1000 > now_us
