"""Every database client of the system carries the name of its role.

The web app's store, the in-process sequencer and the long-poll notifier
each open a client of their own whose ``appName`` the server sees (a fail
point or ``currentOp`` can single one out); the names come from the ini
file, and an ``appname`` in the URI names the web client.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from pymongo import MongoClient
from pyramid.exceptions import ConfigurationError

from openprocurement_feed import shutdown
from openprocurement_feed.demo import main
from openprocurement_feed.roles import LONGPOLL, SEQUENCER, WEB, app_name_of
from openprocurement_feed.settings import parse_settings
from openprocurement_feed.store.state import feed_state, role_store


def server_app_names(client: MongoClient[Any]) -> dict[str, int]:
    """The connections the server holds, counted by the ``appName`` their
    handshake gave (``currentOp`` with ``$all``: idle connections too)."""
    found: dict[str, int] = {}
    for op in client.admin.command({"currentOp": 1, "$all": True})["inprog"]:
        name = ((op.get("clientMetadata") or {}).get("application") or {}).get("name")
        if name:
            found[name] = found.get(name, 0) + 1
    return found


def wait_for_names(client: MongoClient[Any], names: set[str], timeout: float = 30.0) -> dict[str, int]:
    """The server's connections by name, once each of ``names`` is among them."""
    deadline = time.monotonic() + timeout
    while True:
        found = server_app_names(client)
        if names <= set(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_default_names() -> None:
    parsed = parse_settings({"mongodb.uri": "mongodb://db/"})
    assert (parsed.app_name, parsed.sequencer_app_name, parsed.longpoll_app_name) == (WEB, SEQUENCER, LONGPOLL)


@pytest.mark.parametrize("key", ["mongodb.app_name", "feed.sequencer_app_name", "feed.longpoll_app_name"])
@pytest.mark.parametrize("value", ["has space", "x" * 129, "caf\u00e9", "a/b"])
def test_bad_name_is_a_clear_error(key: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_settings({"mongodb.uri": "mongodb://db/", key: value})
    assert key in str(raised.value) and "appName" in str(raised.value)


def test_each_role_has_its_named_client(settings: dict[str, str], mongo_client: MongoClient[Any]) -> None:
    app = main(
        {},
        **dict(
            settings,
            **{
                "feed.order": "commit",
                "feed.sequencer": "thread",
                "feed.sequencer_app_name": "seq-under-test",
                # names of this test's own: the server is shared with the
                # tests of other workers, whose clients carry the defaults
                "feed.longpoll_app_name": "longpoll-under-test",
            },
        ),
    )
    registry = app.registry
    try:
        assert registry.feed_sequencer.wait_ready(timeout=30)
        web = registry.feed_store.client
        sequencer = registry.feed_sequencer.followers[0].db.client
        notifier = registry.feed_longpoll.store.client
        assert len({id(web), id(sequencer), id(notifier)}) == 3
        names = (app_name_of(web), app_name_of(sequencer), app_name_of(notifier))
        assert names == (WEB, "seq-under-test", "longpoll-under-test")
        web.admin.command("ping")
        seen = wait_for_names(mongo_client, {WEB, "seq-under-test"})
        assert WEB in seen and "seq-under-test" in seen
        # the notifier's client connects with its first waiter, not before
        assert "longpoll-under-test" not in seen
    finally:
        shutdown(registry)
    assert feed_state(registry).role_stores == {}


def test_uri_appname_names_the_web_client_only(settings: dict[str, str]) -> None:
    uri = settings["mongodb.uri"]
    named = uri + ("&" if "?" in uri else "?") + "appname=web"
    app = main({}, **dict(settings, **{"mongodb.uri": named, "mongodb.app_name": "ignored-for-the-uri"}))
    try:
        assert app_name_of(app.registry.feed_store.client) == "web"
        assert app_name_of(role_store(app.registry, SEQUENCER).client) == SEQUENCER
    finally:
        shutdown(app.registry)


def test_clients_poll_their_server_unless_the_uri_says_otherwise() -> None:
    """A polling monitor checks the server again at once after an error
    that marked it unknown; the URI's own choice wins."""
    from openprocurement_feed.roles import client_options

    assert client_options("mongodb://h/", "a", 5000, role=True)["serverMonitoringMode"] == "poll"
    chosen = client_options("mongodb://h/?serverMonitoringMode=stream", "a", 5000, role=False)
    assert "serverMonitoringMode" not in chosen
    client: MongoClient[Any] = MongoClient(
        "mongodb://h/", connect=False, **client_options("mongodb://h/", "a", 5, True)
    )
    try:
        assert client.options.server_monitoring_mode == "poll"
    finally:
        client.close()
