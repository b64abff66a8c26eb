"""The sync client end to end: the demo API over real HTTP on loopback, the
embedded database, concurrent writers, crashes, and a fault-injecting
middleware plus a connection-dropping proxy in front of the API."""

from __future__ import annotations

import contextlib
import email.utils
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
import requests

from openprocurement_feed.client import (
    Batch,
    FeedError,
    FeedSync,
    FeedUnavailable,
    RetryPolicy,
    item_key,
)
from openprocurement_feed.demo.load import PatchWriter, create_tenders
from openprocurement_feed.demo.server import DemoServer, ThreadedServer

pytestmark = [pytest.mark.timeout(90), pytest.mark.server]

W = 0.2
#: Short backoffs so fault tests stay fast; Retry-After is still obeyed as sent.
FAST_RETRY = RetryPolicy(initial_backoff=0.05, max_backoff=0.4, max_time=30.0)


# -- real HTTP plumbing ---------------------------------------------------------


class FaultyFeed:
    """WSGI middleware in front of the demo app: feed GETs consume faults
    from a queue (an HTTP status with optional headers) before reaching the
    app; it also records the User-Agent of every feed request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.faults: deque[tuple[int, dict[str, str], bool]] = deque()
        self.always: tuple[int, dict[str, str], bool] | None = None
        self.user_agents: set[str] = set()
        self.injected: list[int] = []

    def add(
        self, status: int, headers: dict[str, str] | None = None, count: int = 1, only_with_offset: bool = False
    ) -> None:
        """Answer the next ``count`` feed requests with ``status``."""
        with self.lock:
            for _ in range(count):
                self.faults.append((status, headers or {}, only_with_offset))

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] == "GET" and environ["PATH_INFO"].endswith("/tenders"):
            self.user_agents.add(environ.get("HTTP_USER_AGENT", ""))
            has_offset = "offset=" in environ.get("QUERY_STRING", "")
            with self.lock:
                fault = self.always
                if fault is None and self.faults and (has_offset or not self.faults[0][2]):
                    fault = self.faults.popleft()
                if fault is not None and fault[2] and not has_offset:
                    fault = None
                if fault is not None:
                    self.injected.append(fault[0])
            if fault is not None:
                status, headers, _ = fault
                body = json.dumps(
                    {
                        "status": "error",
                        "errors": [
                            {
                                "location": "querystring",
                                "name": "offset" if status == 404 else "fault",
                                "description": f"injected {status}",
                            }
                        ],
                    }
                ).encode()
                reason = {404: "Not Found", 429: "Too Many Requests", 503: "Service Unavailable"}
                start_response(
                    f"{status} {reason.get(status, 'Error')}",
                    [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers.items()],
                )
                return [body]
        return self.app(environ, start_response)


class DropProxy:
    """A TCP proxy on 127.0.0.1 that can drop connections: the next ``n``
    connections are read from and closed without an answer."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.pending_drops = 0
        self.dropped = 0
        self.active: set[socket.socket] = set()
        self.closed = False
        threading.Thread(target=self._accept, name="drop-proxy", daemon=True).start()

    def drop(self, count: int) -> None:
        """Cut the open connections and drop the next ``count`` ones."""
        with self.lock:
            self.pending_drops += count
            active = list(self.active)
        for sock in active:
            _shut(sock)

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with self.lock:
            drop = self.pending_drops > 0
            if drop:
                self.pending_drops -= 1
                self.dropped += 1
        if drop:
            client.settimeout(2)
            with contextlib.suppress(OSError):
                client.recv(65536)
            _shut(client)
            client.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.lock:
            self.active.add(client)
        pump = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
        pump.start()
        _pipe(client, upstream)
        pump.join(timeout=5)
        with self.lock:
            self.active.discard(client)
        client.close()
        upstream.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.drop(0)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            target.sendall(chunk)
    except OSError:
        pass
    _shut(target)
    _shut(source)


# -- fixtures -------------------------------------------------------------------


def demo_settings(mongodb_uri: str, db_name: str, watermark: float = W, delay: str = "0") -> dict[str, str]:
    return {
        "mongodb.uri": mongodb_uri,
        "mongodb.db_name": db_name,
        "feed.watermark_seconds": str(watermark),
        "demo.write_delay_ms": delay,
    }


@pytest.fixture
def demo(mongodb_uri: str, db_name: str) -> Iterator[DemoServer]:
    """The demo API on a real HTTP server, watermark ``W``."""
    server = DemoServer(demo_settings(mongodb_uri, db_name)).start()
    yield server
    server.close()


@pytest.fixture
def faulty(mongodb_uri: str, db_name: str) -> Iterator[tuple[FaultyFeed, DropProxy, str, Any]]:
    """The demo app behind :class:`FaultyFeed` on waitress, behind a
    :class:`DropProxy`: ``(faults, proxy, feed URL via the proxy, store)``."""
    from openprocurement_feed.demo import main

    app = main({}, **demo_settings(mongodb_uri, db_name))
    faults = FaultyFeed(app)
    served = ThreadedServer(faults, threads=4).start()
    proxy = DropProxy(served.port)
    yield faults, proxy, f"http://127.0.0.1:{proxy.port}/api/2.5", app.registry.feed_store
    proxy.close()
    served.close()
    app.registry.feed_store.close()


def wait_watermark(seconds: float = W) -> None:
    time.sleep(seconds + 0.15)


class Collector:
    """A handler that keeps every delivery, in order."""

    def __init__(self) -> None:
        self.delivered: list[dict[str, Any]] = []
        self.batches: list[Batch] = []
        self.latest: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, list[str]] = {}

    def __call__(self, batch: Batch) -> None:
        self.batches.append(batch)
        for item in batch.items:
            self.delivered.append(item)
            self.latest[item["id"]] = item
            self.versions.setdefault(item["id"], []).append(item["dateModified"])

    @property
    def repeats(self) -> int:
        """Deliveries of a version delivered before."""
        return len(self.delivered) - len({item_key(item) for item in self.delivered})


def database_state(store: Any) -> dict[str, str]:
    """``{id: dateModified}`` of every public tender in the database."""
    return {
        doc["_id"]: doc["dateModified"]
        for doc in store.collection("tenders").find({"is_public": True}, {"dateModified": 1})
    }


# -- the tests ------------------------------------------------------------------


def test_full_sync_then_resume_sees_only_changes(demo: DemoServer, tmp_path: Any) -> None:
    ids = create_tenders(demo.api_url, 60, seed=1)
    wait_watermark()
    state = tmp_path / "tenders.state"
    first = Collector()
    with FeedSync(demo.api_url + "/tenders", first, state, limit=12) as sync:
        stats = sync.run()
    assert sorted(first.latest) == sorted(ids)
    assert first.repeats == 0
    assert stats.backward_done and stats.caught_up_at is not None
    assert all(batch.direction == "backward" and not batch.may_repeat for batch in first.batches)
    saved = json.loads(state.read_text())
    assert saved["backward_done"] is True and saved["items_handled"] == 60

    changed = ids[:7]
    http = requests.Session()
    for tender_id in changed:
        http.patch(f"{demo.api_url}/tenders/{tender_id}", json={"data": {"title": "changed"}}).raise_for_status()
    new = create_tenders(demo.api_url, 3, seed=2, session=http)
    wait_watermark()
    second = Collector()
    with FeedSync(demo.api_url + "/tenders", second, state, limit=12, opt_fields=None) as sync:
        stats = sync.run()
    assert sorted(second.latest) == sorted(changed + new)
    assert all(batch.direction == "forward" for batch in second.batches)
    assert second.batches[0].may_repeat  # resumed from a state file
    assert stats.backward_pages == 0
    assert database_state(demo.registry.feed_store) == {
        **{key: item["dateModified"] for key, item in first.latest.items()},
        **{key: item["dateModified"] for key, item in second.latest.items()},
    }


def wait_for_patches(writers: list[PatchWriter], count: int, timeout: float = 60.0) -> None:
    """Wait until ``writers`` made ``count`` patches between them."""
    deadline = time.monotonic() + timeout
    while sum(writer.stats.patches for writer in writers) < count:
        assert time.monotonic() < deadline, f"the writers made fewer than {count} patches in {timeout} s"
        time.sleep(0.02)


def test_concurrent_writers_crawler_ends_with_latest_versions(mongodb_uri: str, db_name: str) -> None:
    watermark = 0.3
    server = DemoServer(demo_settings(mongodb_uri, db_name, watermark, delay="5-40")).start()
    writers: list[PatchWriter] = []
    try:
        ids = create_tenders(server.api_url, 80, seed=3)
        collector = Collector()
        sync = FeedSync(server.api_url + "/tenders", collector, None, limit=10, poll_interval=0.05, longpoll=1.0)
        crawler = threading.Thread(target=sync.run, kwargs={"follow": True}, daemon=True)
        writers = [PatchWriter(server.api_url, ids, rate=30, seed=n, name=f"writer-{n}") for n in range(3)]
        for writer in writers:
            writer.start()
        wait_for_patches(writers, 5)
        crawler.start()  # the history crawl runs while writers change it
        wait_for_patches(writers, 60)
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(timeout=10)
        stopped = time.monotonic()
        deadline = stopped + 30
        while (sync.stats.caught_up_at or 0) < stopped + watermark + 0.2 and time.monotonic() < deadline:
            time.sleep(0.05)
        sync.stop()
        crawler.join(timeout=10)
        sync.close()
        assert not crawler.is_alive()
        assert sum(writer.stats.patches for writer in writers) > 40
        assert sync.stats.forward_pages > 0 and sync.stats.backward_done
        expected = database_state(server.registry.feed_store)
        held = {key: item["dateModified"] for key, item in collector.latest.items()}
        assert held == expected
        for writer in writers:
            for tender_id, (date_modified, _) in writer.stats.last.items():
                assert held[tender_id] >= date_modified
        # versions of a tender arrive oldest first: never a stale one after a newer one
        for versions in collector.versions.values():
            assert versions == sorted(set(versions))
    finally:
        for writer in writers:
            writer.stop()
        server.close()


class Crash(Exception):
    """The process 'dies' after the handler wrote a page, before the save."""


def crashing(collector: Collector, after_pages: int, direction: str | None = None) -> Callable[[Batch], None]:
    calls = {"n": 0}

    def handle(batch: Batch) -> None:
        collector(batch)
        if direction is None or batch.direction == direction:
            calls["n"] += 1
            if calls["n"] == after_pages:
                raise Crash

    return handle


def test_interrupted_and_restarted_loses_nothing(demo: DemoServer, tmp_path: Any) -> None:
    limit = 10
    ids = create_tenders(demo.api_url, 75, seed=4)
    wait_watermark()
    url = demo.api_url + "/tenders"
    state = tmp_path / "state.json"
    collector = Collector()

    # 1. crash in the middle of the history crawl, then restart
    with FeedSync(url, crashing(collector, 3), state, limit=limit) as sync, pytest.raises(Crash):
        sync.run()
    assert json.loads(state.read_text())["pages_handled"] == 2
    with FeedSync(url, collector, state, limit=limit) as sync:
        assert sync.state.started and not sync.state.backward_done
        sync.run()
    assert set(collector.latest) == set(ids)
    assert 0 < collector.repeats <= limit

    # 2. changes arrive; crash in the middle of the forward crawl, then restart
    before = collector.repeats
    http = requests.Session()
    for tender_id in ids[:23]:
        http.patch(f"{url}/{tender_id}", json={"data": {"status": "complete"}}).raise_for_status()
    ids += create_tenders(demo.api_url, 8, seed=5, session=http)
    wait_watermark()
    with FeedSync(url, crashing(collector, 2, "forward"), state, limit=limit) as sync, pytest.raises(Crash):
        sync.run()
    resumed = Collector()
    with FeedSync(url, lambda batch: (collector(batch), resumed(batch)), state, limit=limit) as sync:
        stats = sync.run()
    assert resumed.batches[0].may_repeat and not any(b.may_repeat for b in resumed.batches[1:])
    assert stats.backward_pages == 0
    assert 0 < collector.repeats - before <= limit
    held = {key: item["dateModified"] for key, item in collector.latest.items()}
    assert held == database_state(demo.registry.feed_store)


def test_rejected_offset_in_state_file_restarts_and_completes(demo: DemoServer, tmp_path: Any) -> None:
    ids = create_tenders(demo.api_url, 60, seed=6)
    wait_watermark()
    url = demo.api_url + "/tenders"
    state = tmp_path / "state.json"
    with FeedSync(url, lambda batch: None, state, limit=25) as sync:
        sync.run()
    saved = json.loads(state.read_text())
    saved["forward_offset"] = "not-an-offset"
    state.write_text(json.dumps(saved))
    collector = Collector()
    with FeedSync(url, collector, state, limit=25) as sync:
        stats = sync.run()
    assert stats.restarts == 1
    assert set(collector.latest) == set(ids)
    assert json.loads(state.read_text())["restarts"] == 1
    assert json.loads(state.read_text())["forward_offset"] != "not-an-offset"


def test_faults_are_waited_out_and_nothing_is_lost(faulty: tuple[FaultyFeed, DropProxy, str, Any]) -> None:
    faults, proxy, api, _store = faulty
    ids = create_tenders(api, 80, seed=7)
    wait_watermark()
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(min(seconds, 1.0))  # the wait asked is what is checked; the fault is gone by then

    # An HTTP date 10 s ahead (whole seconds: up to 1 s less): the wait it
    # asks is at most what was left of it when sent, and above any backoff
    # however late the answer comes on a loaded machine.
    dated: dict[str, float] = {}

    def retry_at() -> str:
        dated["sent"] = time.time()
        header = email.utils.formatdate(dated["sent"] + 10, usegmt=True)
        dated["until"] = email.utils.parsedate_to_datetime(header).timestamp()
        return header

    plan: dict[int, Callable[[], None]] = {
        1: lambda: faults.add(429, {"Retry-After": "1"}),
        2: lambda: faults.add(503, count=3),
        3: lambda: proxy.drop(3),
        4: lambda: faults.add(429, {"Retry-After": retry_at()}),
        5: lambda: faults.add(429, count=2),  # no Retry-After: backoff
        6: lambda: faults.add(404, only_with_offset=True),  # the server 'forgets' an offset
        7: lambda: (faults.add(503), proxy.drop(1)),
    }
    collector = Collector()
    pages = {"n": 0}

    def handle(batch: Batch) -> None:
        collector(batch)
        pages["n"] += 1
        if pages["n"] in plan:
            plan[pages["n"]]()

    with FeedSync(api + "/tenders", handle, None, limit=10, retry=FAST_RETRY, sleep=sleep) as sync:
        stats = sync.run()
    assert set(collector.latest) == set(ids)
    assert collector.repeats == 0  # the dedup memory absorbed the restart
    assert stats.restarts == 1
    assert proxy.dropped == 4
    assert faults.injected.count(429) == 4 and faults.injected.count(503) == 4
    assert stats.retries >= 11
    assert 1.0 in waits  # Retry-After: 1 obeyed as sent
    # the HTTP-date form: above the longest backoff (0.4 s and its jitter), within the date
    longest_backoff = FAST_RETRY.max_backoff + FAST_RETRY.initial_backoff
    assert any(longest_backoff < wait <= dated["until"] - dated["sent"] for wait in waits if wait != 1.0), waits
    assert all(wait >= FAST_RETRY.initial_backoff for wait in waits)  # never a tight loop
    assert faults.user_agents and all(agent.startswith("openprocurement-feed-sync/") for agent in faults.user_agents)


def test_gives_up_with_a_clear_error(faulty: tuple[FaultyFeed, DropProxy, str, Any]) -> None:
    faults, _proxy, api, _store = faulty
    faults.always = (503, {}, False)
    policy = RetryPolicy(initial_backoff=0.01, max_backoff=0.05, max_attempts=4, max_time=None)
    with FeedSync(api + "/tenders", lambda batch: None, None, retry=policy) as sync:
        with pytest.raises(FeedUnavailable, match=r"after 4 attempt\(s\).*HTTP 503"):
            sync.run()
        assert sync.stats.retries == 3
    policy = RetryPolicy(initial_backoff=0.05, max_backoff=0.1, max_attempts=None, max_time=0.5)
    with FeedSync(api + "/tenders", lambda batch: None, None, retry=policy) as sync:
        with pytest.raises(FeedUnavailable, match="gave up"):
            sync.run()


def test_offsets_rejected_again_and_again_give_up(faulty: tuple[FaultyFeed, DropProxy, str, Any]) -> None:
    faults, _proxy, api, _store = faulty
    create_tenders(api, 5, seed=8)
    wait_watermark()
    faults.always = (404, {}, True)
    with FeedSync(api + "/tenders", lambda batch: None, None, max_restarts=2) as sync:
        with pytest.raises(FeedError, match="rejected 3 offsets in a row"):
            sync.run()
        assert sync.stats.restarts == 2
