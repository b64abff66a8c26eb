"""Pages read in bounded windows of their key (SPEC I.1): the same pages and
offsets as one read of the whole range, byte for byte, in both orders,
forward and descending; and a page gathers O(limit) matches on the server,
not the rest of the feed (counted from the queries the store sent)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import wait_sequenced
from pymongo import monitoring

from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.offset import Offset, parse_offset

NOW = 1_790_000_000.0


def stamps(count: int, seed: int) -> list[float]:
    """Uneven stamps: bursts with ties, quiet gaps of days, a few outliers."""
    chooser = random.Random(seed)
    values: list[float] = []
    moment = NOW - 400 * 86400
    while len(values) < count:
        kind = chooser.random()
        if kind < 0.2:  # one command stamping several documents: a tie group
            values += [round(moment, 3)] * chooser.randint(2, 30)
        elif kind < 0.3:
            moment += chooser.uniform(3600, 20 * 86400)
        else:
            moment += chooser.expovariate(1 / 30)
            values.append(round(moment, 3))
    return values[:count]


class Finds(monitoring.CommandListener):
    """The filters of the ``find`` commands sent on one collection."""

    def __init__(self, collection: str) -> None:
        self.collection = collection
        self.filters: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find" and event.command.get("find") == self.collection:
            self.filters.append(dict(event.command.get("filter") or {}))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def crawl(store: FeedStore, order: str, limit: int, descending: bool = False) -> Iterator[tuple[list[Any], str]]:
    """Every page of a crawl: its rows and the offset after it."""
    collection = store.collection("tenders")
    offset: Offset | None = None
    feed_order = store.feed_order(order)
    for _ in range(10_000):
        rows = store.feed_page(
            collection, ["dateModified"], offset=offset, limit=limit, descending=descending, order=order
        )
        if not rows:
            return
        value = feed_order.row_value(rows[-1])
        text = feed_order.compose(value, [row["_id"] for row in rows if feed_order.row_value(row) == value])
        yield [(row["_id"], row.get("dateModified")) for row in rows], text
        offset = parse_offset(text)
    raise AssertionError("the crawl did not end")


@pytest.fixture
def filled(store: FeedStore) -> FeedStore:
    collection = store.collection("tenders")
    docs = [
        {
            "_id": uuid.uuid4().hex,
            "_rev": "1-" + uuid.uuid4().hex,
            "status": "active",
            "dateModified": f"2026-01-01T00:00:{number % 60:02d}+00:00",
            "is_public": True,
            "is_test": number % 7 == 0,
            "public_modified": stamp,
        }
        for number, stamp in enumerate(stamps(700, seed=7))
    ]
    collection.insert_many(docs)
    return store


def pages_both_ways(store: FeedStore, order: str, limit: int, descending: bool) -> tuple[list[Any], list[Any]]:
    store.windowed_reads = False
    whole = list(crawl(store, order, limit, descending))
    store.windowed_reads = True
    windowed = list(crawl(store, order, limit, descending))
    return whole, windowed


@pytest.mark.parametrize("limit", [1, 7, 100])
@pytest.mark.parametrize("descending", [False, True], ids=["forward", "descending"])
def test_windows_give_the_same_pages_and_offsets_in_watermark_order(
    filled: FeedStore, limit: int, descending: bool
) -> None:
    whole, windowed = pages_both_ways(filled, "watermark", limit, descending)
    assert sum(len(rows) for rows, _ in whole) >= 700 * 6 // 7 - 1
    assert windowed == whole


@pytest.mark.parametrize("descending", [False, True], ids=["forward", "descending"])
def test_windows_give_the_same_pages_and_offsets_in_commit_order(filled: FeedStore, descending: bool) -> None:
    from openprocurement_feed.commit.sequencer import Sequencer

    sequencer = Sequencer(filled.db, {"tenders": ()}).start()
    try:
        assert sequencer.wait_ready(timeout=60)
        wait_sequenced(filled.db, timeout=60)
        whole, windowed = pages_both_ways(filled, "commit", 50, descending)
    finally:
        sequencer.stop()
    assert sum(len(rows) for rows, _ in whole) >= 700 * 6 // 7 - 1
    assert windowed == whole


def gathered(store: FeedStore, finds: Finds) -> int:
    """The matches the server gathered for the queries sent (each counted
    without its limit: what a server without limit pushdown reads)."""
    collection = store.db[finds.collection]
    return sum(collection.count_documents(query) for query in finds.filters)


@pytest.mark.parametrize("order", ["watermark", "commit"])
def test_a_page_gathers_matches_of_the_order_of_its_limit_not_the_feed(
    filled: FeedStore, mongodb_uri: str, order: str
) -> None:
    from pymongo import MongoClient

    from openprocurement_feed.commit.sequencer import Sequencer
    from openprocurement_feed.store.positions import positions_name

    sequencer = None
    if order == "commit":
        sequencer = Sequencer(filled.db, {"tenders": ()}).start()
        assert sequencer.wait_ready(timeout=60)
        wait_sequenced(filled.db, timeout=60)
    finds = Finds(positions_name("tenders") if order == "commit" else "tenders")
    client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[finds])
    store = FeedStore(client, filled.db.name, watermark_seconds=1.0)
    try:
        figures: dict[tuple[bool, str], int] = {}
        for windowed in (False, True):
            store.windowed_reads = windowed
            for name, descending in (("forward", False), ("descending", True)):
                pages = crawl(store, order, 20, descending)
                next(pages)  # the first page (the hints' one read is counted too)
                finds.filters.clear()
                for _ in range(10):
                    next(pages)
                figures[windowed, name] = gathered(store, finds)
    finally:
        client.close()
        if sequencer is not None:
            sequencer.stop()
    for name in ("forward", "descending"):
        assert figures[False, name] > 10 * 200, figures  # the rest of the feed, page after page
        assert figures[True, name] < 10 * 20 * 6, figures  # about the pages themselves


@pytest.mark.parametrize("order", ["watermark", "commit"])
def test_a_first_page_finds_the_lowest_key_without_gathering_the_feed(
    filled: FeedStore, mongodb_uri: str, order: str
) -> None:
    """A fresh process's first page from the start of the feed: the lowest
    key is found in reads that each gather a small part of the feed (one
    sorted read with a limit of one gathered all of it: at a million
    documents, more memory than the machine has), the page is the one a
    single read gives, and the next process's first page reads no more than
    the pages themselves do once this one has learnt the key."""
    from pymongo import MongoClient

    from openprocurement_feed.commit.sequencer import Sequencer
    from openprocurement_feed.store.positions import positions_name

    sequencer = None
    if order == "commit":
        sequencer = Sequencer(filled.db, {"tenders": ()}).start()
        assert sequencer.wait_ready(timeout=60)
        wait_sequenced(filled.db, timeout=60)
    try:
        filled.windowed_reads = False
        whole, _ = next(crawl(filled, order, 20))
        finds = Finds(positions_name("tenders") if order == "commit" else "tenders")
        client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[finds])
        store = FeedStore(client, filled.db.name, watermark_seconds=1.0)
        try:
            first, _ = next(crawl(store, order, 20))
            searched = list(finds.filters)
            finds.filters.clear()
            again, _ = next(crawl(store, order, 20))
            learnt = list(finds.filters)
        finally:
            client.close()
    finally:
        if sequencer is not None:
            sequencer.stop()
    assert first == whole == again
    collection = filled.db[finds.collection]
    counts = [collection.count_documents(query) for query in searched]
    # the widest read is the newest row's, in the window that crosses the
    # months between the fixture's last stamp and the present
    assert max(counts) < 700 // 3, f"a read gathered {max(counts)} of 700: {searched[counts.index(max(counts))]}"
    assert len(searched) < 200, f"{len(searched)} reads for the first page"
    # the next first page starts at the key learnt: no search again
    assert len(learnt) < len(searched) // 4, (len(learnt), len(searched))
    assert sum(collection.count_documents(query) for query in learnt) < 700 // 3, learnt


@pytest.mark.parametrize("chunk", [1, 13, 500])
def test_an_ordered_scan_in_windows_reads_every_row_once_in_order(filled: FeedStore, chunk: int) -> None:
    """The recovery's scan of a whole collection (scan_in_order): the rows
    of one sorted read, in its order, each once (tie groups split across
    chunks included), and no read gathers much more than its chunk."""
    from openprocurement_feed.store.windows import scan_in_order

    collection = filled.collection("tenders")
    sort = [("public_modified", 1), ("_id", 1)]
    query = {"is_public": True}
    whole = [row["_id"] for row in collection.find(query, {"_id": 1}, sort=sort)]
    sent: list[dict[str, Any]] = []

    def run(windowed: Any, limit: int) -> list[dict[str, Any]]:
        sent.append(dict(windowed))
        return list(collection.find(windowed, {"_id": 1, "public_modified": 1}, sort=sort, limit=limit))

    first = collection.find_one(query, {"public_modified": 1}, sort=sort)
    scanned = [
        row["_id"] for row in scan_in_order(run, query, "public_modified", chunk, lambda: first["public_modified"])
    ]
    assert len(whole) == 700
    assert scanned == whole
    # ranges of the key (and of _id within a key) only: an index serves each
    # read, where an $or of ranges makes the embedded server scan the collection
    assert not [query for query in sent if "$or" in query or "$expr" in query]
    if chunk == 13:
        counts = [collection.count_documents(windowed) for windowed in sent]
        assert max(counts) < 700, f"a read gathered all {max(counts)} matches: one sorted read of the whole"
        assert sum(counts) < 6 * 700, f"the scan gathered {sum(counts)} matches for 700 rows"


def test_the_long_poll_watcher_finds_the_newest_stamp_in_windows(filled: FeedStore, mongodb_uri: str) -> None:
    """A watermark watcher's first read: the collection's newest public
    stamp, read in windows down from the present, not a ``$max`` over every
    document (each read gathers a small part of the collection)."""
    from pymongo import MongoClient

    from openprocurement_feed.longpoll.notifier import LongPollNotifier
    from openprocurement_feed.longpoll.waiters import Watch
    from openprocurement_feed.longpoll.watchers import StampWatcher

    finds = Finds("tenders")
    client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[finds])
    store = FeedStore(client, filled.db.name, watermark_seconds=1.0)
    try:
        watcher = StampWatcher(LongPollNotifier(store, watermark_seconds=1.0))
        newest = watcher.newest_stamp(Watch("watermark", "tenders"))
    finally:
        client.close()
    collection = filled.collection("tenders")
    expected = max(doc["public_modified"] for doc in collection.find({"is_public": True}, {"public_modified": 1}))
    assert newest == expected
    assert finds.filters, "read with find, in windows"
    # the stamps end weeks before the present: the windows double across
    # the gap, and the first that reaches the stamps takes a part of them
    assert max(collection.count_documents(query) for query in finds.filters) < 700 // 2, finds.filters


def test_the_watermark_bound_is_a_plain_range_by_the_database_clock(store: FeedStore, mongodb_uri: str) -> None:
    """A watermark page's bound ``key <= now - W`` goes to the server as a
    range of the key (an index serves it; an ``$expr`` with ``$$NOW`` made
    the embedded server scan the collection), by the database's clock: a
    document stamped by the server just now is not shown, one stamped W
    ago is."""
    from pymongo import MongoClient

    from openprocurement_feed.store.db_clock import DatabaseClock

    collection = store.collection("tenders")
    now_stamp = {"$divide": [{"$toLong": "$$NOW"}, 1000]}
    young, old = uuid.uuid4().hex, uuid.uuid4().hex
    for key, shift in ((young, 0.0), (old, -30.0)):
        collection.update_one(
            {"_id": key},
            [{"$set": {"is_public": True, "is_test": False, "public_modified": {"$add": [now_stamp, shift]}}}],
            upsert=True,
        )
    finds = Finds("tenders")
    client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[finds])
    watched = FeedStore(client, store.db.name, watermark_seconds=10.0)
    try:
        for descending in (False, True):
            rows = watched.feed_page(watched.collection("tenders"), [], None, "all", descending, 100)
            assert [row["_id"] for row in rows] == [old], "the young one waits W, by the database's clock"
        clock = DatabaseClock()
        server_now = client.admin.command("hello")["localTime"].timestamp()
        assert clock.now(client) <= server_now + 1.0
    finally:
        client.close()
    assert finds.filters and not [query for query in finds.filters if "$expr" in query], finds.filters


def test_the_long_poll_watcher_of_an_empty_collection_searches_once(store: FeedStore, mongodb_uri: str) -> None:
    """A watcher whose collection has no stamp yet searches down from the
    present once (some twenty-five empty reads), then polls the stamps
    above the key's least value: no search at every poll; the first
    document written is still seen."""
    from pymongo import MongoClient

    from openprocurement_feed.longpoll.notifier import LongPollNotifier
    from openprocurement_feed.longpoll.waiters import Watch
    from openprocurement_feed.longpoll.watchers import StampWatcher

    finds = Finds("tenders")
    client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[finds])
    watching = FeedStore(client, store.db.name, watermark_seconds=1.0)
    try:
        watcher = StampWatcher(LongPollNotifier(watching, watermark_seconds=1.0))
        watch = Watch("watermark", "tenders")
        watcher.poll(watch)
        assert finds.filters, "the first poll searches"
        finds.filters.clear()
        for _ in range(3):
            watcher.poll(watch)
        assert finds.filters == []
        store.collection("tenders").insert_one({"_id": "a" * 32, "is_public": True, "public_modified": 1.7e9})
        watcher.poll(watch)
        assert watch.newest == 1.7e9 and finds.filters == []
    finally:
        client.close()


@pytest.mark.parametrize("descending", [False, True], ids=["forward", "descending"])
def test_a_density_hint_far_too_low_is_mended_by_the_page_it_spoils(filled: FeedStore, descending: bool) -> None:
    """A page read with a density hint a million times too low takes its
    rows from one window that reaches the end of the feed; the density it
    hands to the next page is that of its rows, so the next page's window
    fits again (a hint that stayed low made every page a read of the rest
    of the feed)."""
    from openprocurement_feed.store.windows import read_windowed

    collection = filled.collection("tenders")
    order = -1 if descending else 1
    sort = [("public_modified", order), ("_id", order)]
    query = {"is_public": True, "is_test": False}

    def run(windowed: Any, limit: int) -> list[dict[str, Any]]:
        return list(collection.find(windowed, {"public_modified": 1}, sort=sort, limit=limit))

    whole = run(query, 20)
    lowest = whole[0]["public_modified"] if not descending else 0.0
    rows, density = read_windowed(
        run, query, "public_modified", descending, 20, lambda: lowest, 1e-9, None, lambda: 0.0
    )
    assert [row["_id"] for row in rows] == [row["_id"] for row in whole]
    # the fixture's 700 rows span about 400 days: 2e-5 rows a second on
    # average, far denser where they are
    assert density is not None and density > 1e-6, density
