"""The commit-ordered feed's materialized listing (SPEC D.2, D.5, D.13): pages
are two reads of the positions alone, entries carry the feeds' fields, a
field added to a live feed is re-materialized in the background while pages
fill it from the documents, and positions of an earlier release (entries
without a listing) are upgraded the same way."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from conftest import wait_sequenced
from pymongo import MongoClient, monitoring
from pyramid.config import Configurator
from webtest import TestApp

from openprocurement_feed import commit_listings, shutdown
from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.listing import (
    STATE_LISTING,
    STATE_SEQ,
    STATE_TARGET,
    covers,
    merge,
    missing,
    normalize,
    take,
)
from openprocurement_feed.store.orders import STATE_ID, positions_name
from openprocurement_feed.store.state import feed_state

FEED = "/api/2.5/tenders"


def feed_app(settings: dict[str, str], allowed: Sequence[str], **feed: Any) -> TestApp:
    """A commit-ordered app with one ``tenders`` feed allowing ``allowed``."""
    config = Configurator(settings=dict(settings, **{"feed.order": "commit", "feed.sequencer": "thread"}))
    config.include("openprocurement_feed")
    config.add_feed("tenders", allowed_fields=tuple(allowed), **feed)
    app = TestApp(config.make_wsgi_app())
    assert app.app.registry.feed_sequencer.wait_ready(timeout=30)
    return app


def write(store: Any, count: int, prefix: str) -> list[dict[str, Any]]:
    collection = store.collection("tenders")
    return [
        store.save_data(
            collection,
            {"_id": uuid.uuid4().hex, "title": f"{prefix}{n}", "status": "active", "owner": "o", "budget": n},
            insert=True,
        )
        for n in range(count)
    ]


def state_of(store: Any) -> dict[str, Any]:
    return store.db[positions_name("tenders")].find_one({"_id": STATE_ID}) or {}


def wait_listing(store: Any, listing: Sequence[str], timeout: float = 30.0) -> None:
    """Wait until the state says every entry carries ``listing``."""
    deadline = time.monotonic() + timeout
    while True:
        state = state_of(store)
        if tuple(state.get(STATE_LISTING) or ()) == tuple(listing) and STATE_TARGET not in state:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the listing was not re-materialized: {state.get(STATE_LISTING)}")
        time.sleep(0.05)


class Finds(monitoring.CommandListener):
    """The collections of the commands sent while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.commands: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on:
            self.commands.append((event.command_name, str(event.command.get(event.command_name))))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
def monitored(settings: dict[str, str], mongodb_uri: str) -> Iterator[tuple[TestApp, Finds]]:
    """A commit-ordered feed app whose store's client reports its commands."""
    app = feed_app(settings, ("title", "status", "budget"))
    registry = app.app.registry
    listener = Finds()
    client: MongoClient[Any] = MongoClient(mongodb_uri, event_listeners=[listener], tz_aware=True)
    own = registry.feed_store
    feed_state(registry).store = FeedStore(client, registry.feed_settings.db_name)
    try:
        yield app, listener
    finally:
        feed_state(registry).store = own
        client.close()
        shutdown(registry)


def test_listing_paths() -> None:
    assert normalize(["title", "config.restricted", "config", "_id", "rev", "deleted.x", "title", "a.b.c", "a.b"]) == (
        "a.b",
        "config",
        "title",
    )
    assert covers(("config",), "config.restricted") and not covers(("config",), "configuration")
    assert missing(("title",), ["_id", "title", "status", "committed_ts"]) == ("status",)
    doc = {"title": "t", "config": {"restricted": True, "other": 1}, "n": None}
    assert take(doc, ("config.restricted", "n", "absent", "config.absent.deeper")) == {
        "config": {"restricted": True},
        "n": None,
    }
    row: dict[str, Any] = {"config": {"restricted": True}, "title": "old"}
    merge(row, {"config": {"owner": "x"}, "status": "active"})
    assert row == {"config": {"restricted": True, "owner": "x"}, "title": "old", "status": "active"}


@pytest.mark.parametrize("limit", [5, 150])
def test_a_commit_page_is_two_reads_of_the_positions(monitored: tuple[TestApp, Finds], limit: int) -> None:
    """The checkpoint, then the entries in one reply, whatever the limit
    (past 101 rows a cursor's first batch would otherwise need a getMore)."""
    app, listener = monitored
    store = app.app.registry.feed_store
    docs = write(store, 2 * limit + 2, "p")
    wait_sequenced(store.db)
    first = app.get(FEED + f"?limit={limit}&opt_fields=title,status").json
    listener.on = True
    page = app.get(first["next_page"]["path"]).json
    listener.on = False
    assert [item["id"] for item in page["data"]] == [doc["_id"] for doc in docs[limit : 2 * limit]]
    assert page["data"][0] == {
        "id": docs[limit]["_id"],
        "dateModified": docs[limit]["dateModified"],
        "title": f"p{limit}",
        "status": "active",
    }
    positions = positions_name("tenders")
    # the checkpoint, then the entries without a getMore: in one window,
    # or two where the page's positions cross into a second past the
    # first window's (a window of positions is whole seconds wide)
    assert listener.commands[:2] == [("find", positions), ("find", positions)], "the checkpoint, then the entries"
    assert listener.commands[2:] in ([], [("find", positions)]), listener.commands


def test_a_commit_feed_cannot_list_an_entry_field(settings: dict[str, str]) -> None:
    from pyramid.exceptions import ConfigurationError

    config = Configurator(settings=dict(settings, **{"feed.order": "commit"}))
    config.include("openprocurement_feed")
    with pytest.raises(ConfigurationError, match=r"add_feed\('tenders'\): deleted, rev cannot be listed"):
        config.add_feed("tenders", allowed_fields=("rev", "deleted.by", "title"))
    config.add_feed("tenders", allowed_fields=("rev",), order="watermark")  # the documents' own field: fine


def test_entries_carry_the_listing_of_their_version(settings: dict[str, str]) -> None:
    app = feed_app(settings, ("title", "config.restricted"), restricted=True)
    store = app.app.registry.feed_store
    try:
        assert commit_listings(app.app.registry) == {
            "tenders": ("config.restricted", "dateModified", "owner", "public_modified", "title")
        }
        (doc,) = write(store, 1, "v")
        wait_sequenced(store.db)
        entry = store.db[positions_name("tenders")].find_one({"_id": doc["_id"]})
        assert {name: entry[name] for name in ("dateModified", "owner", "public_modified", "title")} == {
            "dateModified": doc["dateModified"],
            "owner": "o",
            "public_modified": doc["public_modified"],
            "title": "v0",
        }
        assert "budget" not in entry and "status" not in entry, "what the feeds may show and the rule reads"
        assert set(entry) == {"_id", "committed_ts", "committed_seq", "rev", "is_public", "is_test"} | {
            "dateModified",
            "owner",
            "public_modified",
            "title",
        }
        assert entry["committed_seq"] == f"{entry['committed_ts'].time:08x}{entry['committed_ts'].inc:08x}"
        assert state_of(store)[STATE_LISTING] == [
            "config.restricted",
            "dateModified",
            "owner",
            "public_modified",
            "title",
        ]
        store.collection("tenders").delete_one({"_id": doc["_id"]})
        wait_sequenced(store.db)
        tombstone = store.db[positions_name("tenders")].find_one({"_id": doc["_id"]})
        assert tombstone["deleted"] is True and "title" not in tombstone
        assert app.get(FEED).json["data"] == []
    finally:
        shutdown(app.app.registry)


def test_pages_fill_the_fields_the_entries_lack_from_the_documents(settings: dict[str, str]) -> None:
    """Until a re-materialization has finished, a field the state does not
    list is read from the documents: slower, never wrong."""
    app = feed_app(settings, ("title", "status"))
    store = app.app.registry.feed_store
    try:
        docs = write(store, 4, "f")
        wait_sequenced(store.db)
        app.app.registry.feed_sequencer.stop()
        positions = store.db[positions_name("tenders")]
        positions.update_one({"_id": STATE_ID}, {"$set": {STATE_LISTING: ["dateModified"]}})
        positions.update_many({"_id": {"$ne": STATE_ID}}, {"$unset": {"title": ""}})
        body = app.get(FEED + "?opt_fields=title,status").json
        assert [item["title"] for item in body["data"]] == ["f0", "f1", "f2", "f3"]
        assert [item["dateModified"] for item in body["data"]] == [doc["dateModified"] for doc in docs]
        store.collection("tenders").delete_one({"_id": docs[0]["_id"]})
        body = app.get(FEED + "?opt_fields=title").json
        assert body["data"][0] == {"id": docs[0]["_id"], "dateModified": docs[0]["dateModified"]}, (
            "a document gone since keeps what its entry has (its tombstone comes later)"
        )
    finally:
        shutdown(app.app.registry)


def crawl_from(app: TestApp, path: str, seen: list[dict[str, Any]]) -> str:
    """Follow ``path`` to the end of the feed; append the items, return the
    path to ask next."""
    for _ in range(200):
        body = app.get(path).json
        seen.extend(body["data"])
        path = body["next_page"]["path"]
        if not body["data"]:
            return path
    raise AssertionError("the crawl did not end")


def test_a_field_added_to_a_live_feed_is_rematerialized_and_nothing_is_lost_or_resent(
    settings: dict[str, str],
) -> None:
    first = feed_app(settings, ("title",))
    store = first.app.registry.feed_store
    seen: list[dict[str, Any]] = []
    try:
        write(store, 30, "a")
        wait_sequenced(store.db)
        path = crawl_from(first, FEED + "?limit=7&opt_fields=title,status", seen)
        positions_before = {
            entry["_id"]: entry["committed_ts"]
            for entry in store.db[positions_name("tenders")].find({"_id": {"$ne": STATE_ID}})
        }
    finally:
        shutdown(first.app.registry)
    assert all("status" not in item for item in seen), "not allowed yet"
    second = feed_app(settings, ("title", "status"))
    store = second.app.registry.feed_store
    try:
        more = write(store, 10, "b")
        assert "&opt_fields=title&" in path, "status was not allowed: its link dropped it"
        path = path.replace("opt_fields=title", "opt_fields=status%2Ctitle")  # the crawler asks for it again
        path = crawl_from(second, path, seen)
        wait_listing(store, ("dateModified", "public_modified", "status", "title"))
        wait_sequenced(store.db)
        crawl_from(second, path, seen)
        versions = [(item["id"], item["dateModified"]) for item in seen]
        assert len(versions) == len(set(versions)) == 40, "every version once: nothing lost, nothing re-sent"
        assert {item["id"] for item in seen[-10:]} == {doc["_id"] for doc in more}
        assert all(item.get("status") == "active" for item in seen[30:]), "pages after the change show it"
        for entry in store.db[positions_name("tenders")].find({"_id": {"$ne": STATE_ID}}):
            assert entry["status"] == "active"
            if entry["_id"] in positions_before:
                assert entry["committed_ts"] == positions_before[entry["_id"]], "no position moved"
        everything: list[dict[str, Any]] = []
        crawl_from(second, FEED + "?limit=100&opt_fields=status,title", everything)
        assert len(everything) == 40 and all(item["status"] == "active" for item in everything)
        assert second.app.registry.feed_sequencer.followers[0].stats.rematerialized == 30
    finally:
        shutdown(second.app.registry)


def test_positions_of_an_earlier_release_are_upgraded(settings: dict[str, str]) -> None:
    """Entries without a listing and a state that names none (the previous
    release's positions): pages fill every field from the documents, the
    sequencer re-materializes the entries, and the feed is the same."""
    first = feed_app(settings, ("title",))
    store = first.app.registry.feed_store
    try:
        docs = write(store, 8, "u")
        wait_sequenced(store.db)
        expected = first.get(FEED + "?opt_fields=title").json["data"]
        first_page = first.get(FEED + "?limit=3").json
    finally:
        shutdown(first.app.registry)
    db = MongoClient(settings["mongodb.uri"], tz_aware=True)[settings["mongodb.db_name"]]
    positions = db[positions_name("tenders")]
    positions.update_many(
        {"_id": {"$ne": STATE_ID}}, {"$unset": {"title": "", "dateModified": "", "committed_seq": ""}}
    )
    positions.update_one({"_id": STATE_ID}, {"$unset": {STATE_LISTING: "", STATE_SEQ: ""}})
    assert positions.count_documents({"title": {"$exists": True}}) == 0
    second = feed_app(settings, ("title",))
    store = second.app.registry.feed_store
    try:
        assert second.get(FEED + "?opt_fields=title").json["data"] == expected
        # pages written before the upgrade and after it have the same offsets
        assert second.get(FEED + "?limit=3").json["next_page"] == first_page["next_page"]
        wait_listing(store, ("dateModified", "public_modified", "title"))
        assert positions.count_documents({"title": {"$exists": True}}) == len(docs)
        deadline = time.monotonic() + 30
        while state_of(store).get(STATE_SEQ) is not True:
            assert time.monotonic() < deadline, "the entries were not given committed_seq"
            time.sleep(0.05)
        assert positions.count_documents({"committed_seq": {"$exists": False}}) == 1  # the state alone
        assert second.get(FEED + "?opt_fields=title").json["data"] == expected
        assert second.get(FEED + "?limit=3").json["next_page"] == first_page["next_page"]
        # an entry without committed_seq (an earlier release's sequencer still
        # writing beside this one) still gets its position on a page
        ids = [item["id"] for item in first_page["data"]]
        positions.update_many({"_id": {"$in": ids}}, {"$unset": {"committed_seq": ""}})
        assert second.get(FEED + "?limit=3").json["next_page"] == first_page["next_page"]
        assert second.get(FEED + "?opt_fields=title").json["data"] == expected
    finally:
        shutdown(second.app.registry)
        db.client.close()
