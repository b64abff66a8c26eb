"""The reconciliation aggregates' keeper on its own (no app, no stream):
fed change events as its follower hands them over, against the real
server. Its buckets must always add up to its records, whoever writes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo import MongoClient

from openprocurement_feed.commit import aggregates
from openprocurement_feed.commit.aggregates import AggregateKeeper
from openprocurement_feed.reconcile.fingerprint import limbs
from openprocurement_feed.store.buckets import LEVELS, STATE_ID, reconcile_name, shift

pytestmark = [pytest.mark.timeout(120)]

START = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)


@pytest.fixture
def tenders(mongo_client: MongoClient[Any], db_name: str) -> Iterator[Any]:
    yield mongo_client[db_name]["tenders"]


def document(key: str, seconds: float) -> dict[str, Any]:
    moment = START + timedelta(seconds=seconds)
    return {
        "_id": key,
        "is_public": True,
        "is_test": False,
        "dateModified": moment.isoformat(),
        "public_modified": moment.timestamp(),
    }


def event(doc: dict[str, Any]) -> dict[str, Any]:
    """A change event as the follower's stream gives it."""
    return {
        "operationType": "replace",
        "documentKey": {"_id": doc["_id"]},
        "fullDocument": doc,
        "wallTime": datetime.fromtimestamp(doc["public_modified"], timezone.utc),
    }


def assert_buckets_add_up(tenders: Any) -> None:
    """Every bucket holds the count and limb sums of its records, and no
    bucket is missing."""
    records = tenders.database[reconcile_name(tenders.name)]
    expected: dict[tuple[str, int, int], list[int]] = {}
    for record in records.find({"lv": 0, "w.0": {"$exists": True}}):
        values = [1, *limbs(bytes.fromhex(record["r"]))]
        for view in record["w"]:
            for level in range(1, LEVELS + 1):
                total = expected.setdefault((view, level, record["b"] >> shift(level)), [0] * 9)
                for i, value in enumerate(values):
                    total[i] += value
    found = {
        (bucket["w"], bucket["lv"], bucket["b"]): [bucket["n"], *(bucket[f"l{i}"] for i in range(8))]
        for bucket in records.find({"lv": {"$gt": 0}, "n": {"$ne": 0}})
    }
    assert found == expected


def test_a_keeper_whose_lease_was_taken_over_writes_nothing_more(tenders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aggregates, "APPLY_SECONDS", 0.0)  # a write per batch
    keys = [uuid.uuid4().hex for _ in range(6)]
    docs = [document(key, number) for number, key in enumerate(keys)]
    tenders.insert_many(docs)
    first = AggregateKeeper(tenders)
    first.handle([], caught_up=True)  # takes the lease, builds from the documents
    first.handle([event(document(keys[0], 100))], caught_up=True)
    assert first.stats.errors == 0 and first.built
    # its lease lapses (a process stopped past it); a second keeper takes over
    records = tenders.database[reconcile_name(tenders.name)]
    records.update_one({"_id": STATE_ID}, {"$set": {"lease": 0}})
    second = AggregateKeeper(tenders)
    second.handle([event(document(keys[1], 200))], caught_up=True)
    assert second.stats.errors == 0
    assert records.find_one({"_id": keys[1]})["b"] == int((START + timedelta(seconds=200)).timestamp() * 1e6)
    # the first resumes, still believing its lease: its write finds another owner
    first.handle([event(document(keys[1], 150)), event(document(keys[2], 150))], caught_up=True)
    assert first.stats.errors == 1 and "lease" in first.stats.last_error
    assert not first.cache, "it forgot what it kept in memory"
    assert records.find_one({"_id": keys[1]})["b"] == int((START + timedelta(seconds=200)).timestamp() * 1e6)
    assert records.find_one({"_id": keys[2]})["b"] == int((START + timedelta(seconds=2)).timestamp() * 1e6)
    assert_buckets_add_up(tenders)


def test_hot_objects_are_not_read_again_and_emptied_buckets_go(tenders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aggregates, "APPLY_SECONDS", 0.0)  # a write per batch
    keys = [uuid.uuid4().hex for _ in range(20)]
    keeper = AggregateKeeper(tenders)
    keeper.handle([event(document(key, number)) for number, key in enumerate(keys)], caught_up=False)
    keeper.handle([], caught_up=True)
    assert keeper.built
    reads = keeper.stats.reads
    for round_ in range(1, 4):
        batch = [event(document(key, 1000 * round_ + number / 10)) for number, key in enumerate(keys)]
        keeper.handle(batch, caught_up=False)
        assert_buckets_add_up(tenders)
    assert keeper.stats.reads == reads, "the old records came from memory"
    records = tenders.database[reconcile_name(tenders.name)]
    assert records.count_documents({"lv": {"$gt": 0}, "n": 0}) > 0  # emptied, not swept yet
    keeper.handle([], caught_up=True)  # a quiet batch sweeps them
    assert records.count_documents({"lv": {"$gt": 0}, "n": 0}) == 0
    assert keeper.stats.swept > 0
    assert_buckets_add_up(tenders)


def test_a_build_whose_lease_was_taken_over_adds_no_bucket(tenders: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A keeper stopped past its lease in the middle of a build, then
    resumed at the build's end: its buckets would add to those of the build
    that replaced it; its write is refused instead."""
    monkeypatch.setattr(aggregates, "SCAN_CHUNK", 2)
    monkeypatch.setattr(aggregates, "SCAN_SECONDS", 0.0)  # a chunk a batch
    monkeypatch.setattr(aggregates, "QUIET_SCAN_SECONDS", 0.0)
    keys = [uuid.uuid4().hex for _ in range(6)]
    tenders.insert_many([document(key, number) for number, key in enumerate(keys)])
    first = AggregateKeeper(tenders)
    for _ in range(3):
        first.handle([], caught_up=True)
    assert not first.built and first.build_ids is not None
    records = tenders.database[reconcile_name(tenders.name)]
    records.update_one({"_id": STATE_ID}, {"$set": {"lease": 0}})
    monkeypatch.setattr(aggregates, "SCAN_CHUNK", 100)
    second = AggregateKeeper(tenders)
    second.handle([], caught_up=True)
    assert second.built
    first.handle([], caught_up=True)  # its next chunk: records and buckets
    assert not first.built and first.stats.errors == 1 and "lease" in first.stats.last_error
    assert_buckets_add_up(tenders)


def delete_event(key: str, seconds: float) -> dict[str, Any]:
    """A delete event as the follower's stream gives it."""
    return {
        "operationType": "delete",
        "documentKey": {"_id": key},
        "wallTime": START + timedelta(seconds=seconds),
    }


def assert_records_match_documents(tenders: Any) -> None:
    """The aggregates show exactly the public documents, and their buckets
    add up."""
    records = tenders.database[reconcile_name(tenders.name)]
    shown = {record["_id"] for record in records.find({"lv": 0, "n": 1}, {"_id": 1})}
    public = {doc["_id"] for doc in tenders.find({"is_public": True}, {"_id": 1})}
    assert shown == public
    assert_buckets_add_up(tenders)


def test_an_object_deleted_while_the_keeper_is_stopped_loses_its_record(
    tenders: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catch-up after a restart reads the documents changed since the
    last complete point; an object deleted meanwhile has none to read (and
    one hidden without a new stamp is not among them): the catch-up checks
    the records it holds against the documents."""
    monkeypatch.setattr(aggregates, "APPLY_SECONDS", 0.0)  # a write per batch
    keys = [uuid.uuid4().hex for _ in range(6)]
    tenders.insert_many([document(key, number) for number, key in enumerate(keys)])
    first = AggregateKeeper(tenders)
    first.handle([], caught_up=True)  # builds from the documents
    first.handle([], caught_up=True)
    assert first.built and not first.behind
    assert_records_match_documents(tenders)
    # the keeper's process stops; meanwhile an object is deleted, another
    # hidden (its stamp unchanged)
    tenders.delete_one({"_id": keys[0]})
    tenders.update_one({"_id": keys[1]}, {"$set": {"is_public": False}})
    records = tenders.database[reconcile_name(tenders.name)]
    records.update_one({"_id": STATE_ID}, {"$set": {"lease": 0}})
    restarted = AggregateKeeper(tenders)
    restarted.handle([], caught_up=True)  # takes the lease over, catches up
    restarted.handle([], caught_up=True)
    assert restarted.stats.errors == 0 and not restarted.behind
    assert_records_match_documents(tenders)


def test_an_object_deleted_during_a_lease_handover_loses_its_record(
    tenders: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keeper without the lease drops the events it is handed, the delete
    included; once it takes the lease over, its catch-up must find the
    deletion all the same."""
    monkeypatch.setattr(aggregates, "APPLY_SECONDS", 0.0)  # a write per batch
    keys = [uuid.uuid4().hex for _ in range(6)]
    tenders.insert_many([document(key, number) for number, key in enumerate(keys)])
    holder = AggregateKeeper(tenders)
    holder.handle([], caught_up=True)
    holder.handle([], caught_up=True)
    assert holder.built and not holder.behind
    waiting = AggregateKeeper(tenders)
    waiting.handle([], caught_up=True)
    assert not waiting.lease.held, "the lease is the holder's"
    # the holder's process stops; the object is deleted, and the waiting
    # keeper, still without the lease, drops its event
    tenders.delete_one({"_id": keys[2]})
    waiting.handle([delete_event(keys[2], 100)], caught_up=True)
    records = tenders.database[reconcile_name(tenders.name)]
    records.update_one({"_id": STATE_ID}, {"$set": {"lease": 0}})  # the holder's lease lapses
    waiting.handle([], caught_up=True)  # takes the lease over, catches up
    waiting.handle([], caught_up=True)
    assert waiting.stats.errors == 0 and not waiting.behind
    assert_records_match_documents(tenders)


def test_the_keeper_state_one_type_for_writer_and_reader() -> None:
    """What the keeper writes and the endpoint reads: complete only once
    built, alive for a lease past the lease's end, nothing from nothing."""
    from datetime import datetime, timezone

    from openprocurement_feed.store.buckets import LAYOUT
    from openprocurement_feed.store.keeper_state import KEEPER_ALIVE_SECONDS, LEASE_SECONDS, KeeperState

    assert KEEPER_ALIVE_SECONDS == 2 * LEASE_SECONDS
    assert KeeperState.from_document(None) == KeeperState()
    assert KeeperState.from_document({"wall": 5}).complete is None, "a build that did not finish is complete nowhere"
    assert KeeperState.from_document({"wall": 5, "built": "levels:old"}).complete is None, "another layout"
    state = KeeperState.from_document({"wall": 5, "built": LAYOUT, "lease": 1_000, "owner": "a", "foreign": True})
    assert (state.complete, state.owner, state.foreign) == (5, "a", True)
    alive_until_us = (1_000 + int(KEEPER_ALIVE_SECONDS * 1000)) * 1000
    assert state.alive(alive_until_us - 1) and not state.alive(alive_until_us)
    dated = KeeperState.from_document({"lease": datetime(1970, 1, 1, 0, 0, 1, tzinfo=timezone.utc)})
    assert dated.lease == 1_000
    assert not KeeperState.from_document({"lease": True}).alive(0), "a boolean is no lease"


def test_a_build_reads_the_documents_in_windows_and_misses_none_changed_meanwhile(
    tenders: Any, mongodb_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's scan reads the documents a chunk at a time in windows of
    the stamp: no read gathers the collection (one read of every public
    document made the embedded server decode all of them at once); a
    document changed during the build (its stamp moves up) is still shown."""
    from pymongo import monitoring

    class Filters(monitoring.CommandListener):
        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name == "find" and event.command.get("find") == tenders.name:
                self.sent.append(dict(event.command.get("filter") or {}))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    monkeypatch.setattr(aggregates, "SCAN_CHUNK", 50)
    monkeypatch.setattr(aggregates, "SCAN_SECONDS", 0.0)  # a chunk a batch
    monkeypatch.setattr(aggregates, "QUIET_SCAN_SECONDS", 0.0)
    keys = [uuid.uuid4().hex for _ in range(600)]
    # a live feed: its stamps up to the present (a read down from the
    # present across months before a dense burst would take the burst whole)
    since = (datetime.now(timezone.utc) - START).total_seconds() - 600 * 7.0
    tenders.insert_many([document(key, since + number * 7.0) for number, key in enumerate(keys)])
    filters = Filters()
    client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[filters])
    try:
        keeper = AggregateKeeper(client[tenders.database.name][tenders.name])
        moved = 0
        for _ in range(100):
            keeper.handle([], caught_up=True)
            if keeper.built:
                break
            # the oldest not yet moved jumps past the newest, as an edit does
            doc = document(keys[moved], since + 600 * 7.0 + moved)
            tenders.replace_one({"_id": doc["_id"]}, doc)
            keeper.handle([event(doc)], caught_up=False)
            moved += 1
    finally:
        client.close()
    assert keeper.built and moved > 3
    assert_records_match_documents(tenders)
    counts = [tenders.count_documents(query) for query in filters.sent]
    assert counts and max(counts) < 600 // 3, (
        f"a read gathered {max(counts)} of 600: {filters.sent[counts.index(max(counts))]}"
    )


def test_a_build_writes_its_buckets_with_its_records_and_changes_meanwhile_add_up(
    tenders: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A million objects make about two million buckets: a build writes each
    chunk's buckets with its records (the keeper holds no sums in memory),
    so the stored buckets add up to the stored records after every batch of
    the build, whatever changes meanwhile (a record out of a bucket, another
    into it, a patch), sweeps included."""
    monkeypatch.setattr(aggregates, "SCAN_CHUNK", 4)
    monkeypatch.setattr(aggregates, "SCAN_SECONDS", 0.0)  # a chunk a batch
    monkeypatch.setattr(aggregates, "QUIET_SCAN_SECONDS", 0.0)
    monkeypatch.setattr(aggregates, "APPLY_SECONDS", 0.0)
    monkeypatch.setattr(aggregates, "SWEEP_SECONDS", 0.0)  # a sweep at every write allowed
    keys = [uuid.uuid4().hex for _ in range(16)]
    tenders.insert_many([document(key, number * 20.0) for number, key in enumerate(keys)])
    keeper = AggregateKeeper(tenders)
    keeper.handle([], caught_up=False)  # the build's first chunk
    assert keeper.build_ids and not keeper.built
    assert not hasattr(keeper, "build_deltas"), "no bucket sums held in memory"
    assert_buckets_add_up(tenders)
    added = document(uuid.uuid4().hex, 35.0)  # into the first chunk's buckets
    patched = document(keys[9], 400.0)
    batches = [
        [event(added)],
        [delete_event(keys[1], 500.0)],
        [event(patched)],
    ]
    tenders.insert_one(added)
    tenders.delete_one({"_id": keys[1]})
    tenders.replace_one({"_id": keys[9]}, patched)
    turns = 0
    while not keeper.built:
        keeper.handle(batches.pop(0) if batches else [], caught_up=False)
        turns += 1
        assert keeper.stats.errors == 0, keeper.stats.last_error
        assert_buckets_add_up(tenders)
        assert turns < 20
    assert turns >= 3 and keeper.build_ids is None
    assert_records_match_documents(tenders)


def test_a_chunk_that_takes_longer_than_its_turn_makes_the_next_ones_smaller(
    tenders: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower's next batch waits for a build's turn (at least one
    chunk): a chunk slower than :data:`SCAN_SECONDS` shrinks the next ones,
    down to :data:`MIN_SCAN_CHUNK`; fast ones grow them back."""
    keeper = AggregateKeeper(tenders)
    assert keeper.chunk_size == aggregates.SCAN_CHUNK
    keeper._size_chunks(500, 2.0)  # four turns' time
    assert keeper.chunk_size == 125
    keeper._size_chunks(125, 100.0)
    assert keeper.chunk_size == aggregates.MIN_SCAN_CHUNK
    keeper._size_chunks(50, 0.01)
    assert keeper.chunk_size == 100
    for _ in range(5):
        keeper._size_chunks(keeper.chunk_size, 0.01)
    assert keeper.chunk_size == aggregates.SCAN_CHUNK
    keeper._size_chunks(500, 0.4)  # within its turn: kept
    assert keeper.chunk_size == aggregates.SCAN_CHUNK


def test_the_lease_is_held_with_an_update_and_a_read_by_id(mongodb_uri: str, db_name: str) -> None:
    """The embedded server answers a ``findAndModify`` of the state's
    ``_id`` (``MinKey``) by scanning the whole collection (4.9 s at 100,000
    tenders' records and buckets, every few seconds of the follower's
    turns): the lease is taken and renewed by an update and a read by id."""
    from pymongo import monitoring

    from openprocurement_feed.commit.lease import Lease

    class Names(monitoring.CommandListener):
        def __init__(self) -> None:
            self.sent: list[str] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            self.sent.append(event.command_name)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    names = Names()
    client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[names])
    try:
        records = client[db_name][reconcile_name("tenders")]
        mine, theirs = Lease(records), Lease(records)
        assert mine.hold() and mine.held
        assert not theirs.hold(), "held by the first"
        assert names.sent == ["update", "find", "update", "find"], names.sent
    finally:
        client.close()


def test_a_write_conflict_during_a_build_is_retried_not_built_again(
    tenders: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction that conflicted wrote nothing: its chunk is written by
    the next batch, and a build of a million objects is not begun again
    from an empty collection for it (a conflict at 200,000 of 300,000
    records did so)."""
    from pymongo.errors import OperationFailure

    monkeypatch.setattr(aggregates, "SCAN_CHUNK", 4)
    monkeypatch.setattr(aggregates, "SCAN_SECONDS", 0.0)  # a chunk a batch
    monkeypatch.setattr(aggregates, "QUIET_SCAN_SECONDS", 0.0)
    keys = [uuid.uuid4().hex for _ in range(16)]
    tenders.insert_many([document(key, number * 20.0) for number, key in enumerate(keys)])
    keeper = AggregateKeeper(tenders)
    keeper.handle([], caught_up=False)
    keeper.handle([], caught_up=False)
    written = keeper.records.bulk_write
    conflicts = []

    def conflicting(*args: Any, **kwargs: Any) -> Any:
        if not conflicts:
            conflicts.append(1)
            raise OperationFailure("WriteConflict error: this operation conflicted with another operation", 112)
        return written(*args, **kwargs)

    monkeypatch.setattr(keeper.records, "bulk_write", conflicting)
    for _ in range(20):
        keeper.handle([], caught_up=False)
        if keeper.built:
            break
    assert conflicts and keeper.stats.errors == 1 and "WriteConflict" in keeper.stats.last_error
    assert keeper.built and keeper.stats.scanned == 16, "the scan went on, not again from the start"
    assert_records_match_documents(tenders)
