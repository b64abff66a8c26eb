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
    """Write A (slow transaction) and B (fast) while a crawler follows the feed.

    Without a watermark, A commits once the crawler has passed B (an event:
    on a loaded machine the crawler may take longer than any fixed delay to
    get there). With one, A commits :data:`COMMIT_DELAY` after its stamp,
    below W. Either way the crawl goes on until a page begun once A had
    committed and W had passed since both stamps comes back empty: what it
    holds then is all it will ever get, however slow the machine.
    """
    app = main({}, **dict(settings, **{"feed.watermark_seconds": str(watermark)}))
    web = TestApp(app)
    store = app.registry.feed_store
    collection = store.collection("tenders")
    a, b = doc("A: stamped first, commits last"), doc("B: stamped second, commits first")
    stamped = threading.Event()
    passed_b = threading.Event()
    committed: list[float] = []

    def slow_writer() -> None:
        with store.client.start_session() as session, session.start_transaction():
            store.save_data(collection, a, insert=True, session=session)
            stamped.set()
            if watermark:
                time.sleep(COMMIT_DELAY)
            else:
                passed_b.wait(30)
        committed.append(time.time())

    writer = threading.Thread(target=slow_writer)
    writer.start()
    assert stamped.wait(5)
    time.sleep(0.02)
    store.save_data(collection, b, insert=True)
    b_stamped = time.time()
    seen: list[str] = []
    offsets: list[str] = []
    path = FEED
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"the crawl did not settle within 60 s: {seen}"
        settled = bool(committed) and time.time() > max(committed[0], b_stamped + watermark) + 0.05
        body = web.get(path).json
        seen.extend(item["id"] for item in body["data"])
        offsets.append(body["next_page"]["offset"])
        path = body["next_page"]["path"]
        if b["_id"] in seen and not committed:
            passed_b.set()
        if settled and not body["data"]:
            break
        time.sleep(0.02)
    writer.join()
    stamps = {d["_id"]: d["public_modified"] for d in collection.find({}, {"public_modified": 1})}
    store.close()
    return {
        "seen": [item for item in seen if item in (a["_id"], b["_id"])],  # not an earlier run's
        "a": a["_id"],
        "b": b["_id"],
        "stamps": stamps,
        "offsets": offsets,
        # from A's stamp to its commit's acknowledgement: the watermark's bet is that it stays below W
        "delay": committed[0] - stamps[a["_id"]],
    }


def test_without_watermark_the_late_commit_is_lost(settings: dict[str, str]) -> None:
    result = run_race(settings, watermark=0)
    assert result["stamps"][result["a"]] < result["stamps"][result["b"]]
    assert result["b"] in result["seen"]
    assert result["a"] not in result["seen"], "the crawler passed A's stamp before A committed"


@pytest.mark.parametrize("watermark", [0.5, 1.0])
def test_with_watermark_above_the_delay_nothing_is_lost(settings: dict[str, str], watermark: float) -> None:
    # The premise is a commit delay below W (0.3 s, and the commit's own
    # time): a loaded machine may stretch it past W, where losing A is the
    # watermark's bet lost, not a fault. Up to three runs for one that
    # holds the premise, measured.
    delays = []
    for _ in range(3):
        result = run_race(settings, watermark=watermark)
        delays.append(round(result["delay"], 3))
        if result["delay"] < watermark:
            break
    assert result["delay"] < watermark, f"A's commit took longer than W in every run: {delays} s"
    assert result["stamps"][result["a"]] < result["stamps"][result["b"]]
    assert sorted(result["seen"]) == sorted([result["a"], result["b"]])
    assert result["seen"] == [result["a"], result["b"]], "served in stamp order, once each"
