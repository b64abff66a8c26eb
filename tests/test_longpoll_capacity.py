"""Long-poll capacity (SPEC E.3-E.4): what waiters cost the database, and
ordinary requests beside more waiters than the cap.

The crawlers are the benchmark's (``benchmarks/longpoll.py``): they follow
``next_page`` from the head, long-polling or polling, and honour
``Retry-After``. The database's cost is counted here in operations (the
server's own counters), which a loaded machine cannot tip; the benchmark
measures it in CPU seconds, over spans long enough for the clock's ticks.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from pymongo import MongoClient

from benchmarks.longpoll import Crawler, head, start_server
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.longpoll.notifier import STREAM_AWAIT_MS
from openprocurement_feed.testing import make_settings

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

#: Seconds each way of crawling is measured (the benchmark: 30).
SPAN = 5.0


@pytest.fixture(scope="module")
def own_database() -> Iterator[EmbeddedServer]:
    """An embedded server of this module's own: its operations are the
    crawlers' alone (the session's server may be a MongoDB elsewhere, and
    others' leftovers must not count)."""
    with EmbeddedServer() as server:
        yield server


def operations(client: MongoClient[Any]) -> Counter[str]:
    """The operations the server has run so far, by kind (its
    ``serverStatus`` counters: ``query``, ``getmore``, ``command``...)."""
    counters = client.admin.command("serverStatus")["opcounters"]
    return Counter({kind: int(count) for kind, count in counters.items()})


def database_operations(
    embedded: EmbeddedServer, crawlers: list[Crawler], seconds: float, ready: Callable[[], bool] = lambda: True
) -> Counter[str]:
    """The operations the database runs over ``seconds`` while ``crawlers``
    run (started here, after a second to settle and until ``ready``:
    connections made, waiters registered); the two ``serverStatus`` of the
    measure not counted."""
    for crawler in crawlers:
        crawler.start()
    time.sleep(1.0)
    deadline = time.monotonic() + 30
    while not ready():
        assert time.monotonic() < deadline, "the crawlers did not settle within 30 s"
        time.sleep(0.05)
    with MongoClient(embedded.uri) as client:
        before = operations(client)
        time.sleep(seconds)
        after = operations(client)
    for crawler in crawlers:
        crawler.stop()
    after.subtract(before)
    after["command"] -= 2  # the measure's own serverStatus
    return after


def test_50_waiters_cost_the_database_less_than_5_crawlers_polling_every_second(
    own_database: EmbeddedServer,
) -> None:
    """Commit order, a quiet feed: 50 crawlers long-polling at the head
    against 5 polling once a second, each for :data:`SPAN` seconds.

    The cost is counted in the database's reads (its own counters), which a
    loaded machine cannot tip (the benchmark compares the CPU of 30 s
    spans): a waiter reads no page while it waits, and what the 50 cost is
    the notifier's one change stream on the checkpoint, read at most every
    :data:`~openprocurement_feed.longpoll.notifier.STREAM_AWAIT_MS` whoever
    waits (a read ends early only on a write, and the feed is quiet); each
    poll reads a page. By design the waiters read less than half what the
    pollers do (a read per 250 ms against two per poll, five polls a
    second); the test asserts less, which a poller would cross only if its
    requests took over a second each. The sequencer, which positioned the feed's one tender, is
    stopped before the measure: in production it runs in its own process
    and costs the same whoever crawls, and on the embedded server its paced
    reads would add to both figures.
    """
    db_name = "longpoll_cpu_" + uuid.uuid4().hex[:8]
    sequenced = start_server(own_database, "commit", db_name)
    try:
        response = requests.post(f"{sequenced.api_url}/tenders", json={"data": {"title": "t"}}, timeout=30)
        assert response.status_code == 201, response.text
        tender = response.json()["data"]
        deadline = time.monotonic() + 10
        while not requests.get(f"{sequenced.api_url}/tenders", timeout=10).json()["data"]:
            assert time.monotonic() < deadline, "the sequencer did not position the tender"
            time.sleep(0.05)
    finally:
        sequenced.close()
    settings = make_settings(own_database.uri, db_name)
    settings.update({"feed.order": "commit", "feed.longpoll_max_waiters": "60"})
    server = DemoServer(settings, threads=80).start()
    try:
        offset = head(server)
        base = f"{server.api_url}/tenders"
        first = requests.get(f"{base}?limit=1", timeout=10).json()["data"]
        assert [item["id"] for item in first] == [tender["id"]]
        pollers = [Crawler(base, offset, longpoll=False, interval=1.0) for _ in range(5)]
        polling = database_operations(own_database, pollers, SPAN)
        for crawler in pollers:
            crawler.join(10)
        notifier = server.registry.feed_longpoll
        # the waits outlast the span: no waiter asks again while measured
        waiters = [Crawler(base, offset, longpoll=True, timeout=SPAN + 30) for _ in range(50)]
        waiting = database_operations(
            own_database, waiters, SPAN, ready=lambda: notifier.counters("tenders").waiting == 50
        )
        assert notifier.counters("tenders").over_cap == 0, "some crawlers did not wait: over the cap"
        assert notifier.counters("tenders").waiting == 50
        assert not any(crawler.seen for crawler in pollers + waiters), "the feed was not quiet"
    finally:
        server.close()  # answers the waiters at once
    for crawler in waiters:
        crawler.join(10)
    assert polling["insert"] == polling["update"] == waiting["insert"] == waiting["update"] == 0, (
        "the feed was not quiet"
    )
    figures = f"in {SPAN:g} s, 50 waiting crawlers: {dict(+waiting)}; 5 crawlers polling every second: {dict(+polling)}"
    assert waiting["query"] == 0 < polling["query"], figures
    watch_reads = math.ceil(SPAN * 1000 / STREAM_AWAIT_MS)
    assert waiting["getmore"] <= watch_reads + 1, figures
    assert waiting["query"] + waiting["getmore"] < polling["query"] + polling["getmore"], figures


def test_over_the_cap_ordinary_requests_still_answer_within_a_second(settings: dict[str, str]) -> None:
    """8 server threads, a cap of 4 waiters, 12 crawlers long-polling at the
    head (those over the cap come back every second, as ``Retry-After``
    asks).

    The bound is about capacity, not speed: such a request takes a few
    milliseconds when a thread is free, and without the cap the 12 waiters
    would hold all 8 threads, so it would wait for a waiter's timeout
    (10 s). Under a second means it found a free thread.
    """
    server = DemoServer(dict(settings, **{"feed.longpoll_max_waiters": "4"}), threads=8).start()
    crawlers: list[Crawler] = []
    try:
        api = server.api_url
        tender = requests.post(f"{api}/tenders", json={"data": {"title": "t"}}, timeout=10).json()["data"]
        time.sleep(float(settings["feed.watermark_seconds"]) + 0.2)
        offset = head(server)
        crawlers = [Crawler(f"{api}/tenders", offset, longpoll=True, timeout=10) for _ in range(12)]
        for crawler in crawlers:
            crawler.start()
        notifier = server.registry.feed_longpoll
        deadline = time.monotonic() + 10
        while notifier.waiting < 4 or notifier.counters("tenders").over_cap < 8:
            assert time.monotonic() < deadline, f"{notifier.waiting} waiting, {notifier.report()}"
            time.sleep(0.01)
        timings = {}
        for number in range(3):
            for name, send in {
                "GET a tender": lambda: requests.get(f"{api}/tenders/{tender['id']}", timeout=30),
                "GET a feed page": lambda: requests.get(f"{api}/tenders?offset={offset}", timeout=30),
                "GET a plans page": lambda: requests.get(f"{api}/plans", timeout=30),
                "POST a draft tender": lambda: requests.post(
                    f"{api}/tenders", json={"data": {"title": "d", "status": "draft"}}, timeout=30
                ),
            }.items():
                started = time.monotonic()
                response = send()
                timings[f"{name} #{number}"] = time.monotonic() - started
                assert response.status_code in (200, 201), response.text
            assert notifier.waiting == 4, "the waiters were released meanwhile: the test measured nothing"
        slowest = max(timings, key=timings.__getitem__)
        assert timings[slowest] < 1.0, f"{slowest} took {timings[slowest]:.2f} s beside {notifier.waiting} waiters"
    finally:
        for crawler in crawlers:
            crawler.stop()
        server.close()
    for crawler in crawlers:
        crawler.join(10)
