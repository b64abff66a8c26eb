"""The embedded server's bounds for a development machine that runs for
days: its oplog's entries and age and its cache, settings with defaults
(``mongodb.embedded_*``) passed to ``secantusd-py``."""

from __future__ import annotations

import pytest
from pyramid.exceptions import ConfigurationError

from openprocurement_feed.settings import parse_settings

EMBEDDED = {"mongodb.uri": "embedded://"}


def test_the_bounds_have_defaults_for_a_development_machine() -> None:
    settings = parse_settings(EMBEDDED, {})
    assert (settings.embedded_oplog_max_entries, settings.embedded_oplog_retention_seconds) == (20_000, 3600.0)
    assert settings.embedded_cache_size == "64M"
    assert settings.embedded_args == (
        "--oplog-max-entries",
        "20000",
        "--oplog-retention-seconds",
        "3600",
        "--cache-size",
        "64M",
    )


def test_the_bounds_are_settings_and_environment_variables() -> None:
    ini = {
        **EMBEDDED,
        "mongodb.embedded_oplog_max_entries": "500",
        "mongodb.embedded_oplog_retention_seconds": "90.5",
        "mongodb.embedded_cache_size": "1g",
    }
    settings = parse_settings(ini, {"MONGODB_EMBEDDED_CACHE_SIZE": "256M"})
    assert settings.embedded_args == (
        "--oplog-max-entries",
        "500",
        "--oplog-retention-seconds",
        "90.5",
        "--cache-size",
        "256M",
    )
    assert parse_settings(ini, {}).embedded_cache_size == "1G"


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("mongodb.embedded_oplog_max_entries", "0", "expected an integer >= 1"),
        ("mongodb.embedded_oplog_max_entries", "many", "expected an integer >= 1"),
        ("mongodb.embedded_oplog_retention_seconds", "-1", "expected a number of seconds > 0"),
        ("mongodb.embedded_cache_size", "64", "expected megabytes or gigabytes such as 64M or 1G, at least 16M"),
        ("mongodb.embedded_cache_size", "8M", "at least 16M"),
        ("mongodb.embedded_cache_size", "1.5G", "such as 64M or 1G"),
    ],
)
def test_a_bad_bound_stops_start_up_with_its_name(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_settings({**EMBEDDED, key: value}, {})
    assert f"Invalid setting {key!r}: {value!r}" in str(raised.value) and message in str(raised.value)


@pytest.mark.server  # starts an embedded server of its own
def test_the_app_starts_the_embedded_server_with_its_bounds_and_the_oplog_keeps_them() -> None:
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main

    app = main({}, **{**EMBEDDED, "mongodb.embedded_oplog_max_entries": "50", "mongodb.embedded_cache_size": "32M"})
    try:
        embedded = app.registry.feed_embedded
        with open(f"/proc/{embedded.process.pid}/cmdline", "rb") as handle:
            command = handle.read().split(b"\0")
        # the guard runs the server with the same arguments
        for flag, value in ((b"--oplog-max-entries", b"50"), (b"--cache-size", b"32M")):
            assert command[command.index(flag) + 1] == value, command
        web = TestApp(app)
        for number in range(120):
            web.post_json("/api/2.5/tenders", {"data": {"title": f"tender {number}"}}, status=201)
        client = app.registry.feed_store.client
        assert client.local["oplog.rs"].estimated_document_count() > 50
        # the server prunes once every 1000 writes; this is the same pass now
        client.admin.command("secantusAdmin.pruneOplog")
        oplog = client.local["oplog.rs"].estimated_document_count()
        assert oplog <= 50, f"{oplog} oplog entries for a bound of 50"
    finally:
        shutdown(app.registry)
