"""A burst of writes larger than the oplog's bound loses nothing in the
commit order (SPEC I.4): the embedded server prunes entries under a live
change stream without failing it, the sequencer tells by itself
(:mod:`openprocurement_feed.commit.history`) and recovers, and the health
view is not ``ok`` meanwhile, whatever the stamps of the missed documents
(their insert's, or a restore's a year old).

Each test starts a server of its own with a small oplog, inserts many more
tenders at once than it keeps, and waits until the commit-ordered feed (over
HTTP) shows every one, sampling the health view all along.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from webtest import TestApp

from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.store.orders import HISTORY_LOST, STATE_ID, positions_name

pytestmark = pytest.mark.server  # starts a server or a process of its own

#: the oplog's bound and the burst (the embedded server prunes every 1000 writes)
OPLOG_ENTRIES = 200
BURST = 3000
SCRIPT = Path(sys.executable).with_name("openprocurement-feed")
YEAR = 365 * 86400


@pytest.fixture
def small_oplog() -> Iterator[EmbeddedServer]:
    with EmbeddedServer(extra_args=("--oplog-max-entries", str(OPLOG_ENTRIES))) as server:
        yield server


def tenders(count: int, stamp: float) -> list[dict[str, Any]]:
    """``count`` public tenders as the demo stores them, stamped from ``stamp``."""
    return [
        {
            "_id": uuid.uuid4().hex,
            "_rev": f"1-{uuid.uuid4().hex}",
            "status": "active",
            "dateModified": "2026-01-01T00:00:00+00:00",
            "is_public": True,
            "is_test": False,
            "public_modified": stamp + number / 1000,
        }
        for number in range(count)
    ]


def crawl(web: TestApp) -> set[str]:
    """Every id the commit-ordered feed shows, crawled as a crawler does."""
    seen: set[str] = set()
    path = "/api/2.5/tenders?limit=1000"
    while True:
        page = web.get(path).json
        if not page["data"]:
            return seen
        seen.update(item["id"] for item in page["data"])
        path = page["next_page"]["path"]


class HealthSampler(threading.Thread):
    """Reads the health view until stopped: (verdict, reason) of the feed."""

    def __init__(self, web: TestApp) -> None:
        super().__init__(daemon=True)
        self.web = web
        self.samples: list[tuple[str, str]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            feeds = self.web.get("/api/2.5/feeds/health", status="*").json.get("feeds", [])
            for feed in feeds:
                if feed["name"] == "tenders":
                    self.samples.append((feed["verdict"], feed["reason"]))
            self.stopping.wait(0.2)


def burst_reaches_the_feed(web: TestApp, client: MongoClient[Any], db_name: str, stamp: float) -> HealthSampler:
    """Insert :data:`BURST` tenders at once, wait (with a deadline) until the
    feed shows every tender, then check the state: recovered, no mark left."""
    collection = client[db_name]["tenders"]
    docs = tenders(BURST, stamp)
    sampler = HealthSampler(web)
    sampler.start()
    try:
        collection.insert_many(docs)
        expected = {doc["_id"] for doc in docs} | {doc["_id"] for doc in collection.find({}, {"_id": 1})}
        deadline = time.monotonic() + 300
        while True:
            shown = crawl(web)
            if shown >= expected:
                break
            assert time.monotonic() < deadline, f"the feed shows {len(shown & expected)} of {len(expected)} after 300 s"
            time.sleep(0.5)
    finally:
        sampler.stopping.set()
        sampler.join(10)
    # the recovery's own writes may push its start out of the oplog too:
    # another (cheaper) recovery then runs; the mark goes with the last one
    positions = client[db_name][positions_name("tenders")]
    while HISTORY_LOST in (positions.find_one({"_id": STATE_ID}) or {}):
        assert time.monotonic() < deadline, "the recoveries cleared the mark"
        time.sleep(0.2)
    assert crawl(web) >= expected
    return sampler


def assert_not_ok_while_lost(sampler: HealthSampler) -> None:
    lost = [verdict for verdict, reason in sampler.samples if "skipped changes pruned from the oplog" in reason]
    assert lost, f"the health view said the stream skipped history (samples: {sampler.samples[:5]} ...)"
    assert set(lost) == {"at-risk"}


@pytest.mark.parametrize("age", [0, YEAR], ids=["stamped-now", "stamped-a-year-ago"])
def test_a_burst_past_the_oplog_reaches_the_feed_with_the_sequencer_in_process(
    small_oplog: EmbeddedServer, age: float
) -> None:
    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main

    db_name = f"burst_{uuid.uuid4().hex[:8]}"
    app = main(
        {},
        **{
            "mongodb.uri": small_oplog.uri,
            "mongodb.db_name": db_name,
            "feed.order": "commit",
            "feed.sequencer": "thread",
        },
    )
    client: MongoClient[Any] = MongoClient(small_oplog.uri)
    try:
        assert app.registry.feed_sequencer.wait_ready(timeout=30)
        sampler = burst_reaches_the_feed(TestApp(app), client, db_name, time.time() - age)
        follower = app.registry.feed_sequencer.followers[0]
        assert follower.stats.recovered >= BURST - OPLOG_ENTRIES - 1000, "the recovery positioned what was pruned"
    finally:
        shutdown(app.registry)
        client.close()
    assert_not_ok_while_lost(sampler)


@pytest.mark.parametrize("age", [0, YEAR], ids=["stamped-now", "stamped-a-year-ago"])
def test_a_burst_past_the_oplog_reaches_the_feed_with_the_sequencer_in_its_own_process(
    small_oplog: EmbeddedServer, age: float, tmp_path: Path
) -> None:
    from openprocurement_feed.demo import main

    db_name = f"burst_{uuid.uuid4().hex[:8]}"
    settings = {"mongodb.uri": small_oplog.uri, "mongodb.db_name": db_name, "feed.order": "commit"}
    ini = tmp_path / "app.ini"
    ini.write_text(
        "[app:main]\nuse = egg:openprocurement_feed#demo\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
    )
    process = subprocess.Popen(
        [str(SCRIPT), "sequence", str(ini), "--progress-every", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    app = main({}, **settings)
    client: MongoClient[Any] = MongoClient(small_oplog.uri)
    try:
        positions = client[db_name][positions_name("tenders")]
        deadline = time.monotonic() + 60
        while (positions.find_one({"_id": STATE_ID}) or {}).get("checkpoint") is None:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the sequencer published a first checkpoint within 60 s"
            time.sleep(0.05)
        try:
            sampler = burst_reaches_the_feed(TestApp(app), client, db_name, time.time() - age)
        except AssertionError:
            process.send_signal(signal.SIGTERM)
            raise AssertionError(process.communicate(timeout=60)[1][:3000]) from None
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
        app.registry.feed_store.close()
        client.close()
    assert "skipped changes" in err and "recovered" in err, err[-2000:]
    assert "Traceback" not in err
    assert_not_ok_while_lost(sampler)


def test_a_read_is_caught_up_only_where_the_oplog_ends_not_where_the_server_stopped_looking(
    small_oplog: EmbeddedServer,
) -> None:
    """The embedded server's change stream examines a few hundred oplog
    entries a read: a read that brings nothing of the followed collection
    yet moves the stream's point went through other collections' entries
    (the follower's own writes among them), not to the oplog's end. A batch
    called caught up there left the follower ever further behind its busy
    neighbours, until its point left the oplog and it recovered (a million
    tenders' aggregates build did so twice)."""
    from openprocurement_feed.commit.collection import CollectionSequencer
    from openprocurement_feed.commit.history import SHORT_READ_SECONDS, skip_read_seconds

    client: MongoClient[Any] = MongoClient(small_oplog.uri)
    try:
        db = client["reads"]
        # this server's reads stop short: a batch that found nothing reads on longer
        assert skip_read_seconds(db, 0.05) == SHORT_READ_SECONDS
        db["tenders"].insert_one({"_id": "first"})
        follower = CollectionSequencer(db["tenders"])
        with db.watch([{"$match": {"ns.coll": "tenders"}}], max_await_time_ms=1) as stream:
            assert stream.try_next() is None  # the stream's point: now
            for start in range(0, 3000, 500):  # past what one read examines
                db["neighbour"].insert_many([{"n": n} for n in range(start, start + 500)])
            db["tenders"].insert_one({"_id": "second"})
            batches = 0
            while True:
                events, caught_up = follower.read_batch(stream)
                batches += 1
                if events or caught_up:
                    break
                assert batches < 1000, "the stream never reached the end of the oplog"
            assert [event["documentKey"]["_id"] for event in events] == ["second"], (
                f"caught up after {batches} batches without the event written last"
            )
    finally:
        client.close()
