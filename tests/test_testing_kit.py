"""The testing kit host applications use (``openprocurement_feed.testing``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from webtest import TestApp

from openprocurement_feed.testing import (
    TEST_WATERMARK,
    crawl,
    make_settings,
    save_in_the_past,
    serve_http,
    wait_visible,
)


def test_make_settings_and_the_factory(
    feed_settings_factory: Callable[..., dict[str, str]], mongodb_uri: str, db_name: str
) -> None:
    assert make_settings("mongodb://x/", "db") == {
        "mongodb.uri": "mongodb://x/",
        "mongodb.db_name": "db",
        "feed.watermark_seconds": str(TEST_WATERMARK),
    }
    made = feed_settings_factory(feed_order="commit")
    assert made["feed.order"] == "commit"
    assert (made["mongodb.uri"], made["mongodb.db_name"]) == (mongodb_uri, db_name)


def test_documents_saved_in_the_past_are_visible_at_once(demo_app: TestApp, store: Any) -> None:
    saved = save_in_the_past(
        store, store.collection("tenders"), [{"tenderID": "a"}, {"tenderID": "b"}, {"tenderID": "c", "status": "draft"}]
    )
    stamps = [doc["public_modified"] for doc in saved]
    assert stamps == sorted(stamps) and stamps[0] < time.time() - 3000
    data = demo_app.get("/api/2.5/tenders?opt_fields=tenderID").json["data"]  # no wait
    assert [item["tenderID"] for item in data] == ["a", "b"]


def test_wait_visible_over_http_and_its_failure(demo_app: TestApp) -> None:
    tender = demo_app.post_json("/api/2.5/tenders", {"data": {}}).json["data"]
    with serve_http(demo_app.app) as url:
        seen = wait_visible(lambda: [i["id"] for i in crawl(url, "/api/2.5/tenders")], [tender["id"]])
        assert tender["id"] in seen
        with pytest.raises(AssertionError, match=r"1 documents not visible.*'missing-id'"):
            wait_visible(lambda: [i["id"] for i in crawl(url, "/api/2.5/tenders")], ["missing-id"], timeout=0.3)
