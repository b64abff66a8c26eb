"""One change stream per database: the sequenced collections share it, each
keeps its own entries, state and checkpoint, a quiet one's point is kept
fresh, and a restart resumes each collection exactly after its own token."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from bson.timestamp import Timestamp
from conftest import wait_sequenced
from pymongo import MongoClient, monitoring

from openprocurement_feed.commit import dbstream
from openprocurement_feed.commit.dbstream import DatabaseStream
from openprocurement_feed.commit.sequencer import CollectionSequencer, Sequencer
from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.orders import STATE_ID, positions_name


class StreamOpenings(monitoring.CommandListener):
    """Counts the change streams opened (``aggregate`` with ``$changeStream``)."""

    def __init__(self) -> None:
        self.streams: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "aggregate":
            stage = (event.command.get("pipeline") or [{}])[0]
            if "$changeStream" in stage:
                self.streams.append({"on": event.command["aggregate"], **stage["$changeStream"]})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
def watched(mongodb_uri: str, db_name: str) -> Iterator[tuple[FeedStore, StreamOpenings]]:
    listener = StreamOpenings()
    client: MongoClient = MongoClient(mongodb_uri, event_listeners=[listener])
    yield FeedStore(client, db_name, watermark_seconds=0.2), listener
    client.close()


def put(store: FeedStore, name: str, count: int) -> None:
    for number in range(count):
        store.save_data(store.collection(name), {"_id": f"{name}-{number}", "status": "active"}, insert=True)


def test_three_collections_are_sequenced_from_one_stream(watched: tuple[FeedStore, StreamOpenings]) -> None:
    store, listener = watched
    for name in ("tenders", "plans", "contracts"):
        put(store, name, 3)
    sequencer = Sequencer(store.db, {"tenders": (), "plans": (), "contracts": ()}).start()
    try:
        assert sequencer.wait_ready(timeout=30)
        assert len(sequencer.threads) == 1, "one thread for the three collections"
        for name in ("tenders", "plans"):
            collection = store.collection(name)
            store.save_data(collection, dict(collection.find_one({"_id": f"{name}-0"}), title="changed"))
        for name in ("tenders", "plans", "contracts"):
            wait_sequenced(store.db, name)
    finally:
        sequencer.stop()
    streams = [stream for stream in listener.streams if "startAtOperationTime" in stream]
    assert len(streams) == 1 and streams[0]["on"] == 1, f"one database stream, not one per collection: {streams}"
    entries = store.db[positions_name("plans")].find_one({"_id": "plans-0"})
    assert entries is not None and entries["rev"].startswith("2-")
    assert store.db[positions_name("contracts")].count_documents({"_id": {"$ne": STATE_ID}}) == 3


def test_a_quiet_collection_keeps_its_point_and_checkpoint_fresh(
    watched: tuple[FeedStore, StreamOpenings], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = watched
    monkeypatch.setattr(dbstream, "QUIET_STATE_SECONDS", 0.3)
    put(store, "tenders", 2)
    sequencer = Sequencer(store.db, {"tenders": (), "plans": ()}).start()
    try:
        assert sequencer.wait_ready(timeout=30)
        quiet = store.db[positions_name("plans")]
        before = quiet.find_one({"_id": STATE_ID})
        collection = store.collection("tenders")
        deadline = time.monotonic() + 20
        while True:  # the busy collection moves the stream on
            store.save_data(collection, dict(collection.find_one({"_id": "tenders-0"})))
            time.sleep(0.1)
            state = quiet.find_one({"_id": STATE_ID})
            if state.get("token_ts") and state["checkpoint"] > before["checkpoint"]:
                break
            assert time.monotonic() < deadline, "the quiet collection's state moved on within 20 s"
    finally:
        sequencer.stop()
    newest = store.db[positions_name("tenders")].find_one({"_id": STATE_ID})
    assert state["token_ts"] <= newest["token_ts"] and state["checkpoint"] == state["token_ts"]
    assert quiet.count_documents({"_id": {"$ne": STATE_ID}}) == 0, "no entry without a change"


def event(name: str, stamp: Timestamp, token: str) -> dict[str, Any]:
    return {"_id": {"_data": token}, "ns": {"db": "d", "coll": name}, "clusterTime": stamp}


def test_a_restart_skips_exactly_what_each_collection_handled(store: Any) -> None:
    """Events at a collection's point up to its saved token were handled
    before the restart; those after it, and every later one, are not."""
    followers = [CollectionSequencer(store.collection(name)) for name in ("tenders", "plans")]
    stream = DatabaseStream(followers)
    point = Timestamp(100, 5)
    stream.floors = {"tenders": point, "plans": Timestamp(100, 1)}
    stream.tokens = {"tenders": {"_data": "t2"}}
    stream.held = {"tenders": []}
    shares = stream.split(
        [
            event("plans", Timestamp(100, 0), "p0"),  # before plans' point
            event("plans", Timestamp(100, 1), "p1"),
            event("tenders", Timestamp(100, 4), "t0"),  # before tenders' point
            event("tenders", point, "t1"),  # at the point, before the token
            event("tenders", point, "t2"),  # the token
            event("tenders", point, "t3"),  # after it, same transaction
            event("other", Timestamp(100, 6), "o"),
            {"_id": {"_data": "x"}, "ns": {"db": "d"}, "clusterTime": Timestamp(101, 0), "operationType": "invalidate"},
        ]
    )
    assert [e["_id"]["_data"] for e in shares["tenders"]] == ["t3", "x"]
    assert [e["_id"]["_data"] for e in shares["plans"]] == ["p1", "x"]


def test_events_held_for_a_token_that_never_comes_are_handled(store: Any) -> None:
    """Should the token not show up (another stream's encoding), what was
    held at the point is handled again once the stream moves past it or is
    caught up: a no-op for entries, never a loss."""
    stream = DatabaseStream([CollectionSequencer(store.collection("tenders"))])
    point = Timestamp(100, 5)
    for moves_on in (True, False):
        stream.floors = {"tenders": point}
        stream.tokens = {"tenders": {"_data": "gone"}}
        stream.held = {"tenders": []}
        first = stream.split([event("tenders", point, "a"), event("tenders", point, "b")])
        assert first["tenders"] == [] and len(stream.held["tenders"]) == 2
        later = [event("tenders", Timestamp(100, 6), "c")] if moves_on else []
        shares = stream.split(later, caught_up=not moves_on)
        expected = ["a", "b", "c"] if moves_on else ["a", "b"]
        assert [e["_id"]["_data"] for e in shares["tenders"]] == expected
        assert "tenders" not in stream.tokens


def test_a_database_stream_needs_sequencers_of_one_database(store: Any, mongodb_uri: str) -> None:
    with pytest.raises(ValueError, match="at least one"):
        DatabaseStream([])
    with pytest.raises(ValueError, match="observe-only"):
        DatabaseStream([CollectionSequencer(store.collection("tenders"), observe=True)])
    other = MongoClient(mongodb_uri)["another_db"]["tenders"]
    with pytest.raises(ValueError, match="one database"):
        DatabaseStream([CollectionSequencer(store.collection("tenders")), CollectionSequencer(other)])
