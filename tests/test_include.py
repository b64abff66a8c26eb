"""The include: settings errors at start-up, double include, ini wiring,
feeds from settings, conflicts, and the embedded URI."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationConflictError, ConfigurationError
from webtest import TestApp

from openprocurement_feed import FeedStore


def make_app(settings: dict[str, str], *feeds: str) -> Any:
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    for name in feeds:
        config.add_feed(name)
    return config.make_wsgi_app()


def test_include_registers_settings_store_and_request_property(settings: dict[str, str]) -> None:
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_feed("plans")

    def echo(request: Any) -> dict[str, Any]:
        return {"same": request.feed_store is request.registry.feed_store}

    config.add_route("echo", "/echo")
    config.add_view(echo, route_name="echo", renderer="json")
    app = config.make_wsgi_app()
    assert isinstance(app.registry.feed_store, FeedStore)
    assert app.registry.feed_settings.watermark_seconds == 0.2
    assert TestApp(app).get("/echo").json == {"same": True}
    assert TestApp(app).get("/api/2.5/plans").json["data"] == []
    app.registry.feed_store.close()


def test_double_include_reuses_the_store(settings: dict[str, str]) -> None:
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    feed_settings = config.registry.feed_settings
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    app = config.make_wsgi_app()
    assert app.registry.feed_settings is feed_settings
    store = app.registry.feed_store
    TestApp(app).get("/api/2.5/tenders")
    assert TestApp(app).app.registry.feed_store is store
    store.close()


def test_same_feed_twice_is_a_configuration_conflict(settings: dict[str, str]) -> None:
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    with pytest.raises(ConfigurationConflictError):
        config.add_feed("tenders", path="other")


def test_bad_setting_stops_start_up(settings: dict[str, str]) -> None:
    config = Configurator(settings=dict(settings, **{"feed.watermark_seconds": "-1"}))
    with pytest.raises(ConfigurationError, match=r"feed\.watermark_seconds"):
        config.include("openprocurement_feed")


def test_missing_uri_stops_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONGODB_URI", raising=False)
    with pytest.raises(ConfigurationError, match=r"mongodb\.uri"):
        Configurator(settings={}).include("openprocurement_feed")


def test_scope_must_appear_in_the_path(settings: dict[str, str]) -> None:
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    with pytest.raises(ConfigurationError, match="lacks the scope"):
        config.add_feed("submissions", scope="frameworkID")


def test_feeds_listed_in_settings_and_custom_collection(settings: dict[str, str]) -> None:
    app = make_app(
        dict(
            settings,
            **{
                "feed.resources": "plans contracts",
                "mongodb.contracts_collection": "contract_docs",
                "feed.route_prefix": "/api/0",
            },
        )
    )
    store = app.registry.feed_store
    store.save_data(store.collection("contracts"), {"_id": "c1", "public_modified": 5.0}, insert=True, modified=False)
    assert store.collection("contracts").name == "contract_docs"
    web = TestApp(app)
    assert [i["id"] for i in web.get("/api/0/contracts").json["data"]] == ["c1"]
    assert web.get("/api/0/plans").json["data"] == []
    store.close()


def test_ini_file_with_pyramid_includes(tmp_path: Path, mongodb_uri: str, db_name: str) -> None:
    from pyramid.paster import get_app

    ini = tmp_path / "app.ini"
    ini.write_text(
        textwrap.dedent(f"""
        [app:main]
        use = call:pyramid.config:Configurator
        pyramid.includes = openprocurement_feed
        mongodb.uri = {mongodb_uri}
        mongodb.db_name = {db_name}
        feed.resources = tenders
        feed.watermark_seconds = 0.5
    """).replace("call:pyramid.config:Configurator", "call:tests_ini_factory:make")
    )
    (tmp_path / "tests_ini_factory.py").write_text(
        textwrap.dedent("""
        from pyramid.config import Configurator

        def make(global_config, **settings):
            return Configurator(settings=settings).make_wsgi_app()
    """)
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        app = get_app(str(ini))
    finally:
        sys.path.remove(str(tmp_path))
    assert app.registry.feed_settings.watermark_seconds == 0.5
    assert TestApp(app).get("/api/2.5/tenders").json["data"] == []
    app.registry.feed_store.close()


@pytest.mark.server  # starts a server or a process of its own
def test_embedded_uri_starts_and_owns_a_server(tmp_path: Path) -> None:
    data = tmp_path / "db"
    app = make_app({"mongodb.uri": f"embedded://{data}", "feed.watermark_seconds": "0"}, "tenders")
    embedded = app.registry.feed_embedded
    try:
        assert embedded.running
        store = app.registry.feed_store
        store.save_data(store.collection("tenders"), {"_id": "x"}, insert=True)
        assert [i["id"] for i in TestApp(app).get("/api/2.5/tenders").json["data"]] == ["x"]
        assert data.is_dir() and any(data.iterdir())
    finally:
        app.registry.feed_store.close()
        embedded.stop()
    assert not embedded.running


def test_feed_reads_default_to_the_primary(settings: dict[str, str]) -> None:
    """SPEC B.6: the watermark needs a node that has every committed write."""
    from pymongo.read_preferences import Primary, SecondaryPreferred

    app = make_app(settings)
    store = app.registry.feed_store
    assert isinstance(store.feed_collection("tenders").read_preference, Primary)
    assert store.feed_collection("tenders").read_concern.level == "local"
    store.close()
    app = make_app(
        dict(
            settings,
            **{
                "mongodb.read_preference": "secondaryPreferred",
                "mongodb.read_concern": "majority",
            },
        )
    )
    store = app.registry.feed_store
    assert isinstance(store.feed_collection("tenders").read_preference, SecondaryPreferred)
    assert store.feed_collection("tenders").read_concern.level == "majority"
    assert store.collection("tenders").write_concern.document == {"w": "majority"}
    store.close()


def test_a_bad_feed_order_is_a_configuration_error(settings: dict[str, str]) -> None:
    from pyramid.exceptions import ConfigurationError

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    with pytest.raises(ConfigurationError, match="add_feed\\('tenders'\\): invalid order 'sideways'"):
        config.add_feed("tenders", order="sideways")


def test_per_feed_order_and_the_thread_sequencer(settings: dict[str, str]) -> None:
    """A watermark deployment can serve one feed in commit order; the thread
    sequencer sequences exactly the commit-ordered feeds' collections and
    observes the others'."""
    from openprocurement_feed import commit_collections, shutdown

    config = Configurator(settings=dict(settings, **{"feed.sequencer": "thread"}))
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    config.add_feed("plans", order="commit")
    config.add_feed(
        "submissions",
        path="frameworks/{frameworkID}/submissions",
        scope="frameworkID",
        collection="plans",
        order="commit",
    )
    app = config.make_wsgi_app()
    try:
        assert commit_collections(app.registry) == {"plans": ("frameworkID",)}
        sequencer = app.registry.feed_sequencer
        assert [(f.name, f.observe) for f in sequencer.followers] == [("plans", False), ("tenders", True)]
        assert sequencer.followers[0].scope_fields == ("frameworkID",)
        assert sequencer.wait_ready(timeout=30)
        web = TestApp(app)
        assert web.get("/api/2.5/plans").json["data"] == []
        assert web.get("/api/2.5/tenders").json["data"] == []
    finally:
        shutdown(app.registry)
    assert app.registry.feed_sequencer is None
