"""The probes for orchestrators: liveness without the database, readiness
that fails only while the database cannot be reached, never for a verdict."""

from __future__ import annotations

import logging
import re
import socket
import time
from typing import Any

import pytest
from pyramid.config import Configurator
from webtest import TestApp

from openprocurement_feed import shutdown
from openprocurement_feed.demo import main
from openprocurement_feed.operations.probes import READY_TIMEOUT_SECONDS
from openprocurement_feed.store.state import feed_state

HEALTH = "/api/2.5/feeds/health"
LIVE = HEALTH + "/live"
READY = HEALTH + "/ready"
FEED = "/api/2.5/tenders"


class NoDatabase:
    """A store stand-in that fails any use: a view that touches it errs."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the store was used ({name!r})")


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_liveness_answers_without_touching_the_database(settings: dict[str, str]) -> None:
    web = TestApp(main({}, **settings))
    store = web.app.registry.feed_store
    try:
        feed_state(web.app.registry).store = NoDatabase()
        response = web.get(LIVE)
        assert response.json == {"status": "alive"}
        assert response.headers["Cache-Control"] == "no-store"
    finally:
        feed_state(web.app.registry).store = store
        shutdown(web.app.registry)


def test_readiness_pings_the_database(settings: dict[str, str]) -> None:
    web = TestApp(main({}, **settings))
    try:
        response = web.get(READY)
        assert response.json == {"status": "ready"}
        assert response.headers["Cache-Control"] == "no-store"
    finally:
        shutdown(web.app.registry)


def test_a_commit_feed_without_sequencer_is_alive_and_ready(settings: dict[str, str]) -> None:
    """The feed answers 503 (no checkpoint yet) and the verdict is unknown,
    yet the worker is fine: the probes say so."""
    web = TestApp(main({}, **dict(settings, **{"feed.order": "commit", "feed.sequencer": "off"})))
    try:
        assert web.get(FEED, status=503).json["errors"][0]["name"] == "feed"
        assert web.get(HEALTH).json["status"] == "unknown"
        assert web.get(LIVE).json == {"status": "alive"}
        assert web.get(READY).json == {"status": "ready"}
    finally:
        shutdown(web.app.registry)


def test_readiness_fails_fast_while_the_database_is_unreachable(
    settings: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    unreachable = dict(
        settings,
        **{
            "mongodb.uri": f"mongodb://127.0.0.1:{closed_port()}/?directConnection=true",
            "mongodb.server_selection_timeout_ms": "3000",
        },
    )
    web = TestApp(main({}, **unreachable))
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="openprocurement_feed.probes"):
            response = web.get(READY, status=503)
        took = time.monotonic() - started
        assert response.json["errors"] == [
            {"location": "body", "name": "database", "description": "The database is unavailable; retry later"}
        ]
        assert response.headers["Retry-After"] == "1"
        # Bounded by the probe's timeout (0.5 s), not the 3 s server
        # selection: the driver's error says which timeout ended the wait
        # (read from it, not from a time a loaded machine may stretch).
        messages = [record.getMessage() for record in caplog.records]
        (failure,) = [message for message in messages if "did not answer a ping" in message]
        waited = re.search(r"Timeout: ([\d.]+)s", failure)
        assert waited and float(waited[1]) <= READY_TIMEOUT_SECONDS, f"{failure[:300]} ({took:.2f} s)"
        assert web.get(LIVE).json == {"status": "alive"}
    finally:
        shutdown(web.app.registry)


def test_the_probes_need_no_permission_when_the_health_view_does(settings: dict[str, str]) -> None:
    from pyramid.authorization import ACLHelper, Allow, Authenticated
    from pyramid.security import Allowed, Denied

    class Policy:
        """Nobody is authenticated; the health view needs 'health'."""

        def identity(self, request: Any) -> None:
            return None

        def authenticated_userid(self, request: Any) -> None:
            return None

        def permits(self, request: Any, context: Any, permission: str) -> Allowed | Denied:
            return ACLHelper().permits(context, [], permission)

    class Root:
        __acl__ = ((Allow, Authenticated, "health"),)

        def __init__(self, request: Any) -> None:
            pass

    config = Configurator(settings=dict(settings, **{"feed.health_permission": "health"}), root_factory=Root)
    config.set_security_policy(Policy())
    config.set_default_permission("health")
    config.include("openprocurement_feed")
    web = TestApp(config.make_wsgi_app())
    try:
        web.get(HEALTH, status=403)
        assert web.get(LIVE).json == {"status": "alive"}
        assert web.get(READY).json == {"status": "ready"}
    finally:
        shutdown(web.app.registry)


def test_the_probes_follow_the_health_path(settings: dict[str, str]) -> None:
    web = TestApp(main({}, **dict(settings, **{"feed.health_path": "/status/"})))
    try:
        assert web.get("/status/live").json == {"status": "alive"}
        assert web.get("/status/ready").json == {"status": "ready"}
        web.get(LIVE, status=404)
    finally:
        shutdown(web.app.registry)
