"""Re-materializing a collection's entries when its feeds' listing changes
(SPEC D.13), and giving ``committed_seq`` to entries of an earlier release:
background work of a collection's sequencer that moves no position."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import PyMongoError

from ..store.listing import STATE_LISTING, STATE_SEQ, STATE_TARGET, covers, take
from ..store.orders import COMMITTED_SEQ, COMMITTED_TS, STATE_ID, position_seq
from ..store.scans import documents_in_windows
from .entries import CollectionEntries
from .stamps import RESTAMP_CHUNK, chunks

log = logging.getLogger("openprocurement_feed.sequencer")  # the sequencer's logger, whichever module logs


class CollectionRematerializer(CollectionEntries):
    """A collection's entries brought to this sequencer's listing, in a
    background thread."""

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
        # in windows of the stamp: one read of every document makes the
        # embedded server gather the whole collection at once
        cursor = documents_in_windows(self.collection, {"is_public": True}, projection, RESTAMP_CHUNK)
        for chunk in chunks(cursor, RESTAMP_CHUNK):
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
        for chunk in chunks(cursor, RESTAMP_CHUNK):
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
