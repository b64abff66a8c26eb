"""The shared HTTP feed reader (``client/http.py``) on the failures a real
network produces: a server that never answers, TLS spoken to a plain HTTP
port, a body that cannot be decoded, a URL requests cannot use, and pages
whose links or items are not what the protocol says."""

from __future__ import annotations

import email.utils
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from openprocurement_feed.client.errors import FeedError, FeedUnavailable
from openprocurement_feed.client.http import FeedHTTP, _seconds, _short
from openprocurement_feed.client.page import _echoed_limit, read_page
from openprocurement_feed.client.retry import RetryPolicy, parse_retry_after
from tests import test_client

#: A real HTTP server on loopback answering what a test sets (shared with the client tests).
canned = test_client.canned

ONCE = RetryPolicy(max_attempts=1)
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for connection in accepted:
        connection.close()
    listener.close()


def fetch_once(url: str, **options: Any) -> Any:
    http = FeedHTTP(url, retry=ONCE, **options)
    try:
        return http.fetch(None)
    finally:
        http.close()


def test_a_server_that_never_answers_is_a_timeout(silent_port: int) -> None:
    with pytest.raises(FeedUnavailable, match=r"after 1 attempt\(s\).*no answer within 0.2/0.3 s"):
        fetch_once(f"http://127.0.0.1:{silent_port}/feed", timeout=(0.2, 0.3))


def test_tls_spoken_to_a_plain_http_port_is_a_feed_error(canned: Any) -> None:
    canned.answer = (200, JSON, "{}")
    with pytest.raises(FeedError, match=r"^TLS error for https://127.0.0.1:\d+/feed"):
        fetch_once(f"https://127.0.0.1:{canned.server_address[1]}/feed", timeout=2.0)


def test_a_body_that_cannot_be_decoded_is_retried(canned: Any) -> None:
    canned.answer = (200, {**JSON, "Content-Encoding": "gzip"}, "this is not gzip")
    with pytest.raises(FeedUnavailable, match="ContentDecodingError"):
        fetch_once(f"http://127.0.0.1:{canned.server_address[1]}/feed")


def test_a_url_requests_cannot_use_is_a_feed_error() -> None:
    with pytest.raises(FeedError, match=r"^cannot request http://127.0.0.1:99999/feed"):
        fetch_once("http://127.0.0.1:99999/feed")


def test_a_page_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="limit must be >= 1, got 0"):
        FeedHTTP("http://127.0.0.1:1/feed", limit=0)


@pytest.mark.parametrize(
    "body, message",
    [
        ({"data": ["x"], "next_page": {"offset": "1"}}, "returned feed items that are not objects"),
        ({"data": [], "next_page": {"offset": "1"}, "prev_page": {"offset": 2}}, '"prev_page" offset that is not'),
    ],
)
def test_pages_that_break_the_protocol(body: Any, message: str) -> None:
    with pytest.raises(FeedError, match=message):
        read_page(body, "http://h/f", 0.0)


def test_the_echoed_limit_is_read_from_path_or_uri() -> None:
    assert _echoed_limit(None) is None
    assert _echoed_limit({"path": "/f?limit=7&offset=1"}) == 7
    assert _echoed_limit({"path": "/f", "uri": "http://h/f?limit=9"}) == 9
    assert _echoed_limit({"uri": "http://h/f?limit=many"}) is None


def test_a_retry_after_date_without_a_zone_is_utc() -> None:
    now = 1_700_000_000.0
    stamp = email.utils.formatdate(now + 30, usegmt=True).replace("GMT", "-0000")  # "no zone information"
    assert parse_retry_after(stamp, now) == pytest.approx(30.0)


def test_messages_stay_short() -> None:
    assert _seconds(10.0) == "10" and _seconds((3.0, 60.0)) == "3/60"
    assert _short(ValueError("x" * 500)) == "x" * 197 + "..."
    assert _short(ValueError("short")) == "short"


def test_a_json_body_is_read_after_a_retry(canned: Any) -> None:
    answers = iter(
        [(429, {"Retry-After": "0"}, ""), (200, JSON, json.dumps({"data": [], "next_page": {"offset": ""}}))]
    )
    canned.answer = lambda path: next(answers)
    waits: list[float] = []
    http = FeedHTTP(f"http://127.0.0.1:{canned.server_address[1]}/feed", sleep=waits.append)
    try:
        page = http.fetch(None)
    finally:
        http.close()
    assert page.items == [] and page.next_offset == "" and page.prev_offset is None
    assert waits == [http.retry.initial_backoff]  # Retry-After: 0 still waits the shortest backoff
