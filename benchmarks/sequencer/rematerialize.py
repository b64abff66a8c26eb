"""Changing a commit-ordered feed's fields: the sequencer's
re-materialization of the entries, wall time and the database's CPU."""

from __future__ import annotations

import time

from pymongo import MongoClient

from openprocurement_feed.commit.sequencer import CollectionSequencer, Sequencer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.store.database import FeedStore

from ..common import seed_tenders, status
from .workload import COLLECTION


def measure_rematerialize(database: EmbeddedServer, docs: int) -> str:
    """A field added to a commit-ordered feed of ``docs`` tenders: the
    sequencer's re-materialization of the entries (wall time and the
    database's CPU)."""
    db_name = "bench_sequencer_listing"
    client: MongoClient = MongoClient(database.uri, tz_aware=True)
    store = FeedStore(client, db_name)
    try:
        status(f"sequencer: seeding {docs} tenders for the listing change")
        seed_tenders(store.collection(COLLECTION), docs)
        before = ("dateModified", "public_modified")
        sequencer = Sequencer(store.db, {COLLECTION: ()}, listings={COLLECTION: before}).start()
        if not sequencer.wait_ready(timeout=120):
            raise RuntimeError(f"the sequencer did not backfill: {sequencer.errors}")
        sequencer.stop()
        follower = CollectionSequencer(
            store.db[COLLECTION], listing=(*before, "status", "title"), lag_window_seconds=60.0
        )
        cpu = database.cpu_seconds()
        started = time.perf_counter()
        follower.check_listing(follower.load_state())  # as a sequencer's start with the new feeds
        assert follower.rematerializer is not None
        follower.rematerializer.join()
        wall = time.perf_counter() - started
        done = "listing_target" not in follower.load_state()
        used = (database.cpu_seconds() or 0.0) - (cpu or 0.0)
        count = follower.stats.rematerialized
        return (
            f"Changing a feed's fields: 2 fields added to a commit-ordered feed of {docs} tenders "
            f"({count} public entries): re-materialized in {wall:.1f} s, {used:.1f} s of the "
            f"database's CPU ({used * 1000 / max(count, 1):.2f} ms per entry){'' if done else ' (superseded)'}."
        )
    finally:
        client.drop_database(db_name)
        store.close()
