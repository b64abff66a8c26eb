"""The race of SPEC "the problem", reproduced on the real server both ways.

A write stamped earlier (inside a transaction that stays open) commits after a
later-stamped write that a crawler has already passed. Without the watermark
the crawler holding the later offset never sees it; with a watermark above
the delay it does.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from webtest import TestApp

from openprocurement_feed.demo import main

FEED = "/api/2.5/tenders"
COMMIT_DELAY = 0.3


def doc(title: str) -> dict[str, Any]:
    return {"_id": uuid.uuid4().hex, "title": title, "status": "active", "dateModified": "x"}


def run_race(settings: dict[str, str], watermark: float) -> dict[str, Any]:
    """Write A (slow transaction) and B (fast) while a crawler follows the feed."""
    app = main({}, **dict(settings, **{"feed.watermark_seconds": str(watermark)}))
    web = TestApp(app)
    store = app.registry.feed_store
    collection = store.collection("tenders")
    a, b = doc("A: stamped first, commits last"), doc("B: stamped second, commits first")
    stamped = threading.Event()

    def slow_writer() -> None:
        with store.client.start_session() as session, session.start_transaction():
            store.save_data(collection, a, insert=True, session=session)
            stamped.set()
            time.sleep(COMMIT_DELAY)

    writer = threading.Thread(target=slow_writer)
    writer.start()
    stamped.wait(5)
    time.sleep(0.02)
    store.save_data(collection, b, insert=True)
    seen: list[str] = []
    offsets: list[str] = []
    path = FEED
    deadline = time.monotonic() + COMMIT_DELAY + watermark + 1.0
    while time.monotonic() < deadline:
        body = web.get(path).json
        seen.extend(item["id"] for item in body["data"])
        offsets.append(body["next_page"]["offset"])
        path = body["next_page"]["path"]
        time.sleep(0.02)
    writer.join()
    stamps = {d["_id"]: d["public_modified"] for d in collection.find({}, {"public_modified": 1})}
    store.close()
    return {"seen": seen, "a": a["_id"], "b": b["_id"], "stamps": stamps, "offsets": offsets}


def test_without_watermark_the_late_commit_is_lost(settings: dict[str, str]) -> None:
    result = run_race(settings, watermark=0)
    assert result["stamps"][result["a"]] < result["stamps"][result["b"]]
    assert result["b"] in result["seen"]
    assert result["a"] not in result["seen"], "the crawler passed A's stamp before A committed"


@pytest.mark.parametrize("watermark", [0.5, 1.0])
def test_with_watermark_above_the_delay_nothing_is_lost(settings: dict[str, str], watermark: float) -> None:
    result = run_race(settings, watermark=watermark)
    assert result["stamps"][result["a"]] < result["stamps"][result["b"]]
    assert sorted(result["seen"]) == sorted([result["a"], result["b"]])
    assert result["seen"] == [result["a"], result["b"]], "served in stamp order, once each"
