"""The commit-ordered feed over HTTP (SPEC D), against the real server with a
sequencer running in the app: the race closed without a watermark, ties cut
by pages, the checkpoint bound, 503 before it, deletes, whole-document
replaces, scopes and modes, and the sequencer's hands off the documents."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from bson.timestamp import Timestamp
from conftest import wait_sequenced
from pymongo import monitoring
from webtest import TestApp

from openprocurement_feed import shutdown
from openprocurement_feed.demo import main
from openprocurement_feed.store.offset import is_position_offset, parse_offset
from openprocurement_feed.store.orders import STATE_ID, positions_name
from openprocurement_feed.store.state import feed_state

FEED = "/api/2.5/tenders"


def crawl(app: TestApp, start: str = FEED, max_pages: int = 100) -> list[dict[str, Any]]:
    """Follow next_page until an empty page; every item seen."""
    items: list[dict[str, Any]] = []
    url = start
    for _ in range(max_pages):
        body = app.get(url).json
        if not body["data"]:
            return items
        items.extend(body["data"])
        url = body["next_page"]["path"]
    raise AssertionError("the crawl did not end")


def doc(title: str, **fields: Any) -> dict[str, Any]:
    return {"_id": uuid.uuid4().hex, "title": title, "status": "active", "dateModified": title, **fields}


def test_before_the_first_checkpoint_the_feed_answers_503(settings: dict[str, str]) -> None:
    app = main({}, **dict(settings, **{"feed.order": "commit"}))
    try:
        response = TestApp(app).get(FEED, status=503)
        assert response.headers["Retry-After"] == "1"
        assert response.content_type == "application/json"
        error = response.json["errors"][0]
        assert response.json["status"] == "error"
        assert error["name"] == "feed" and "sequencer has not run" in error["description"]
        assert "openprocurement-feed sequence" in error["description"]
    finally:
        shutdown(app.registry)


def test_offsets_are_positions_and_pages_follow_commit_order(commit_app: TestApp) -> None:
    ids = [commit_app.post_json(FEED, {"data": {"next_check": f"t{n}"}}).json["data"]["id"] for n in range(5)]
    commit_app.patch_json(f"{FEED}/{ids[0]}", {"data": {"next_check": "t0 again"}})
    wait_sequenced(commit_app.app.registry.feed_store.db)
    body = commit_app.get(FEED + "?limit=2&opt_fields=next_check").json
    assert is_position_offset(body["next_page"]["offset"])
    items = crawl(commit_app, FEED + "?limit=2&opt_fields=next_check")
    assert [item["id"] for item in items] == [*ids[1:], ids[0]], "ordered by commit, the patch last"
    assert items[-1]["next_check"] == "t0 again"
    newest_first = commit_app.get(FEED + "?descending=1").json
    assert [item["id"] for item in newest_first["data"]] == [ids[0], *ids[1:][::-1]]
    assert set(newest_first["data"][0]) == {"id", "dateModified"}


def test_a_transaction_stamped_early_and_committed_late_is_never_lost(commit_app: TestApp) -> None:
    """SPEC "the problem": A is stamped before B but commits after it (once
    the crawler has passed B). A crawler that saw B in commit order still
    gets A, next."""
    store = commit_app.app.registry.feed_store
    collection = store.collection("tenders")
    a, b = doc("A: stamped first, commits last"), doc("B: stamped second, commits first")
    stamped = threading.Event()
    passed_b = threading.Event()

    def slow_writer() -> None:
        with store.client.start_session() as session, session.start_transaction():
            store.save_data(collection, a, insert=True, session=session)
            stamped.set()
            # A commits once the crawler has passed B: an event, not a span a
            # loaded machine might not fit the sequencer and a page read into
            passed_b.wait(30)

    writer = threading.Thread(target=slow_writer)
    writer.start()
    assert stamped.wait(5)
    time.sleep(0.02)  # B's stamp after A's (the clock only moves on)
    store.save_data(collection, b, insert=True)
    seen: list[str] = []
    path = FEED + "?opt_fields=public_modified"
    saw_b_before_a_committed = False
    deadline = time.monotonic() + 60
    empty_after_a = False
    # read on until A came, then until an empty page (a repeat would show)
    while not empty_after_a:
        assert time.monotonic() < deadline, f"the crawler did not get both within 60 s: {seen}"
        body = commit_app.get(path).json
        seen.extend(item["id"] for item in body["data"])
        empty_after_a = a["_id"] in seen and not body["data"]
        if b["_id"] in seen and a["_id"] not in seen and writer.is_alive():
            saw_b_before_a_committed = True
            passed_b.set()
        path = body["next_page"]["path"]
        time.sleep(0.02)
    writer.join()
    stamps = {d["_id"]: d["public_modified"] for d in collection.find({}, {"public_modified": 1})}
    assert stamps[a["_id"]] < stamps[b["_id"]], "A was stamped first"
    assert saw_b_before_a_committed, "the crawler passed B while A was still open"
    assert seen == [b["_id"], a["_id"]], "A comes after B, once each, nothing lost"


def test_a_transaction_cut_by_page_boundaries_is_served_once(commit_app: TestApp) -> None:
    """One transaction's documents share one position: a tie group that pages
    of 2 cut twice, both directions."""
    store = commit_app.app.registry.feed_store
    collection = store.collection("tenders")
    before = [doc("before")]
    group = [doc(f"group {n}") for n in range(5)]
    after = [doc("after")]
    store.save_data(collection, before[0], insert=True)
    with store.client.start_session() as session, session.start_transaction():
        for item in group:
            store.save_data(collection, item, insert=True, session=session)
    store.save_data(collection, after[0], insert=True)
    wait_sequenced(store.db)
    positions = store.db[positions_name("tenders")]
    stamps = {entry["committed_ts"] for entry in positions.find({"_id": {"$in": [d["_id"] for d in group]}})}
    assert len(stamps) == 1, "a transaction's documents share one position"
    expected = [d["_id"] for d in before] + sorted(d["_id"] for d in group) + [d["_id"] for d in after]
    forward = [item["id"] for item in crawl(commit_app, FEED + "?limit=2")]
    assert forward == expected
    backward = [item["id"] for item in crawl(commit_app, FEED + "?limit=2&descending=1")]
    assert backward == expected[::-1]


def test_the_feed_never_shows_a_position_above_the_checkpoint(commit_app: TestApp) -> None:
    store = commit_app.app.registry.feed_store
    commit_app.post_json(FEED, {"data": {"title": "visible"}})
    checkpoint = wait_sequenced(store.db)
    positions = store.db[positions_name("tenders")]
    ahead = doc("ahead of the checkpoint")
    store.collection("tenders").insert_one(dict(ahead, is_public=True, is_test=False, _rev="1-x"))
    # Hold the sequencer so its checkpoint stays where it is, then place an
    # entry above it as a sequencer in the middle of a batch would.
    commit_app.app.registry.feed_sequencer.stop()
    positions.update_one(
        {"_id": ahead["_id"]},
        {
            "$set": {
                "committed_ts": Timestamp(checkpoint.time + 5, 1),
                "is_public": True,
                "is_test": False,
                "rev": "1-x",
            }
        },
        upsert=True,
    )
    state = positions.find_one({"_id": STATE_ID})
    items = crawl(commit_app) + commit_app.get(FEED + "?descending=1").json["data"]
    assert ahead["_id"] not in {item["id"] for item in items}
    assert state["checkpoint"] < Timestamp(checkpoint.time + 5, 1)
    for body in (commit_app.get(FEED).json, commit_app.get(FEED + "?descending=1").json):
        for key in ("next_page", "prev_page"):
            if key in body and body[key]["offset"]:
                assert parse_offset(body[key]["offset"]).value <= state["checkpoint"]


def test_a_deleted_document_leaves_the_feed(commit_app: TestApp) -> None:
    store = commit_app.app.registry.feed_store
    ids = [commit_app.post_json(FEED, {"data": {"title": f"d{n}"}}).json["data"]["id"] for n in range(3)]
    wait_sequenced(store.db)
    store.collection("tenders").delete_one({"_id": ids[1]})
    wait_sequenced(store.db)
    entry = store.db[positions_name("tenders")].find_one({"_id": ids[1]})
    assert entry["deleted"] is True and entry["is_public"] is False, "a tombstone, not a removal"
    assert [item["id"] for item in crawl(commit_app)] == [ids[0], ids[2]]
    assert ids[1] not in {item["id"] for item in commit_app.get(FEED + "?descending=1").json["data"]}


def test_a_host_write_that_replaces_the_whole_document_keeps_it_in_the_feed(commit_app: TestApp) -> None:
    """The sequencer's data lives beside the documents: a replace that knows
    nothing of it cannot erase the document's position."""
    store = commit_app.app.registry.feed_store
    tender = commit_app.post_json(FEED, {"data": {"next_check": "original"}}).json["data"]
    commit_app.post_json(FEED, {"data": {"next_check": "other"}})
    wait_sequenced(store.db)
    first = commit_app.get(FEED).json
    assert len(first["data"]) == 2
    raw = store.collection("tenders").find_one({"_id": tender["id"]})
    replacement = {key: value for key, value in raw.items() if key not in ("next_check",)}
    replacement.update(next_check="replaced by the host", _rev="2-host")
    store.collection("tenders").replace_one({"_id": tender["id"]}, replacement)
    wait_sequenced(store.db)
    after = commit_app.get(FEED + "?opt_fields=next_check&offset=" + first["next_page"]["offset"]).json
    assert [item["id"] for item in after["data"]] == [tender["id"]], "it comes again, at its new position"
    assert after["data"][0]["next_check"] == "replaced by the host"


def test_pages_show_each_entry_as_it_was_taken_and_never_read_the_documents(commit_app: TestApp) -> None:
    """A page is rendered from the entries alone (SPEC D.2/D.5): with the
    sequencer stopped, documents hidden since keep showing as the version
    their positions were taken from; once their hiding is sequenced, their
    entries move on as hidden entries and no page shows them."""
    store = commit_app.app.registry.feed_store
    ids = [commit_app.post_json(FEED, {"data": {"title": f"h{n}"}}).json["data"]["id"] for n in range(6)]
    wait_sequenced(store.db)
    before = commit_app.get(FEED + "?limit=10&opt_fields=title").json["data"]
    assert [item["id"] for item in before] == ids
    sequencer = commit_app.app.registry.feed_sequencer
    sequencer.stop()  # the hidden documents keep their old entries
    store.collection("tenders").update_many(
        {"_id": {"$in": ids[:3]}}, {"$set": {"is_public": False, "title": "x", "_rev": "9-hidden"}}
    )
    assert commit_app.get(FEED + "?limit=10&opt_fields=title").json["data"] == before
    feed_state(commit_app.app.registry).sequencer = None
    from openprocurement_feed import _start_sequencer

    _start_sequencer(commit_app.app.registry)
    wait_sequenced(store.db)
    body = commit_app.get(FEED + "?limit=3").json
    assert [item["id"] for item in body["data"]] == ids[3:]
    assert crawl(commit_app, FEED + "?limit=2") == commit_app.get(FEED + "?limit=10").json["data"]


def test_scopes_modes_and_opt_fields_in_commit_order(commit_settings: dict[str, str]) -> None:
    from pyramid.config import Configurator

    config = Configurator(settings=commit_settings)
    config.include("openprocurement_feed")
    config.add_feed(
        "submissions", path="frameworks/{frameworkID}/submissions", scope="frameworkID", allowed_fields=("status",)
    )
    app = TestApp(config.make_wsgi_app())
    registry = app.app.registry
    try:
        assert registry.feed_sequencer.wait_ready(timeout=30)
        store = registry.feed_store
        collection = store.collection("submissions")
        rows = [
            doc("a", frameworkID="F1"),
            doc("b", frameworkID="F2"),
            doc("c", frameworkID="F1", mode="test"),
            doc("d", frameworkID="F1", status="draft"),
        ]
        for row in rows:
            store.save_data(collection, row, insert=True)
        wait_sequenced(store.db, "submissions")
        path = "/api/2.5/frameworks/F1/submissions"
        body = app.get(path + "?opt_fields=status,title&limit=1").json
        assert [item["id"] for item in body["data"]] == [rows[0]["_id"]]
        stamped = collection.find_one({"_id": rows[0]["_id"]})["dateModified"]  # save_data's
        assert body["data"][0] == {"id": rows[0]["_id"], "dateModified": stamped, "status": "active"}
        assert body["next_page"]["path"].startswith(path + "?"), "links keep the scope"
        assert [item["id"] for item in crawl(app, path + "?mode=test")] == [rows[2]["_id"]]
        assert [item["id"] for item in crawl(app, path + "?mode=_all_")] == [rows[0]["_id"], rows[2]["_id"]]
        indexes = store.db[positions_name("submissions")].index_information()
        assert {"feed_frameworkID_mode", "feed_frameworkID_all", "feed_mode", "feed_all"} <= set(indexes)
        assert indexes["feed_mode"]["key"] == [("is_public", 1), ("is_test", 1), ("committed_ts", 1), ("_id", 1)]
        # the documents keep only the backfill's index: pages read the positions
        assert sorted(collection.index_information()) == ["_id_", "feed_all"]
    finally:
        shutdown(registry)


def test_watermark_offsets_are_read_in_commit_order_and_back(settings: dict[str, str]) -> None:
    """Switching a deployment between orders keeps every crawler's offset
    valid: read a margin earlier, duplicates allowed, nothing lost."""
    watermark = main({}, **dict(settings, **{"feed.watermark_seconds": "0.2"}))
    web = TestApp(watermark)
    old = [web.post_json(FEED, {"data": {"title": f"old {n}"}}).json["data"]["id"] for n in range(3)]
    time.sleep(0.4)
    watermark_offset = web.get(FEED).json["next_page"]["offset"]
    commit = main({}, **dict(settings, **{"feed.order": "commit", "feed.sequencer": "thread"}))
    commit_web = TestApp(commit)
    try:
        assert commit.registry.feed_sequencer.wait_ready(timeout=30)
        new = [commit_web.post_json(FEED, {"data": {"title": f"new {n}"}}).json["data"]["id"] for n in range(3)]
        wait_sequenced(commit.registry.feed_store.db)
        seen = [item["id"] for item in crawl(commit_web, FEED + "?offset=" + watermark_offset)]
        assert set(new) <= set(seen), "nothing written after the offset is lost"
        position = commit_web.get(FEED + "?limit=4").json["next_page"]["offset"]
        assert is_position_offset(position)
        time.sleep(0.4)
        back = [item["id"] for item in crawl(web, FEED + "?offset=" + position)]
        expected_after = [item["id"] for item in crawl(commit_web, FEED + "?offset=" + position)]
        assert set(expected_after) <= set(back), "and back to the watermark: nothing lost"
        assert set(old) | set(new) == {item["id"] for item in crawl(commit_web)}
    finally:
        shutdown(commit.registry)
        shutdown(watermark.registry)


class WriteRecorder(monitoring.CommandListener):
    """Collects the (command, collection) of every write a client sends."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("insert", "update", "delete", "findAndModify"):
            self.writes.append((event.command_name, str(event.command[event.command_name])))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_the_sequencer_never_writes_the_applications_documents(mongodb_uri: str, db_name: str) -> None:
    """Hence it cannot cause the application's transactions a write conflict."""
    from pymongo import MongoClient

    from openprocurement_feed.commit.sequencer import Sequencer

    recorder = WriteRecorder()
    app_client: MongoClient = MongoClient(mongodb_uri)
    client: MongoClient = MongoClient(mongodb_uri, event_listeners=[recorder])
    sequencer = Sequencer(client[db_name], {"tenders": ()}).start()
    try:
        assert sequencer.wait_ready(timeout=30)
        tenders = app_client[db_name]["tenders"]
        for number in range(20):
            tenders.insert_one({"_id": f"t{number}", "is_public": True, "_rev": "1-a"})
        tenders.update_many({}, {"$set": {"_rev": "2-b"}})
        tenders.delete_one({"_id": "t3"})
        wait_sequenced(client[db_name])
    finally:
        sequencer.stop()
        client.close()
        app_client.close()
    assert recorder.writes, "the sequencer wrote its positions"
    from openprocurement_feed.operations.health import HEALTH_COLLECTION

    written = {collection for _, collection in recorder.writes}
    assert positions_name("tenders") in written
    assert written <= {positions_name("tenders"), HEALTH_COLLECTION}, "never the documents"
