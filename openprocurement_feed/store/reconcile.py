"""The database side of the reconcile endpoint (SPEC G.2, G.3): the feed's
horizon and the storage a request's Negentropy reads.

:func:`open_reconcile` gives a :class:`ReconcileSource` for one request (a
feed's collection, order, mode and scope). Its :meth:`~ReconcileSource.horizon`
is the ``until`` the ``GET`` answers; :meth:`~ReconcileSource.storage` the
index-based storage (size, item, items, lower bound, fingerprint) of the
records below a client's ``until``:

* :class:`AggregateStorage` when the follower's aggregates
  (:mod:`.buckets`) are complete up to ``until``: ranks and fingerprints come
  from bucket counts and limb sums summed by the server (one small document
  per range), items from the records of one fine bucket; every read of the
  request in one snapshot (a read-only transaction), cached for the request;
* while a keeper runs but has not yet reached ``until``:
  :class:`ReconcileUnavailable` (503, ``Retry-After``);
* where no keeper runs (the setting off, no follower anywhere, or one that
  stopped): the records computed from the feed itself, every ``(id,
  dateModified)`` the feed shows below its bound read in one query, in a
  :class:`~openprocurement_feed.reconcile.storage.VectorStorage`. Its cost
  grows with the feed (``docs/reconcile.rst``, "A host without a follower").
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bson.timestamp import Timestamp
from pymongo.collection import Collection
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference

from ..reconcile.fingerprint import Accumulator, fingerprint_of, from_limbs, id_int
from ..reconcile.items import MAX_TIMESTAMP, Bound, Item
from ..reconcile.records import micros, shown_record
from ..reconcile.storage import Storage, VectorStorage
from .buckets import (
    LEVELS,
    STATE_ID,
    children_range,
    limb_values,
    pad_id,
    prefix_ranges,
    reconcile_name,
    request_views,
    sum_group,
)
from .keeper_state import STATE_FIELDS, KeeperState
from .orders import STATE_ID as POSITIONS_STATE_ID
from .orders import FeedNotReady, order_kind, positions_name
from .positions import checkpoint_of

#: What the client is asked to wait while the aggregates catch up.
RETRY_AFTER_SECONDS = 1
AGGREGATES = "aggregates"
FEED = "feed"
ZERO_ID = "0" * 64


class ReconcileUnavailable(Exception):
    """The records cannot be given now (aggregates still catching up)."""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_SECONDS) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UntilAboveHorizon(ValueError):
    """A client's ``until`` above the feed's horizon."""

    def __init__(self, until: int, horizon: int) -> None:
        super().__init__(
            f"until {until} is above the feed's horizon {horizon}: take until from GET (records above the "
            "horizon are not final yet)"
        )
        self.until = until
        self.horizon = horizon


class NotReconcilable(Exception):
    """The feed shows objects whose ids are not 32 hex digits (SPEC G.1)."""


@dataclass(frozen=True)
class Horizon:
    """A feed's horizon for one request: ``until`` (µs) and where the
    records come from (:data:`AGGREGATES` or :data:`FEED`)."""

    until: int
    source: str


class AggregateStorage:
    """The records below ``until`` of ``views``, read from the aggregates.

    Index-based (:class:`~openprocurement_feed.reconcile.storage.Storage`):
    the prefix sum (count and limb sums) below a key is one ``$group`` per
    level; the item at a rank is found by walking down the levels from the
    top (each bucket's children are one read, cached), then the records of
    one fine bucket. Every answer is cached for the request: a round asks
    the same ranks several times.
    """

    def __init__(self, records: Collection[Any], views: Sequence[str], until: int, session: Any = None) -> None:
        self.records = records
        self.views = list(views)
        self.until = until
        self.session = session
        self._size: int | None = None
        #: rank → the sum of the records below it
        self._below: dict[int, Accumulator] = {0: Accumulator()}
        self._items: dict[int, Item] = {}
        self._children: dict[tuple[int, int | None], list[tuple[int, int, int]]] = {}
        self._fine: dict[int, list[tuple[Item, int]]] = {}
        #: database commands sent (for tests and benchmarks)
        self.reads = 0

    # -- reads -------------------------------------------------------------

    def _aggregate(self, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.reads += 1
        return list(self.records.aggregate(pipeline, session=self.session))

    def prefix(self, timestamp: int, rid: str) -> Accumulator:
        """The count and sum of the records below key ``(timestamp, rid)``."""
        count, total = 0, 0
        for view in self.views:
            for query in prefix_ranges(timestamp, rid):
                for doc in self._aggregate([{"$match": {"w": view, **query}}, sum_group()]):
                    count += int(doc.get("n") or 0)
                    total += from_limbs(limb_values(doc))
        return Accumulator(total, count)

    def children(self, level: int, parent: int | None) -> list[tuple[int, int, int]]:
        """``(slot, count, sum)`` of level ``level``'s non-empty buckets in
        ``parent``, in order (every view's summed)."""
        key = (level, parent)
        found = self._children.get(key)
        if found is None:
            merged: dict[int, list[int]] = {}
            for view in self.views:
                pipeline = [{"$match": {"w": view, **children_range(level, parent)}}, sum_group("$b")]
                for doc in self._aggregate(pipeline):
                    entry = merged.setdefault(int(doc["_id"]), [0, 0])
                    entry[0] += int(doc.get("n") or 0)
                    entry[1] += from_limbs(limb_values(doc))
            found = [(slot, n, total) for slot, (n, total) in sorted(merged.items()) if n > 0]
            self._children[key] = found
        return found

    def fine_records(self, slot: int) -> list[tuple[Item, int]]:
        """The records of fine bucket ``slot``, in order, with their ids as integers."""
        found = self._fine.get(slot)
        if found is None:
            rows: list[tuple[int, str]] = []
            for view in self.views:
                self.reads += 1
                cursor = self.records.find(
                    {"w": view, **children_range(0, slot)}, {"_id": 0, "b": 1, "r": 1}, session=self.session
                )
                rows.extend((int(doc["b"]), str(doc["r"])) for doc in cursor)
            rows.sort()
            found = []
            for stamp, rid in rows:
                ident = bytes.fromhex(rid)
                found.append((Item(stamp, ident), id_int(ident)))
            self._fine[slot] = found
        return found

    def _locate(self, rank: int) -> None:
        """Find the item at ``rank`` (< size) and the sum below it."""
        count, total = 0, 0
        parent: int | None = None
        for level in range(LEVELS, 0, -1):
            for slot, n, value in self.children(level, parent):
                if count + n > rank:
                    parent = slot
                    break
                count += n
                total += value
            else:
                raise ReconcileUnavailable("the aggregates changed during the request; retry")
        assert parent is not None
        for item, value in self.fine_records(parent):
            if count == rank:
                self._items[rank] = item
                self._below.setdefault(rank, Accumulator(total, count))
                return
            count += 1
            total += value
        raise ReconcileUnavailable("the aggregates changed during the request; retry")

    def _sum_below(self, rank: int) -> Accumulator:
        found = self._below.get(rank)
        if found is None:
            if rank == self.size():
                found = self._below[rank]
            else:
                self._locate(rank)
                found = self._below[rank]
        return found

    # -- the Storage protocol ------------------------------------------------------

    def size(self) -> int:
        """The records below ``until``."""
        if self._size is None:
            below = self.prefix(self.until, ZERO_ID)
            self._size = below.count
            self._below[below.count] = below
        return self._size

    def get_item(self, i: int) -> Item:
        """The record at rank ``i``."""
        if not 0 <= i < self.size():
            raise IndexError(f"rank {i} outside 0..{self.size() - 1}")
        found = self._items.get(i)
        if found is None:
            self._locate(i)
            found = self._items[i]
        return found

    def iterate(self, begin: int, end: int) -> Iterator[Item]:
        """The records at ranks ``begin`` .. ``end - 1``."""
        for rank in range(begin, end):
            yield self.get_item(rank)

    def find_lower_bound(self, begin: int, end: int, bound: Bound) -> int:
        """The first rank in ``begin`` .. ``end`` whose record is not below ``bound``."""
        if bound.timestamp >= min(self.until, MAX_TIMESTAMP):
            rank = self.size()
        else:
            below = self.prefix(bound.timestamp, pad_id(bound.id_prefix))
            rank = below.count
            self._below.setdefault(rank, below)
        return min(max(rank, begin), end)

    def fingerprint(self, begin: int, end: int) -> bytes:
        """The fingerprint of ranks ``begin`` .. ``end - 1`` (two prefix sums)."""
        upper = self._sum_below(end)
        lower = self._sum_below(begin)
        return fingerprint_of(upper.sum - lower.sum, end - begin)


def feed_storage(rows: Sequence[Mapping[str, Any]], until: int) -> VectorStorage:
    """The records below ``until`` of a feed's rows (``_id``, ``dateModified``)."""
    storage = VectorStorage()
    for row in rows:
        object_id = row.get("_id")
        try:
            item = shown_record(object_id, row.get("dateModified"))  # type: ignore[arg-type]
        except ValueError:
            message = f"the feed shows an object whose id is not 32 hexadecimal digits: {object_id!r}"
            raise NotReconcilable(message) from None
        if item is not None and item.timestamp < until:
            storage.insert(item.timestamp, item.id)
    storage.seal()
    return storage


class ReconcileSource:
    """One request's view of a feed's records (:func:`open_reconcile`)."""

    def __init__(
        self,
        store: Any,
        collection: Collection[Any],
        order: str,
        mode: str,
        scope_field: str | None = None,
        scope_value: str | None = None,
        aggregates: bool = True,
        feed_limit: int = 0,
    ) -> None:
        self.store = store
        self.collection = collection
        self.order = order
        self.mode = mode
        self.scope_field = scope_field
        self.scope_value = scope_value
        self.aggregates = aggregates
        self.feed_limit = feed_limit
        db = collection.database
        self.records = db.get_collection(
            reconcile_name(collection.name),
            read_preference=ReadPreference.PRIMARY,
            read_concern=ReadConcern("majority"),
        )
        self._state: KeeperState | None = None
        self._now_us: int = 0
        self._checkpoint: Any = None

    # -- the horizon ---------------------------------------------------------

    def _read_state(self) -> KeeperState:
        """The keeper's state, the database's time and (commit order) the
        checkpoint: the time first, then each state document by its
        ``_id`` (an index lookup on every server; a ``$unionWith`` of them
        made the embedded server read both whole collections, a million
        positions and records at every request of a reconcile)."""
        if self._state is None:
            database = self.collection.database.with_options(read_concern=ReadConcern("majority"))
            rows = list(database.aggregate([{"$documents": [{"kind": "now"}]}, {"$set": {"now": "$$NOW"}}]))
            now = rows[0].get("now") if rows else None
            self._now_us = micros(now) if isinstance(now, datetime) else time.time_ns() // 1000
            found = None
            if self.aggregates:
                found = self.records.find_one({"_id": STATE_ID}, dict.fromkeys(STATE_FIELDS, 1))
            if order_kind(self.order).sequenced:
                positions = database[positions_name(self.collection.name)]
                self._checkpoint = checkpoint_of(positions.find_one({"_id": POSITIONS_STATE_ID}, {"checkpoint": 1}))
            self._state = KeeperState.from_document(found)
        return self._state

    def feed_horizon(self) -> int:
        """The feed's own bound in µs: ``$$NOW - W`` (watermark order) or
        the start of the checkpoint's second (commit order)."""
        state = self._read_state()
        if order_kind(self.order).sequenced:
            checkpoint = self._checkpoint
            if not isinstance(checkpoint, Timestamp):
                raise FeedNotReady(self.collection.name)
            bound = int(checkpoint.time) * 1_000_000
            if self.aggregates:
                # The keeper runs in the sequencer's batch loop, after the
                # batch's entries and checkpoint: its complete point is also
                # the sequencer's (a quiet feed's checkpoint stays at its
                # last change, the keeper's point moves on).
                wall = state.complete
                if wall is not None and self.keeper_alive():
                    bound = max(bound, min(wall, self._now_us))
            return bound
        return self._now_us - int(float(self.store.watermark_seconds) * 1_000_000)

    def keeper_alive(self) -> bool:
        """Whether a keeper holds the lease (it writes while it runs)."""
        return self._read_state().alive(self._now_us)

    def horizon(self) -> Horizon:
        """The ``until`` a client reconciles below: the feed's bound, or the
        aggregates' complete point where that is lower and a keeper runs."""
        bound = self.feed_horizon()
        if not self.aggregates:
            return Horizon(bound, FEED)
        state = self._read_state()
        self._check_foreign(state)
        wall = state.complete
        if wall is not None:
            if wall >= bound:
                return Horizon(bound, AGGREGATES)
            if self.keeper_alive():
                return Horizon(max(0, min(bound, wall)), AGGREGATES)
        return Horizon(bound, FEED)

    @staticmethod
    def _check_foreign(state: KeeperState) -> None:
        if state.foreign:
            raise NotReconcilable(
                "the feed shows objects whose ids are not 32 hexadecimal digits: they have no reconcile record"
            )

    # -- the storage -----------------------------------------------------------

    @contextmanager
    def storage(self, until: int) -> Iterator[Storage]:
        """The storage of the records below ``until`` for this request.

        :raises UntilAboveHorizon: ``until`` above the feed's bound.
        :raises ReconcileUnavailable: the aggregates lag behind ``until``
            while a keeper runs.
        :raises NotReconcilable: the feed's ids are not 32 hex digits.
        """
        bound = self.feed_horizon()
        if until > bound:
            raise UntilAboveHorizon(until, bound)
        if self.aggregates:
            state = self._read_state()
            self._check_foreign(state)
            wall = state.complete
            if wall is not None and wall >= until:
                views = request_views(self.mode, self.scope_field, self.scope_value)
                client = self.records.database.client
                with (
                    client.start_session(causal_consistency=False) as session,
                    session.start_transaction(
                        read_concern=ReadConcern("snapshot"), read_preference=ReadPreference.PRIMARY
                    ),
                ):
                    yield AggregateStorage(self.records, views, until, session)
                return
            if self.keeper_alive():
                raise ReconcileUnavailable(
                    "the reconcile aggregates are catching up with the feed"
                    + (f" (complete up to {wall}, until {until})" if wall is not None else " (being built)")
                )
        yield self.feed_records(until, self.feed_limit if self.aggregates else 0)

    def feed_records(self, until: int, limit: int = 0) -> VectorStorage:
        """The records below ``until`` computed from the feed itself.

        :param limit: with the aggregates on (the deployment expects them),
            the most objects read so: a feed of more gets
            :class:`ReconcileUnavailable` rather than a read of the whole
            feed at every request while no keeper answers (0: no bound).
        """
        filters = {self.scope_field: self.scope_value} if self.scope_field else None
        rows = self.store.list(
            self.collection,
            ["dateModified"],
            mode=self.mode,
            filters=filters,
            order=self.order,
            limit=limit + 1 if limit else 0,
        )
        if limit and len(rows) > limit:
            raise ReconcileUnavailable(
                "the reconcile aggregates are not built or their keeper has stopped (the sequencer keeps them: "
                "'openprocurement-feed sequence CONFIG.ini' or feed.sequencer = thread), and the feed shows more "
                f"than feed.reconcile_feed_limit = {limit} objects: too many to read whole for each request"
            )
        return feed_storage(rows, until)


def open_reconcile(
    store: Any,
    collection: Collection[Any],
    order: str,
    mode: str,
    scope_field: str | None = None,
    scope_value: str | None = None,
    aggregates: bool = True,
    feed_limit: int = 0,
) -> ReconcileSource:
    """The records of one feed request (its collection, order, ``mode`` and
    scope); ``aggregates=False`` computes them from the feed itself, as does
    a request the aggregates cannot answer, for at most ``feed_limit``
    objects (0: no bound)."""
    return ReconcileSource(store, collection, order, mode, scope_field, scope_value, aggregates, feed_limit)
