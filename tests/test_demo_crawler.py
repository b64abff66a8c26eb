"""A crawler written for the public API, run unchanged against the demo.

The crawler here is not the project's reference client: it behaves the way
crawlers of the public openprocurement API do. It is given a base URL; per
resource (``tenders`` and ``plans``, and ``contracts`` as many do) it walks
the feed with ``descending=1`` back to the start, then goes forward from the
first page's ``prev_page`` offset, asks for ``opt_fields=procuringEntity``
on tenders to keep one region, and fetches each changed object with
``GET /{resource}/{id}``.

The demo is served over real HTTP on loopback, seeded with real-shaped
tenders, plans and contracts, while writers patch all three (transactions
held open 5-40 ms, so writes commit out of stamp order). After the writers
stop, the crawler must end holding every object it keeps at its latest
version — in either feed order.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from openprocurement_feed.demo.load import PatchWriter, create_objects
from openprocurement_feed.demo.server import DemoServer

pytestmark = [pytest.mark.timeout(120), pytest.mark.server]

#: What the crawler syncs: tenders and plans, and contracts as many do.
RESOURCES = ("tenders", "plans", "contracts")


@dataclass
class RegionCrawler:
    """Syncs tenders of one region, every plan and every contract from ``base_url``."""

    base_url: str
    region: str
    limit: int = 10
    http: requests.Session = field(default_factory=requests.Session)
    #: per resource, the objects kept: id → the full object last fetched
    store: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: per resource, where the forward crawl goes on from
    forward: dict[str, str] = field(default_factory=dict)
    fetched: Counter[str] = field(default_factory=Counter)
    pages: Counter[str] = field(default_factory=Counter)

    def page(self, resource: str, **params: str) -> dict[str, Any]:
        query = {"limit": str(self.limit), **params}
        if resource == "tenders":
            query["opt_fields"] = "procuringEntity"
        response = self.http.get(f"{self.base_url}/{resource}", params=query, timeout=30)
        response.raise_for_status()
        self.pages[resource] += 1
        return response.json()

    def wanted(self, resource: str, item: dict[str, Any]) -> bool:
        """Tenders of the region (read from the feed item), every plan and contract."""
        if resource != "tenders":
            return True
        return item.get("procuringEntity", {}).get("address", {}).get("region") == self.region

    def handle(self, resource: str, items: list[dict[str, Any]]) -> None:
        kept = self.store.setdefault(resource, {})
        for item in items:
            if not self.wanted(resource, item):
                continue
            known = kept.get(item["id"])
            if known is not None and known["dateModified"] >= item["dateModified"]:
                continue
            response = self.http.get(f"{self.base_url}/{resource}/{item['id']}", timeout=30)
            response.raise_for_status()
            self.fetched[resource] += 1
            data = response.json()["data"]
            if known is None or data["dateModified"] > known["dateModified"]:
                kept[item["id"]] = data

    def backward(self, resource: str) -> None:
        """``descending=1`` back to the start; remembers the first page's
        ``prev_page`` offset for the forward crawl."""
        body = self.page(resource, descending="1")
        self.forward[resource] = body["prev_page"]["offset"]
        while body["data"]:
            self.handle(resource, body["data"])
            body = self.page(resource, descending="1", offset=body["next_page"]["offset"])

    def step(self, resource: str) -> int:
        """One forward pass to the current end of the feed; items seen."""
        seen = 0
        while True:
            body = self.page(resource, offset=self.forward[resource])
            self.forward[resource] = body["next_page"]["offset"]
            if not body["data"]:
                return seen
            seen += len(body["data"])
            self.handle(resource, body["data"])


@pytest.fixture(params=["watermark", "commit"])
def demo(request: pytest.FixtureRequest, settings: dict[str, str]) -> Iterator[DemoServer]:
    server = DemoServer(
        dict(
            settings,
            **{
                "feed.order": request.param,
                "feed.sequencer": "thread",
                "demo.write_delay_ms": "5-40",
            },
        ),
        threads=12,
    ).start()
    if server.registry.feed_sequencer is not None:
        server.registry.feed_sequencer.wait_ready(timeout=30)
    yield server
    server.close()


def latest(server: DemoServer, resource: str, region: str | None = None) -> dict[str, str]:
    """id → dateModified of the public objects of ``resource`` in the database."""
    query: dict[str, Any] = {"is_public": True, "is_test": False}
    if region is not None:
        query["procuringEntity.address.region"] = region
    collection = server.registry.feed_store.collection(resource)
    return {doc["_id"]: doc["dateModified"] for doc in collection.find(query, {"dateModified": 1})}


def test_a_public_api_crawler_syncs_tenders_plans_and_contracts_while_writers_patch(demo: DemoServer) -> None:
    api = demo.api_url
    tenders = create_objects(api, "tenders", 20, seed=11)
    plans = create_objects(api, "plans", 10, seed=12)
    contracts = create_objects(api, "contracts", 6, seed=13, tender_ids=tenders)
    regions = Counter(
        doc["procuringEntity"]["address"]["region"]
        for doc in demo.registry.feed_store.collection("tenders").find({"is_public": True})
    )
    region, in_region = regions.most_common(1)[0]
    assert in_region >= 2 and len(regions) >= 2, regions  # the filter keeps some, drops some

    targets = (
        [("tenders", one) for one in tenders]
        + [("plans", one) for one in plans]
        + [("contracts", one) for one in contracts]
    )
    # Each writer patches its own objects: two writers' transactions on one
    # object conflict, and on a loaded machine (each held open up to 40 ms)
    # a patch can lose all its retries to the other and get the demo's 409,
    # which is not what this test is about.
    writers = [
        PatchWriter(api, targets[number::3], rate=20, seed=number, name=f"writer-{number}") for number in range(3)
    ]
    for writer in writers:
        writer.start()
    crawler = RegionCrawler(api, region)
    try:
        for resource in RESOURCES:
            crawler.backward(resource)
        # forward while the writers patch: a number of patches, not a span of
        # time (a loaded machine patches fewer a second)
        deadline = time.monotonic() + 60
        while sum(writer.stats.patches for writer in writers) <= 20:
            assert time.monotonic() < deadline, "the writers made 20 patches within 60 s"
            for resource in RESOURCES:
                crawler.step(resource)
            time.sleep(0.05)
    finally:
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(timeout=10)
    assert sum(writer.stats.patches for writer in writers) > 20
    assert {target[0] for writer in writers for target in writer.ids} == set(RESOURCES)
    assert sum(writer.stats.errors for writer in writers) == 0, [writer.stats.failures for writer in writers]

    expected = {
        "tenders": latest(demo, "tenders", region),
        "plans": latest(demo, "plans"),
        "contracts": latest(demo, "contracts"),
    }
    deadline = time.monotonic() + 20

    def holds() -> dict[str, dict[str, str]]:
        return {
            resource: {key: doc["dateModified"] for key, doc in crawler.store.get(resource, {}).items()}
            for resource in expected
        }

    while holds() != expected and time.monotonic() < deadline:
        for resource in expected:
            crawler.step(resource)
        time.sleep(0.1)
    assert holds() == expected, "the crawler ended without every object at its latest version"
    assert len(expected["tenders"]) == in_region and len(expected["plans"]) == len(plans)
    assert len(expected["contracts"]) == len(contracts)
    for doc in crawler.store["tenders"].values():  # the full object, real-shaped
        assert doc["procuringEntity"]["address"]["region"] == region
        assert doc["tenderID"].startswith("UA-") and doc["items"][0]["classification"]["scheme"] == "ДК021"
    assert crawler.pages["tenders"] > 4, "the crawl went over several pages"


def test_the_three_feeds_and_unknown_paths_answer_json(demo: DemoServer) -> None:
    for resource in ("tenders", "plans", "contracts"):
        response = requests.get(f"{demo.api_url}/{resource}?descending=1", timeout=10)
        assert response.status_code == 200 and "prev_page" in response.json()
    response = requests.get(f"{demo.api_url}/awards", timeout=10)
    assert response.status_code == 404
    assert response.json()["errors"] == [{"location": "url", "name": "url", "description": "Not Found"}]
