"""What the reconcile client's tests share: the demo app on loopback behind
a middleware that can tamper with the reconcile endpoint's exchanges, a
crawler's copy made by ``openprocurement-feed sync``, and waits with
deadlines for the feed to show a change below its horizon."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.reconcile.records import timestamp_us


class Tamper:
    """WSGI middleware in front of the demo app for the reconcile endpoint
    only: queued faults (a status, headers) answer instead of the app;
    ``before_post`` runs once before the first POST is passed on;
    ``corrupt_request`` replaces the client's message, ``cut_answer`` cuts
    the server's answer to its first bytes."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.faults: deque[tuple[int, dict[str, str]]] = deque()
        self.before_post: Callable[[], None] | None = None
        self.corrupt_request: bytes | None = None
        self.cut_answer: int | None = None
        self.posts = 0
        self.gets = 0
        self.injected: list[int] = []

    def add(self, status: int, headers: dict[str, str] | None = None, count: int = 1) -> None:
        with self.lock:
            self.faults.extend([(status, headers or {})] * count)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not environ["PATH_INFO"].endswith("/reconcile"):
            return self.app(environ, start_response)
        post = environ["REQUEST_METHOD"] == "POST"
        with self.lock:
            if post:
                self.posts += 1
            else:
                self.gets += 1
            fault = self.faults.popleft() if self.faults else None
            hook, self.before_post = (self.before_post, None) if post else (None, self.before_post)
        if fault is not None:
            self.injected.append(fault[0])
            status, headers = fault
            body = json.dumps(
                {
                    "status": "error",
                    "errors": [{"location": "body", "name": "reconcile", "description": f"injected {status}"}],
                }
            ).encode()
            start_response(
                f"{status} Injected",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers.items()],
            )
            return [body]
        if hook is not None:
            hook()
        if post and self.corrupt_request is not None:
            import io

            length = int(environ.get("CONTENT_LENGTH") or 0)
            environ["wsgi.input"].read(length)
            environ["wsgi.input"] = io.BytesIO(self.corrupt_request)
            environ["CONTENT_LENGTH"] = str(len(self.corrupt_request))
        if not (post and self.cut_answer is not None):
            return self.app(environ, start_response)
        held: list[Any] = []
        answer = b"".join(self.app(environ, lambda status, headers, *rest: held.append((status, headers))))
        answer = answer[: self.cut_answer]
        status, headers = held[0]
        headers = [(key, value) for key, value in headers if key.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(answer)))])
        return [answer]


@dataclass
class Feed:
    """The demo feed served for a test: its URLs, the tamper and the app's registry."""

    api: str
    tamper: Tamper
    registry: Any
    order: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"{self.api}/tenders"

    def horizon(self) -> int:
        response = requests.get(f"{self.api}/feeds/tenders/reconcile", timeout=10)
        response.raise_for_status()
        return int(response.json()["until"])

    def newest(self, limit: int = 100) -> dict[str, str]:
        """id → dateModified of the feed's newest page."""
        response = requests.get(self.url, params={"descending": "1", "limit": str(limit)}, timeout=10)
        response.raise_for_status()
        return {item["id"]: item["dateModified"] for item in response.json()["data"]}

    def settle(self, versions: dict[str, str], timeout: float = 20.0) -> None:
        """Wait until the feed shows ``versions`` on its newest page and its
        horizon lies above them (a check then compares them)."""
        deadline = time.monotonic() + timeout
        latest = max(timestamp_us(stamp) for stamp in versions.values())
        while True:
            shown = self.newest()
            if all(shown.get(key) == stamp for key, stamp in versions.items()) and self.horizon() > latest:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the feed did not show {versions} below its horizon within {timeout} s")
            time.sleep(0.05)

    def patch(self, object_id: str, title: str) -> str:
        """PATCH a tender; its new dateModified."""
        response = requests.patch(f"{self.url}/{object_id}", json={"data": {"title": title}}, timeout=10)
        response.raise_for_status()
        return str(response.json()["data"]["dateModified"])

    def database(self) -> dict[str, str]:
        """id → dateModified of the tenders the feed shows (public, not test)."""
        collection = self.registry.feed_store.collection("tenders")
        query = {"is_public": True, "is_test": False}
        return {doc["_id"]: doc["dateModified"] for doc in collection.find(query, {"dateModified": 1})}


def crawl(feed: Feed, folder: Path, expected: dict[str, str], timeout: float = 30.0) -> Path:
    """``openprocurement-feed sync`` into ``folder/copy.jsonl`` until the copy
    holds ``expected`` (repeated: the commit order shows a write once
    sequenced), and the feed's horizon lies above them."""
    state, out = folder / "state.json", folder / "copy.jsonl"
    deadline = time.monotonic() + timeout
    while True:
        assert cli_main(["sync", feed.url, "--state", str(state), "--out", str(out), "--no-progress"]) == 0
        held = latest_lines(out)
        if all(held.get(key, {}).get("dateModified") == stamp for key, stamp in expected.items()):
            feed.settle(expected)  # and the horizon above them: a check compares them all
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"sync did not bring the copy to {len(expected)} objects within {timeout} s")
        time.sleep(0.1)


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def latest_lines(path: Path) -> dict[str, dict[str, Any]]:
    """id → its last line (the copy's own rule, close enough for the tests' files)."""
    held: dict[str, dict[str, Any]] = {}
    for line in read_lines(path) if path.exists() else []:
        if line.get("removed"):
            held.pop(line["id"], None)
        else:
            held[line["id"]] = line
    return held


def write_lines(path: Path, lines: Iterable[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def serve(settings: dict[str, str]) -> Iterator[tuple[Tamper, str, Any]]:
    """The demo app behind :class:`Tamper` on waitress: ``(tamper, API URL, registry)``."""
    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main
    from openprocurement_feed.demo.server import ThreadedServer

    app = main({}, **settings)
    try:
        if app.registry.feed_sequencer is not None:
            assert app.registry.feed_sequencer.wait_ready(timeout=30)
        tamper = Tamper(app)
        with ThreadedServer(tamper, threads=8) as served:
            yield tamper, served.url + app.registry.feed_settings.route_prefix, app.registry
    finally:
        shutdown(app.registry)
