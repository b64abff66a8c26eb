"""A collection's entries and its checkpoint: the follower's state in the
positions collection (SPEC D), written forward only, one bulk write a batch."""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bson.timestamp import Timestamp
from pymongo import UpdateOne
from pymongo.collection import Collection
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from ..store.listing import normalize, take
from ..store.orders import COMMITTED_SEQ, COMMITTED_TS, PUBLIC_MODIFIED, STATE_ID, position_seq, positions_name
from ..store.positions import read_checkpoint
from .lag import LagWindow, Publisher
from .stamps import hashable

log = logging.getLogger("openprocurement_feed.sequencer")  # the sequencer's logger, whichever module logs


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
    #: since when (wall-clock seconds) the current read of the change stream
    #: has waited, None between two reads: the driver resumes a stream by
    #: itself after a resumable error and, after an election's error, waits
    #: in server selection, so a read can hang for seconds with no error
    #: reaching the follower (the health view shows such a read as a failure)
    reading_since: float | None = None
    #: when (``time.monotonic()``) the last read of the stream returned
    read_returned: float | None = None
    #: an observer that could not resume its stream after an error (its
    #: point had left the oplog): from when to when (wall-clock seconds)
    #: the writes whose lag it could not take committed
    unmeasured: tuple[float, float] | None = None

    def failed(self, error: BaseException) -> None:
        """Record a database error that stopped the stream (it is retried)."""
        self.restarts += 1
        self.reading_since = None
        if self.failing_since is None:
            self.failing_since = time.time()
        self.last_error = f"{type(error).__name__}: {error}".splitlines()[0][:300]

    def reading(self) -> None:
        """A read of the stream begins."""
        self.reading_since = time.time()

    def read(self) -> None:
        """The read of the stream returned."""
        self.reading_since = None
        self.read_returned = time.monotonic()

    def history_lost(self) -> None:
        """Record that the stream could not resume where it stopped: what
        committed since the first error of this failure (or now) is unseen."""
        now = time.time()
        self.unmeasured = (self.failing_since or now, now)

    def failure(self, stuck_after: float, now: float | None = None) -> tuple[float, str] | None:
        """Since when (wall-clock seconds) and why the follower has not
        followed: a database error it retries, or a read of its stream that
        has not returned for ``stuck_after`` seconds; None while it follows."""
        if self.failing_since is not None:
            return self.failing_since, self.last_error
        since = self.reading_since
        now = time.time() if now is None else now
        if since is not None and now - since >= stuck_after:
            return (
                since,
                f"a read of its change stream has not returned for {now - since:.1f} s (the driver retries it)",
            )
        return None

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


class CollectionEntries:
    """A collection's follower's configuration, its entries and its state
    (token and checkpoint); :class:`~.collection.CollectionSequencer` builds
    on it, with the same parameters.

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
        #: seconds a batch that found no event reads on while the stream's
        #: point moves (None: not known yet; :func:`.history.skip_read_seconds`)
        self.skip_seconds: float | None = None
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
        #: an observer's point: the stream's token after the last batch it took
        self.observed_token: Mapping[str, Any] | None = None
        #: an observer's exact point: the token of the last event it took
        self.event_token: Mapping[str, Any] | None = None
        #: the database's time when an observer first opened its stream
        self.observed_since: Timestamp | None = None

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
                latest[hashable(key)] = self.tombstone(key, position)
            elif operation in ("insert", "replace", "update"):
                doc = event.get("fullDocument")
                if doc is None:
                    continue  # gone since: its delete event follows
                latest[hashable(key)] = self.entry(doc, position)
        return list(latest.values())

    # -- state --------------------------------------------------------------

    def load_state(self) -> dict[str, Any]:
        """This collection's saved token, checkpoint and start (may be empty)."""
        return read_checkpoint(self.positions, fields=None)[1]

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
