"""Idempotency keys expire: the demo's key collection is bounded by a TTL
index (``demo.idempotency_ttl_seconds``, a day by default), and a retry
after its key expired is a new create."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from pyramid.exceptions import ConfigurationError
from webtest import TestApp

from openprocurement_feed import shutdown
from openprocurement_feed.demo import main
from openprocurement_feed.demo.idempotency import DEFAULT_TTL_SECONDS, KEYS, REPLAYED, TTL_INDEX
from openprocurement_feed.demo.settings import parse_demo_settings
from openprocurement_feed.testing import make_settings


def test_the_expiry_is_a_day_by_default_and_a_validated_setting() -> None:
    assert parse_demo_settings({}, {}).idempotency_ttl_seconds == DEFAULT_TTL_SECONDS == 86_400
    assert parse_demo_settings({"demo.idempotency_ttl_seconds": " 3600 "}, {}).idempotency_ttl_seconds == 3600
    env = {"DEMO_IDEMPOTENCY_TTL_SECONDS": "60"}
    assert parse_demo_settings({"demo.idempotency_ttl_seconds": "3600"}, env).idempotency_ttl_seconds == 60
    for bad in ("0", "-5", "1.5", "a day", "", "2147483648"):
        with pytest.raises(ConfigurationError, match=r"demo.idempotency_ttl_seconds.*whole seconds from 1"):
            parse_demo_settings({"demo.idempotency_ttl_seconds": bad}, {})
    with pytest.raises(ConfigurationError, match="environment variable DEMO_IDEMPOTENCY_TTL_SECONDS"):
        parse_demo_settings({}, {"DEMO_IDEMPOTENCY_TTL_SECONDS": "soon"})


def _ttl(app: Any) -> Any:
    indexes = app.registry.feed_store.collection(KEYS).index_information()
    return indexes.get(TTL_INDEX, {}).get("expireAfterSeconds")


def test_the_key_collection_has_its_ttl_index_and_a_new_setting_changes_it(settings: dict[str, str]) -> None:
    first = main({}, **settings)
    try:
        assert _ttl(first) == DEFAULT_TTL_SECONDS
    finally:
        shutdown(first.registry)
    second = main({}, **dict(settings, **{"demo.idempotency_ttl_seconds": "120"}))
    try:
        assert _ttl(second) == 120, "a restart with another expiry changes the index"
    finally:
        shutdown(second.registry)


def run_ttl_monitor(client: Any) -> None:
    """One pass of the embedded server's TTL monitor now (it runs once a
    minute, as MongoDB's, whose monitor a test can only wait for)."""
    from pymongo.errors import OperationFailure

    with contextlib.suppress(OperationFailure):  # a MongoDB: its own monitor
        client.admin.command("secantusAdmin.pruneTtl")


def test_a_retry_after_its_key_expired_is_a_new_create(mongodb_uri: str, db_name: str) -> None:
    settings = make_settings(mongodb_uri, db_name)
    settings["demo.idempotency_ttl_seconds"] = "1"
    app = main({}, **settings)
    try:
        web = TestApp(app)
        body = {"data": {"title": "kept a second"}}
        headers = {"Idempotency-Key": "expiring-key"}
        first = web.post_json("/api/2.5/tenders", body, headers=headers, status=201)
        replayed = web.post_json("/api/2.5/tenders", body, headers=headers, status=201)
        assert replayed.headers.get(REPLAYED) == "true" and replayed.json["data"]["id"] == first.json["data"]["id"]
        keys = app.registry.feed_store.collection(KEYS)
        deadline = time.monotonic() + 90  # MongoDB's monitor: once a minute
        while keys.count_documents({}) > 0:
            assert time.monotonic() < deadline, "the key was not removed by the TTL index"
            time.sleep(0.5)
            run_ttl_monitor(keys.database.client)
        again = web.post_json("/api/2.5/tenders", body, headers=headers, status=201)
        assert REPLAYED not in again.headers
        assert again.json["data"]["id"] != first.json["data"]["id"], "a new object, with a new token"
        assert again.json["access"]["token"] != first.json["access"]["token"]
    finally:
        shutdown(app.registry)
