"""The demo tender API: create, read, patch, errors, and the write delay."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from pyramid.exceptions import ConfigurationError

from conftest import wait_watermark
from openprocurement_feed.demo import main
from openprocurement_feed.demo.settings import parse_delay

TENDERS = "/api/2.5/tenders"


def test_create_read_patch(demo_app: Any, store: Any) -> None:
    created = demo_app.post_json(TENDERS, {"data": {"title": "Fuel", "mode": "test"}}, status=201)
    data = created.json["data"]
    assert len(data["id"]) == 32 and int(data["id"], 16) >= 0
    assert data["status"] == "active" and data["title"] == "Fuel"
    assert created.headers["Location"].endswith(f"{TENDERS}/{data['id']}")
    stored = store.collection("tenders").find_one({"_id": data["id"]})
    assert {"_id", "_rev", "is_public", "is_test", "public_modified", "dateModified"} <= set(stored)
    assert stored["is_test"] is True
    assert demo_app.get(f"{TENDERS}/{data['id']}").json["data"] == data
    patched = demo_app.patch_json(f"{TENDERS}/{data['id']}", {"data": {"title": "Diesel"}}).json["data"]
    assert patched["title"] == "Diesel" and patched["dateModified"] > data["dateModified"]
    assert store.collection("tenders").find_one({"_id": data["id"]})["_rev"].startswith("2-")


def test_unknown_tender_is_404(demo_app: Any) -> None:
    body = demo_app.get(f"{TENDERS}/{'0' * 32}", status=404).json
    assert body["status"] == "error" and body["errors"][0]["name"] == "tender_id"
    demo_app.patch_json(f"{TENDERS}/{'0' * 32}", {"data": {"title": "x"}}, status=404)


@pytest.mark.parametrize(
    "body, name",
    [
        ("not json", "body"),
        ("[1, 2]", "data"),
        ('{"title": "no data"}', "data"),
        ('{"data": "text"}', "data"),
        ('{"data": {"_id": "mine"}}', "data"),
        ('{"data": {"public_modified": 1}}', "data"),
        ('{"data": {"$set": 1}}', "data"),
        ('{"data": {"status": "bogus"}}', "status"),
        ('{"data": {"mode": "prod"}}', "mode"),
    ],
)
def test_bad_bodies_are_422_with_the_error_body(demo_app: Any, body: str, name: str) -> None:
    response = demo_app.post(TENDERS, body, content_type="application/json", status=422)
    assert response.json["status"] == "error"
    assert response.json["errors"][0]["name"] == name


def test_created_tender_reaches_the_feed_after_the_watermark(demo_app: Any) -> None:
    tender = demo_app.post_json(TENDERS, {"data": {"title": "x"}}).json["data"]
    wait_watermark()
    feed = demo_app.get(TENDERS + "?opt_fields=status").json
    assert feed["data"] == [{"id": tender["id"], "dateModified": tender["dateModified"], "status": "active"}]


def test_draft_tender_is_not_in_the_feed(demo_app: Any) -> None:
    demo_app.post_json(TENDERS, {"data": {"status": "draft"}})
    wait_watermark()
    assert demo_app.get(TENDERS).json["data"] == []


def test_concurrent_patches_of_one_tender_all_succeed_or_conflict(settings: dict[str, str]) -> None:
    from webtest import TestApp

    app = main({}, **dict(settings, **{"demo.write_delay_ms": "20-40"}))
    web = TestApp(app)
    tender = web.post_json(TENDERS, {"data": {"title": "x"}}).json["data"]
    statuses: list[int] = []

    def patch(number: int) -> None:
        response = web.patch_json(f"{TENDERS}/{tender['id']}", {"data": {"n": number}}, expect_errors=True)
        statuses.append(response.status_int)

    threads = [threading.Thread(target=patch, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(statuses) <= {200, 409}
    assert 200 in statuses
    rev = app.registry.feed_store.collection("tenders").find_one({"_id": tender["id"]})["_rev"]
    assert int(rev.split("-")[0]) == 1 + statuses.count(200)
    app.registry.feed_store.close()


def test_write_delay_keeps_the_transaction_open(settings: dict[str, str]) -> None:
    from webtest import TestApp

    app = main({}, **dict(settings, **{"demo.write_delay_ms": "150"}))
    started = time.monotonic()
    TestApp(app).post_json(TENDERS, {"data": {}}, status=201)
    assert time.monotonic() - started >= 0.15
    app.registry.feed_store.close()


@pytest.mark.parametrize("raw, parsed", [("0", (0, 0)), ("20", (20, 20)), ("5-40", (5, 40)), (" 5 - 40 ", (5, 40))])
def test_parse_delay(raw: str, parsed: tuple[int, int]) -> None:
    assert parse_delay(raw) == parsed


@pytest.mark.parametrize("raw", ["-5", "40-5", "fast", "1.5", "5-"])
def test_bad_delay_names_the_setting(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="demo.write_delay_ms"):
        parse_delay(raw)
