"""Long-poll capacity (SPEC E.3-E.4): what waiters cost the database, and
ordinary requests beside more waiters than the cap.

The crawlers are the benchmark's (``benchmarks/longpoll.py``): they follow
``next_page`` from the head, long-polling or polling, and honour
``Retry-After``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import requests

from benchmarks.longpoll import Crawler, head, start_server
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.testing import make_settings

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

#: Seconds each way of crawling is measured (the benchmark: 30).
SPAN = 5.0


@pytest.fixture(scope="module")
def own_database() -> Iterator[EmbeddedServer]:
    """An embedded server of this module's own: its CPU is the crawlers'
    alone (the session's server may be a MongoDB elsewhere, and others'
    leftovers must not count)."""
    with EmbeddedServer() as server:
        if server.cpu_seconds() is None:
            pytest.skip("this platform does not tell a process's CPU time (/proc)")
        yield server


def database_cpu(embedded: EmbeddedServer, crawlers: list[Crawler], seconds: float) -> float:
    """The database's CPU seconds over ``seconds`` while ``crawlers`` run
    (started here, after a second to settle: connections made, waiters
    registered)."""
    for crawler in crawlers:
        crawler.start()
    time.sleep(1.0)
    before = embedded.cpu_seconds()
    time.sleep(seconds)
    after = embedded.cpu_seconds()
    for crawler in crawlers:
        crawler.stop()
    assert before is not None and after is not None
    return after - before


def test_50_waiters_cost_the_database_less_than_5_crawlers_polling_every_second(
    own_database: EmbeddedServer,
) -> None:
    """Commit order, a quiet feed: 50 crawlers long-polling at the head
    against 5 polling once a second, each for :data:`SPAN` seconds.

    The benchmark compares 30 s spans; this test, shorter, asserts only that
    the waiters cost less. The sequencer, which positioned the feed's one
    tender, is stopped before the measure: in production it runs in its own
    process and costs the same whoever crawls, and on the embedded server its
    paced reads would add to both figures a cost larger than either.
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
        polling = database_cpu(own_database, pollers, SPAN)
        for crawler in pollers:
            crawler.join(10)
        # the waits outlast the span: no waiter asks again while measured
        waiters = [Crawler(base, offset, longpoll=True, timeout=SPAN + 5) for _ in range(50)]
        waiting = database_cpu(own_database, waiters, SPAN)
        notifier = server.registry.feed_longpoll
        assert notifier.counters("tenders").over_cap == 0, "some crawlers did not wait: over the cap"
        assert notifier.counters("tenders").waiting == 50
        assert not any(crawler.seen for crawler in pollers + waiters), "the feed was not quiet"
    finally:
        server.close()  # answers the waiters at once
    for crawler in waiters:
        crawler.join(10)
    assert waiting < polling, (
        f"50 waiting crawlers cost the database {waiting:.2f} s of CPU in {SPAN:g} s, "
        f"5 crawlers polling every second {polling:.2f} s"
    )


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
