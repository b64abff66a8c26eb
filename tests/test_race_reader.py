"""The race tool's crawler and detector threads when the feed cannot be
read: errors are counted after the shared reader's retries, never raised,
and the threads stop when asked."""

from __future__ import annotations

import json
import time
from typing import Any

from openprocurement_feed.client.http import RetryPolicy
from openprocurement_feed.race.crawler import Crawler
from openprocurement_feed.race.detector import Detector, DetectorThread
from openprocurement_feed.race.feed import FeedClient, FeedPage
from tests import test_client

#: A real HTTP server on loopback answering what a test sets (shared with the client tests).
canned = test_client.canned

ONCE = RetryPolicy(max_attempts=1)
JSON = {"Content-Type": "application/json"}


def client_of(server: Any, limit: int = 2) -> FeedClient:
    return FeedClient(f"http://127.0.0.1:{server.server_address[1]}/feed", limit=limit, retry=ONCE)


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_crawler_counts_read_errors_and_goes_on(canned: Any) -> None:
    canned.answer = (503, {}, "busy")
    crawler = Crawler(client_of(canned), poll_interval=0.01)
    crawler.start()
    try:
        wait_for(lambda: crawler.log.errors >= 1)
        page = {"data": [{"id": "a", "public_modified": 1.5, "dateModified": "d1"}], "next_page": {"offset": "1.5"}}
        canned.answer = (200, JSON, json.dumps(page))
        wait_for(lambda: crawler.log.pages >= 2)
    finally:
        crawler.stop()
        crawler.join(timeout=10)
    assert not crawler.is_alive()
    assert crawler.log.saw("a", "d1") and crawler.offset == "1.5"
    assert crawler.log.duplicates == crawler.log.deliveries - 1  # the same version, page after page
    crawler.client.close()


def test_drain_stops_at_a_read_error_or_a_short_page(canned: Any) -> None:
    crawler = Crawler(client_of(canned))
    canned.answer = (500, {}, "boom")
    crawler.drain()
    assert crawler.log.errors == 1 and crawler.log.pages == 0
    full = {
        "data": [{"id": "a", "public_modified": 1}, {"id": "b", "public_modified": 2}],
        "next_page": {"offset": "2.0"},
    }
    short = {"data": [], "next_page": {"offset": "2.0"}}
    answers = iter([(200, JSON, json.dumps(full)), (200, JSON, json.dumps(short))])
    canned.answer = lambda path: next(answers)
    crawler.drain()
    assert crawler.log.pages == 2 and sorted(crawler.log.seen) == ["a", "b"]
    crawler.client.close()


def test_the_detector_thread_counts_errors_and_closes_its_client(canned: Any) -> None:
    canned.answer = (502, {}, "bad gateway")
    thread = DetectorThread(Detector(client_of(canned), wait=0))
    thread.start()
    try:
        wait_for(lambda: thread.stats.errors >= 1)
    finally:
        thread.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert thread.stats.checks == 0 and thread.stats.errors >= 1


def test_a_longpolling_crawler_asks_with_feed_longpoll_and_waits_only_when_the_server_did_not(canned: Any) -> None:
    """Its forward requests carry ``feed=longpoll&timeout``; after a page
    that is not full it asks again at once if the server held the request,
    waits ``Retry-After`` when given one, else its poll interval; drain
    never long-polls."""
    echoed = {"path": "/feed?feed=longpoll&timeout=7&offset=1.5", "offset": "1.5"}
    empty = {"data": [], "next_page": echoed}
    canned.answer = (200, JSON, json.dumps(empty))
    client = FeedClient(f"http://127.0.0.1:{canned.server_address[1]}/feed", limit=2, retry=ONCE, longpoll=7)
    crawler = Crawler(client, poll_interval=3.0)
    try:
        crawler.poll_once()
        assert "feed=longpoll" in canned.seen[-1][0] and "timeout=7" in canned.seen[-1][0]
        # an empty answer at once: the server did not wait (the pause
        # computed from the answer's time, not from this machine's speed)
        assert crawler.pause_after(FeedPage((), "1.5", longpoll=True), took=0.0) == 3.0
        assert crawler.pause_after(FeedPage((), "1.5", longpoll=True), took=2.0) == 0.0
        assert crawler.pause_after(FeedPage((), "1.5", longpoll=False), took=2.0) == 3.0
        assert crawler.pause_after(FeedPage((), "1.5", longpoll=True, retry_after=1.0), took=0.0) == 1.0
        canned.answer = (200, {**JSON, "Retry-After": "1"}, json.dumps(empty))
        crawler.poll_once()
        assert crawler.pause == 1.0, "over the server's cap: its Retry-After"
        crawler.drain()
        assert "feed=longpoll" not in canned.seen[-1][0]
    finally:
        client.close()
