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
        ("feed.timezone", "Europe/Atlantis", "'feed.timezone': 'Europe/Atlantis'; expected a time zone name"),
        ("feed.timezone", "../etc/passwd", "'feed.timezone': '../etc/passwd'"),
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


def test_the_time_zone_of_naive_dates() -> None:
    """Upstream's renderer writes naive dates in its ``TZ`` (Europe/Kiev
    when unset): the default is the same zone."""
    assert parse_settings({"mongodb.uri": URI}, {}).timezone == "Europe/Kyiv"
    assert parse_settings({"mongodb.uri": URI, "feed.timezone": "UTC"}, {}).timezone == "UTC"
    assert parse_settings({"mongodb.uri": URI}, {"FEED_TIMEZONE": "Europe/Warsaw"}).timezone == "Europe/Warsaw"


def test_an_upstream_ini_configures_the_include(settings: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """Upstream's ini keys in upstream's spellings, under its autocommitting
    Configurator with its route prefix: the include accepts them all and
    the package's own store reads as they say."""
    from pymongo.read_preferences import SecondaryPreferred
    from pyramid.config import Configurator

    from openprocurement_feed import shutdown

    upstream_ini = {
        "mongodb.uri": settings["mongodb.uri"],
        "mongodb.db_name": settings["mongodb.db_name"],
        "mongodb.max_pool_size": "100",
        "mongodb.min_pool_size": "0",
        "mongodb.read_preference": "SECONDARY_PREFERRED",
        "mongodb.write_concern": "majority",
        "mongodb.read_concern": "majority",
        "mongodb.tender_collection": "test_tenders",
        "mongodb.plan_collection": "test_plans",
        "feed.route_prefix": "",
        "feed.watermark_seconds": settings["feed.watermark_seconds"],
    }
    config = Configurator(settings=upstream_ini, autocommit=True, route_prefix="/api/2.5")
    with caplog.at_level("WARNING", logger="openprocurement_feed"):
        config.include("openprocurement_feed")
    assert "Unknown setting" not in caplog.text  # every upstream key is known
    config.add_feed("tenders", collection="test_tenders")
    app = config.make_wsgi_app()
    try:
        store = app.registry.feed_store
        collection = store.feed_collection("test_tenders")
        assert isinstance(collection.read_preference, SecondaryPreferred)
        assert collection.read_concern.level == "majority"
        assert store.collection("test_tenders").write_concern.document == {"w": "majority"}
        assert app.registry.feed_definitions["tenders"].route_path == "/api/2.5/tenders"
    finally:
        shutdown(app.registry)
