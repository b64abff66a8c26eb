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
                 "MONGODB_SERVER_SELECTION_TIMEOUT_MS", "FEED_ORDER", "FEED_SEQUENCER"):
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


def wait_sequenced(db: Any, collection: str = "tenders", timeout: float = 10.0) -> Any:
    """Wait until the sequencer caught up with ``collection``: every public
    document has an entry of its current ``_rev``, so has every other
    document that has an entry, deleted ones have tombstones, and the
    checkpoint covers every entry. Returns the checkpoint."""
    from openprocurement_feed.orders import STATE_ID, positions_name

    positions = db[positions_name(collection)]
    deadline = time.monotonic() + timeout
    while True:
        docs = {doc["_id"]: doc for doc in db[collection].find({}, {"_rev": 1, "is_public": 1})}
        entries = {
            entry["_id"]: entry
            for entry in positions.find({"_id": {"$ne": STATE_ID}}, {"rev": 1, "committed_ts": 1, "deleted": 1})
        }
        state = positions.find_one({"_id": STATE_ID}) or {}
        checkpoint = state.get("checkpoint")
        current = all(
            entries[doc_id].get("rev") == doc.get("_rev") if doc_id in entries else doc.get("is_public") is not True
            for doc_id, doc in docs.items()
        )
        tombstoned = all(entry.get("deleted") or entry["_id"] in docs for entry in entries.values())
        covered = checkpoint is not None and all(
            entry["committed_ts"] <= checkpoint for entry in entries.values()
        )
        if current and tombstoned and covered:
            return checkpoint
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the sequencer did not catch up with {collection!r} within {timeout} s "
                f"(current={current}, tombstones={tombstoned}, covered={covered})"
            )
        time.sleep(0.02)


@pytest.fixture
def commit_settings(settings: dict[str, str]) -> dict[str, str]:
    """Ini settings of a commit-ordered app with an in-process sequencer."""
    return dict(settings, **{"feed.order": "commit", "feed.sequencer": "thread"})


@pytest.fixture
def commit_app(commit_settings: dict[str, str]) -> Iterator[Any]:
    """The demo API in commit order, its sequencer running, as a TestApp."""
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main

    app = main({}, **commit_settings)
    assert app.registry.feed_sequencer.wait_ready(timeout=30)
    yield TestApp(app)
    shutdown(app.registry)
