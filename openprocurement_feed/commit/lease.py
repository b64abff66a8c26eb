"""The reconcile keeper's lease: of the keepers of one feed (one per
sequencer running), only the holder writes the aggregates.

The lease lives in the keeper's state document (``store/keeper_state.py``);
it is taken when it is this keeper's or has lapsed, renewed after a third
of :data:`~..store.keeper_state.LEASE_SECONDS`, and every write of the
aggregates checks it in its own transaction, so a keeper that lost it
cannot add to what its successor builds.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from ..store.buckets import STATE_ID
from ..store.keeper_state import LEASE, LEASE_SECONDS, OWNER

__all__ = ["Lease", "LeaseLost"]


class LeaseLost(PyMongoError):
    """Another keeper holds the lease now (found in a write's transaction)."""


class Lease:
    """One keeper's hold on the lease of the state in ``records``."""

    def __init__(self, records: Collection[Any]) -> None:
        self.records = records
        self.owner = uuid.uuid4().hex
        #: monotonic time until which this keeper holds the lease (0: not)
        self.until = 0.0

    @property
    def held(self) -> bool:
        """Whether this keeper took the lease and has not lost it since."""
        return self.until != 0.0

    def drop(self) -> None:
        """Forget the lease (after an error: take it again before writing)."""
        self.until = 0.0

    def hold(self) -> bool:
        """Take or renew the lease; True while this keeper holds it.

        One update by ``_id`` alone (a residual predicate beside ``_id``
        makes the embedded server scan the collection), then a read of the
        owner by ``_id``: the embedded server answers a ``findAndModify``
        of the state's ``_id`` (``MinKey``) by scanning the collection, 4.9
        s at 100,000 tenders' records and buckets, taken from the
        follower's turn every few seconds.
        """
        now = time.monotonic()
        if now < self.until - LEASE_SECONDS * 2 / 3:
            return True
        mine = {"$eq": [f"${OWNER}", self.owner]}
        now_ms = {"$toLong": "$$NOW"}
        lapsed = {"$lt": [{"$ifNull": [f"${LEASE}", 0]}, now_ms]}
        ours = {"$or": [mine, lapsed]}
        renewed = {"$add": [now_ms, int(LEASE_SECONDS * 1000)]}  # ms since the epoch
        self.records.update_one(
            {"_id": STATE_ID},
            [
                {
                    "$set": {
                        OWNER: {"$cond": [ours, self.owner, f"${OWNER}"]},
                        LEASE: {"$cond": [ours, renewed, f"${LEASE}"]},
                    }
                }
            ],
            upsert=True,
        )
        state = self.records.find_one({"_id": STATE_ID}, {OWNER: 1})
        if state is None or state.get(OWNER) != self.owner:
            self.until = 0.0
            return False
        self.until = now + LEASE_SECONDS
        return True

    def check(self, session: Any) -> None:
        """In a write's transaction: this keeper still holds the lease (the
        write then also writes the state, so a takeover meanwhile conflicts
        with it).

        :raises LeaseLost: another keeper's now.
        """
        owner = (self.records.find_one({"_id": STATE_ID}, {OWNER: 1}, session=session) or {}).get(OWNER)
        if owner != self.owner:
            raise LeaseLost(f"the lease is {owner!r}'s now")
