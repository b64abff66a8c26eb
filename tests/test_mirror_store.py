"""The mirror's store on real databases (an SQLite file, a PostgreSQL
server): the index read as a Negentropy storage gives what the in-memory
one gives, a row is replaced only by a newer version, a page's rows and its
position commit together, the schema's version is checked."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from openprocurement_feed.client.mirror import IndexStorage, MirrorError, MirrorStore, PageSink, feed_objects
from openprocurement_feed.client.state import FeedIdentity, SyncState
from openprocurement_feed.reconcile import Bound, Item, Negentropy, VectorStorage, record_id

START = 1_700_000_000_000_000


def open_store(url: str) -> MirrorStore:
    store = MirrorStore.open(url)
    store.create_schema()
    return store


def random_rows(count: int, seed: int, spread: int = 2000) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        key = uuid.UUID(int=rng.getrandbits(128)).hex
        stamp = START + rng.randint(0, spread)  # many rows share a timestamp
        rows.append({"id": key, "date_modified": "t", "modified_us": stamp, "data": {"id": key}})
    return rows


def test_the_index_answers_the_protocol_as_the_in_memory_storage_does(database_url: str) -> None:
    rows = random_rows(3000, seed=5)
    until = START + 1500
    store = open_store(database_url)
    with store.engine.begin() as connection:
        store.upsert(connection, "tenders", rows)
        store.upsert(connection, "plans", random_rows(200, seed=6))  # another feed: not read
    vector = VectorStorage.of(
        Item(row["modified_us"], record_id(row["id"], row["modified_us"])) for row in rows if row["modified_us"] < until
    )
    rng = random.Random(1)
    with store.engine.connect() as connection, connection.begin():
        index = IndexStorage(connection, feed_objects, feed_objects.c.feed == "tenders", until, block=37)
        size = index.size()
        assert size == vector.size()
        for _ in range(200):
            begin = rng.randint(0, size)
            end = rng.randint(begin, size)
            assert index.fingerprint(begin, end) == vector.fingerprint(begin, end)
            assert list(index.iterate(begin, end)) == list(vector.iterate(begin, end))
            item = vector.get_item(rng.randrange(size))
            for bound in (Bound(item.timestamp, item.id[: rng.randint(0, 32)]), Bound(item.timestamp + 1)):
                assert index.find_lower_bound(begin, end, bound) == vector.find_lower_bound(begin, end, bound)
        assert Negentropy(index).initiate() == Negentropy(vector).initiate()
        assert index.reads < 200 * 6  # block reads, not scans
    store.close()


def test_a_row_is_replaced_only_by_a_newer_version(database_url: str) -> None:
    store = open_store(database_url)
    key = uuid.uuid4().hex
    new = {"id": key, "date_modified": "2024-01-02T00:00:00+00:00", "modified_us": START + 10, "data": {"v": 2}}
    old = {**new, "date_modified": "2024-01-01T00:00:00+00:00", "modified_us": START, "data": {"v": 1}}
    store.write_page("tenders", [new], {"url": "http://x/tenders"})
    store.write_page("tenders", [old, old], {"url": "http://x/tenders"})  # a replayed, older page
    assert [tuple(row) for row in store.rows("tenders", data=True)] == [(key, new["date_modified"], {"v": 2})]
    newer = {**new, "modified_us": START + 20, "data": {"v": 3}}
    store.write_page("tenders", [newer], {"url": "http://x/tenders"})
    assert [row[2] for row in store.rows("tenders", data=True)] == [{"v": 3}]
    store.close()


def test_a_page_and_its_position_commit_together(database_url: str) -> None:
    store = open_store(database_url)
    rows = random_rows(5, seed=2)
    bad = {"id": None, "date_modified": "x", "modified_us": START, "data": {}}  # violates NOT NULL
    with pytest.raises(Exception):  # noqa: B017 - the database's own error
        store.write_page("tenders", [*rows, bad], {"url": "http://x/tenders", "next_offset": "9"})
    assert store.count("tenders") == 0 and store.load_state("tenders") is None
    store.write_page("tenders", rows, {"url": "http://x/tenders", "next_offset": "9"})
    assert store.count("tenders") == 5 and store.load_state("tenders")["next_offset"] == "9"  # type: ignore[index]
    store.close()


def test_pages_written_behind_the_crawl_stop_at_a_failed_one(database_url: str) -> None:
    """The writer thread commits the pages in order; after one that fails,
    none: the position never passes rows that were not written."""
    store = open_store(database_url)
    sink = PageSink(store, "tenders")
    feed = FeedIdentity(url="http://x/tenders")
    bad = {"id": None, "date_modified": "x", "modified_us": START, "data": {}}  # violates NOT NULL
    sink.pending = random_rows(5, seed=3)
    sink.save(SyncState(feed=feed, forward_offset="1"))
    sink.flush()  # else it may wait for the writer with the next, and fail with it
    sink.pending = [*random_rows(5, seed=4), bad]
    sink.save(SyncState(feed=feed, forward_offset="2"))
    with pytest.raises(Exception):  # noqa: B017 - the database's own error, raised by the save or the flush
        sink.pending = random_rows(5, seed=5)
        sink.save(SyncState(feed=feed, forward_offset="3"))
        sink.flush()
    with pytest.raises(Exception):  # noqa: B017 - and by every save after it
        sink.save(SyncState(feed=feed, forward_offset="4"))
    sink.close()
    with pytest.raises(Exception):  # noqa: B017 - closed, it still writes nothing after the failed page
        sink.save(SyncState(feed=feed, forward_offset="5"))
    assert store.count("tenders") == 5 and store.load_state("tenders")["next_offset"] == "1"  # type: ignore[index]
    assert sink.rows_written == 5
    store.close()


def test_pages_that_wait_for_the_writer_go_in_one_transaction(database_url: str) -> None:
    """While another transaction holds the feed's state row, the pages
    handed over wait; then they are written together, their rows and the
    last position in one transaction."""
    from sqlalchemy import text

    store = open_store(database_url)
    sink = PageSink(store, "tenders")
    feed = FeedIdentity(url="http://x/tenders")
    pages = [random_rows(20, seed=10 + number) for number in range(5)]
    sink.pending = list(pages[0])
    sink.save(SyncState(feed=feed, forward_offset="1"))
    sink.flush()
    with store.engine.connect() as locker:
        locker.begin()
        locker.execute(text("UPDATE feed_state SET restarts = restarts WHERE feed = 'tenders'"))
        for number, rows in enumerate(pages[1:], 2):
            sink.pending = list(rows)
            sink.save(SyncState(feed=feed, forward_offset=str(number)))
        assert store.load_state("tenders")["next_offset"] == "1"  # type: ignore[index]
        locker.rollback()
    sink.flush()
    sink.close()
    assert store.count("tenders") == 100 and store.load_state("tenders")["next_offset"] == "5"  # type: ignore[index]
    assert sink.rows_written == 100 and 2 <= sink.commits <= 3
    store.close()


def test_the_page_writer_writes_as_the_store_does(database_url: str, sql: Callable[..., list[Any]]) -> None:
    """A crawl's writer (its own connection, the driver's transactions):
    the first page makes the state row, the next ones update it; a state
    row deleted meanwhile is made again; a failed page leaves nothing."""
    store = open_store(database_url)
    writer = store.page_writer()
    pages = [random_rows(10, seed=20 + number) for number in range(4)]
    writer.write("tenders", pages[0], {"url": "http://x/tenders", "next_offset": "1"})
    writer.write("tenders", pages[1], {"url": "http://x/tenders", "next_offset": "2"})
    assert store.count("tenders") == 20 and store.load_state("tenders")["next_offset"] == "2"  # type: ignore[index]
    sql("DELETE FROM feed_state")
    writer.write("tenders", pages[2], {"url": "http://x/tenders", "next_offset": "3"})
    assert store.count("tenders") == 30 and store.load_state("tenders")["next_offset"] == "3"  # type: ignore[index]
    bad = {"id": None, "date_modified": "x", "modified_us": START, "data": {}}
    with pytest.raises(Exception):  # noqa: B017 - the database's own error
        writer.write("tenders", [*pages[3], bad], {"url": "http://x/tenders", "next_offset": "4"})
    assert store.count("tenders") == 30 and store.load_state("tenders")["next_offset"] == "3"  # type: ignore[index]
    writer.write("tenders", pages[3], {"url": "http://x/tenders", "next_offset": "4"})
    assert store.count("tenders") == 40 and store.load_state("tenders")["next_offset"] == "4"  # type: ignore[index]
    writer.close()
    store.close()


def test_a_schema_of_another_version_is_refused(database_url: str, sql: Callable[..., list[Any]]) -> None:
    open_store(database_url).close()
    sql("UPDATE feed_schema SET version = 99")
    with pytest.raises(MirrorError, match="schema of version 99; this package reads version 1"):
        MirrorStore.open(database_url)


def test_ids_that_are_not_lower_case_hex_have_no_record(database_url: str) -> None:
    store = open_store(database_url)
    row = {"id": "ABCDEF" + "0" * 26, "date_modified": "t", "modified_us": START, "data": {}}
    store.write_page("tenders", [row], {"url": "http://x/tenders"})
    with store.engine.connect() as connection, connection.begin(), pytest.raises(ValueError, match="lower-case"):
        IndexStorage(connection, feed_objects, feed_objects.c.feed == "tenders", START + 1)
    store.close()
