"""Backfill and recovery: where a collection's events are needed from, and
fresh positions for every document that has none or a stale one (SPEC D)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from bson.timestamp import Timestamp
from pymongo import DESCENDING

from ..store.listing import STATE_LISTING, STATE_SEQ
from ..store.orders import COMMITTED_TS, HISTORY_LOST, PUBLIC_MODIFIED, STATE_ID
from ..store.positions import checkpoint_of
from ..store.scans import documents_in_windows
from ..store.windows import newest_row
from .history import present_token
from .rematerialize import CollectionRematerializer
from .stamps import RESTAMP_CHUNK, PositionCounter, chunks, cluster_time, hashable, predecessor, successor

log = logging.getLogger("openprocurement_feed.sequencer")  # the sequencer's logger, whichever module logs

#: The state's field: the resume token taken when its ``start`` was chosen.
START_TOKEN = "start_token"


class CollectionRecovery(CollectionRematerializer):
    """A collection's resume point, its backfill on a first start and its
    recovery when the resume point has left the oplog."""

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
        # in windows of the stamp: the server never holds the whole
        # collection's documents sorted for one cursor
        cursor = documents_in_windows(self.collection, {"is_public": True}, projection, RESTAMP_CHUNK, session)
        written = 0
        for chunk in chunks(cursor, RESTAMP_CHUNK):
            known = {
                hashable(row["_id"]): row.get("rev")
                for row in self.positions.find({"_id": {"$in": [doc["_id"] for doc in chunk]}}, {"rev": 1})
            }
            entries = []
            for doc in chunk:
                key = hashable(doc["_id"])
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
        for chunk in chunks(cursor, RESTAMP_CHUNK):
            ids = [row["_id"] for row in chunk]
            docs = {
                hashable(doc["_id"]): doc
                for doc in self.collection.find(
                    {"_id": {"$in": ids}}, {"is_public": 1, "_rev": 1, "is_test": 1}, session=session
                )
            }
            entries = []
            for doc_id in ids:
                doc = docs.get(hashable(doc_id))
                if doc is None:
                    entries.append(self.tombstone(doc_id, counter.next(0)))
                elif doc.get("is_public") is not True:
                    entries.append(self.entry(doc, counter.next(0)))
            written += self.write(entries)
        return written

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
        checkpoint = checkpoint_of(state)
        if checkpoint is not None:
            # the feed is served from the saved checkpoint at once (ready)
            self.published(checkpoint)
        if state.get("token") and isinstance(state.get("token_ts"), Timestamp):
            return state["token_ts"], state["token"]
        if isinstance(state.get("start"), Timestamp):
            if state.get("checkpoint") is None:  # stopped during its backfill
                self._backfill(state["start"])
            return state["start"], None
        anchor = present_token(self.db)  # taken first: the stream's first read is checked from here
        start = successor(cluster_time(self.db))
        self.positions.update_one(
            {"_id": STATE_ID},
            {
                "$setOnInsert": {
                    "start": start,
                    START_TOKEN: anchor,
                    STATE_LISTING: list(self.listing),
                    STATE_SEQ: True,
                }
            },
            upsert=True,
        )
        start = self.load_state().get("start", start)  # a sequencer that started first wins
        self._backfill(start)
        return start, None

    def _start_above(self, floor: Timestamp, timeout: float = 30.0) -> tuple[Mapping[str, Any] | None, Timestamp]:
        """A token at the present, then a start just after it, in a later
        second of the database's clock than ``floor``: every position
        between the two seconds is free for the re-stamped documents
        (:class:`~.stamps.PositionCounter` counts within a second). Within
        ``floor``'s own second the start waits for the clock's next second,
        writing the state to move the database's time where nothing else
        writes."""
        deadline = time.monotonic() + timeout
        while True:
            anchor = present_token(self.db)  # taken first: the stream's first read is checked from here
            start = successor(cluster_time(self.db))
            if start.time > floor.time or time.monotonic() > deadline:
                return anchor, start
            self.positions.update_one({"_id": STATE_ID}, [{"$set": {"recovering": "$$NOW"}}], upsert=True)
            time.sleep(0.1)

    def start_anchor(self) -> Mapping[str, Any] | None:
        """The resume token taken when the saved start was chosen (a stream
        opened at that start is checked from it), if saved."""
        token = self.load_state().get(START_TOKEN)
        return token if isinstance(token, Mapping) else None

    def history_lost(self) -> None:
        """Record in the state, for every reader of the health view, that
        this collection's stream skipped history: the feed may miss changes
        until :meth:`recover` has run (it clears the mark)."""
        self.positions.update_one({"_id": STATE_ID}, [{"$set": {HISTORY_LOST: "$$NOW"}}], upsert=True)

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

    def newest_position(self) -> Timestamp | None:
        """The highest position of any entry (public or not), read in windows
        of the position down from the present on the positions' index: no
        sort of every entry on a server that gathers them all first."""
        sort = [(COMMITTED_TS, DESCENDING), ("_id", DESCENDING)]

        def run(query: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
            return list(self.positions.find(query, {COMMITTED_TS: 1}, sort=sort, limit=limit))

        found = []
        for public in (True, False):
            row = newest_row(run, {"is_public": public}, COMMITTED_TS, Timestamp(0, 0))
            if row is not None and isinstance(row.get(COMMITTED_TS), Timestamp):
                found.append(row[COMMITTED_TS])
        return max(found, default=None)

    def recover(self) -> Timestamp:
        """The resume point has left the oplog: give every document changed
        since a fresh position above every position written so far, turn
        entries of vanished documents into tombstones; returns the new
        start (just after the present when it began)."""
        state = self.load_state()
        # Above every position written so far (a batch may have written its
        # entries past the saved token): a re-stamped entry always moves.
        newest = self.newest_position()
        floors = [
            stamp for stamp in (state.get("checkpoint"), state.get("token_ts"), newest) if isinstance(stamp, Timestamp)
        ]
        floor = max(floors) if floors else Timestamp(0, 0)
        anchor, start = self._start_above(floor)
        count = self.restamp(start, floor=floor)
        self.stats.recovered += count
        self.positions.update_one(
            {"_id": STATE_ID},
            {
                "$set": {"start": start, START_TOKEN: anchor},
                "$unset": {"token": "", HISTORY_LOST: "", "recovering": ""},
            },
            upsert=True,
        )
        self.publish(None, None, predecessor(start))
        log.warning("Sequencer of %r: recovered, %d documents re-stamped above %s", self.name, count, floor)
        return start
