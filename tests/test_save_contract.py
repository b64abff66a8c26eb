"""``save_data`` keeps upstream's contract: ``id``/``rev`` as well as
``_id``/``_rev``, ``dateModified``/``dateCreated`` from the request's time,
``is_masked`` dropped unless true, the visibility policies as hooks, and a
clear error for an update without its revision."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import pytest
from pymongo import MongoClient
from pyramid.config import Configurator
from pyramid.request import Request
from webtest import TestApp

from openprocurement_feed.store.database import ConflictError, FeedStoreMixin, MissingRevision

MOMENT = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


class Store(FeedStoreMixin):
    """A host store whose clock is fixed (the ``now`` hook)."""

    def __init__(self, client: MongoClient, db_name: str) -> None:
        self.tenders = client[db_name]["tenders"]

    def now(self) -> datetime:
        return MOMENT


class Policies(Store):
    """A host with its own visibility policies."""

    hidden_statuses = ("draft", "deleted", "draft.pending")

    def is_test(self, doc: Mapping[str, Any]) -> bool:
        return doc.get("mode") == "test" or str(doc.get("title", "")).startswith("[TEST]")


@pytest.fixture
def store(mongo_client: MongoClient, db_name: str) -> Store:
    return Store(mongo_client, db_name)


def test_id_and_rev_are_accepted_like_underscored_ones(store: Store) -> None:
    first = store.save_data(store.tenders, {"id": "t1", "status": "active"}, insert=True)
    assert first["_id"] == "t1" and "id" not in first
    stored = store.tenders.find_one({"_id": "t1"})
    assert "id" not in stored and "rev" not in stored
    second = store.save_data(store.tenders, {"id": "t1", "rev": first["_rev"], "status": "active"})
    assert second["_rev"].startswith("2-")
    with pytest.raises(ConflictError):
        store.save_data(store.tenders, {"id": "t1", "rev": first["_rev"]})


def test_dates_come_from_now_on_insert_and_update(store: Store) -> None:
    saved = store.save_data(store.tenders, {"_id": "t", "dateModified": "old", "dateCreated": "old"}, insert=True)
    assert saved["dateModified"] == saved["dateCreated"] == MOMENT.isoformat()
    stored = store.tenders.find_one({"_id": "t"})
    assert stored["dateModified"] == stored["dateCreated"] == MOMENT.isoformat()
    updated = store.save_data(store.tenders, dict(stored, dateCreated="kept"))
    assert updated["dateCreated"] == "kept"  # only an insert stamps it


def test_modified_false_keeps_the_given_dates(store: Store) -> None:
    data = {"_id": "t", "public_modified": 5.0, "dateModified": "2020-01-01", "dateCreated": "2019-01-01"}
    saved = store.save_data(store.tenders, data, insert=True, modified=False)
    assert (saved["dateModified"], saved["dateCreated"]) == ("2020-01-01", "2019-01-01")
    bare = store.save_data(store.tenders, {"_id": "u", "public_modified": 5.0}, insert=True, modified=False)
    assert bare["dateCreated"] == MOMENT.isoformat() and "dateModified" not in bare


@pytest.mark.parametrize("value, kept", [(True, True), (False, False), (None, False), ("yes", False)])
def test_is_masked_is_dropped_unless_true(store: Store, value: Any, kept: bool) -> None:
    store.save_data(store.tenders, {"_id": "t", "is_masked": value}, insert=True)
    assert ("is_masked" in store.tenders.find_one({"_id": "t"})) is kept


def test_an_update_without_rev_says_so(store: Store) -> None:
    store.save_data(store.tenders, {"_id": "t"}, insert=True)
    with pytest.raises(MissingRevision, match="updating document t needs its current '_rev'"):
        store.save_data(store.tenders, {"_id": "t", "title": "x"})


def test_visibility_policies_are_hooks(mongo_client: MongoClient, db_name: str) -> None:
    store = Policies(mongo_client, db_name)
    store.save_data(store.tenders, {"_id": "p", "status": "draft.pending"}, insert=True)
    store.save_data(store.tenders, {"_id": "a", "status": "active"}, insert=True)
    store.save_data(store.tenders, {"_id": "x", "title": "[TEST] x"}, insert=True)
    docs = {d["_id"]: d for d in store.tenders.find()}
    assert (docs["p"]["is_public"], docs["a"]["is_public"]) == (False, True)
    assert (docs["x"]["is_test"], docs["a"]["is_test"]) == (True, False)


def test_the_default_clock_is_the_requests_time(
    mongo_client: MongoClient, db_name: str, settings: dict[str, str]
) -> None:
    """Two writes in one request share ``request.feed_now``."""

    class RequestClock(FeedStoreMixin):
        def __init__(self) -> None:
            self.tenders = mongo_client[db_name]["tenders"]

    clock = RequestClock()

    def write_two(request: Request) -> dict[str, Any]:
        one = clock.save_data(clock.tenders, {"_id": "one"}, insert=True)
        two = clock.save_data(clock.tenders, {"_id": "two"}, insert=True)
        return {"one": one["dateModified"], "two": two["dateModified"], "now": request.feed_now.isoformat()}

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_route("write", "/write")
    config.add_view(write_two, route_name="write", renderer="json")
    app = config.make_wsgi_app()
    try:
        body = TestApp(app).get("/write").json
    finally:
        app.registry.feed_store.close()
    assert body["one"] == body["two"] == body["now"]
