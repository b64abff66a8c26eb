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
) -> tuple[Counter[str], float]:
    """The operations the database runs over about ``seconds`` while
    ``crawlers`` run (started here, after a second to settle and until
    ``ready``: connections made, waiters registered), the two
    ``serverStatus`` of the measure not counted; and the seconds that
    actually passed between them (a loaded machine oversleeps: a figure
    bounded by time is bounded by the span measured, not the span asked)."""
    for crawler in crawlers:
        crawler.start()
    time.sleep(1.0)
    deadline = time.monotonic() + 30
    while not ready():
        assert time.monotonic() < deadline, "the crawlers did not settle within 30 s"
        time.sleep(0.05)
    with MongoClient(embedded.uri) as client:
        before = operations(client)
        started = time.monotonic()
        time.sleep(seconds)
        after = operations(client)
        elapsed = time.monotonic() - started
    for crawler in crawlers:
        crawler.stop()
    after.subtract(before)
    after["command"] -= 2  # the measure's own serverStatus
    return after, elapsed


def poll_reads(embedded: EmbeddedServer, url: str, polls: int = 10) -> float:
    """The database reads (``query`` + ``getmore``) of one poll of ``url``:
    ``polls`` polls in a row, counted by the server (a count of reads, the
    same on any machine)."""
    with MongoClient(embedded.uri) as client:
        before = operations(client)
        for _ in range(polls):
            assert requests.get(url, timeout=30).json()["data"] == [], "the feed was not quiet"
        after = operations(client)
    after.subtract(before)
    return (after["query"] + after["getmore"]) / polls


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
    waits (a read ends early only on a write, and the feed is quiet), over
    the span actually measured; each poll reads a page. The pollers are
    weighed at their nominal rate (five polls a second, each costing the
    reads a poll was counted to cost), not at the rate a loaded machine lets
    them reach (a slow answer delays a poller's next poll, and would make
    them look cheap): by design the waiters read less than half that (a
    read per 250 ms against two per poll). The sequencer, which positioned the feed's one tender, is
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
        per_poll = poll_reads(own_database, base + f"?offset={offset}")
        pollers = [Crawler(base, offset, longpoll=False, interval=1.0) for _ in range(5)]
        polling, polled = database_operations(own_database, pollers, SPAN)
        for crawler in pollers:
            crawler.join(10)
        notifier = server.registry.feed_longpoll
        # the waits outlast the span: no waiter asks again while measured
        waiters = [Crawler(base, offset, longpoll=True, timeout=SPAN + 30) for _ in range(50)]
        waiting, waited = database_operations(
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
    figures = (
        f"in {waited:.1f} s, 50 waiting crawlers: {dict(+waiting)}; "
        f"in {polled:.1f} s, 5 crawlers polling every second: {dict(+polling)}; a poll reads {per_poll:g} times"
    )
    print("\n" + figures)
    assert waiting["query"] == 0 < polling["query"], figures
    assert per_poll >= 1, figures
    # the notifier's one stream, whoever waits: a read per STREAM_AWAIT_MS of the span measured
    watch_reads = math.ceil(waited * 1000 / STREAM_AWAIT_MS)
    assert waiting["getmore"] <= watch_reads + 1, figures
    # 5 pollers polling every second read 5 * per_poll times a second
    assert waiting["query"] + waiting["getmore"] < 5 * per_poll * waited, figures


def test_over_the_cap_ordinary_requests_still_find_a_free_thread(settings: dict[str, str]) -> None:
    """8 server threads, a cap of 4 waiters, 12 crawlers long-polling at the
    head for 30 s (those over the cap come back every second, as
    ``Retry-After`` asks).

    The proof is about capacity, not speed: without the cap the 12 waiters
    would hold all 8 threads, and an ordinary request would wait in the
    queue until a waiter's timeout freed one (30 s, the requests' own
    timeout). Each request is answered while the same 4 wait, none of them
    released (no timeout, no answer): it found a free thread. The time
    each took is printed, not compared (a loaded machine takes what it
    takes, and it is the waiters' events that say whether it queued).
    """
    server = DemoServer(dict(settings, **{"feed.longpoll_max_waiters": "4"}), threads=8).start()
    crawlers: list[Crawler] = []
    try:
        api = server.api_url
        tender = requests.post(f"{api}/tenders", json={"data": {"title": "t"}}, timeout=10).json()["data"]
        time.sleep(float(settings["feed.watermark_seconds"]) + 0.2)
        offset = head(server)
        crawlers = [Crawler(f"{api}/tenders", offset, longpoll=True, timeout=30) for _ in range(12)]
        for crawler in crawlers:
            crawler.start()
        notifier = server.registry.feed_longpoll
        deadline = time.monotonic() + 30
        while notifier.waiting < 4 or notifier.counters("tenders").over_cap < 8:
            assert time.monotonic() < deadline, f"{notifier.waiting} waiting, {notifier.report()}"
            time.sleep(0.01)
        counters = notifier.counters("tenders")
        # the waiters answered (by a timeout, a write, their client gone), not the ones over the cap
        released = lambda: counters.answered - counters.over_cap  # noqa: E731
        assert released() == 0, notifier.report()
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
                timings[f"{name} #{number}"] = round(time.monotonic() - started, 3)
                assert response.status_code in (200, 201), response.text
                assert released() == 0 and notifier.waiting == 4, (
                    f"{name} #{number} was answered once a waiter was released: it waited for its thread; "
                    f"{notifier.report()}"
                )
        print(f"\nbeside {notifier.waiting} waiters: {timings}")
    finally:
        for crawler in crawlers:
            crawler.stop()
        server.close()
    for crawler in crawlers:
        crawler.join(10)
