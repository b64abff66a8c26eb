"""The demo tender API: create, read, patch, errors, and the write delay."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from conftest import wait_watermark
from pyramid.exceptions import ConfigurationError

from openprocurement_feed.demo import main
from openprocurement_feed.demo.settings import parse_delay

TENDERS = "/api/2.5/tenders"


def test_create_read_patch(demo_app: Any, store: Any) -> None:
    created = demo_app.post_json(TENDERS, {"data": {"title": "Fuel", "mode": "test"}}, status=201)
    data = created.json["data"]
    assert len(data["id"]) == 32 and int(data["id"], 16) >= 0
    assert data["status"] == "active.enquiries" and data["title"] == "Fuel"
    assert data["tenderID"].startswith("UA-") and data["tenderID"].endswith("-a")
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
        # found by schemathesis (tests/test_fuzz.py): were accepted
        ('{"data": {}, "access": true}', "access"),
        ('{"data": {}, "access": null}', "access"),
        ('{"data": {}, "access": {"token": 5}}', "access"),
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
    assert feed["data"] == [{"id": tender["id"], "dateModified": tender["dateModified"], "status": "active.enquiries"}]


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
    with pytest.raises(ConfigurationError, match=r"demo\.write_delay_ms"):
        parse_delay(raw)


# -- plans, contracts, statuses, server-owned fields, JSON errors ------------

PLANS = "/api/2.5/plans"
CONTRACTS = "/api/2.5/contracts"


@pytest.mark.parametrize(
    "path, id_field, pattern, status",
    [
        (TENDERS, "tenderID", r"UA-\d{4}-\d\d-\d\d-\d{6}-a", "active.enquiries"),
        (PLANS, "planID", r"UA-P-\d{4}-\d\d-\d\d-\d{6}-a", "scheduled"),
        (CONTRACTS, "contractID", r"UA-\d{4}-\d\d-\d\d-\d{6}-a-c1", "active"),
    ],
)
def test_each_resource_creates_reads_patches_and_feeds(
    demo_app: Any, store: Any, path: str, id_field: str, pattern: str, status: str
) -> None:
    import re

    first = demo_app.post_json(path, {"data": {"title": "one"}}, status=201).json["data"]
    second = demo_app.post_json(path, {"data": {"title": "two"}}, status=201).json["data"]
    assert re.fullmatch(pattern, first[id_field]), first[id_field]
    assert first["status"] == status
    assert (
        int(second[id_field].split("-")[-2 if path != CONTRACTS else -3])
        == int(first[id_field].split("-")[-2 if path != CONTRACTS else -3]) + 1
    )
    name = path.rsplit("/", 1)[1]
    assert store.collection(name).count_documents({}) == 2  # its own collection
    patched = demo_app.patch_json(f"{path}/{first['id']}", {"data": {"title": "uno"}}).json["data"]
    assert patched["title"] == "uno" and patched[id_field] == first[id_field]
    assert demo_app.get(f"{path}/{first['id']}").json["data"] == patched
    wait_watermark()
    page = demo_app.get(f"{path}?opt_fields={id_field},dateCreated,title").json["data"]
    assert {item["id"]: item[id_field] for item in page} == {
        first["id"]: first[id_field],
        second["id"]: second[id_field],
    }
    assert all("title" not in item for item in page), "title is not a listing field"


def test_tender_feed_allows_upstreams_listing_fields(demo_app: Any) -> None:
    import random

    from openprocurement_feed.demo.documents import tender

    data = tender(random.Random(7))
    data["status"] = "active.auction"
    created = demo_app.post_json(TENDERS, {"data": data}, status=201).json["data"]
    wait_watermark()
    [item] = demo_app.get(
        TENDERS + "?opt_fields=procuringEntity,status,procurementMethodType,auctionPeriod,tenderID,next_check"
    ).json["data"]
    assert item["procuringEntity"]["address"]["region"] == data["procuringEntity"]["address"]["region"]
    assert item["status"] == "active.auction"
    assert item["tenderID"] == created["tenderID"]
    assert item["procurementMethodType"] == data["procurementMethodType"]


@pytest.mark.parametrize(
    "path, status",
    [
        (TENDERS, s)
        for s in (
            "active.tendering",
            "active.pre-qualification",
            "active.qualification",
            "active.awarded",
            "complete",
            "cancelled",
            "unsuccessful",
            "draft",
        )
    ]
    + [(PLANS, s) for s in ("draft", "scheduled", "cancelled", "complete")]
    + [(CONTRACTS, s) for s in ("pending", "active", "terminated", "cancelled")],
)
def test_real_statuses_are_accepted(demo_app: Any, path: str, status: str) -> None:
    assert demo_app.post_json(path, {"data": {"status": status}}, status=201).json["data"]["status"] == status


@pytest.mark.parametrize(
    "path, status", [(TENDERS, "scheduled"), (PLANS, "active.tendering"), (CONTRACTS, "complete"), (TENDERS, "deleted")]
)
def test_statuses_of_another_resource_are_refused(demo_app: Any, path: str, status: str) -> None:
    body = demo_app.post_json(path, {"data": {"status": status}}, status=422).json
    assert body["errors"][0]["name"] == "status"


@pytest.mark.parametrize("path, id_field", [(TENDERS, "tenderID"), (PLANS, "planID"), (CONTRACTS, "contractID")])
def test_server_owned_fields_in_a_body_are_ignored(demo_app: Any, path: str, id_field: str) -> None:
    owned = {
        "id": "f" * 32,
        "dateModified": "2001-01-01T00:00:00+00:00",
        "dateCreated": "2001-01-01T00:00:00+00:00",
        id_field: "MINE-1",
    }
    created = demo_app.post_json(path, {"data": dict(owned, title="x")}, status=201).json["data"]
    assert created["title"] == "x"
    for key, value in owned.items():
        assert created[key] != value, key
    # a client that sends back what it read (server-owned fields included) is fine
    echoed = dict(created, title="y")
    patched = demo_app.patch_json(f"{path}/{created['id']}", {"data": dict(echoed, **owned)}).json["data"]
    assert patched["title"] == "y"
    assert patched["id"] == created["id"] and patched[id_field] == created[id_field]
    assert patched["dateCreated"] == created["dateCreated"]
    assert patched["dateModified"] > created["dateModified"]


@pytest.mark.parametrize(
    "method, path, status, name",
    [
        ("GET", "/nowhere", 404, "url"),
        ("GET", "/api/2.5/awards", 404, "url"),
        ("DELETE", TENDERS, 405, "method"),
        ("PUT", PLANS, 405, "method"),
        ("GET", f"{PLANS}/{'0' * 32}", 404, "plan_id"),
        ("GET", f"{CONTRACTS}/{'0' * 32}", 404, "contract_id"),
    ],
)
def test_errors_are_json(demo_app: Any, method: str, path: str, status: int, name: str) -> None:
    response = demo_app.request(path, method=method, status=status)
    assert response.content_type == "application/json"
    assert response.json["status"] == "error"
    assert response.json["errors"][0]["name"] == name
    if status == 405:
        assert "GET" in response.headers["Allow"]


def test_parallel_first_creates_of_a_day_get_distinct_ids(demo_app: Any) -> None:
    """The per-day counter is created by whichever create comes first; the
    others take the next values (no 500, no duplicate)."""
    from concurrent.futures import ThreadPoolExecutor

    def create(_: int) -> Any:
        return demo_app.post_json(PLANS, {"data": {}}, expect_errors=True)

    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(create, range(16)))
    assert [response.status_int for response in responses] == [201] * 16
    ids = {response.json["data"]["planID"] for response in responses}
    assert len(ids) == 16
