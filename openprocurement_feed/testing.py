"""A testing kit for host applications: pytest fixtures and helpers.

Load it from the host's ``conftest.py``::

    pytest_plugins = ["openprocurement_feed.testing"]

Fixtures (names a host may override in its own ``conftest.py``):

* ``mongodb_uri`` (session) — a running database: the embedded server (the
  ``embedded`` extra), started once per test session, or the server named
  by ``MONGODB_URI``;
* ``mongo_client`` (session) — a client of that server;
* ``db_name`` — a fresh database name, dropped after the test;
* ``settings`` — ini settings of an app on that database with a short
  watermark (:data:`TEST_WATERMARK`);
* ``feed_settings_factory`` — :func:`make_settings` bound to the server.

Helpers: :func:`wait_watermark`, :func:`wait_visible` (until written
documents appear in a feed), :func:`save_in_the_past` (fixtures stamped in
the past, visible at once) and :func:`serve_http` (the app on a loopback
port, for tests over real HTTP).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any
from urllib.request import Request as UrlRequest
from urllib.request import urlopen
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from pymongo import MongoClient

#: The watermark tests run with: on, short, and waited for.
TEST_WATERMARK = 0.2
#: How far in the past :func:`save_in_the_past` stamps documents.
PAST_SECONDS = 3600.0


def make_settings(uri: str, db_name: str, **extra: str) -> dict[str, str]:
    """Ini settings of an app on ``uri``/``db_name`` with the test watermark;
    ``extra`` keys use ``_`` for ``.`` (``feed_order="commit"``) or are
    given as a mapping of real keys."""
    settings = {
        "mongodb.uri": uri,
        "mongodb.db_name": db_name,
        "feed.watermark_seconds": str(TEST_WATERMARK),
    }
    for key, value in extra.items():
        settings[key.replace("_", ".", 1)] = value
    return settings


def wait_watermark(seconds: float = TEST_WATERMARK) -> None:
    """Sleep until writes made before now are older than the watermark."""
    time.sleep(seconds + 0.1)


def wait_visible(
    read_ids: Callable[[], Iterable[str]],
    ids: Iterable[str],
    timeout: float = 10.0,
    poll: float = 0.05,
) -> set[str]:
    """Poll ``read_ids()`` (e.g. a crawl of the feed) until every id of
    ``ids`` is among them; returns what was read. Raises AssertionError
    naming the missing ids after ``timeout`` seconds."""
    wanted = set(ids)
    deadline = time.monotonic() + timeout
    while True:
        seen = set(read_ids())
        if wanted <= seen:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(wanted - seen)} documents not visible in the feed after {timeout} s: "
                f"{sorted(wanted - seen)[:10]}"
            )
        time.sleep(poll)


def save_in_the_past(
    store: Any,
    collection: Any,
    docs: Iterable[Mapping[str, Any]],
    seconds_ago: float = PAST_SECONDS,
) -> list[dict[str, Any]]:
    """Insert ``docs`` through ``store.save_data`` with ``public_modified``
    stamps ``seconds_ago`` in the past (one millisecond apart, in order) and
    the matching ``dateModified`` (unless given): feeds show them at once,
    whatever the watermark."""
    start = round(time.time() - seconds_ago, 3)
    saved = []
    for number, doc in enumerate(docs):
        data = {"_id": uuid.uuid4().hex, "status": "active", **doc}
        data.setdefault("public_modified", round(start + number / 1000, 3))
        data.setdefault("dateModified", datetime.fromtimestamp(data["public_modified"], timezone.utc).isoformat())
        saved.append(store.save_data(collection, data, insert=True, modified=False))
    return saved


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_http(app: Callable[..., Any], host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread; yields its base URL."""
    server: WSGIServer = make_server(host, 0, app, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def get_json(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
    """``GET url`` over HTTP: ``(status, decoded JSON body)``, errors included."""
    from urllib.error import HTTPError

    try:
        # bandit B310: the tests' own http:// URLs of servers they started
        with urlopen(UrlRequest(url, headers=dict(headers or {})), timeout=30) as response:  # nosec B310
            return response.status, json.loads(response.read())
    except HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def crawl(
    base_url: str, path: str, headers: Mapping[str, str] | None = None, query: str = "", max_pages: int = 1000
) -> list[dict[str, Any]]:
    """Every item of a feed, following ``next_page`` until an empty page."""
    items: list[dict[str, Any]] = []
    url = f"{base_url}{path}?{query}"
    for _ in range(max_pages):
        status, body = get_json(url, headers)
        if status != 200:
            raise AssertionError(f"GET {url} answered {status}: {body}")
        if not body["data"]:
            return items
        items.extend(body["data"])
        url = base_url + body["next_page"]["path"]
    raise AssertionError(f"{path}: more than {max_pages} pages")


@pytest.fixture(scope="session")
def mongodb_uri() -> Iterator[str]:
    """The URI of a running database server: ``MONGODB_URI``, or an
    embedded server started for the session."""
    uri = os.environ.get("MONGODB_URI")
    if uri:
        yield uri
        return
    from .embedded.server import EmbeddedServer

    with EmbeddedServer() as server:
        yield server.uri


@pytest.fixture(scope="session")
def mongo_client(mongodb_uri: str) -> Iterator[MongoClient[Any]]:
    """A client of the test server."""
    client: MongoClient[Any] = MongoClient(mongodb_uri, serverSelectionTimeoutMS=5000)
    yield client
    client.close()


@pytest.fixture
def db_name(mongo_client: MongoClient[Any]) -> Iterator[str]:
    """A fresh database name, dropped after the test."""
    name = "test_" + uuid.uuid4().hex[:12]
    yield name
    mongo_client.drop_database(name)


@pytest.fixture
def settings(mongodb_uri: str, db_name: str) -> dict[str, str]:
    """Ini settings of an app on the test server, watermark on and short."""
    return make_settings(mongodb_uri, db_name)


@pytest.fixture
def feed_settings_factory(mongodb_uri: str, db_name: str) -> Callable[..., dict[str, str]]:
    """:func:`make_settings` on the test server and database."""

    def factory(**extra: str) -> dict[str, str]:
        return make_settings(mongodb_uri, db_name, **extra)

    return factory
