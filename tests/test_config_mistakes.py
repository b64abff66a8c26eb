"""Configuration mistakes are caught at start-up, precisely: duplicate feeds
and paths, empty and unknown settings, an overlong watermark, URI options
overridden by defaults; and start-up says what it serves."""

from __future__ import annotations

import logging

import pytest
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationConflictError, ConfigurationError

from openprocurement_feed import shutdown
from openprocurement_feed.settings import parse_settings
from openprocurement_feed.store.database import FeedStore

URI = "mongodb://127.0.0.1:27017/"
HERE = __file__.rstrip("c")


def included(settings: dict[str, str]) -> Configurator:
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    return config


def test_a_listed_feed_added_again_is_a_conflict_at_the_callers_lines(settings: dict[str, str]) -> None:
    config = included(dict(settings, **{"feed.resources": "tenders plans"}))
    with pytest.raises(ConfigurationConflictError) as caught:
        config.add_feed("tenders")
    message = str(caught.value)
    assert "('openprocurement_feed.feed', 'tenders')" in message
    assert message.count(HERE) == 2  # the include line and the add_feed line
    assert "feed.resources = tenders plans" in message
    assert "openprocurement_feed/__init__.py" not in message
    assert "openprocurement_feed/feed/views.py" not in message


def test_two_add_feeds_of_one_name_conflict(settings: dict[str, str]) -> None:
    config = included(settings)
    config.add_feed("tenders")
    with pytest.raises(ConfigurationConflictError) as caught:
        config.add_feed("tenders", path="elsewhere")
    assert 'config.add_feed("tenders")' in str(caught.value)
    assert 'config.add_feed("tenders", path="elsewhere")' in str(caught.value)


def test_two_feeds_on_one_path_conflict(settings: dict[str, str]) -> None:
    config = included(settings)
    config.add_feed("submissions", path="frameworks/{framework_id}/submissions", scope="framework_id")
    with pytest.raises(ConfigurationConflictError, match=r"feed-path.*frameworks/\{\}/submissions"):
        config.add_feed("other", path="/frameworks/{id}/submissions/", scope="id")


def test_feeds_added_in_two_includes_conflict(settings: dict[str, str]) -> None:
    def one(config: Configurator) -> None:
        config.add_feed("tenders")

    def two(config: Configurator) -> None:
        config.add_feed("tenders", path="again")

    config = included(settings)
    config.include(one)
    with pytest.raises(ConfigurationConflictError, match="'tenders'"):
        config.include(two)


@pytest.mark.parametrize(
    "key", ["feed.watermark_seconds", "feed.max_limit", "mongodb.db_name", "feed.order", "mongodb.read_preference"]
)
def test_an_empty_value_is_an_error(key: str) -> None:
    with pytest.raises(ConfigurationError, match=f"Empty setting '{key}'"):
        parse_settings({"mongodb.uri": URI, key: "  "}, {})


def test_empty_means_off_where_it_is_documented() -> None:
    parsed = parse_settings({"mongodb.uri": URI, "feed.resources": "", "feed.metrics_path": ""}, {})
    assert parsed.resources == () and parsed.metrics_path == ""


@pytest.mark.parametrize(
    "key, close",
    [
        ("feed.watermark_second", "feed.watermark_seconds"),
        ("mongodb.read_prefrence", "mongodb.read_preference"),
        ("feed.max_limt", "feed.max_limit"),
    ],
)
def test_an_unknown_key_is_a_warning_with_the_closest_name(
    key: str, close: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="openprocurement_feed.settings"):
        parse_settings({"mongodb.uri": URI, key: "2"}, {})
    assert f"Unknown setting {key!r} is ignored; did you mean {close!r}?" in caplog.text


def test_known_host_keys_are_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="openprocurement_feed.settings"):
        parse_settings(
            {"mongodb.uri": URI, "mongodb.tenders_collection": "t", "mongodb.max_pool_size": "100", "other.key": "x"},
            {},
        )
    assert caplog.text == ""


def test_a_watermark_above_an_hour_needs_saying_so() -> None:
    with pytest.raises(ConfigurationError, match=r"feed\.watermark_seconds.*feed\.long_watermark = true"):
        parse_settings({"mongodb.uri": URI, "feed.watermark_seconds": "7200"}, {})
    with pytest.raises(ConfigurationError, match="FEED_WATERMARK_SECONDS"):
        parse_settings({"mongodb.uri": URI}, {"FEED_WATERMARK_SECONDS": "3601"})
    meant = parse_settings({"mongodb.uri": URI, "feed.watermark_seconds": "7200", "feed.long_watermark": "true"}, {})
    assert meant.watermark_seconds == 7200.0
    hour = parse_settings({"mongodb.uri": URI, "feed.watermark_seconds": "3600"}, {})
    assert hour.watermark_seconds == 3600


def test_a_bad_long_watermark_flag_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match=r"feed\.long_watermark.*true or false"):
        parse_settings({"mongodb.uri": URI, "feed.long_watermark": "sure"}, {})


def test_options_in_the_uri_are_not_overridden() -> None:
    uri = "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=1234&connectTimeoutMS=4321"
    store = FeedStore.from_settings(parse_settings({"mongodb.uri": uri}, {}))
    try:
        assert store.client.options.server_selection_timeout == 1.234
        assert store.client.options.pool_options.connect_timeout == 4.321
    finally:
        store.close()
    store = FeedStore.from_settings(
        parse_settings({"mongodb.uri": "mongodb://127.0.0.1:9/", "mongodb.server_selection_timeout_ms": "2500"}, {})
    )
    try:
        assert store.client.options.server_selection_timeout == 2.5
    finally:
        store.close()


def test_start_up_logs_one_line_per_feed(settings: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    config = included(dict(settings, **{"mongodb.plans_collection": "plan_docs"}))
    config.add_feed("tenders")
    config.add_feed("plans", order="commit")
    with caplog.at_level(logging.INFO, logger="openprocurement_feed.views"):
        app = config.make_wsgi_app()
    shutdown(app.registry)
    lines = [r.getMessage() for r in caplog.records if r.name == "openprocurement_feed.views"]
    assert "Feed 'tenders': GET /api/2.5/tenders, collection 'tenders', watermark order, W = 0.2 s" in lines
    assert "Feed 'plans': GET /api/2.5/plans, collection 'plan_docs', commit order, W = 0.2 s" in lines
    assert len(lines) == 2
