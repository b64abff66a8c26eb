"""The reconciliation aggregates, kept by the follower (SPEC G.3).

A :class:`AggregateKeeper` is one more job of a collection's follower (the
commit order's sequencer, or the watermark order's observer): the batch
handler hands it each batch of change events (:meth:`AggregateKeeper.handle`)
and it keeps the records and buckets of :mod:`~openprocurement_feed.store.buckets`
beside the collection. A batch costs one read (the old records of the
batch's objects, to subtract them from their buckets) and one transaction
of upserts: the records, the buckets' ``$inc`` (coalesced: a batch of patches
at the head touches each head bucket once) and the state. It never fails
the follower: a database error is logged, and the keeper catches up from
the documents changed since its last complete point on the next batch.

**One keeper at a time.** Every follower of the collection may carry a
keeper (a follower in each web process, a ``sequence`` process beside
them); the one holding the state's lease writes, the others wait for it to
lapse (:data:`LEASE_SECONDS`). A keeper that takes the lease over catches up
first. The transaction makes two keepers that overlap safe anyway: each
computes its deltas from the records it read in the transaction, and a
concurrent change of the same record is a write conflict, retried.

**Complete up to.** The state's ``wall`` (µs, the database's clock) says up
to when every committed change is in the aggregates; the storage uses them
only for records below it (:mod:`~openprocurement_feed.store.reconcile`).
On a first start (no state) the keeper *builds* them from the documents
(every public one, in chunks between batches, forward only: a record
already taken from a newer version stays); after a restart, an error or a
lease taken over it *catches up*: the documents whose ``public_modified``
is above its last complete point minus :data:`CATCH_UP_MARGIN_SECONDS`.
Until the scan is done the state's ``wall`` stays where it was.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from pymongo import InsertOne, ReplaceOne, ReturnDocument, UpdateOne
from pymongo.collection import Collection
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from ..store.buckets import (
    DATE_MODIFIED,
    INDEX_KEYS,
    INDEX_NAME,
    STATE_ID,
    Delta,
    Record,
    add_delta,
    delta_updates,
    emptied_buckets,
    reconcile_name,
    record_of,
    stored_record,
)

log = logging.getLogger("openprocurement_feed.aggregates")

#: Seconds a keeper's lease lasts without renewal (renewed every third of it).
LEASE_SECONDS = 30.0
#: Seconds before the last complete point from which a catch-up re-reads
#: the documents (a change that committed after the point was stamped at
#: most this much before it).
CATCH_UP_MARGIN_SECONDS = 60.0
#: Ids per read of old records (the embedded server's ``$in`` grows faster
#: than its list).
READ_CHUNK = 100
#: Documents of a build or a catch-up handled with each batch.
SCAN_CHUNK = 500
#: Seconds the changes of consecutive batches are coalesced before one
#: write (a head bucket is written once per interval, not once per batch;
#: the aggregates' complete point lags by as much).
APPLY_SECONDS = 1.0
#: Records held before a write whatever the time.
BUFFER_RECORDS = 2000


def now_us() -> int:
    """The local clock in µs since the epoch."""
    return time.time_ns() // 1000


def event_wall_us(event: Mapping[str, Any]) -> int | None:
    """An event's ``wallTime`` in µs, None without one."""
    wall = event.get("wallTime")
    if not isinstance(wall, datetime):
        return None
    if wall.tzinfo is None:
        wall = wall.replace(tzinfo=timezone.utc)
    return int(wall.timestamp() * 1_000_000)


class KeeperStats:
    """What a keeper did, for tests and benchmarks."""

    def __init__(self) -> None:
        self.batches = 0
        self.records = 0
        self.buckets = 0
        self.scanned = 0
        self.errors = 0
        self.last_error = ""


class AggregateKeeper:
    """Keeps one collection's reconciliation aggregates from its follower's
    batches.

    :param collection: the feed collection (its database holds the
        reconcile collection).
    :param scope_fields: the document fields its scoped feeds filter on.
    """

    def __init__(self, collection: Collection[Any], scope_fields: Iterable[str] = ()) -> None:
        self.documents = collection.with_options(read_concern=ReadConcern("majority"))
        self.client = collection.database.client
        self.records: Collection[Any] = collection.database.get_collection(
            reconcile_name(collection.name),
            write_concern=WriteConcern(w="majority"),
            read_concern=ReadConcern("majority"),
        )
        self.scope_fields = tuple(dict.fromkeys(scope_fields))
        self.owner = uuid.uuid4().hex
        self.stats = KeeperStats()
        #: monotonic time until which this keeper holds the lease (0: not)
        self.lease_until = 0.0
        #: a scan in progress: its cursor (a build or a catch-up)
        self.scan: Iterator[Mapping[str, Any]] | None = None
        #: the follower's restart count last seen (a restart means a gap)
        self.restarts = -1
        #: the state needs a catch-up before its point can move
        self.behind = True
        self.built = False
        self.last_state = 0.0
        self.indexed = False
        #: the changes of the batches since the last write (newest version each)
        self.buffer: dict[str, Record] = {}
        #: a public document whose id is not 32 hex digits was seen: the
        #: feed cannot be reconciled (the state says so)
        self.foreign = False

    @property
    def fields(self) -> tuple[str, ...]:
        """The document fields a record needs (the stream's projection)."""
        return ("is_public", "is_test", "public_modified", DATE_MODIFIED, *self.scope_fields)

    # -- the batch handler's call ----------------------------------------------

    def handle(self, events: Sequence[Mapping[str, Any]], caught_up: bool, restarts: int = 0) -> None:
        """Apply a batch of change events (and a chunk of a scan in
        progress); never raises a database error (logged, caught up later)."""
        try:
            self._handle(events, caught_up, restarts)
        except PyMongoError as error:
            self.stats.errors += 1
            self.stats.last_error = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            self.behind = True
            self.scan = None
            self.buffer.clear()
            self.lease_until = 0.0
            log.warning("Reconcile aggregates of %r: %s; catching up later", self.documents.name, self.stats.last_error)

    def _handle(self, events: Sequence[Mapping[str, Any]], caught_up: bool, restarts: int) -> None:
        began = time.monotonic()
        if not self._lease():
            self.buffer.clear()
            return
        if restarts != self.restarts:
            self.restarts = restarts
            self.behind = True
        if self.behind and self.scan is None:
            self._start_scan()
        changed = self.buffer
        self._merge(changed, self._records_of_events(events).values())
        scanned = False
        if self.scan is not None:
            scanned = True
            for doc in self._scan_chunk():
                record = record_of(doc, self.scope_fields)
                if record is None and doc.get("is_public") is True:
                    self.foreign = True
                if record is not None:
                    self._merge(changed, (record,))
        finished = self.behind and self.scan is None
        if finished:
            self.behind = False
        now = time.monotonic()
        due = scanned or finished or len(changed) >= BUFFER_RECORDS or now - self.last_state >= APPLY_SECONDS
        if not due:
            return  # coalesced with the next batches (the state's point waits for them)
        state: dict[str, Any] = {"foreign": True} if self.foreign else {}
        if not self.behind:
            state["wall"] = {"$max": [{"$ifNull": ["$wall", 0]}, self._point(events, caught_up, began)]}
            if not self.built:
                state["built"] = True
        if changed or finished or state:
            self._apply(changed, state)
            changed.clear()
            self.last_state = time.monotonic()
            if state.get("built"):
                self.built = True

    @staticmethod
    def _merge(changed: dict[str, Record], records: Iterable[Record]) -> None:
        """Keep the newest version of each object."""
        for record in records:
            current = changed.get(record.id)
            if current is None or record.version >= current.version:
                changed[record.id] = record

    @staticmethod
    def _point(events: Sequence[Mapping[str, Any]], caught_up: bool, began: float) -> Any:
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

    def _records_of_events(self, events: Iterable[Mapping[str, Any]]) -> dict[str, Record]:
        """One record per object: its newest event's."""
        found: dict[str, Record] = {}
        for event in events:
            operation = event.get("operationType")
            key = (event.get("documentKey") or {}).get("_id")
            if not isinstance(key, str):
                doc = event.get("fullDocument") or {}
                self.foreign = self.foreign or doc.get("is_public") is True
                continue
            if operation == "delete":
                wall = event_wall_us(event)
                found[key] = Record(key, (wall or now_us()) / 1_000_000)
            elif operation in ("insert", "replace", "update"):
                doc = event.get("fullDocument")
                if doc is None:
                    continue  # gone since: its delete event follows
                record = record_of(doc, self.scope_fields)
                if record is not None:
                    found[key] = record
                elif doc.get("is_public") is True:
                    self.foreign = True
        return found

    # -- the lease ---------------------------------------------------------------

    def _lease(self) -> bool:
        """Hold (take or renew) the state's lease; True while this keeper holds it."""
        now = time.monotonic()
        if now < self.lease_until - LEASE_SECONDS * 2 / 3:
            return True
        self._ensure_index()
        # One update by _id alone (a residual predicate beside _id makes the
        # embedded server scan the collection): the lease is taken when it
        # is this keeper's or has lapsed, and the answer says whose it is.
        mine = {"$eq": ["$owner", self.owner]}
        now_ms = {"$toLong": "$$NOW"}
        lapsed = {"$lt": [{"$ifNull": ["$lease", 0]}, now_ms]}
        ours = {"$or": [mine, lapsed]}
        renewed = {"$add": [now_ms, int(LEASE_SECONDS * 1000)]}  # ms since the epoch
        state = self.records.find_one_and_update(
            {"_id": STATE_ID},
            [
                {
                    "$set": {
                        "owner": {"$cond": [ours, self.owner, "$owner"]},
                        "lease": {"$cond": [ours, renewed, "$lease"]},
                    }
                }
            ],
            projection={"owner": 1},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        held = state is not None and state.get("owner") == self.owner
        if not held:
            self.lease_until = 0.0
            return False
        if self.lease_until == 0.0:
            self.behind = True  # taken over (or first held): catch up first
            self.scan = None
        self.lease_until = now + LEASE_SECONDS
        return True

    def _ensure_index(self) -> None:
        if not self.indexed:
            self.records.create_index(INDEX_KEYS, name=INDEX_NAME)
            self.indexed = True

    # -- scans -------------------------------------------------------------------

    def _start_scan(self) -> None:
        """A build (never built) or a catch-up from the last complete point."""
        state = self.records.find_one({"_id": STATE_ID}, {"built": 1, "wall": 1}) or {}
        self.built = state.get("built") is True
        projection = {name: 1 for name in self.fields}
        wall = state.get("wall")
        if not self.built or not isinstance(wall, int):
            # in the collection's order: versions decide, not the order
            # (a sort would make the server gather every document first)
            cursor = self.documents.find({"is_public": True}, projection, batch_size=SCAN_CHUNK)
            self.scan = iter(cursor)
            return
        since = wall / 1_000_000 - CATCH_UP_MARGIN_SECONDS
        cursors = [
            self.documents.find(
                {"is_public": public, "public_modified": {"$gt": since}}, projection, batch_size=SCAN_CHUNK
            )
            for public in (True, False)
        ]
        self.scan = (doc for cursor in cursors for doc in cursor)

    def _scan_chunk(self) -> list[Mapping[str, Any]]:
        chunk: list[Mapping[str, Any]] = []
        assert self.scan is not None
        for doc in self.scan:
            chunk.append(doc)
            if len(chunk) >= SCAN_CHUNK:
                break
        else:
            self.scan = None
        self.stats.scanned += len(chunk)
        return chunk

    # -- the write ---------------------------------------------------------------

    def _apply(self, changed: Mapping[str, Record], state: Mapping[str, Any]) -> None:
        """One transaction: read the old records, write the changed ones,
        their buckets' deltas and the state."""

        def write(session: Any) -> None:
            operations: list[Any] = []
            deltas: Delta = {}
            records = 0
            old = self._old_records(list(changed), session)
            for object_id, record in changed.items():
                before = old.get(object_id)
                if before is not None and before.version > record.version:
                    continue  # an older version than the one kept
                if record.same(before):
                    if before is not None and record.version > before.version:
                        operations.append(UpdateOne({"_id": object_id}, {"$set": {"v": record.version}}))
                    continue
                if before is not None and before.shown:
                    add_delta(deltas, before, -1)
                if record.shown:
                    add_delta(deltas, record, 1)
                document = record.document()
                if before is None:
                    operations.append(InsertOne(document))
                else:
                    operations.append(ReplaceOne({"_id": object_id}, document))
                records += 1
            buckets = [UpdateOne(query, update, upsert=True) for query, update in delta_updates(deltas)]
            operations.extend(buckets)
            if state:
                operations.append(UpdateOne({"_id": STATE_ID}, [{"$set": dict(state)}], upsert=True))
            if operations:
                self.records.bulk_write(operations, ordered=False, session=session)
            emptied = emptied_buckets(deltas)
            if emptied:
                # a bucket whose last record left it is removed: the
                # collection grows with the objects, not with the changes
                query = {"_id": emptied[0]} if len(emptied) == 1 else {"_id": {"$in": emptied}}
                self.records.delete_many({**query, "n": 0}, session=session)
            self.stats.records += records
            self.stats.buckets += len(buckets)

        # one attempt, not with_transaction's two minutes of retries: the
        # follower's next batch waits for this one, and a failed attempt is
        # caught up from the documents on a later batch (:meth:`handle`)
        with self.client.start_session() as session, session.start_transaction():
            write(session)
        self.stats.batches += 1

    def _old_records(self, ids: Sequence[str], session: Any) -> dict[str, Record]:
        found: dict[str, Record] = {}
        projection = {"w": 1, "b": 1, "r": 1, "v": 1}
        for start in range(0, len(ids), READ_CHUNK):
            chunk = ids[start : start + READ_CHUNK]
            query = {"_id": chunk[0]} if len(chunk) == 1 else {"_id": {"$in": chunk}}
            for doc in self.records.find(query, projection, session=session):
                found[doc["_id"]] = stored_record(doc)
        return found


def keepers_for(collections: Mapping[str, Collection[Any]], scopes: Mapping[str, Iterable[str]]) -> dict[str, Any]:
    """A keeper per collection name (for the sequencer)."""
    return {name: AggregateKeeper(collection, scopes.get(name, ())) for name, collection in collections.items()}
