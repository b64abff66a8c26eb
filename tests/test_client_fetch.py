"""``sync --fetch`` end to end: the reference crawler reads every object the
feed names (``GET {feed}/{id}``) from the demo API on a real HTTP server,
through faults injected in front of the object reads (429 with Retry-After,
503, dropped connections, an object deleted meanwhile), and across a kill
and restart of the command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_client_e2e import FAST_RETRY, DropProxy, W, demo_settings, wait_watermark

from openprocurement_feed.client import Batch, FeedError, FeedSync
from openprocurement_feed.client.objects import ObjectFetcher
from openprocurement_feed.demo.load import create_tenders
from openprocurement_feed.demo.server import DemoServer, ThreadedServer

pytestmark = [pytest.mark.timeout(120), pytest.mark.server]


class ObjectFaults:
    """WSGI middleware in front of the demo app: object GETs
    (``…/tenders/{id}``) consume faults from a queue; ``delete`` names ids
    whose document is deleted from the database just before their read
    (the object goes away between the page and its fetch)."""

    def __init__(self, app: Any, store: Any) -> None:
        self.app = app
        self.store = store
        self.lock = threading.Lock()
        self.faults: deque[tuple[int, dict[str, str]]] = deque()
        self.delete: set[str] = set()
        self.injected: list[int] = []
        self.reads: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0

    def add(self, status: int, headers: dict[str, str] | None = None, count: int = 1) -> None:
        with self.lock:
            for _ in range(count):
                self.faults.append((status, headers or {}))

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ["PATH_INFO"]
        if environ["REQUEST_METHOD"] != "GET" or "/tenders/" not in path:
            return self.app(environ, start_response)
        object_id = path.rsplit("/", 1)[1]
        with self.lock:
            fault = self.faults.popleft() if self.faults else None
            if fault is not None:
                self.injected.append(fault[0])
            else:
                self.reads.append(object_id)
            gone = object_id in self.delete
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if fault is not None:
                status, headers = fault
                body = json.dumps(
                    {
                        "status": "error",
                        "errors": [{"location": "url", "name": "fault", "description": f"injected {status}"}],
                    }
                ).encode()
                reason = {429: "Too Many Requests", 503: "Service Unavailable"}
                start_response(
                    f"{status} {reason.get(status, 'Error')}",
                    [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers.items()],
                )
                return [body]
            if gone:
                self.store.collection("tenders").delete_one({"_id": object_id})
            time.sleep(0.005)  # a little server time, so reads overlap
            return self.app(environ, start_response)
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture
def served(mongodb_uri: str, db_name: str) -> Iterator[tuple[ObjectFaults, DropProxy, str, Any]]:
    """The demo app behind :class:`ObjectFaults` on waitress, behind a
    :class:`DropProxy`: ``(faults, proxy, API URL via the proxy, store)``."""
    from openprocurement_feed.demo import main

    app = main({}, **demo_settings(mongodb_uri, db_name))
    faults = ObjectFaults(app, app.registry.feed_store)
    server = ThreadedServer(faults, threads=4).start()
    proxy = DropProxy(server.port)
    yield faults, proxy, f"http://127.0.0.1:{proxy.port}/api/2.5", app.registry.feed_store
    proxy.close()
    server.close()
    app.registry.feed_store.close()


class ObjectCollector:
    """A handler that keeps every batch and every object, in order."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.objects: dict[str, dict[str, Any]] = {}

    def __call__(self, batch: Batch) -> None:
        self.batches.append(batch)
        assert batch.objects is not None
        for obj in batch.objects:
            self.objects[obj["id"]] = obj


def test_fetch_delivers_whole_objects_in_page_order(served: tuple[ObjectFaults, DropProxy, str, Any]) -> None:
    faults, _proxy, api, _store = served
    ids = create_tenders(api, 45, seed=21)
    wait_watermark()
    collector = ObjectCollector()
    with FeedSync(
        api + "/tenders", collector, None, limit=10, fetch_objects=True, fetch_concurrency=4, retry=FAST_RETRY
    ) as sync:
        stats = sync.run()
    assert set(collector.objects) == set(ids)
    assert stats.objects == 45 and stats.objects_missing == 0
    for batch in collector.batches:
        # order kept: the objects follow the items of their page
        assert [obj["id"] for obj in batch.objects or []] == [item["id"] for item in batch.items]
        for item, obj in zip(batch.items, batch.objects or [], strict=False):
            assert obj["dateModified"] >= item["dateModified"]
            assert "title" in obj  # the whole object, not the feed item
    assert 1 < faults.most_in_flight <= 4  # concurrent, and bounded


def test_fetch_waits_out_faults_and_skips_objects_deleted_meanwhile(
    served: tuple[ObjectFaults, DropProxy, str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    faults, proxy, api, _store = served
    ids = create_tenders(api, 40, seed=22)
    wait_watermark()
    deleted = ids[5]
    faults.delete.add(deleted)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    plan: dict[int, Callable[[], None]] = {
        1: lambda: faults.add(429, {"Retry-After": "1"}),
        2: lambda: faults.add(503, count=3),
        3: lambda: proxy.drop(2),
    }
    collector = ObjectCollector()
    pages = {"n": 0}

    def handle(batch: Batch) -> None:
        collector(batch)
        pages["n"] += 1
        if pages["n"] in plan:
            plan[pages["n"]]()

    with (
        caplog.at_level("WARNING", logger="openprocurement_feed.client.objects"),
        FeedSync(
            api + "/tenders",
            handle,
            None,
            limit=8,
            fetch_objects=True,
            fetch_concurrency=3,
            retry=FAST_RETRY,
            sleep=sleep,
        ) as sync,
    ):
        stats = sync.run()
    assert set(collector.objects) == set(ids) - {deleted}
    assert stats.objects_missing == 1
    assert any(deleted in batch.missing for batch in collector.batches)
    assert f"Object {deleted}" in caplog.text and "skipped" in caplog.text
    assert faults.injected.count(429) == 1 and faults.injected.count(503) == 3
    assert proxy.dropped >= 2
    assert 1.0 in waits  # Retry-After obeyed as sent
    assert stats.retries >= 6
    assert all(wait >= FAST_RETRY.initial_backoff for wait in waits)


def test_fetch_gives_up_on_an_object_error_without_saving_the_page(
    served: tuple[ObjectFaults, DropProxy, str, Any], tmp_path: Path
) -> None:
    faults, _proxy, api, _store = served
    create_tenders(api, 12, seed=23)
    wait_watermark()
    faults.add(403)
    state = tmp_path / "state.json"
    with FeedSync(api + "/tenders", lambda batch: None, state, limit=5, fetch_objects=True, retry=FAST_RETRY) as sync:
        with pytest.raises(FeedError, match="HTTP 403"):
            sync.run()
        assert sync.stats.items == 0
    assert not state.exists()  # nothing saved past objects not handled


def test_fetcher_rejects_a_bad_concurrency(served: tuple[ObjectFaults, DropProxy, str, Any]) -> None:
    _, _, api, _ = served
    with pytest.raises(ValueError, match="fetch_concurrency must be >= 1"):
        FeedSync(api + "/tenders", lambda batch: None, None, fetch_objects=True, fetch_concurrency=0)
    with FeedSync(api + "/tenders", lambda batch: None, None) as sync:
        with pytest.raises(ValueError, match="concurrency must be >= 1"):
            ObjectFetcher(sync.http, 0)
        assert ObjectFetcher(sync.http, 1).object_url("a b/c").endswith("/tenders/a%20b%2Fc")


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by the kill
            pass
    return out


def test_fetch_command_loses_nothing_across_a_kill(mongodb_uri: str, db_name: str, tmp_path: Path) -> None:
    server = DemoServer(demo_settings(mongodb_uri, db_name)).start()
    try:
        ids = create_tenders(server.api_url, 90, seed=24)
        time.sleep(W + 0.15)
        state, out = tmp_path / "state.json", tmp_path / "objects.jsonl"
        command = [
            sys.executable,
            "-m",
            "openprocurement_feed.cli",
            "sync",
            server.api_url + "/tenders",
            "--state",
            str(state),
            "--out",
            str(out),
            "--limit",
            "5",
            "--fetch",
            "--fetch-concurrency",
            "3",
            "--no-progress",
        ]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
        )
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(_lines(out)) < 25:
                time.sleep(0.01)
            process.send_signal(signal.SIGKILL)
            process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == -signal.SIGKILL
        before = {obj["id"] for obj in _lines(out)}
        assert 25 <= len(before) < 90  # killed in the middle
        assert json.loads(state.read_text())["items_handled"] <= len(before)
        again = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        assert "Resuming from" in again.stderr and "Objects fetched:" in again.stderr
        objects = _lines(out)
        assert {obj["id"] for obj in objects} == set(ids)  # nothing lost
        assert all("title" in obj for obj in objects)  # whole objects
    finally:
        server.close()


def test_fetch_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    from openprocurement_feed.cli import main

    url = "http://127.0.0.1:9/api/2.5/tenders"
    for value in ("0", "-3", "many"):
        with pytest.raises(SystemExit) as exit_info:
            main(["sync", url, "--state", "s", "--fetch", "--fetch-concurrency", value])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "--fetch-concurrency" in err and "Traceback" not in err


def test_object_reads_wait_out_dropped_connections(served: tuple[ObjectFaults, DropProxy, str, Any]) -> None:
    """The connections of the object reads themselves are cut: every object
    still arrives, in the page's order, after retries."""
    from openprocurement_feed.client.http import FeedHTTP

    _faults, proxy, api, _store = served
    ids = create_tenders(api, 6, seed=25)
    retries: list[Any] = []
    http = FeedHTTP(api + "/tenders", retry=FAST_RETRY, on_retry=retries.append)
    fetcher = ObjectFetcher(http, concurrency=3)
    try:
        proxy.drop(3)
        page = fetcher.fetch_page([{"id": object_id} for object_id in ids])
    finally:
        fetcher.close()
        http.close()
    assert [obj["id"] for obj in page.objects] == ids and page.missing == []
    assert proxy.dropped >= 3 and len(retries) >= 3


@pytest.mark.parametrize(
    ("body", "message"),
    [(b"<html>busy</html>", "did not return JSON"), (b'{"data": [1]}', 'no "data" object')],
)
def test_an_object_that_is_not_an_object_is_a_clear_error(body: bytes, message: str) -> None:
    """A 200 whose body is not an object's JSON stops with an error naming the URL."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from openprocurement_feed.client.http import FeedHTTP

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    http = FeedHTTP(f"http://127.0.0.1:{server.server_address[1]}/api/2.5/tenders", retry=FAST_RETRY)
    fetcher = ObjectFetcher(http, concurrency=1)
    try:
        with pytest.raises(FeedError, match=message) as caught:
            fetcher.fetch("abc")
        assert "/api/2.5/tenders/abc" in str(caught.value)
    finally:
        fetcher.close()
        http.close()
        server.shutdown()
        server.server_close()
