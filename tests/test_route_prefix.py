"""``feed.route_prefix``: empty is a real value (no prefix of the feed's
own), for a host whose ``Configurator`` already has ``route_prefix``; ``/``
means the same; a bad prefix is a clear error."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError
from webtest import TestApp

from openprocurement_feed import parse_settings, shutdown

URI = "mongodb://127.0.0.1:27017/?replicaSet=rs0"


def test_an_empty_ini_value_is_no_prefix() -> None:
    assert parse_settings({"mongodb.uri": URI, "feed.route_prefix": ""}, {}).route_prefix == ""
    assert parse_settings({"mongodb.uri": URI, "feed.route_prefix": "   "}, {}).route_prefix == ""
    assert parse_settings({"mongodb.uri": URI, "feed.route_prefix": "/"}, {}).route_prefix == ""
    # the line removed: the default
    assert parse_settings({"mongodb.uri": URI}, {}).route_prefix == "/api/2.5"


def test_the_empty_prefix_moves_the_default_health_path() -> None:
    settings = parse_settings({"mongodb.uri": URI, "feed.route_prefix": ""}, {})
    assert settings.health_path == "/feeds/health"


def test_the_environment_spells_no_prefix_as_a_slash() -> None:
    # an empty variable is ignored, like every empty variable
    assert parse_settings({"mongodb.uri": URI}, {"FEED_ROUTE_PREFIX": ""}).route_prefix == "/api/2.5"
    assert parse_settings({"mongodb.uri": URI}, {"FEED_ROUTE_PREFIX": "/"}).route_prefix == ""


@pytest.mark.parametrize("value", ["api/2.5", "/api 2.5", "/api//2.5", "/api/2.5?x"])
def test_a_bad_prefix_is_a_clear_error(value: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_settings({"mongodb.uri": URI, "feed.route_prefix": value}, {})
    assert str(caught.value) == (f"Invalid setting 'feed.route_prefix': {value!r}; expected a path such as /api/2.5.")


def make_app(settings: dict[str, str], prefix: str, **config_args: Any) -> Any:
    config = Configurator(settings=dict(settings, **{"feed.route_prefix": prefix}), **config_args)
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    return config.make_wsgi_app()


def put_tender(app: Any) -> None:
    store = app.registry.feed_store
    store.save_data(store.collection("tenders"), {"_id": "t1", "public_modified": 5.0}, insert=True, modified=False)


@pytest.mark.parametrize("autocommit", [False, True], ids=["default", "autocommit"])
def test_empty_prefix_under_the_configurators_prefix(settings: dict[str, str], autocommit: bool) -> None:
    app = make_app(settings, "", route_prefix="/api/2.5", autocommit=autocommit)
    try:
        put_tender(app)
        web = TestApp(app)
        page = web.get("/api/2.5/tenders").json
        assert [item["id"] for item in page["data"]] == ["t1"]
        assert page["next_page"]["path"].startswith("/api/2.5/tenders?")
        web.get("/api/2.5/api/2.5/tenders", status=404)
        web.get("/tenders", status=404)
        # the include's own routes are under the Configurator's prefix too
        health = web.get("/api/2.5/feeds/health").json
        assert [feed["path"] for feed in health["feeds"]] == ["/api/2.5/tenders"]
    finally:
        shutdown(app.registry)


def test_a_slash_prefix_serves_at_the_root(settings: dict[str, str]) -> None:
    app = make_app(settings, "/")
    try:
        put_tender(app)
        web = TestApp(app)
        assert [item["id"] for item in web.get("/tenders").json["data"]] == ["t1"]
        assert web.get("/feeds/health").json["feeds"][0]["path"] == "/tenders"
    finally:
        shutdown(app.registry)


def test_an_empty_prefix_without_the_configurators_serves_at_the_root(settings: dict[str, str]) -> None:
    app = make_app(settings, "")
    try:
        assert TestApp(app).get("/tenders").json["data"] == []
    finally:
        shutdown(app.registry)


def test_a_doubled_prefix_is_a_warning(settings: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="openprocurement_feed"):
        app = make_app(settings, "/api/2.5", route_prefix="/api/2.5")
    try:
        assert "repeats the Configurator's route_prefix '/api/2.5'" in caplog.text
        assert "set 'feed.route_prefix =' (empty)" in caplog.text
        assert TestApp(app).get("/api/2.5/api/2.5/tenders").json["data"] == []
    finally:
        shutdown(app.registry)
