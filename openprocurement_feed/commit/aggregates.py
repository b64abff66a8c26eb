"""The reconciliation aggregates, kept by the follower (SPEC G.3).

A :class:`AggregateKeeper` is one more job of a collection's follower (the
commit order's sequencer, or the watermark order's observer): the batch
handler hands it each batch of change events (:meth:`AggregateKeeper.handle`)
and it keeps the records and buckets of :mod:`~openprocurement_feed.store.buckets`
beside the collection. A batch costs one read (the old records of the
batch's objects, to subtract them from their buckets; none for the
objects whose records it wrote lately, kept in memory) and one transaction
of upserts: the records, the buckets' ``$inc`` (coalesced over
:data:`APPLY_SECONDS`: a stretch of patches at the head touches each head
bucket once) and the state. Buckets a write emptied are deleted in a later
write (:data:`SWEEP_SECONDS`, or the first quiet one). It never fails the
follower: a database error is logged, and the keeper catches up from the
documents changed since its last complete point on the next batch.

**One keeper at a time.** Every follower of the collection may carry a
keeper (a follower in each web process, a ``sequence`` process beside
them); the one holding the state's lease writes, the others wait for it to
lapse (:data:`~..store.keeper_state.LEASE_SECONDS`). A keeper that takes the lease over catches up
first. The transaction makes two keepers that overlap safe anyway: each
reads the state's owner in it and writes the state, so a keeper whose lease
was taken over (a process stopped past its lease) finds another owner or
conflicts with the new owner's write, and forgets what it kept in memory.

**Complete up to.** The state's ``wall`` (µs, the database's clock) says up
to when every committed change is in the aggregates; the storage uses them
only for records below it (:mod:`~openprocurement_feed.store.reconcile`).
On a first start (no state, or aggregates of another layout: the state's
``built`` names the :data:`~openprocurement_feed.store.buckets.LAYOUT`) the
keeper *builds* them from the documents: it empties the collection, then
reads every public document, in chunks between batches (at most
:data:`SCAN_SECONDS` of each batch, :data:`QUIET_SCAN_SECONDS` of a quiet
one), forward only (a record already taken from a newer version stays),
writing each chunk's records and its buckets' ``$inc`` in one transaction
(the scan goes up the stamps, so a chunk's records share their buckets: the
buckets are written about once each, and the keeper holds no sums in memory:
a million objects make about two million buckets); the state is ``built``
when the scan ends. A chunk is made smaller while one takes longer than
:data:`SCAN_SECONDS` (the follower's next batch waits for it). After a
restart, an error or a lease taken over it *catches up*: the documents whose ``public_modified`` is above its last
complete point minus :data:`CATCH_UP_MARGIN_SECONDS`, then the records it
holds for shown objects, whose document must still exist and be public. A
deletion leaves no document to read, and its event may never have reached
the lease's holder (a keeper without the lease drops the events it is
handed; a stopped one gets none): the records of documents gone or no
longer public lose their views, as the sequencer's recovery hides their
positions. Until the scan is done the state's ``wall`` stays where it was.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, islice
from typing import Any

from pymongo import UpdateOne
from pymongo.collection import Collection
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from ..store.buckets import (
    DATE_MODIFIED,
    INDEX_KEYS,
    INDEX_NAME,
    LAYOUT,
    STATE_ID,
    Record,
    delta_updates,
    emptied_buckets,
    reconcile_name,
    record_of,
    stored_record,
)
from ..store.keeper_state import APPLIED, BUILT, FOREIGN, STATE_FIELDS, WALL, KeeperState
from ..store.readers import PUBLIC_MODIFIED
from ..store.scans import documents_in_windows
from .aggregate_writes import (
    KeeperStats,
    complete_point,
    event_wall_us,
    merge_newest,
    now_us,
    record_writes,
)
from .lease import Lease

log = logging.getLogger("openprocurement_feed.aggregates")

#: The server's code for a write that conflicted with another's.
WRITE_CONFLICT = 112


def transient(error: PyMongoError) -> bool:
    """A transaction's error that left nothing written and may pass on a
    retry (``TransientTransactionError``, a write conflict)."""
    return isinstance(error, OperationFailure) and (
        error.has_error_label("TransientTransactionError") or error.code == WRITE_CONFLICT
    )


def build_key(object_id: str) -> int | str:
    """How a build remembers an id it wrote a record for: 32 hex digits as
    their integer (a third of the string's memory: a million of them are
    held until the build ends)."""
    try:
        return int(object_id, 16) if len(object_id) == 32 else object_id
    except ValueError:
        return object_id


#: Seconds before the last complete point from which a catch-up re-reads
#: the documents (a change that committed after the point was stamped at
#: most this much before it).
CATCH_UP_MARGIN_SECONDS = 60.0
#: Ids per read of old records (the embedded server's ``$in`` grows faster
#: than its list).
READ_CHUNK = 100
#: Documents of a build or a catch-up read and written at a time.
SCAN_CHUNK = 500
#: Seconds of a batch's turn a build or a catch-up may take (whole chunks:
#: at least one): the follower's next batch waits for it. After a quiet
#: batch (no event, caught up) :data:`QUIET_SCAN_SECONDS`: no write waits
#: yet, but one that commits during the turn waits for its end (a longer
#: quiet turn held the commit feed's writes up to its length while a
#: million tenders' aggregates built).
SCAN_SECONDS = 0.5
QUIET_SCAN_SECONDS = 0.5
#: Seconds the changes of consecutive batches are coalesced before one
#: write (a head bucket is written once per interval, not once per batch;
#: the aggregates' complete point lags by as much).
APPLY_SECONDS = 2.0
#: Records held before a write whatever the time.
BUFFER_RECORDS = 2000
#: The records written last kept in memory (their old versions need no
#: read when their objects change again).
CACHE_RECORDS = 50_000
#: Seconds between two deletions of the buckets writes emptied (also done
#: by the first write of a quiet batch, and at :data:`SWEEP_BUCKETS`).
SWEEP_SECONDS = 60.0
SWEEP_BUCKETS = 5000
#: The smallest chunk a scan shrinks to (:data:`SCAN_SECONDS`).
MIN_SCAN_CHUNK = 50


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
        self.stats = KeeperStats()
        self.lease = Lease(self.records)
        #: a scan in progress (a build or a catch-up): an item per document
        #: or record it reads, the record to write (None: nothing to write)
        self.scan: Iterator[Record | None] | None = None
        #: the follower's restart count last seen (a restart means a gap)
        self.restarts = -1
        #: the state needs a catch-up before its point can move
        self.behind = True
        self.built = False
        self.last_state = 0.0
        self.indexed = False
        #: the changes of the batches since the last write (newest version each)
        self.buffer: dict[str, Record] = {}
        #: the records this keeper wrote lately, as stored (valid while it
        #: holds the lease without a break and no write failed)
        self.cache: OrderedDict[str, Record] = OrderedDict()
        #: a build in progress: the ids it wrote records for (any other id
        #: has none: the build emptied the collection) and its buckets'
        #: deltas, written at its end
        self.build_ids: set[int | str] | None = None
        #: documents a scan's next chunk reads (:data:`SCAN_CHUNK`, less
        #: while a chunk takes longer than :data:`SCAN_SECONDS`)
        self.chunk_size = SCAN_CHUNK
        #: buckets that writes took records out of, deleted when empty
        self.emptied: set[str] = set()
        self.last_sweep = time.monotonic()
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
        progress); never raises a database error (logged; a transaction's
        conflict retried with the next batch, any other caught up later)."""
        try:
            self._handle(events, caught_up, restarts)
        except PyMongoError as error:
            self.stats.errors += 1
            self.stats.last_error = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            if transient(error) and self.lease.held:
                # the transaction wrote nothing; what it held (the changes,
                # a scan's chunk) is written by the next batch: a build of a
                # million objects is not begun again for one conflict
                log.warning("Reconcile aggregates of %r: %s; retried next batch", self.documents.name, error)
                return
            self.behind = True
            self.lease.drop()
            self._forget()
            log.warning("Reconcile aggregates of %r: %s; catching up later", self.documents.name, self.stats.last_error)

    def _handle(self, events: Sequence[Mapping[str, Any]], caught_up: bool, restarts: int) -> None:
        began = time.monotonic()
        if not self._lease():
            self._forget()
            return
        if restarts != self.restarts:
            self.restarts = restarts
            self.behind = True
        if self.behind and self.scan is None:
            self._start_scan()
        changed = self.buffer
        merge_newest(changed, self._records_of_events(events).values())
        scanned = False
        budget = QUIET_SCAN_SECONDS if caught_up and not events else SCAN_SECONDS
        while self.scan is not None:
            if scanned and (len(changed) >= BUFFER_RECORDS or time.monotonic() - began >= budget):
                break
            scanned = True
            chunk_began = time.monotonic()
            size = self.chunk_size
            merge_newest(changed, self._scan_chunk(size))
            if len(changed) >= size:
                self._apply(changed, {})
                changed.clear()
                self._size_chunks(size, time.monotonic() - chunk_began)
        finished = self.behind and self.scan is None
        if finished:
            self.behind = False
        now = time.monotonic()
        due = scanned or finished or len(changed) >= BUFFER_RECORDS or now - self.last_state >= APPLY_SECONDS
        if not due:
            return  # coalesced with the next batches (the state's point waits for them)
        state: dict[str, Any] = {FOREIGN: True} if self.foreign else {}
        if not self.behind:
            state[WALL] = {"$max": [{"$ifNull": [f"${WALL}", 0]}, complete_point(events, caught_up, began)]}
            if not self.built:
                state[BUILT] = LAYOUT
        sweep = self.emptied and (
            (caught_up and not events) or len(self.emptied) >= SWEEP_BUCKETS or now - self.last_sweep >= SWEEP_SECONDS
        )
        self._apply(changed, state, sweep=bool(sweep))
        changed.clear()
        self.last_state = time.monotonic()
        if state.get(BUILT):
            self.built = True

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
        """Hold the lease; True while this keeper holds it (a lease newly
        taken means catching up first)."""
        was_held = self.lease.held
        if not was_held:
            self._ensure_index()
        if not self.lease.hold():
            return False
        if not was_held:
            self.behind = True  # taken over (or first held): catch up first
            self._forget()
        return True

    def _ensure_index(self) -> None:
        if not self.indexed:
            self.records.create_index(INDEX_KEYS, name=INDEX_NAME)
            self.indexed = True

    # -- scans -------------------------------------------------------------------

    def _forget(self) -> None:
        """Drop what this keeper holds in memory (after an error or a lease
        lost: the database may differ from it now)."""
        self.scan = None
        self.buffer.clear()
        self.cache.clear()
        self.build_ids = None
        self.emptied.clear()

    def _start_scan(self) -> None:
        """A build (never built) or a catch-up from the last complete point."""
        state = KeeperState.from_document(self.records.find_one({"_id": STATE_ID}, dict.fromkeys(STATE_FIELDS, 1)))
        self.built = state.built
        projection = {name: 1 for name in self.fields}
        wall = state.complete
        if wall is None:
            # from an empty collection (a build broken off, or of another
            # layout, left records and buckets that no longer add up)
            self.records.update_one({"_id": STATE_ID}, {"$unset": {BUILT: "", WALL: ""}})
            self.records.delete_many({"lv": {"$exists": True}})
            self.cache.clear()
            self.emptied.clear()
            self.build_ids = set()
            self.scan = self._records_of_documents(
                documents_in_windows(self.documents, {"is_public": True}, projection, SCAN_CHUNK)
            )
            return
        since = wall / 1_000_000 - CATCH_UP_MARGIN_SECONDS
        changed = (
            doc
            for public in (True, False)
            for doc in documents_in_windows(
                self.documents, {"is_public": public, PUBLIC_MODIFIED: {"$gt": since}}, projection, SCAN_CHUNK
            )
        )
        self.scan = chain(self._records_of_documents(changed), self._vanished())

    def _records_of_documents(self, docs: Iterable[Mapping[str, Any]]) -> Iterator[Record | None]:
        """The records of a scan's documents (a public one whose id is not
        32 hex digits marks the feed foreign)."""
        for doc in docs:
            record = record_of(doc, self.scope_fields)
            if record is None and doc.get("is_public") is True:
                self.foreign = True
            yield record

    def _vanished(self) -> Iterator[Record | None]:
        """A catch-up's second pass, over the records of shown objects: a
        record with no view (of the present's version, as a delete event's)
        for each whose document is gone, the document's record for each
        whose document is no longer public."""
        projection = {name: 1 for name in self.fields}
        shown = iter(self.records.find({"lv": 0, "n": 1}, {"_id": 1}, batch_size=SCAN_CHUNK))
        while ids := [row["_id"] for row in islice(shown, READ_CHUNK)]:
            docs = {doc["_id"]: doc for doc in self.documents.find({"_id": {"$in": ids}}, projection)}
            for object_id in ids:
                doc = docs.get(object_id)
                if doc is None:
                    self.stats.vanished += 1
                    yield Record(object_id, now_us() / 1_000_000)
                elif doc.get("is_public") is not True:
                    self.stats.vanished += 1
                    yield record_of(doc, self.scope_fields)
                else:
                    yield None  # still shown: the first pass has its changes

    def _scan_chunk(self, size: int) -> list[Record]:
        """The records of the scan's next ``size`` documents or records
        read; the scan ends with its last."""
        assert self.scan is not None
        chunk = list(islice(self.scan, size))
        if len(chunk) < size:
            self.scan = None
        self.stats.scanned += len(chunk)
        return [record for record in chunk if record is not None]

    # -- the write ---------------------------------------------------------------

    def _apply(self, changed: Mapping[str, Record], state: Mapping[str, Any], sweep: bool = False) -> None:
        """One transaction: check the lease, read the old records (those not
        in memory), write the changed ones, their buckets' deltas (during a
        build's scan too) and the state."""
        finishing = self.build_ids is not None and bool(state.get(BUILT))
        swept = sorted(self.emptied) if sweep else []
        written: dict[str, Record] = {}

        def write(session: Any) -> None:
            self.lease.check(session)
            writes = record_writes(changed, self._old_records(list(changed), session))
            written.update(writes.written)
            operations, deltas = writes.operations, writes.deltas
            buckets = [UpdateOne(query, update, upsert=True) for query, update in delta_updates(deltas)]
            operations.extend(buckets)
            # always written: a keeper that overlaps conflicts here
            operations.append(
                UpdateOne({"_id": STATE_ID}, [{"$set": {**state, APPLIED: {"$toLong": "$$NOW"}}}], upsert=True)
            )
            self.records.bulk_write(operations, ordered=False, session=session)
            for start in range(0, len(swept), READ_CHUNK):
                # a bucket whose last record left it is removed: the
                # collection grows with the objects, not with the changes
                self.records.delete_many({"_id": {"$in": swept[start : start + READ_CHUNK]}, "n": 0}, session=session)
            self.stats.records += writes.replaced
            self.stats.buckets += len(buckets)
            if buckets:
                self.emptied.update(emptied_buckets(deltas))

        # one attempt, not with_transaction's two minutes of retries: the
        # follower's next batch waits for this one, and a failed attempt is
        # caught up from the documents on a later batch (:meth:`handle`)
        with self.client.start_session() as session, session.start_transaction():
            write(session)
        self.stats.batches += 1
        if swept:
            self.emptied.difference_update(swept)
            self.last_sweep = time.monotonic()
            self.stats.swept += len(swept)
        if finishing:
            self.build_ids = None
        if self.build_ids is not None:
            self.build_ids.update(map(build_key, written))  # a build remembers ids, not records
            return
        for object_id, record in written.items():
            self.cache[object_id] = record
            self.cache.move_to_end(object_id)
        while len(self.cache) > CACHE_RECORDS:
            self.cache.popitem(last=False)

    def _size_chunks(self, size: int, seconds: float) -> None:
        """After a chunk of ``size`` documents read and written in
        ``seconds``: the next chunks' size, smaller while a chunk takes
        longer than :data:`SCAN_SECONDS` (at least :data:`MIN_SCAN_CHUNK`),
        growing back to :data:`SCAN_CHUNK` while it takes less than half."""
        if SCAN_SECONDS <= 0 or seconds <= 0:
            return
        if seconds > SCAN_SECONDS:
            self.chunk_size = max(min(MIN_SCAN_CHUNK, SCAN_CHUNK), int(size * SCAN_SECONDS / seconds))
        elif seconds < SCAN_SECONDS / 2:
            self.chunk_size = min(SCAN_CHUNK, size * 2)

    def _old_records(self, ids: Sequence[str], session: Any) -> dict[str, Record]:
        """The stored records of ``ids``: from memory when this keeper wrote
        them lately; none during a build for the ids it has not written."""
        found: dict[str, Record] = {}
        wanted: list[str] = []
        for object_id in ids:
            cached = self.cache.get(object_id)
            if cached is not None:
                found[object_id] = cached
            elif self.build_ids is None or build_key(object_id) in self.build_ids:
                wanted.append(object_id)
        self.stats.reads += len(wanted)
        projection = {"w": 1, "b": 1, "r": 1, "v": 1}
        for start in range(0, len(wanted), READ_CHUNK):
            chunk = wanted[start : start + READ_CHUNK]
            query = {"_id": chunk[0]} if len(chunk) == 1 else {"_id": {"$in": chunk}}
            for doc in self.records.find(query, projection, session=session):
                found[doc["_id"]] = stored_record(doc)
        return found
