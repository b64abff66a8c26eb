"""The sync client's parts: de-duplication memory, state file, URL building,
Retry-After, and how odd answers of a real HTTP server are reported."""

from __future__ import annotations

import email.utils
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from openprocurement_feed.client import (
    FeedError,
    FeedHTTP,
    FeedIdentity,
    FeedSync,
    JsonLinesWriter,
    OffsetRejected,
    RetryPolicy,
    SeenItems,
    StateError,
    StateFile,
    StateMismatch,
    SyncState,
    item_key,
    parse_retry_after,
    user_agent,
)
from openprocurement_feed.client.http import split_feed_url

pytestmark = pytest.mark.timeout(30)


# -- de-duplication ----------------------------------------------------------------


def test_item_key_is_id_and_date_modified() -> None:
    assert item_key({"id": "a", "dateModified": "1", "title": "x"}) == ("a", "1")
    assert item_key({"id": "a", "title": "x"}) != item_key({"id": "a", "title": "y"})


def test_seen_items_filters_repeats_and_stays_bounded() -> None:
    seen = SeenItems(capacity=3)
    page = [{"id": "a", "dateModified": "1"}, {"id": "a", "dateModified": "1"}, {"id": "b", "dateModified": "1"}]
    fresh, dropped = seen.fresh(page)
    assert fresh == page[::2] and dropped == 1
    assert len(seen) == 0  # nothing remembered until the handler returned
    for item in fresh:
        seen.add(item)
    fresh, dropped = seen.fresh([{"id": "a", "dateModified": "1"}, {"id": "a", "dateModified": "2"}])
    assert fresh == [{"id": "a", "dateModified": "2"}] and dropped == 1
    for name in "cdef":
        seen.add({"id": name, "dateModified": "1"})
    assert len(seen) == 3 and seen.evicted == 3
    assert {"id": "f", "dateModified": "1"} in seen
    assert {"id": "b", "dateModified": "1"} not in seen
    with pytest.raises(ValueError):
        SeenItems(0)


def test_seen_items_keeps_recently_seen_entries() -> None:
    seen = SeenItems(capacity=2)
    seen.add({"id": "a", "dateModified": "1"})
    seen.add({"id": "b", "dateModified": "1"})
    assert seen.seen({"id": "a", "dateModified": "1"})  # refreshes "a"
    seen.add({"id": "c", "dateModified": "1"})
    assert {"id": "a", "dateModified": "1"} in seen
    assert {"id": "b", "dateModified": "1"} not in seen


# -- state file --------------------------------------------------------------------

FEED = FeedIdentity(url="http://127.0.0.1:1/api/2.5/tenders", mode="test", opt_fields=("status",))


def test_state_file_round_trip_and_atomic_write(tmp_path: Path) -> None:
    store = StateFile(tmp_path / "state.json")
    state = store.load(FEED)
    assert not state.started and state.feed == FEED
    state.forward_offset = "1778583600.49.1.abc"
    state.backward_offset = "1778583500.1.1.def"
    state.items_handled = 5
    store.save(state)
    store.save(state)
    assert sorted(os.listdir(tmp_path)) == ["state.json"]  # no temporary file left behind
    data = json.loads((tmp_path / "state.json").read_text())
    assert data["format"] == "openprocurement-feed-sync-state" and data["version"] == 1
    assert data["feed"] == {"url": FEED.url, "mode": "test", "opt_fields": ["status"]}
    loaded = store.load(FEED)
    assert loaded.forward_offset == "1778583600.49.1.abc" and loaded.backward_offset == "1778583500.1.1.def"
    assert loaded.items_handled == 5 and loaded.started and not loaded.backward_done


def test_state_file_of_another_feed_is_refused(tmp_path: Path) -> None:
    store = StateFile(tmp_path / "state.json")
    store.save(SyncState(feed=FEED, forward_offset=""))
    for other in (
        FeedIdentity(url="http://127.0.0.1:1/api/2.5/plans", mode="test", opt_fields=("status",)),
        FeedIdentity(url=FEED.url, mode="", opt_fields=("status",)),
        FeedIdentity(url=FEED.url, mode="test", opt_fields=()),
    ):
        with pytest.raises(StateMismatch, match="belongs to another feed"):
            store.load(other)


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ("[]", "not a sync state file"),
        (json.dumps({"format": "openprocurement-feed-sync-state", "version": 99}), "version 99"),
        (json.dumps({"format": "openprocurement-feed-sync-state", "version": 1, "feed": {}}), "damaged"),
        (
            json.dumps(
                {
                    "format": "openprocurement-feed-sync-state",
                    "version": 1,
                    "feed": {"url": "http://x"},
                    "forward_offset": 12,
                }
            ),
            "damaged",
        ),
    ],
)
def test_damaged_state_files_are_reported(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(content)
    with pytest.raises(StateError, match=message):
        StateFile(path).load(FEED)


def test_state_file_in_a_missing_directory_is_reported(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="cannot write the state file"):
        StateFile(tmp_path / "missing" / "state.json").save(SyncState(feed=FEED))


def test_json_lines_writer_appends(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    with JsonLinesWriter(path) as writer:
        writer.write([{"id": "a", "title": "Пошта"}])
    with JsonLinesWriter(path) as writer:
        writer.write([{"id": "b"}, {"id": "c"}])
        assert writer.lines == 2
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b", "c"]
    assert "Пошта" in lines[0]


def test_json_lines_writer_ends_a_line_a_crash_cut_short(tmp_path: Path) -> None:
    """A process killed in the middle of a write leaves a torn last line:
    the next writer ends it, so what it appends stays readable."""
    path = tmp_path / "items.jsonl"
    path.write_text('{"id":"a"}\n{"id":"b","dateMod', encoding="utf-8")
    with JsonLinesWriter(path) as writer:
        writer.write([{"id": "c"}])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines == ['{"id":"a"}', '{"id":"b","dateMod', '{"id":"c"}']
    with JsonLinesWriter(path) as writer:  # a whole file is left as it is
        writer.write([{"id": "d"}])
    assert path.read_text(encoding="utf-8").endswith('{"id":"c"}\n{"id":"d"}\n')


# -- URLs and headers --------------------------------------------------------------


def test_feed_url_keeps_extra_params_and_drops_managed_ones() -> None:
    identity, extra = split_feed_url(
        "http://h/api/2.5/tenders?offset=1.2&descending=1&limit=7&mode=test&opt_fields=status,title&feed=changes"
    )
    assert identity == FeedIdentity(
        url="http://h/api/2.5/tenders?feed=changes", mode="test", opt_fields=("status", "title")
    )
    assert extra == [("feed", "changes")]
    identity, _ = split_feed_url("http://h/t?mode=test", mode="", opt_fields=["tenderID", " status", ""])
    assert identity.mode == "" and identity.opt_fields == ("status", "tenderID")
    with pytest.raises(FeedError, match="expected an http"):
        split_feed_url("ftp://h/t")


def test_request_urls_carry_params_and_opaque_offsets() -> None:
    http = FeedHTTP("http://h:8/api/2.5/tenders?feed=changes", mode="_all_", opt_fields=["status"], limit=50)
    try:
        assert http.request_url(None, descending=True) == (
            "http://h:8/api/2.5/tenders?feed=changes&limit=50&mode=_all_&opt_fields=status&descending=1"
        )
        # offsets are passed on exactly, whatever they look like
        assert http.request_url("2024-01-01T00:00:00+02:00").endswith("&offset=2024-01-01T00%3A00%3A00%2B02%3A00")
        assert http.request_url("") == "http://h:8/api/2.5/tenders?feed=changes&limit=50&mode=_all_&opt_fields=status"
        assert http.session.headers["User-Agent"] == user_agent()
    finally:
        http.close()
    assert user_agent().startswith("openprocurement-feed-sync/")


def test_retry_after_seconds_and_http_dates() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("7", now) == 7.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == pytest.approx(30.0)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("", now) is None
    assert parse_retry_after(None, now) is None


# -- odd answers from a real HTTP server ---------------------------------------------


class Canned(BaseHTTPRequestHandler):
    """Answers every GET with ``server.answer`` = (status, headers, body)."""

    def do_GET(self) -> None:
        answer = self.server.answer  # type: ignore[attr-defined]
        status, headers, body = answer(self.path) if callable(answer) else answer
        self.server.seen.append((self.path, self.headers.get("User-Agent")))  # type: ignore[attr-defined]
        data = body.encode()
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def fetch(
    server: Any, answer: tuple[int, dict[str, str], str], offset: str | None = None, retry: RetryPolicy = RetryPolicy()
) -> Any:
    server.answer = answer
    http = FeedHTTP(f"http://127.0.0.1:{server.server_address[1]}/api/2.5/tenders", retry=retry)
    try:
        return http.fetch(offset)
    finally:
        http.close()


JSON = {"Content-Type": "application/json"}
ERROR = json.dumps(
    {
        "status": "error",
        "errors": [{"location": "querystring", "name": "limit", "description": "Invalid limit provided: x"}],
    }
)


def test_odd_answers_are_clear_errors(canned: Any) -> None:
    with pytest.raises(FeedError, match="HTTP 400: limit: Invalid limit provided"):
        fetch(canned, (400, JSON, ERROR))
    with pytest.raises(FeedError, match="did not return JSON"):
        fetch(canned, (200, {"Content-Type": "text/html"}, "<html>hello</html>"))
    with pytest.raises(FeedError, match='no "data" list'):
        fetch(canned, (200, JSON, json.dumps({"items": []})))
    with pytest.raises(FeedError, match='no "next_page" offset'):
        fetch(canned, (200, JSON, json.dumps({"data": [], "next_page": {"offset": 1.5}})))
    with pytest.raises(FeedError, match="HTTP 404"):
        fetch(canned, (404, JSON, "{}"))  # no offset: a wrong URL, not a stale cursor
    with pytest.raises(OffsetRejected, match="'abc'"):
        fetch(canned, (404, JSON, "{}"), offset="abc")
    with pytest.raises(FeedError, match="HTTP 403"):
        fetch(canned, (403, {}, "Forbidden"))
    assert all(agent == user_agent() for _, agent in canned.seen)


def test_a_page_reports_the_echoed_limit(canned: Any) -> None:
    body = {
        "data": [{"id": "a", "dateModified": "1"}],
        "next_page": {"offset": "1.5.1.x", "path": "/api/2.5/tenders?limit=1000&offset=1.5.1.x"},
        "prev_page": {"offset": "1.4.1.y", "uri": "http://elsewhere/api/2.5/tenders?offset=1.4.1.y"},
    }
    page = fetch(canned, (200, JSON, json.dumps(body)), offset="1.0")
    assert page.items == body["data"] and page.next_offset == "1.5.1.x"
    assert page.prev_offset == "1.4.1.y" and page.limit == 1000
    assert canned.seen[-1][0] == "/api/2.5/tenders?limit=100&offset=1.0"


def test_a_feed_without_prev_page_is_refused(canned: Any) -> None:
    canned.answer = (200, JSON, json.dumps({"data": [{"id": "a", "dateModified": "1"}], "next_page": {"offset": "1"}}))
    url = f"http://127.0.0.1:{canned.server_address[1]}/api/2.5/tenders"
    with FeedSync(url, lambda batch: None) as sync, pytest.raises(FeedError, match='no "prev_page"'):
        sync.run()


def test_stop_cuts_a_wait_short(canned: Any) -> None:
    canned.answer = (503, {"Retry-After": "30"}, "busy")
    url = f"http://127.0.0.1:{canned.server_address[1]}/api/2.5/tenders"
    sync = FeedSync(url, lambda batch: None)
    threading.Timer(0.3, sync.stop).start()
    started = time.monotonic()
    stats = sync.run()
    sync.close()
    assert stats.stopped and stats.retries == 1
    assert time.monotonic() - started < 25  # returned long before the 30 s Retry-After


def scripted(backward_items: list[dict[str, str]]) -> Any:
    """A feed whose forward offset never moves and whose history is
    ``backward_items`` at an offset that does not move either."""

    def answer(path: str) -> tuple[int, dict[str, str], str]:
        if "offset=f1" in path:
            body = {"data": [{"id": "x", "dateModified": "1"}], "next_page": {"offset": "f1"}}
        elif "offset=b1" in path:
            body = {"data": backward_items, "next_page": {"offset": "b1"}, "prev_page": {"offset": "b0"}}
        else:
            body = {
                "data": [{"id": "a", "dateModified": "1"}],
                "next_page": {"offset": "b1"},
                "prev_page": {"offset": "f1"},
            }
        return 200, JSON, json.dumps(body)

    return answer


def test_a_stuck_forward_offset_is_no_busy_loop(canned: Any, caplog: pytest.LogCaptureFixture) -> None:
    canned.answer = scripted([])
    url = f"http://127.0.0.1:{canned.server_address[1]}/api/2.5/tenders"
    got: list[dict[str, Any]] = []
    with FeedSync(url, lambda batch: got.extend(batch.items), limit=1) as sync:
        stats = sync.run()
    assert stats.backward_done and [item["id"] for item in got] == ["a", "x"]
    assert "without moving the forward offset" in caplog.text
    assert len(canned.seen) == 4  # newest page, forward, backward (empty), forward


def test_a_stuck_backward_offset_is_an_error(canned: Any) -> None:
    canned.answer = scripted([{"id": "c", "dateModified": "1"}])
    url = f"http://127.0.0.1:{canned.server_address[1]}/api/2.5/tenders"
    with FeedSync(url, lambda batch: None, limit=5) as sync:
        with pytest.raises(FeedError, match="without moving the backward offset 'b1'"):
            sync.run()
