"""One change stream per database for every sequenced collection in it (SPEC D).

Each collection's :class:`~.collection.CollectionSequencer` keeps its own
entries, state and checkpoint exactly as before; :class:`DatabaseStream`
reads **one** change stream of their database for all of them, filtered on
their names, and hands each collection its share of every batch.

Why one stream: a read of a change stream costs the server whatever it
finds. On the embedded server a read opens the oplog afresh and decodes every
entry written since, whichever collection it belongs to, so each stream of a
database decoded each change of every collection, and a quiet collection's
stream cost as much as a busy one's (docs/embedded.rst, "One change stream
per database", has the figures). One stream per database makes the
sequencer's reads the same whatever the number of collections it follows.

Where it starts: each collection's :meth:`~.collection.CollectionSequencer.resume_point`
(the time and resume token of the last event it handled, or its start, after
a backfill on a first start); the stream opens at the oldest of them
(``startAtOperationTime``), and a collection's events before its own point
are dropped, as are those at its point up to its saved token (they were
handled before the restart). Events at that time are held until the token
shows up; should it not (the stream caught up, or a later time reached),
they are handled again, which is a no-op: entries move forward only. When
the resume point has left the oplog every collection recovers
(:meth:`~.collection.CollectionSequencer.recover`) and the stream goes on
from the present.

A collection without events keeps its point fresh: once the stream is caught
up and the collection's state has not moved for :data:`QUIET_STATE_SECONDS`,
its saved time and checkpoint advance to the batch's last event (the stream
holds every change up to there, none of them its own), so a restart does not
reach back into the oplog for it and its checkpoint does not age.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from bson.timestamp import Timestamp
from pymongo.change_stream import ChangeStream, DatabaseChangeStream
from pymongo.database import Database
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

from .entries import SequencerStats
from .errors import HISTORY_LOST_CODES, SequencerError
from .history import HistoryGuard, HistoryLost, resumable

log = logging.getLogger("openprocurement_feed.dbstream")  # its name from before the package had subpackages

#: Events that concern every collection of the database (they carry no
#: collection name).
DATABASE_EVENTS = ("dropDatabase", "invalidate")
#: Seconds a sequenced collection's state may stay unmoved while the stream
#: moves on before its saved time and checkpoint are advanced (one small
#: write per quiet collection this often).
QUIET_STATE_SECONDS = 5.0


class StreamFollower(Protocol):
    """What the stream needs of a collection's follower
    (:class:`~.collection.CollectionSequencer` is one)."""

    name: str
    db: Database[Any]
    observe: bool
    max_await_ms: int
    batch_size: int
    stats: SequencerStats
    stopping: threading.Event
    pending: tuple[Timestamp, list[dict[str, Any]]] | None

    def stream_pipeline(self) -> list[dict[str, Any]]: ...

    def resume_point(self) -> tuple[Timestamp, Mapping[str, Any] | None]: ...

    def recover(self) -> Timestamp: ...

    def start_anchor(self) -> Mapping[str, Any] | None: ...

    def history_lost(self) -> None: ...

    def read_batch(self, stream: ChangeStream[Any]) -> tuple[list[dict[str, Any]], bool]: ...

    def handle(self, stream: ChangeStream[Any], events: list[dict[str, Any]], caught_up: bool) -> None: ...

    def publish(
        self, token: Mapping[str, Any] | None, token_ts: Timestamp | None, checkpoint: Timestamp | None
    ) -> None: ...

    def join_rematerializer(self, timeout: float = 10.0) -> None: ...

    def _pace(self, events: int, empty: int, began: float, stopping: threading.Event) -> None: ...


class DatabaseStream:
    """Reads one change stream of a database for the sequencers of several
    of its collections (one thread: :meth:`run`).

    :param followers: the collections' sequencers, all of one database and
        none observe-only; the first one's batch and pacing options are used.
    """

    def __init__(self, followers: Sequence[StreamFollower]) -> None:
        if not followers:
            raise ValueError("a database stream needs at least one collection")
        first = followers[0]
        if any(follower.observe for follower in followers):
            raise ValueError("observe-only followers read their own streams")
        if any(follower.db.name != first.db.name for follower in followers):
            raise ValueError("a database stream follows the collections of one database")
        self.followers: dict[str, StreamFollower] = {follower.name: follower for follower in followers}
        self.db = first.db.with_options(read_concern=ReadConcern("majority"))
        self.options = first
        #: per collection: the oldest event time it needs
        self.floors: dict[str, Timestamp] = {}
        #: per collection: when its state last moved (monotonic seconds)
        self.moved: dict[str, float] = {}
        #: per collection resuming after a token: the token, and the events
        #: at its point seen before it
        self.tokens: dict[str, Mapping[str, Any]] = {}
        self.held: dict[str, list[dict[str, Any]]] = {}
        #: tells when the stream skipped changes pruned from the oplog
        self.guard = HistoryGuard(self.db, f"Sequencer of {self.name}")
        #: the stream skipped history: every collection recovers at the next open
        self.lost = False

    @property
    def name(self) -> str:
        """For log lines: the collections followed."""
        return ", ".join(repr(name) for name in self.followers)

    def pipeline(self) -> list[dict[str, Any]]:
        """The followed collections' events (and the database's own), with
        only what an entry needs of each (see
        :meth:`~.collection.CollectionSequencer.stream_pipeline`)."""
        names = list(self.followers)
        keep: dict[str, int] = {}
        for follower in self.followers.values():
            keep.update(follower.stream_pipeline()[0]["$project"])
        return [
            {"$match": {"$or": [{"ns.coll": {"$in": names}}, {"operationType": {"$in": list(DATABASE_EVENTS)}}]}},
            {"$project": keep},
        ]

    def _watch(self) -> DatabaseChangeStream[Any]:
        options = self.options
        return self.db.watch(
            self.pipeline(),
            full_document="updateLookup",
            max_await_time_ms=options.max_await_ms,
            batch_size=options.batch_size,
            start_at_operation_time=min(self.floors.values()),
        )

    def open(self) -> DatabaseChangeStream[Any]:
        """Every collection's resume point (backfills included), then the
        stream at the oldest; every collection recovers when that point has
        left the oplog, or when the last stream skipped history
        (:attr:`lost`). The stream is anchored (:class:`~.history.HistoryGuard`)
        at the oldest point's token, so its first read is checked too."""
        self.tokens.clear()
        self.held.clear()
        if self.lost:
            return self._recover_all()
        anchors: dict[str, Mapping[str, Any] | None] = {}
        for name, follower in self.followers.items():
            self.floors[name], token = follower.resume_point()
            if token is not None and not resumable(self.db, token):
                log.warning(
                    "Sequencer of %r: the resume point has left the oplog; re-stamping the changed documents", name
                )
                self.floors[name], token = follower.recover(), None
            self.moved[name] = time.monotonic()
            anchors[name] = token if token is not None else follower.start_anchor()
            if token is not None:
                self.tokens[name] = token
                self.held[name] = []
        try:
            stream = self._watch()
        except OperationFailure as error:
            if error.code not in HISTORY_LOST_CODES:
                raise
            log.warning(
                "Sequencer of %s: the resume point has left the oplog (%s); re-stamping the changed documents",
                self.name,
                (error.details or {}).get("codeName"),
            )
            return self._recover_all()
        oldest = min(self.floors, key=lambda name: self.floors[name])
        self.guard.anchor(anchors[oldest])
        return stream

    def _recover_all(self) -> DatabaseChangeStream[Any]:
        """Every collection recovers (:meth:`~.recovery.CollectionRecovery.recover`),
        then the stream opens at the oldest new start, anchored at its token."""
        self.tokens.clear()
        self.held.clear()
        for name, follower in self.followers.items():
            self.floors[name] = follower.recover()
            self.moved[name] = time.monotonic()
        self.lost = False
        stream = self._watch()
        oldest = min(self.floors, key=lambda name: self.floors[name])
        self.guard.anchor(self.followers[oldest].start_anchor())
        return stream

    def split(self, events: Sequence[dict[str, Any]], caught_up: bool = False) -> dict[str, list[dict[str, Any]]]:
        """Each collection's events of a batch: those before its point left
        out, those at its point up to its saved token too; an event of the
        whole database goes to every collection."""
        shares: dict[str, list[dict[str, Any]]] = {name: [] for name in self.followers}
        for event in events:
            name = (event.get("ns") or {}).get("coll")
            targets = [name] if name in shares else list(shares) if name is None else []
            for target in targets:
                stamp = event["clusterTime"]
                if stamp < self.floors[target]:
                    continue
                if target in self.tokens:
                    if stamp == self.floors[target]:
                        if event["_id"] == self.tokens[target]:
                            del self.tokens[target]  # handled before: so was all it held
                            self.held.pop(target)
                        else:
                            self.held[target].append(event)
                        continue
                    self._release(target, shares)  # a later time: the token never came
                shares[target].append(event)
        if caught_up:
            for target in list(self.tokens):
                self._release(target, shares)
        return shares

    def _release(self, name: str, shares: dict[str, list[dict[str, Any]]]) -> None:
        """Handle again what was held at ``name``'s point (no token met)."""
        del self.tokens[name]
        shares[name].extend(self.held.pop(name))

    def handle(self, stream: DatabaseChangeStream[Any], events: list[dict[str, Any]], caught_up: bool) -> None:
        """Hand each collection its share (possibly none: a pending
        checkpoint is published once the stream is caught up), then advance
        the quiet collections."""
        now = time.monotonic()
        for name, share in self.split(events, caught_up).items():
            self.followers[name].handle(stream, share, caught_up)
            if share:
                self.moved[name] = now
        if caught_up and events:
            self._advance_quiet(events[-1], now)

    def _advance_quiet(self, last: Mapping[str, Any], now: float) -> None:
        """Move the saved time and checkpoint of every collection quiet for
        :data:`QUIET_STATE_SECONDS` to the batch's last event."""
        stamp: Timestamp = last["clusterTime"]
        for name, follower in self.followers.items():
            if now - self.moved[name] < QUIET_STATE_SECONDS or follower.pending is not None or name in self.tokens:
                continue
            if follower.stats.checkpoint is not None and follower.stats.checkpoint >= stamp:
                continue
            follower.publish(last["_id"], stamp, stamp)
            self.floors[name] = max(self.floors[name], stamp)
            self.moved[name] = now

    def run(self, stopping: threading.Event, retry_seconds: float = 1.0) -> None:
        """Follow the stream until ``stopping`` is set; transient database
        errors are logged and retried from the saved states."""
        for follower in self.followers.values():
            follower.stopping = stopping
        try:
            self._follow(stopping, retry_seconds)
        finally:
            for follower in self.followers.values():
                follower.join_rematerializer()

    def _follow(self, stopping: threading.Event, retry_seconds: float) -> None:
        options = self.options
        while not stopping.is_set():
            try:
                stream = self.open()
                with stream:
                    empty = 0
                    while not stopping.is_set():
                        began = time.monotonic()
                        for follower in self.followers.values():
                            follower.stats.reading()
                        events, caught_up = options.read_batch(stream)
                        for follower in self.followers.values():
                            follower.stats.read()
                        if events or any(follower.pending is not None for follower in self.followers.values()):
                            self.guard.check(stream)  # before anything this read covers is published
                        else:
                            self.guard.check_idle(stream)
                        self.handle(stream, events, caught_up)
                        empty = 0 if events or not caught_up else empty + 1
                        options._pace(len(events), empty, began, stopping)
            except SequencerError:
                raise
            except HistoryLost as error:
                self.lost = True
                for follower in self.followers.values():
                    follower.stats.failed(error)
                    follower.history_lost()
                log.warning("%s; every collection recovers", error)
            except PyMongoError as error:
                for follower in self.followers.values():
                    follower.stats.failed(error)
                log.warning(
                    "Sequencer of %s: %s: %s; retrying in %g s", self.name, type(error).__name__, error, retry_seconds
                )
                stopping.wait(retry_seconds)
