"""Settings: defaults, env overrides and a precise error for every bad value."""

from __future__ import annotations

import pytest
from pyramid.exceptions import ConfigurationError

from openprocurement_feed.settings import FeedSettings, parse_settings

URI = "mongodb://127.0.0.1:27017/?replicaSet=rs0"


def test_defaults() -> None:
    settings = parse_settings({"mongodb.uri": URI}, {})
    assert settings == FeedSettings(uri=URI)
    assert settings.watermark_seconds == 1.0
    assert settings.read_preference == "primary"
    assert settings.route_prefix == "/api/2.5"
    assert (settings.default_limit, settings.max_limit) == (100, 1000)


def test_ini_values() -> None:
    settings = parse_settings(
        {
            "mongodb.uri": URI,
            "mongodb.db_name": "prozorro",
            "mongodb.read_preference": "secondaryPreferred",
            "mongodb.write_concern": "2",
            "mongodb.read_concern": "majority",
            "mongodb.server_selection_timeout_ms": "1500",
            "mongodb.plans_collection": "plan_docs",
            "feed.watermark_seconds": "0.5",
            "feed.route_prefix": "/api/2.5/",
            "feed.default_limit": "50",
            "feed.max_limit": "500",
            "feed.resources": "tenders plans, contracts",
            "feed.max_time_ms": "2500",
        },
        {},
    )
    assert settings.db_name == "prozorro"
    assert settings.read_preference == "secondaryPreferred"
    assert settings.write_concern == 2
    assert settings.read_concern == "majority"
    assert settings.server_selection_timeout_ms == 1500
    assert settings.watermark_seconds == 0.5
    assert settings.route_prefix == "/api/2.5"
    assert (settings.default_limit, settings.max_limit) == (50, 500)
    assert settings.resources == ("tenders", "plans", "contracts")
    assert settings.max_time_ms == 2500
    assert settings.collection_name("plans") == "plan_docs"
    assert settings.collection_name("tenders") == "tenders"


def test_environment_overrides_the_ini() -> None:
    settings = parse_settings(
        {"mongodb.uri": URI, "feed.watermark_seconds": "2", "mongodb.db_name": "a"},
        {
            "MONGODB_URI": "mongodb://other:27017",
            "DB_NAME": "b",
            "FEED_WATERMARK_SECONDS": "0",
            "MONGODB_CONTRACTS_COLLECTION": "contract_docs",
        },
    )
    assert settings.uri == "mongodb://other:27017"
    assert settings.db_name == "b"
    assert settings.watermark_seconds == 0.0
    assert settings.collection_name("contracts") == "contract_docs"


def test_embedded_uri() -> None:
    assert parse_settings({"mongodb.uri": "embedded://"}, {}).embedded_path is None
    settings = parse_settings({"mongodb.uri": "embedded:///tmp/feed-db"}, {})
    assert settings.embedded and settings.embedded_path == "/tmp/feed-db"
    assert not parse_settings({"mongodb.uri": URI}, {}).embedded


def test_missing_uri_names_the_setting_and_the_variable() -> None:
    with pytest.raises(ConfigurationError, match=r"mongodb\.uri.*MONGODB_URI"):
        parse_settings({}, {})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("mongodb.uri", "http://x", "Invalid setting 'mongodb.uri': 'http://x'"),
        ("feed.watermark_seconds", "-1", "'feed.watermark_seconds': '-1'; expected a number of seconds >= 0"),
        ("feed.watermark_seconds", "soon", "'feed.watermark_seconds': 'soon'"),
        ("feed.watermark_seconds", "nan", "'feed.watermark_seconds': 'nan'"),
        ("feed.watermark_seconds", "inf", "'feed.watermark_seconds': 'inf'"),
        ("feed.max_limit", "0", "'feed.max_limit': '0'; expected an integer >= 1"),
        ("feed.default_limit", "ten", "'feed.default_limit': 'ten'"),
        ("feed.default_limit", "5000", "expected at most feed.max_limit (1000)"),
        ("mongodb.read_preference", "fastest", "expected one of primary, primaryPreferred"),
        ("mongodb.read_concern", "strong", "'mongodb.read_concern': 'strong'"),
        ("mongodb.write_concern", "all nodes", "'mongodb.write_concern': 'all nodes'"),
        ("mongodb.server_selection_timeout_ms", "-5", "server_selection_timeout_ms"),
        ("mongodb.db_name", "a/b", "'mongodb.db_name': 'a/b'"),
        ("feed.route_prefix", "api 2", "'feed.route_prefix': 'api 2'"),
        ("feed.resources", "tenders tenders", "expected each feed name once"),
        ("feed.resources", "ten-ders", "'ten-ders'"),
        ("mongodb.plans_collection", "$bad", "'mongodb.plans_collection': '$bad'"),
        ("feed.max_time_ms", "-1", "'feed.max_time_ms': '-1'; expected an integer >= 0"),
        ("feed.max_time_ms", "soon", "'feed.max_time_ms': 'soon'"),
        ("feed.order", "sideways", "'feed.order': 'sideways'; expected one of watermark, commit"),
        ("feed.order", "Commit", "'feed.order': 'Commit'"),
        ("feed.sequencer", "process", "'feed.sequencer': 'process'; expected one of off, thread"),
    ],
)
def test_bad_values_name_the_setting(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        parse_settings({"mongodb.uri": URI, key: value}, {})
    assert message in str(error.value)


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="environment variable FEED_WATERMARK_SECONDS: '-2'"):
        parse_settings({"mongodb.uri": URI}, {"FEED_WATERMARK_SECONDS": "-2"})


def test_from_settings_is_parse_settings() -> None:
    assert FeedSettings.from_settings({"mongodb.uri": URI}) == parse_settings({"mongodb.uri": URI}, {})


def test_feed_order_and_sequencer() -> None:
    settings = parse_settings({"mongodb.uri": URI}, {})
    assert (settings.order, settings.sequencer) == ("watermark", "off")
    settings = parse_settings({"mongodb.uri": URI, "feed.order": "commit", "feed.sequencer": "thread"}, {})
    assert (settings.order, settings.sequencer) == ("commit", "thread")
    overridden = parse_settings(
        {"mongodb.uri": URI, "feed.order": "commit"}, {"FEED_ORDER": "watermark", "FEED_SEQUENCER": "thread"}
    )
    assert (overridden.order, overridden.sequencer) == ("watermark", "thread")
    with pytest.raises(ConfigurationError, match="environment variable FEED_ORDER: 'both'"):
        parse_settings({"mongodb.uri": URI}, {"FEED_ORDER": "both"})


@pytest.mark.parametrize(
    ("upstream", "driver"),
    [
        ("PRIMARY", "primary"),
        ("PRIMARY_PREFERRED", "primaryPreferred"),
        ("SECONDARY", "secondary"),
        ("SECONDARY_PREFERRED", "secondaryPreferred"),
        ("NEAREST", "nearest"),
    ],
)
def test_upstreams_read_preference_spelling_is_accepted(upstream: str, driver: str) -> None:
    """An upstream ini names ``ReadPreference`` attributes; the driver's mode
    name comes out."""
    settings = parse_settings({"mongodb.uri": "mongodb://db", "mongodb.read_preference": upstream}, environ={})
    assert settings.read_preference == driver


def test_upstreams_environment_variables_are_read_after_ours() -> None:
    base = {"mongodb.uri": "mongodb://db"}
    upstream_env = {"READ_PREFERENCE": "SECONDARY_PREFERRED", "WRITE_CONCERN": "2", "READ_CONCERN": "majority"}
    settings = parse_settings(base, environ=upstream_env)
    assert (settings.read_preference, settings.write_concern, settings.read_concern) == (
        "secondaryPreferred",
        2,
        "majority",
    )
    ours = {**upstream_env, "MONGODB_READ_PREFERENCE": "nearest", "MONGODB_WRITE_CONCERN": "1"}
    settings = parse_settings(base, environ=ours)
    assert (settings.read_preference, settings.write_concern) == ("nearest", 1)


def test_a_bad_upstream_variable_is_named() -> None:
    with pytest.raises(ConfigurationError, match="environment variable READ_PREFERENCE: 'FASTEST'"):
        parse_settings({"mongodb.uri": "mongodb://db"}, environ={"READ_PREFERENCE": "FASTEST"})
