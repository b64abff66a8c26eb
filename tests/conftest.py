"""Shared fixtures: one real database server for the whole run.

The embedded SecantusDB server is started once per session; with
``MONGODB_URI`` set, that server (a MongoDB replica set) is used instead.
Every test gets a database of its own, dropped afterwards.
"""
from __future__ import annotations

import os
import time
import uuid
from typing import Any, Callable, Iterator

import pytest
from pymongo import MongoClient

#: The watermark the tests run with: on, short, and waited for.
TEST_WATERMARK = 0.2


@pytest.fixture(scope="session")
def mongodb_uri() -> Iterator[str]:
    """The URI of a running database server."""
    uri = os.environ.get("MONGODB_URI")
    if uri:
        yield uri
        return
    from openprocurement_feed.embedded import EmbeddedServer

    with EmbeddedServer() as server:
        yield server.uri


@pytest.fixture(scope="session")
def mongo_client(mongodb_uri: str) -> Iterator[MongoClient]:
    client: MongoClient = MongoClient(mongodb_uri, serverSelectionTimeoutMS=5000)
    yield client
    client.close()


@pytest.fixture
def db_name(mongo_client: MongoClient) -> Iterator[str]:
    """A fresh database name, dropped after the test."""
    name = "test_" + uuid.uuid4().hex[:12]
    yield name
    mongo_client.drop_database(name)


@pytest.fixture
def settings(mongodb_uri: str, db_name: str) -> dict[str, str]:
    """Ini settings of an app on the test server, watermark on."""
    return {
        "mongodb.uri": mongodb_uri,
        "mongodb.db_name": db_name,
        "feed.watermark_seconds": str(TEST_WATERMARK),
    }


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Environment overrides of a developer's shell must not leak into tests."""
    for name in ("DB_NAME", "FEED_WATERMARK_SECONDS", "FEED_ROUTE_PREFIX",
                 "FEED_DEFAULT_LIMIT", "FEED_MAX_LIMIT", "FEED_RESOURCES",
                 "DEMO_WRITE_DELAY_MS", "MONGODB_READ_PREFERENCE",
                 "MONGODB_WRITE_CONCERN", "MONGODB_READ_CONCERN",
                 "MONGODB_SERVER_SELECTION_TIMEOUT_MS"):
        monkeypatch.delenv(name, raising=False)


def wait_watermark(seconds: float = TEST_WATERMARK) -> None:
    """Sleep until writes made before now are older than the watermark."""
    time.sleep(seconds + 0.1)


@pytest.fixture
def demo_app(settings: dict[str, str]) -> Iterator[Any]:
    """The demo API as a ``webtest.TestApp``."""
    from webtest import TestApp

    from openprocurement_feed.demo import main

    app = main({}, **settings)
    yield TestApp(app)
    app.registry.feed_store.close()


@pytest.fixture
def store(demo_app: Any) -> Any:
    """The demo app's store."""
    return demo_app.app.registry.feed_store


@pytest.fixture
def put_docs(store: Any) -> Callable[..., list[dict[str, Any]]]:
    """Store tenders with chosen ``public_modified`` stamps (in the past, so
    the watermark already lets them through)."""

    def put(stamps: list[float], collection: str = "tenders", **fields: Any) -> list[dict[str, Any]]:
        docs = []
        for number, stamp in enumerate(stamps):
            doc = {
                "_id": fields.pop("_id", None) or uuid.uuid4().hex,
                "public_modified": stamp,
                "dateModified": f"2020-01-01T00:00:{number % 60:02d}+00:00",
                "status": "active",
                **fields,
            }
            docs.append(store.save_data(store.collection(collection), doc, insert=True, modified=False))
        return docs

    return put
