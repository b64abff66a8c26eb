"""The sequencer: gives every committed change a position in commit order (SPEC D).

For each collection of a commit-ordered feed, a :class:`CollectionSequencer`
handles the collection's change events, strictly in order and in batches, and
keeps one *entry* per document in the positions collection beside it
(:func:`~.orders.positions_name`); the events of every sequenced collection
of a database come from one change stream of the database
(:class:`~.dbstream.DatabaseStream`)::

    {_id, committed_ts, rev, is_public, is_test, public_modified, <scope fields>,
     <the listing's fields>}

``committed_ts`` is the change event's ``clusterTime``; the listing
(:mod:`.listing`) is every field a feed of the collection may show, copied
from the version the entry was taken from, so that a page is rendered from
the entries alone. Entries move
**forward only**: one bulk write per batch, each a pipeline upsert that
replaces the entry only when the event is newer, so a stale or repeated event
is a no-op and any number of sequencers can run at once. A deleted document's
entry becomes a tombstone (``is_public: false, deleted: true``) at the
delete's position. The sequencer never writes the application's documents.

Each batch's resume token and **checkpoint** are saved in the same ordered
bulk write, after its entries, with ``w: majority``, in the positions
collection's state document (:data:`~.orders.STATE_ID`; ``$max``: never
backwards): one round trip per batch. The
checkpoint promises that every change with ``clusterTime <= checkpoint`` has
its entry: it is the last event's time when the stream is caught up, else
that time's predecessor (a transaction's events can straddle batches).

On its first start a sequencer reads the cluster time, takes ``T0`` just
after it as the point its events are read from, and *backfills* from a
snapshot that holds every change before ``T0``: every public document
without an entry gets a position below ``T0`` in ``(public_modified, _id)``
order. When its resume token has left the oplog it *recovers*: every
document whose ``_rev`` differs from its entry's (or that has none) gets a
fresh position above the old checkpoint, entries of vanished documents
become tombstones, and it goes on from the present. Both are
:meth:`CollectionSequencer.restamp`.

The state document also records the listing the entries carry. A sequencer
that starts with another listing (a feed gained an allowed field)
*re-materializes* the entries in a background thread
(:meth:`CollectionSequencer.rematerialize`): each entry whose revision is
the document's current one gets the new listing, no position moves; the
others are rewritten by their pending event anyway. Until it has finished,
the state's listing names only the fields every entry carries, and pages
fill the rest from the documents.

What a change costs the database is what this module sends per change: one
event of a stream reply and its share of one bulk write (:meth:`read_batch`).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from bson.timestamp import Timestamp
from pymongo import ASCENDING, DESCENDING, UpdateOne
from pymongo.change_stream import ChangeStream, CollectionChangeStream
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from ..operations.health import LagWindow, Publisher, event_lag
from ..store.listing import STATE_LISTING, STATE_SEQ, STATE_TARGET, covers, normalize, take
from ..store.orders import COMMITTED_SEQ, COMMITTED_TS, PUBLIC_MODIFIED, STATE_ID, position_seq, positions_name

if TYPE_CHECKING:
    from .dbstream import DatabaseStream

log = logging.getLogger("openprocurement_feed.sequencer")  # its name from before the package had subpackages

#: Server error codes of a resume point that is no longer in the oplog.
HISTORY_LOST_CODES = frozenset({136, 280, 286})
#: Events that end a collection's stream.
INVALIDATING = frozenset({"drop", "rename", "dropDatabase", "invalidate"})
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


class SequencerError(RuntimeError):
    """The sequencer cannot follow a collection (a setup problem, not transient)."""


@dataclass
class SequencerStats:
    """What a collection's sequencer did, for progress lines and benchmarks.

    ``delays_ms`` keeps the last few thousand commit-to-checkpoint delays:
    the time from an event's ``wallTime`` to the publication of a checkpoint
    that covers it.
    """

    events: int = 0
    stamped: int = 0
    batches: int = 0
    backfilled: int = 0
    recovered: int = 0
    rematerialized: int = 0
    restarts: int = 0
    checkpoint: Timestamp | None = None
    published_at: float = 0.0
    delays_ms: deque[float] = field(default_factory=lambda: deque(maxlen=5000))
    #: since when (wall-clock seconds) its database errors have kept it from
    #: following, None while it follows; the health view shows it
    failing_since: float | None = None
    #: the last of those errors, one line
    last_error: str = ""

    def failed(self, error: BaseException) -> None:
        """Record a database error that stopped the stream (it is retried)."""
        self.restarts += 1
        if self.failing_since is None:
            self.failing_since = time.time()
        self.last_error = f"{type(error).__name__}: {error}".splitlines()[0][:300]

    def following(self) -> None:
        """A batch was read and handled: whatever failed before is over."""
        self.failing_since = None

    def delay_summary(self) -> dict[str, float | None]:
        """Median, p99 and max of the recent commit-to-checkpoint delays (ms)."""
        values = sorted(self.delays_ms)
        if not values:
            return {"median": None, "p99": None, "max": None}
        return {
            "median": round(statistics.median(values), 1),
            "p99": round(values[min(len(values) - 1, int(len(values) * 0.99))], 1),
            "max": round(values[-1], 1),
        }


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


def forward_only(entry: Mapping[str, Any]) -> UpdateOne:
    """An upsert that writes ``entry`` unless its entry is already as new."""
    return UpdateOne(
        {"_id": entry["_id"]},
        [
            {
                "$replaceWith": {
                    "$cond": [
                        {"$lt": ["$" + COMMITTED_TS, entry[COMMITTED_TS]]},
                        {"$literal": dict(entry)},
                        "$$ROOT",
                    ]
                }
            }
        ],
        upsert=True,
    )


class CollectionSequencer:
    """Follows one collection's change stream and keeps its positions.

    :param collection: the feed collection (its database holds the positions
        and the state).
    :param scope_fields: document fields the collection's feeds filter on,
        copied into each entry.
    :param listing: the document fields the collection's feeds may show
        (:mod:`.listing`), copied into each entry.
    :param batch_size: the most events handled in one bulk write.
    :param max_await_ms: how long one read of the stream waits for events
        (short: a batch is what the server holds when it is read, see
        :meth:`_pace`).
    :param batch_seconds: the longest a batch reads on before its entries
        are written.
    :param read_interval: the least time between the starts of two batches
        (:meth:`_pace`).
    :param idle_seconds: the longest pause before reading a stream again
        after reads that found nothing.
    """

    def __init__(
        self,
        collection: Collection[Any],
        scope_fields: Iterable[str] = (),
        listing: Iterable[str] = (),
        batch_size: int = 1000,
        max_await_ms: int = 1,
        batch_seconds: float = 0.05,
        read_interval: float = 0.05,
        idle_seconds: float = 0.05,
        observe: bool = False,
        lag_window_seconds: float = 300.0,
        metrics: Any = None,
    ) -> None:
        majority = WriteConcern(w="majority")
        self.name = collection.name
        self.db = collection.database
        self.collection = collection.with_options(read_concern=ReadConcern("majority"))
        self.positions = self.db.get_collection(
            positions_name(self.name), write_concern=majority, read_concern=ReadConcern("majority")
        )
        self.scope_fields = tuple(dict.fromkeys(scope_fields))
        self.listing = normalize(listing)
        self.batch_size = batch_size
        self.max_await_ms = max_await_ms
        self.batch_seconds = batch_seconds
        self.idle_seconds = idle_seconds
        self.read_interval = read_interval
        self.stats = SequencerStats()
        #: observe only: measure the lag, write no positions (watermark feeds)
        self.observe = observe
        self.window = LagWindow(lag_window_seconds)
        self.metrics = metrics
        self.publisher = Publisher(self.db, self.name, "observer" if observe else "sequencer")
        #: a batch published mid-stream: its last time and uncovered events
        self.pending: tuple[Timestamp, list[dict[str, Any]]] | None = None
        #: set by :meth:`run`: ends a re-materialization
        self.stopping = threading.Event()
        self.rematerializer: threading.Thread | None = None

    # -- entries ------------------------------------------------------------

    def entry(self, doc: Mapping[str, Any], position: Timestamp) -> dict[str, Any]:
        """The positions entry of ``doc`` at ``position``."""
        entry = take(doc, self.listing)
        entry.update(
            {
                "_id": doc["_id"],
                COMMITTED_TS: position,
                COMMITTED_SEQ: position_seq(position),
                "rev": doc.get("_rev"),
                "is_public": doc.get("is_public") is True,
                "is_test": doc.get("is_test") is True,
                PUBLIC_MODIFIED: doc.get(PUBLIC_MODIFIED),
            }
        )
        for name in self.scope_fields:
            if name in doc:
                entry[name] = doc[name]
        return entry

    def document_fields(self) -> tuple[str, ...]:
        """The document fields an entry is made of (a projection's paths)."""
        return normalize(("_rev", "is_public", "is_test", PUBLIC_MODIFIED, *self.scope_fields, *self.listing))

    @staticmethod
    def tombstone(doc_id: Any, position: Timestamp) -> dict[str, Any]:
        """The entry of a deleted document: hidden from every feed."""
        return {
            "_id": doc_id,
            COMMITTED_TS: position,
            COMMITTED_SEQ: position_seq(position),
            "is_public": False,
            "deleted": True,
        }

    def write(self, entries: Sequence[Mapping[str, Any]], state: UpdateOne | None = None) -> int:
        """Write entries forward-only, then ``state``, in one ordered bulk
        write; returns the number of entries changed."""
        operations = [forward_only(entry) for entry in entries]
        if state is not None:
            operations.append(state)
        if not operations:
            return 0
        result = self.positions.bulk_write(operations, ordered=True)
        changed = result.upserted_count + result.modified_count
        return changed - (1 if state is not None else 0)

    def entries_of(self, events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """One entry per document: its newest event of ``events``."""
        latest: dict[Any, dict[str, Any]] = {}
        for event in events:
            operation = event.get("operationType")
            key = (event.get("documentKey") or {}).get("_id")
            position = event["clusterTime"]
            if operation == "delete":
                latest[_hashable(key)] = self.tombstone(key, position)
            elif operation in ("insert", "replace", "update"):
                doc = event.get("fullDocument")
                if doc is None:
                    continue  # gone since: its delete event follows
                latest[_hashable(key)] = self.entry(doc, position)
        return list(latest.values())

    # -- state --------------------------------------------------------------

    def load_state(self) -> dict[str, Any]:
        """This collection's saved token, checkpoint and start (may be empty)."""
        return self.positions.find_one({"_id": STATE_ID}) or {}

    @staticmethod
    def state_update(
        token: Mapping[str, Any] | None, token_ts: Timestamp | None, checkpoint: Timestamp | None
    ) -> UpdateOne:
        """Save the resume token (if newer than the saved one) and advance the
        checkpoint (``$max``), as one upsert of the state document."""
        stage: dict[str, Any] = {}
        if token is not None and token_ts is not None:
            newer = {"$lt": [{"$ifNull": ["$token_ts", Timestamp(0, 0)]}, token_ts]}
            stage["token"] = {"$cond": [newer, {"$literal": dict(token)}, "$token"]}
            stage["token_ts"] = {"$max": ["$token_ts", token_ts]}
        if checkpoint is not None:
            stage["checkpoint"] = {"$max": ["$checkpoint", checkpoint]}
            stage["published"] = "$$NOW"
        return UpdateOne({"_id": STATE_ID}, [{"$set": stage}], upsert=True)

    def published(self, checkpoint: Timestamp | None) -> None:
        """Record a checkpoint this sequencer has published."""
        if checkpoint is None:
            return
        if self.stats.checkpoint is None or checkpoint > self.stats.checkpoint:
            self.stats.checkpoint = checkpoint
        self.stats.published_at = time.time()

    def publish(
        self, token: Mapping[str, Any] | None, token_ts: Timestamp | None, checkpoint: Timestamp | None
    ) -> None:
        """Save the token and the checkpoint alone (no entries)."""
        self.write((), self.state_update(token, token_ts, checkpoint))
        self.published(checkpoint)

    # -- backfill and recovery ----------------------------------------------

    def restamp(self, ceiling: Timestamp, floor: Timestamp | None = None) -> int:
        """Give positions below ``ceiling`` (above ``floor``) to every public
        document without an entry or whose ``_rev`` differs from its entry's,
        in ``(public_modified, _id)`` order; with ``floor`` (recovery), also
        turn entries of documents that are gone or hidden into tombstones or
        hidden entries. Returns the number of entries written."""
        with self.db.client.start_session(causal_consistency=True) as session:
            # Read a snapshot that holds every change committed before the
            # stream's start, on any node: majority, after that cluster time.
            session.advance_operation_time(predecessor(ceiling))
            return self._restamp(ceiling, floor, session)

    def _restamp(self, ceiling: Timestamp, floor: Timestamp | None, session: Any) -> int:
        counter = PositionCounter(ceiling, floor)
        projection = {"_id": 1, **{name: 1 for name in self.document_fields()}}
        cursor = self.collection.find(
            {"is_public": True},
            projection,
            sort=[(PUBLIC_MODIFIED, ASCENDING), ("_id", ASCENDING)],
            batch_size=RESTAMP_CHUNK,
            session=session,
        )
        written = 0
        for chunk in _chunks(cursor, RESTAMP_CHUNK):
            known = {
                _hashable(row["_id"]): row.get("rev")
                for row in self.positions.find({"_id": {"$in": [doc["_id"] for doc in chunk]}}, {"rev": 1})
            }
            entries = []
            for doc in chunk:
                key = _hashable(doc["_id"])
                if key in known and known[key] == doc.get("_rev"):
                    continue
                entries.append(self.entry(doc, counter.next(doc.get(PUBLIC_MODIFIED))))
            written += self.write(entries)
        if floor is not None:
            written += self._hide_vanished(counter, session)
        return written

    def _hide_vanished(self, counter: PositionCounter, session: Any) -> int:
        """Recovery: public entries whose document is gone or no longer public."""
        written = 0
        cursor = self.positions.find({"is_public": True}, {"_id": 1}, batch_size=RESTAMP_CHUNK, session=session)
        for chunk in _chunks(cursor, RESTAMP_CHUNK):
            ids = [row["_id"] for row in chunk]
            docs = {
                _hashable(doc["_id"]): doc
                for doc in self.collection.find(
                    {"_id": {"$in": ids}}, {"is_public": 1, "_rev": 1, "is_test": 1}, session=session
                )
            }
            entries = []
            for doc_id in ids:
                doc = docs.get(_hashable(doc_id))
                if doc is None:
                    entries.append(self.tombstone(doc_id, counter.next(0)))
                elif doc.get("is_public") is not True:
                    entries.append(self.entry(doc, counter.next(0)))
            written += self.write(entries)
        return written

    # -- the listing (SPEC D.13) ---------------------------------------------

    def check_listing(self, state: Mapping[str, Any]) -> None:
        """Start re-materializing the entries when they carry another listing
        than this sequencer's (or none: positions of an earlier release).

        The state's listing shrinks at once to the fields every entry
        carries whichever listing wrote it (what pages may take from the
        entries); the new listing becomes the target, and the state's
        listing once :meth:`rematerialize` has gone through every document.
        """
        carried = state.get(STATE_LISTING)
        target = state.get(STATE_TARGET)
        if carried is not None and tuple(carried) == self.listing and target is None:
            if state.get(STATE_SEQ) is not True:
                self._start_rematerializer()
            return
        old = tuple(carried or ())
        kept = [name for name in self.listing if covers(old, name)]
        self.positions.update_one(
            {"_id": STATE_ID}, {"$set": {STATE_LISTING: kept, STATE_TARGET: list(self.listing)}}, upsert=True
        )
        log.warning(
            "Sequencer of %r: the entries carry the listing %s, the feeds need %s; re-materializing them "
            "in the background (pages fill the missing fields from the documents until it has finished)",
            self.name,
            list(old) if carried is not None else "(none)",
            list(self.listing),
        )
        self._start_rematerializer()

    def _start_rematerializer(self) -> None:
        if self.rematerializer is None or not self.rematerializer.is_alive():
            self.rematerializer = threading.Thread(
                target=self._rematerialize_logged, name=f"rematerialize-{self.name}", daemon=True
            )
            self.rematerializer.start()

    def _rematerialize_logged(self) -> None:
        try:
            if self.positions.find_one({"_id": STATE_ID, STATE_TARGET: {"$exists": True}}, {"_id": 1}):
                self.rematerialize()
            self.add_seq()
        except PyMongoError as error:  # the next start tries again
            log.warning("Sequencer of %r: re-materialization stopped: %s", self.name, error)

    def rematerialize(self) -> bool:
        """Give every entry taken from its document's current revision this
        sequencer's listing, from the documents, without moving a position;
        then record the listing in the state. Entries of older revisions are
        left to their pending events (which this sequencer writes with its
        listing). Returns False when stopped or superseded before the end."""
        began = time.monotonic()
        projection = {"_id": 1, **{name: 1 for name in self.document_fields()}}
        cursor = self.collection.find({"is_public": True}, projection, batch_size=RESTAMP_CHUNK)
        for chunk in _chunks(cursor, RESTAMP_CHUNK):
            if self.stopping.is_set():
                return False
            operations = [
                UpdateOne({"_id": doc["_id"], "rev": doc.get("_rev")}, {"$set": values})
                for doc in chunk
                if (values := take(doc, self.listing))
            ]
            if operations:
                result = self.positions.bulk_write(operations, ordered=False)
                self.stats.rematerialized += result.modified_count
        done = self.positions.update_one(
            {"_id": STATE_ID, STATE_TARGET: list(self.listing)},
            {"$set": {STATE_LISTING: list(self.listing)}, "$unset": {STATE_TARGET: ""}},
        )
        log.info(
            "Sequencer of %r: %d entries re-materialized in %.1f s%s",
            self.name,
            self.stats.rematerialized,
            time.monotonic() - began,
            "" if done.matched_count else " (another listing has been asked for since)",
        )
        return bool(done.matched_count)

    def add_seq(self) -> int:
        """Give ``committed_seq`` to every entry without it (entries of an
        earlier release), then flag the state: pages project it instead of
        ``committed_ts``. Each write is filtered on the entry's position, so
        an entry moved meanwhile (which has it) is left alone. Returns the
        number of entries given it."""
        state = self.positions.find_one({"_id": STATE_ID}, {STATE_SEQ: 1}) or {}
        if state.get(STATE_SEQ) is True:
            return 0
        added = 0
        cursor = self.positions.find(
            {COMMITTED_SEQ: {"$exists": False}, COMMITTED_TS: {"$type": "timestamp"}},
            {COMMITTED_TS: 1},
            batch_size=RESTAMP_CHUNK,
        )
        for chunk in _chunks(cursor, RESTAMP_CHUNK):
            if self.stopping.is_set():
                return added
            operations = [
                UpdateOne(
                    {"_id": row["_id"], COMMITTED_TS: row[COMMITTED_TS]},
                    {"$set": {COMMITTED_SEQ: position_seq(row[COMMITTED_TS])}},
                )
                for row in chunk
            ]
            added += self.positions.bulk_write(operations, ordered=False).modified_count
        self.positions.update_one({"_id": STATE_ID}, {"$set": {STATE_SEQ: True}}, upsert=True)
        log.info("Sequencer of %r: %d entries given committed_seq", self.name, added)
        return added

    # -- the stream ---------------------------------------------------------

    def stream_pipeline(self) -> list[dict[str, Any]]:
        """Keep of each event only what an entry needs: the server encodes
        and ships a few fields instead of whole documents.

        Measured on the embedded server (its CPU per event, 1000 events read
        in batches, ``fullDocument: updateLookup``): 0.16-0.17 ms with this
        stage against 0.09 ms without it for 3 KB documents, 0.18-0.19 ms
        against 0.20 ms for 30 KB ones, which the sequencer would also have
        to decode whole. Tenders are tens of KB and MongoDB runs the stage
        in its own code, so it stays."""
        keep = {f"fullDocument.{name}": 1 for name in ("_id", *self.document_fields())}
        keep.update({name: 1 for name in ("operationType", "documentKey", "clusterTime", "wallTime", "ns")})
        return [{"$project": keep}]

    def _watch(self, **options: Any) -> CollectionChangeStream[Any]:
        return self.collection.watch(
            self.stream_pipeline(),
            full_document="updateLookup",
            max_await_time_ms=self.max_await_ms,
            batch_size=self.batch_size,
            **options,
        )

    def open(self) -> CollectionChangeStream[Any]:
        """An observer's stream, from the present (a sequencer of positions
        reads its database's stream: :class:`~.dbstream.DatabaseStream`)."""
        if not self.observe:
            raise SequencerError(f"collection {self.name!r}: a sequencer of positions reads its database's stream")
        return self._watch()

    def resume_point(self) -> tuple[Timestamp, Mapping[str, Any] | None]:
        """Where this collection's events are needed from, by the saved
        state, and the resume token of the last event handled there if any:
        the last handled event's time and token, else the saved start
        (backfilled first if it was stopped during its backfill); on a first
        start, just after the present, after a backfill of everything
        before it."""
        state = self.load_state()
        if state:
            self.check_listing(state)
        if isinstance(state.get("checkpoint"), Timestamp):
            # the feed is served from the saved checkpoint at once (ready)
            self.published(state["checkpoint"])
        if state.get("token") and isinstance(state.get("token_ts"), Timestamp):
            return state["token_ts"], state["token"]
        if isinstance(state.get("start"), Timestamp):
            if state.get("checkpoint") is None:  # stopped during its backfill
                self._backfill(state["start"])
            return state["start"], None
        start = successor(cluster_time(self.db))
        self.positions.update_one(
            {"_id": STATE_ID},
            {"$setOnInsert": {"start": start, STATE_LISTING: list(self.listing), STATE_SEQ: True}},
            upsert=True,
        )
        start = self.load_state().get("start", start)  # a sequencer that started first wins
        self._backfill(start)
        return start, None

    def _backfill(self, start: Timestamp) -> None:
        began = time.monotonic()
        count = self.restamp(start)
        self.stats.backfilled += count
        self.publish(None, None, predecessor(start))
        log.info(
            "Sequencer of %r: backfilled %d documents below %s in %.1f s",
            self.name,
            count,
            start,
            time.monotonic() - began,
        )

    def recover(self) -> Timestamp:
        """The resume point has left the oplog: give every document changed
        since a fresh position above every position written so far, turn
        entries of vanished documents into tombstones; returns the new
        start (just after the present when it began)."""
        state = self.load_state()
        start = successor(cluster_time(self.db))
        # Above every position written so far (a batch may have written its
        # entries past the saved token): a re-stamped entry always moves.
        newest = self.positions.find_one(
            {COMMITTED_TS: {"$type": "timestamp"}},
            {COMMITTED_TS: 1},
            sort=[(COMMITTED_TS, DESCENDING)],
        )
        floors = [
            stamp
            for stamp in (state.get("checkpoint"), state.get("token_ts"), (newest or {}).get(COMMITTED_TS))
            if isinstance(stamp, Timestamp)
        ]
        floor = max(floors) if floors else Timestamp(0, 0)
        count = self.restamp(start, floor=floor)
        self.stats.recovered += count
        self.positions.update_one({"_id": STATE_ID}, {"$set": {"start": start}, "$unset": {"token": ""}}, upsert=True)
        self.publish(None, None, predecessor(start))
        log.warning("Sequencer of %r: recovered, %d documents re-stamped above %s", self.name, count, floor)
        return start

    def read_batch(self, stream: ChangeStream[Any]) -> tuple[list[dict[str, Any]], bool]:
        """The events of one batch, and whether the stream was caught up at
        its end (a read came back empty: every event committed by then is in
        the batch).

        A batch is what one reply of the server brings: the reads go on
        while the driver hands out events of the same reply, and the batch
        ends where the stream's resume token moves past the last event (the
        server's post-batch token: its reply ended there), at ``batch_size``
        events or after ``batch_seconds``. Such a batch is not known to be
        caught up (a transaction's events may go on in the next reply), so
        its checkpoint stops short of its last event's time (:meth:`handle`).
        Paced by :meth:`_pace`, a batch costs two short reads (the events
        the server holds, then one that finds nothing) and one bulk write,
        however many events it holds.
        """
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + self.batch_seconds
        while len(events) < self.batch_size:
            event = stream.try_next()
            if event is None:
                return events, True
            events.append(event)
            if stream.resume_token != event["_id"] or time.monotonic() >= deadline:
                break
        return events, False

    def handle(self, stream: ChangeStream[Any], events: list[dict[str, Any]], caught_up: bool) -> None:
        """Write a batch's entries, then its token and checkpoint. An empty
        read after a batch published mid-stream publishes its last event's
        time (the stream is caught up there)."""
        self.measure(events)
        self.stats.following()
        if self.observe:
            self.stats.events += len(events)
            self.publisher.maybe_publish(self.window)
            return
        if not events:
            self.publisher.maybe_publish(self.window, {"checkpoint": self.stats.checkpoint})
            pending = self.pending
            if caught_up and pending is not None:
                self.pending = None
                self.publish(None, None, pending[0])
                self._record_delays(pending[1])
            return
        for event in events:
            if event.get("operationType") in INVALIDATING:
                raise SequencerError(
                    f"collection {self.name!r}: its change stream ended "
                    f"({event['operationType']} event: dropped or renamed)"
                )
        last = events[-1]["clusterTime"]
        checkpoint = last if caught_up else predecessor(last)
        # The last handled event's own token, not the stream's post-batch
        # token: a restart resumes exactly after what was written.
        state = self.state_update(events[-1]["_id"], last, checkpoint)
        stamped = self.write(self.entries_of(events), state)
        self.published(checkpoint)
        stats = self.stats
        stats.batches += 1
        stats.events += len(events)
        stats.stamped += stamped
        covered = [event for event in events if event["clusterTime"] <= checkpoint]
        self._record_delays(covered)
        self.pending = None if caught_up else (last, events[len(covered) :])
        self.publisher.maybe_publish(self.window, {"checkpoint": self.stats.checkpoint})

    def measure(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Record each write's start-to-commit lag (the watermark's bet)."""
        for event in events:
            lag = event_lag(event)
            if lag is None:
                continue
            self.window.add(lag)
            if self.metrics is not None:
                self.metrics.observe_lag(self.name, lag)

    def _record_delays(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Commit-to-checkpoint delays of events a checkpoint now covers."""
        now = time.time()
        for event in events:
            wall = event.get("wallTime")
            if isinstance(wall, datetime):
                if wall.tzinfo is None:
                    wall = wall.replace(tzinfo=timezone.utc)
                self.stats.delays_ms.append(max(0.0, (now - wall.timestamp()) * 1000.0))

    def run(self, stopping: threading.Event, retry_seconds: float = 1.0) -> None:
        """Follow the stream until ``stopping`` is set; transient database
        errors are logged and retried from the saved state."""
        if not self.observe:
            from .dbstream import DatabaseStream  # (it builds on this module)

            DatabaseStream([self]).run(stopping, retry_seconds)
            return
        self.stopping = stopping
        self._follow(stopping, retry_seconds)

    def join_rematerializer(self, timeout: float = 10.0) -> None:
        """Wait for a running re-materialization to end (it stops with
        :attr:`stopping`)."""
        if self.rematerializer is not None:
            self.rematerializer.join(timeout)

    def _pace(self, events: int, empty: int, began: float, stopping: threading.Event) -> None:
        """Wait before the next batch: until ``read_interval`` after this
        one's start when it had events; after ``empty`` reads in a row that
        found nothing, ``empty`` times that, at most ``idle_seconds``.

        A read of a stream waits only ``max_await_ms`` (a millisecond) on
        the server, so a batch is what the server holds when it is read
        plus one read that finds nothing (caught up: the checkpoint covers
        the last event at once). Awaited reads cost more than they save: a
        server wakes every waiting stream on each write to the database
        (the embedded server does, its own positions writes included), so
        a stream waiting 20 ms was read again on about every write and
        each batch ended with a read woken by its own bulk write. Measured
        on the embedded server under the seed's load (80 patches/s asked,
        ``python -m benchmarks orders``), reads every 30 ms took the feed
        delay median from 131 ms to 68 ms, the commit order from 90 % to
        100 % of the watermark order's patches/s and its database CPU per
        patch from 1.44 to 1.37 times the watermark's. A batch has a cost
        of its own whatever it holds (two reads, the state's statement, the
        bulk write's command, the state's oplog entry that every stream of
        the database decodes): reads every 50 ms instead of 30 ms make 40 %
        fewer batches under load for about 10 ms more delay on average
        (on a busy 2-core machine, ABBA runs of the same benchmark: 1.23
        and 1.28 times the watermark's CPU per patch at 30 ms, 1.11 and 1.22
        at 60 ms). A quiet stream backs off to ``idle_seconds``, so three
        idle collections cost about 60 short reads a second.
        """
        if events:
            wait = self.read_interval - (time.monotonic() - began)
        else:
            step = max(self.max_await_ms / 1000.0, self.read_interval)
            wait = min(self.idle_seconds, empty * step) - (time.monotonic() - began)
        if wait > 0:
            stopping.wait(wait)

    def _follow(self, stopping: threading.Event, retry_seconds: float) -> None:
        while not stopping.is_set():
            try:
                stream = self.open()
                with stream:  # (the stubs type ``__enter__`` as the base ChangeStream)
                    empty = 0
                    while not stopping.is_set():
                        began = time.monotonic()
                        events, caught_up = self.read_batch(stream)
                        self.handle(stream, events, caught_up)
                        empty = 0 if events else empty + 1
                        self._pace(len(events), empty, began, stopping)
            except SequencerError:
                raise
            except PyMongoError as error:
                self.stats.failed(error)
                log.warning(
                    "Sequencer of %r: %s: %s; retrying in %g s", self.name, type(error).__name__, error, retry_seconds
                )
                stopping.wait(retry_seconds)


class Sequencer:
    """The sequencers of several collections of one database: one thread
    reads the database's change stream for the sequenced ones
    (:class:`~.dbstream.DatabaseStream`), one thread per observed one.

    :param collections: feed collection → the scope fields its feeds filter on.
    :param observed: collections of watermark feeds to follow observe-only
        (their lag measured, no positions written).
    :param listings: feed collection → the fields its feeds may show
        (:func:`openprocurement_feed.commit_listings`), carried by its entries.
    """

    def __init__(
        self,
        db: Database[Any],
        collections: Mapping[str, Iterable[str]],
        observed: Iterable[str] = (),
        listings: Mapping[str, Iterable[str]] | None = None,
        **options: Any,
    ) -> None:
        listings = listings or {}
        self.followers = [
            CollectionSequencer(db.get_collection(name), scope_fields, listing=listings.get(name, ()), **options)
            for name, scope_fields in collections.items()
        ] + [
            CollectionSequencer(db.get_collection(name), observe=True, **options)
            for name in observed
            if name not in collections
        ]
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def _run(self, follower: CollectionSequencer | DatabaseStream) -> None:
        try:
            follower.run(self.stopping)
        except BaseException as error:  # reported by the owner (errors, logs)
            self.errors.append(error)
            name = follower.name if not isinstance(follower, CollectionSequencer) else repr(follower.name)
            log.error("Sequencer of %s stopped: %s", name, error)

    def start(self) -> Sequencer:
        """Start one daemon thread for the sequenced collections (one
        change stream of their database) and one per observed collection."""
        from .dbstream import DatabaseStream  # (it builds on this module)

        sequenced = [follower for follower in self.followers if not follower.observe]
        runners: list[CollectionSequencer | DatabaseStream] = [DatabaseStream(sequenced)] if sequenced else []
        runners += [follower for follower in self.followers if follower.observe]
        for runner in runners:
            label = "stream" if isinstance(runner, DatabaseStream) else runner.name
            thread = threading.Thread(target=self._run, args=(runner,), name=f"sequencer-{label}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current batches (their token and checkpoint saved) and end."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout)

    @property
    def alive(self) -> bool:
        """True while every follower thread runs."""
        return bool(self.threads) and all(thread.is_alive() for thread in self.threads)

    def wait_ready(self, timeout: float = 30.0, poll: Callable[[float], Any] = time.sleep) -> bool:
        """Wait until every sequenced collection has a checkpoint; False on time-out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(follower.stats.checkpoint is not None for follower in self.followers if not follower.observe):
                return True
            if self.errors:
                return False
            poll(0.02)
        return False


def _hashable(value: Any) -> Any:
    """A dict key for a document ``_id`` of any BSON type."""
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


def _chunks(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
