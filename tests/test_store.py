"""The store: stamped writes, optimistic concurrency, and the mixin on a host
store class, against the real server."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pymongo import MongoClient

from openprocurement_feed.store.database import (
    ConflictError,
    FeedStoreMixin,
    find_window,
    next_rev,
)
from openprocurement_feed.store.offset import Offset, ids_digest


class HostStore(FeedStoreMixin):
    """A host application's own store class with the mixin."""

    watermark_seconds = 0.2
    max_limit = 50

    def __init__(self, client: MongoClient, db_name: str) -> None:
        self.tenders = client[db_name]["tenders"]


@pytest.fixture
def host(mongo_client: MongoClient, db_name: str) -> HostStore:
    return HostStore(mongo_client, db_name)


def server_now(client: MongoClient) -> float:
    return client.admin.command("hello")["localTime"].timestamp()


def test_save_data_stamps_now_of_the_server(host: HostStore, mongo_client: MongoClient) -> None:
    before = server_now(mongo_client)
    saved = host.save_data(host.tenders, {"_id": "t1", "status": "active"}, insert=True)
    after = server_now(mongo_client)
    assert before - 0.01 <= saved["public_modified"] <= after + 0.01
    stored = host.tenders.find_one({"_id": "t1"})
    assert stored["public_modified"] == saved["public_modified"]
    assert round(stored["public_modified"], 3) == stored["public_modified"]
    assert stored["_rev"].startswith("1-") and len(stored["_rev"]) == 34
    assert stored["is_public"] is True and stored["is_test"] is False


@pytest.mark.parametrize("status, public", [("draft", False), ("deleted", False), ("active", True), (None, True)])
def test_is_public(host: HostStore, status: Any, public: bool) -> None:
    host.save_data(host.tenders, {"_id": "t", "status": status}, insert=True)
    assert host.tenders.find_one({"_id": "t"})["is_public"] is public


def test_is_test(host: HostStore) -> None:
    host.save_data(host.tenders, {"_id": "t", "mode": "test"}, insert=True)
    assert host.tenders.find_one({"_id": "t"})["is_test"] is True


def test_dollar_strings_stay_inert(host: HostStore) -> None:
    data = {"_id": "t", "title": "$$NOW", "nested": {"x": "$title"}, "list": ["$foo"]}
    host.save_data(host.tenders, data, insert=True)
    stored = host.tenders.find_one({"_id": "t"})
    assert (stored["title"], stored["nested"], stored["list"]) == ("$$NOW", {"x": "$title"}, ["$foo"])


def test_update_with_current_rev_and_conflict_with_stale_rev(host: HostStore) -> None:
    first = host.save_data(host.tenders, {"_id": "t", "v": 1}, insert=True)
    second = host.save_data(host.tenders, dict(first, v=2))
    assert second["_rev"].startswith("2-")
    with pytest.raises(ConflictError):
        host.save_data(host.tenders, dict(first, v=3))  # stale _rev
    assert host.tenders.find_one({"_id": "t"})["v"] == 2


def test_insert_of_an_existing_id_is_a_conflict(host: HostStore) -> None:
    host.save_data(host.tenders, {"_id": "t"}, insert=True)
    with pytest.raises(ConflictError):
        host.save_data(host.tenders, {"_id": "t"}, insert=True)


def test_update_of_a_missing_document_is_a_conflict(host: HostStore) -> None:
    with pytest.raises(ConflictError):
        host.save_data(host.tenders, {"_id": "missing", "_rev": "1-abc"})


class Transactional:
    """``save_data`` of ``host`` run inside a transaction of its own (the
    demo's writes): the guarded ``update_one`` by ``_id`` and the read-back."""

    def __init__(self, host: HostStore, client: MongoClient) -> None:
        self.host = host
        self.client = client
        self.tenders = host.tenders

    def save_data(self, collection: Any, data: Any, **options: Any) -> Any:
        with self.client.start_session() as session, session.start_transaction():
            assert session.in_transaction
            return self.host.save_data(collection, data, session=session, **options)


@pytest.fixture(params=["plain", "transaction"])
def saver(request: pytest.FixtureRequest, host: HostStore, mongo_client: MongoClient) -> Any:
    """The store, saving outside a transaction or inside one."""
    return host if request.param == "plain" else Transactional(host, mongo_client)


def test_both_write_paths_stamp_guard_and_report_conflicts(saver: Any, mongo_client: MongoClient) -> None:
    tenders = saver.tenders
    before = server_now(mongo_client)
    first = saver.save_data(tenders, {"_id": "t", "v": 1, "title": "$$NOW"}, insert=True)
    stored = tenders.find_one({"_id": "t"})
    assert stored["public_modified"] == first["public_modified"] >= before - 0.01
    assert stored["title"] == "$$NOW" and stored["_rev"] == first["_rev"]
    time.sleep(0.01)
    second = saver.save_data(tenders, dict(first, v=2))
    assert second["_rev"].startswith("2-") and second["public_modified"] > first["public_modified"]
    assert tenders.find_one({"_id": "t"})["public_modified"] == second["public_modified"]
    with pytest.raises(ConflictError):
        saver.save_data(tenders, dict(first, v=3))  # stale _rev: nothing written
    with pytest.raises(ConflictError):
        saver.save_data(tenders, {"_id": "t", "v": 4}, insert=True)  # the id is taken
    with pytest.raises(ConflictError):
        saver.save_data(tenders, {"_id": "missing", "_rev": "1-abc"})
    stored = tenders.find_one({"_id": "t"})
    assert (stored["v"], stored["_rev"], stored["public_modified"]) == (2, second["_rev"], second["public_modified"])
    assert tenders.find_one({"_id": "missing"}) is None
    kept = saver.save_data(tenders, {"_id": "k", "public_modified": 123.456}, insert=True, modified=False)
    assert kept["public_modified"] == tenders.find_one({"_id": "k"})["public_modified"] == 123.456


def test_a_stale_save_in_a_transaction_changes_nothing(host: HostStore, mongo_client: MongoClient) -> None:
    """The guard leaves the document as it was, stamp included: no write
    the sequencer would see as a change."""
    first = host.save_data(host.tenders, {"_id": "t", "v": 1}, insert=True)
    second = host.save_data(host.tenders, dict(first, v=2))
    with pytest.raises(ConflictError):
        Transactional(host, mongo_client).save_data(host.tenders, dict(first, v=3))
    stored = host.tenders.find_one({"_id": "t"})
    assert stored["public_modified"] == second["public_modified"] and stored["_rev"] == second["_rev"]


def test_modified_false_keeps_the_given_stamp(host: HostStore) -> None:
    host.save_data(host.tenders, {"_id": "t", "public_modified": 123.456}, insert=True, modified=False)
    assert host.tenders.find_one({"_id": "t"})["public_modified"] == 123.456
    with pytest.raises(ValueError, match="public_modified"):
        host.save_data(host.tenders, {"_id": "u"}, insert=True, modified=False)


def test_save_data_needs_an_id(host: HostStore) -> None:
    with pytest.raises(ValueError, match="_id"):
        host.save_data(host.tenders, {"title": "x"}, insert=True)


def test_mixin_list_applies_the_watermark(host: HostStore) -> None:
    host.save_data(host.tenders, {"_id": "old", "public_modified": 1.0}, insert=True, modified=False)
    host.save_data(host.tenders, {"_id": "new"}, insert=True)
    assert [d["_id"] for d in host.list(host.tenders, ["_id"])] == ["old"]
    assert [d["_id"] for d in host.list(host.tenders, [], descending=True, offset_value=1e10)] == ["new", "old"]
    time.sleep(0.3)
    assert [d["_id"] for d in host.list(host.tenders, [])] == ["old", "new"]


def test_watermark_zero_disables_it(host: HostStore) -> None:
    host.watermark_seconds = 0
    host.save_data(host.tenders, {"_id": "new"}, insert=True)
    assert [d["_id"] for d in host.list(host.tenders, [])] == ["new"]
    query, _ = host.build_query()
    assert "$expr" not in query


def test_build_query_shapes(host: HostStore) -> None:
    query, sort = host.build_query(offset_value=5.0, inclusive_filter=True, mode="test")
    assert query["public_modified"] == {"$gte": 5.0}
    assert query["is_test"] is True and query["is_public"] is True
    assert "$expr" in query
    assert sort == [("public_modified", 1), ("_id", 1)]
    query, sort = host.build_query(offset_value=5.0, descending=True, mode="_all_")
    assert query["public_modified"] == {"$lt": 5.0}
    assert "$expr" not in query and "is_test" not in query
    assert sort == [("public_modified", -1), ("_id", -1)]
    query, _ = host.build_query(descending=True)
    assert "$expr" in query and query["is_test"] is False


def test_feed_page_with_a_tie_offset(host: HostStore) -> None:
    for name in "abcde":
        host.save_data(host.tenders, {"_id": name, "public_modified": 7.0}, insert=True, modified=False)
    offset = Offset(7.0, 2, ids_digest(["c", "d"]))
    assert [d["_id"] for d in host.feed_page(host.tenders, [], offset, limit=10)] == ["e"]


def test_find_window() -> None:
    ids = ["a", "b", "c", "d"]
    assert find_window(ids, 2, ids_digest(["b", "c"])) == 3
    assert find_window(ids, 2, ids_digest(["a", "c"])) is None
    assert find_window(ids, 5, "x") is None
    assert find_window(ids, 0, "") is None


def test_next_rev() -> None:
    assert next_rev(None).startswith("1-")
    assert next_rev("41-abc").startswith("42-")
    assert next_rev("garbage").startswith("1-")
