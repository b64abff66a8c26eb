"""Bring your own store: the upstream-shaped host app of ``examples/`` serves
its feeds through its own store and client, over HTTP, in both orders; a
store or accessor that does not fit fails at configuration time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, monitoring
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError, ConfigurationExecutionError
from upstream_example import BROKER, load_example, post, served_example
from webtest import TestApp

from openprocurement_feed import FeedStore, shutdown
from openprocurement_feed.testing import crawl, get_json, wait_visible


@pytest.fixture(params=["watermark", "commit"])
def host(request: pytest.FixtureRequest, settings: dict[str, str]) -> Iterator[tuple[Any, str]]:
    """The example host app in one feed order, served on loopback: (app, base URL)."""
    with served_example(settings, request.param) as served:
        yield served


def ids_of(url: str, path: str, headers: dict[str, str] | None = None, query: str = "") -> list[str]:
    return [item["id"] for item in crawl(url, path, headers, query)]


def test_the_host_store_serves_unscoped_and_scoped_feeds(host: tuple[Any, str]) -> None:
    app, url = host
    store = app.registry.mongodb
    # One client: the feed reads through the host's store and its client.
    assert app.registry.feed_store.store is store
    assert app.registry.feed_store.client is store.connection
    assert app.registry.feed_embedded is None
    # The mixin's numbers come from the feed settings.
    assert (store.watermark_seconds, store.max_limit) == (0.2, 1000)
    tenders = [post(app, "/tenders", {"title": f"t{n}"}, BROKER)["id"] for n in range(5)]
    in_a = [post(app, "/frameworks/a/submissions", {"n": n})["id"] for n in range(3)]
    in_b = [post(app, "/frameworks/b/submissions", {"n": n})["id"] for n in range(2)]
    wait_visible(lambda: ids_of(url, "/api/2.5/tenders", query="limit=2"), tenders)
    assert sorted(ids_of(url, "/api/2.5/tenders", query="limit=2")) == sorted(tenders)
    wait_visible(lambda: ids_of(url, "/api/2.5/submissions"), in_a + in_b)
    scoped = crawl(url, "/api/2.5/frameworks/a/submissions", query="limit=1&opt_fields=status")
    assert sorted(item["id"] for item in scoped) == sorted(in_a)
    status, page = get_json(f"{url}/api/2.5/frameworks/a/submissions?limit=1")
    assert status == 200
    assert page["next_page"]["path"].startswith("/api/2.5/frameworks/a/submissions?")
    # The save contract ran through the host's store: upstream's fields.
    doc = store.tenders.collection.find_one({"_id": tenders[0]})
    assert doc["dateModified"] and doc["dateCreated"] and doc["_rev"].startswith("1-")
    assert doc["is_public"] is True and doc["is_test"] is False


def test_the_tenders_feed_sits_in_place_of_the_hosts_listing(host: tuple[Any, str]) -> None:
    from pyramid.interfaces import IRoutesMapper

    app, url = host
    names = [route.name for route in app.registry.getUtility(IRoutesMapper).get_routes()]
    assert names.index("openprocurement_feed.tenders") == names.index("collection_Tenders") - 1
    status, page = get_json(f"{url}/api/2.5/tenders")
    assert status == 200 and "next_page" in page  # the feed, not the host's listing


class PlainStore:
    """A store without the mixin."""

    def __init__(self, client: MongoClient, db_name: str) -> None:
        self.database = client[db_name]

    def list(self, collection: Any, fields: Any) -> list[Any]:
        return []


def test_a_store_without_the_mixin_fails_at_configuration_time(
    settings: dict[str, str], mongo_client: MongoClient
) -> None:
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    with pytest.raises(ConfigurationError) as caught:
        config.set_feed_store(PlainStore(mongo_client, settings["mongodb.db_name"]))
    message = str(caught.value)
    for name in ("PlainStore", "feed_page", "feed_order", "ensure_feed_indexes", "watermark_seconds", "FeedStoreMixin"):
        assert name in message


def test_an_accessor_returning_another_collection_fails_at_commit(settings: dict[str, str]) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    try:
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.set_feed_store(store, collection=lambda store, name: store.database["elsewhere"])
        config.add_feed("tenders")
        with pytest.raises(ConfigurationError, match="returned the collection 'elsewhere' for 'tenders'"):
            config.commit()
    finally:
        store.close()


def test_an_accessor_returning_no_collection_fails_at_commit(settings: dict[str, str]) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    try:
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.set_feed_store(store, collection=lambda store, name: name)
        config.add_feed("tenders")
        with pytest.raises(ConfigurationError, match="returned str for 'tenders'"):
            config.commit()
    finally:
        store.close()


def test_a_collection_of_another_client_fails_at_commit(settings: dict[str, str]) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    other: MongoClient = MongoClient(settings["mongodb.uri"])
    try:
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.set_feed_store(store, collection=lambda store, name: other[settings["mongodb.db_name"]][name])
        config.add_feed("tenders")
        with pytest.raises(ConfigurationError, match="belongs to another MongoClient"):
            config.commit()
    finally:
        other.close()
        store.close()


def test_a_store_without_a_database_names_the_missing_attribute(settings: dict[str, str]) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    database = store.database
    try:
        del store.database  # the host keeps its database elsewhere
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.set_feed_store(store)
        config.add_feed("tenders")
        with pytest.raises(ConfigurationError, match=r"no .database. or .db. attribute; pass collection="):
            config.commit()
        # Given an accessor, the positions still need a database: it says so.
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.set_feed_store(store, collection=lambda store, name: database[name])
        config.add_feed("tenders", order="commit")
        with pytest.raises(ConfigurationError, match=r"pass database=\.\.\. to set_feed_store"):
            config.commit()
    finally:
        store.database = database
        store.close()


def test_set_feed_store_twice_is_a_conflict(settings: dict[str, str]) -> None:
    from pyramid.exceptions import ConfigurationConflictError

    example = load_example()
    store = example.MongodbStore(settings)
    try:
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.set_feed_store(store)
        config.set_feed_store(store)
        with pytest.raises(ConfigurationConflictError):
            config.commit()
    finally:
        store.close()


def test_a_programming_error_in_index_creation_stops_start_up(settings: dict[str, str]) -> None:
    from pyramid.exceptions import ConfigurationExecutionError

    example = load_example()

    class Broken(example.MongodbStore):  # type: ignore[name-defined,misc]
        def ensure_feed_indexes(self, collection: Any, scope_fields: Any = (), key: Any = None) -> Any:
            raise AttributeError("'Broken' object has no attribute 'feed_collection'")

    store = Broken(settings)
    try:
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.set_feed_store(store)
        config.add_feed("tenders")
        with pytest.raises(ConfigurationExecutionError, match="feed_collection"):
            config.commit()
    finally:
        store.close()


def test_a_database_refusal_in_index_creation_is_a_warning(
    settings: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    from pymongo.errors import OperationFailure

    example = load_example()

    class Refused(example.MongodbStore):  # type: ignore[name-defined,misc]
        def ensure_feed_indexes(self, collection: Any, scope_fields: Any = (), key: Any = None) -> Any:
            raise OperationFailure("not authorized to create indexes", code=13)

    store = Refused(settings)
    try:
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.set_feed_store(store)
        config.add_feed("tenders")
        config.commit()
        assert "Could not create the indexes of feed 'tenders'" in caplog.text
    finally:
        store.close()


def test_a_store_assigned_to_the_registry_is_served_or_refused(
    settings: dict[str, str], mongo_client: MongoClient
) -> None:
    """Assigning the host's store to ``registry.feed_store`` after the
    include (what a host tried first) works like ``set_feed_store``; a store
    without the mixin fails at commit, not with a 500 per request."""
    from webtest import TestApp

    example = load_example()
    store = example.MongodbStore(settings)
    try:
        config = Configurator(settings=settings)
        config.include("openprocurement_feed")
        config.registry.feed_store = store
        config.add_feed("tenders")
        app = config.make_wsgi_app()
        assert app.registry.feed_store.store is store
        assert TestApp(app).get("/api/2.5/tenders").json["data"] == []
    finally:
        store.close()
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.registry.feed_store = PlainStore(mongo_client, settings["mongodb.db_name"])
    config.add_feed("tenders")
    with pytest.raises(ConfigurationError, match="PlainStore lacks feed_page"):
        config.commit()


class PoolCounter(monitoring.ConnectionPoolListener):
    """Counts the connection pools opened by clients created after it was
    registered (a client opens one pool per server it knows, at creation)."""

    def __init__(self) -> None:
        self.active = True
        self.created = 0

    def pool_created(self, event: monitoring.PoolCreatedEvent) -> None:
        if self.active:
            self.created += 1

    def pool_ready(self, event: monitoring.PoolReadyEvent) -> None: ...
    def pool_cleared(self, event: monitoring.PoolClearedEvent) -> None: ...
    def pool_closed(self, event: monitoring.PoolClosedEvent) -> None: ...
    def connection_created(self, event: monitoring.ConnectionCreatedEvent) -> None: ...
    def connection_ready(self, event: monitoring.ConnectionReadyEvent) -> None: ...
    def connection_closed(self, event: monitoring.ConnectionClosedEvent) -> None: ...
    def connection_check_out_started(self, event: monitoring.ConnectionCheckOutStartedEvent) -> None: ...
    def connection_check_out_failed(self, event: monitoring.ConnectionCheckOutFailedEvent) -> None: ...
    def connection_checked_out(self, event: monitoring.ConnectionCheckedOutEvent) -> None: ...
    def connection_checked_in(self, event: monitoring.ConnectionCheckedInEvent) -> None: ...


@pytest.fixture
def pools() -> Iterator[PoolCounter]:
    """A pool counter listening to every client created during the test."""
    counter = PoolCounter()
    monitoring.register(counter)
    yield counter
    counter.active = False


def host_app(settings: dict[str, str], store: Any, autocommit: bool, feed_first: bool) -> Any:
    """An app whose host store is handed over after the include (upstream's
    order: include, then its own store), the feed added before or after."""
    config = Configurator(settings=settings, autocommit=autocommit)
    config.include("openprocurement_feed")
    if feed_first:
        config.add_feed("tenders")
    config.set_feed_store(store, collection=lambda store, name: store.collection_named(name))
    if not feed_first:
        config.add_feed("tenders")
    return config.make_wsgi_app()


@pytest.mark.parametrize("feed_first", [False, True], ids=["store-then-feed", "feed-then-store"])
@pytest.mark.parametrize("autocommit", [False, True], ids=["default", "autocommit"])
def test_one_client_when_the_host_store_comes_after_the_include(
    settings: dict[str, str], pools: PoolCounter, autocommit: bool, feed_first: bool
) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    store.add_collection("tenders", example.TenderCollection)
    host_pools = pools.created
    assert host_pools >= 1  # the counter sees the host's client
    try:
        app = host_app(settings, store, autocommit, feed_first)
        assert app.registry.feed_store.store is store
        assert app.registry.feed_embedded is None
        store.save_data(store.tenders.collection, {"_id": "t1", "public_modified": 5.0}, insert=True, modified=False)
        web = TestApp(app)
        assert [item["id"] for item in web.get("/api/2.5/tenders").json["data"]] == ["t1"]
        assert web.get("/api/2.5/feeds/health").json["feeds"][0]["name"] == "tenders"
        # nothing but the host's client: no pool of another one
        assert pools.created == host_pools
        shutdown(app.registry)
        assert store.tenders.get("t1") is not None  # shutdown left the host's client open
    finally:
        store.close()


@pytest.mark.parametrize("autocommit", [False, True], ids=["default", "autocommit"])
def test_no_embedded_server_when_the_host_store_comes_after_the_include(
    settings: dict[str, str], tmp_path: Path, pools: PoolCounter, autocommit: bool
) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    store.add_collection("tenders", example.TenderCollection)
    host_pools = pools.created
    data = tmp_path / "embedded-data"
    try:
        app = host_app(dict(settings, **{"mongodb.uri": f"embedded://{data}"}), store, autocommit, feed_first=True)
        assert TestApp(app).get("/api/2.5/tenders").json["data"] == []
        assert app.registry.feed_embedded is None
        assert not data.exists()  # an embedded server would have made its data folder
        assert pools.created == host_pools
        shutdown(app.registry)
    finally:
        store.close()


def test_autocommit_without_a_host_store_creates_the_packages_store_with_the_app(settings: dict[str, str]) -> None:
    config = Configurator(settings=settings, autocommit=True)
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    assert config.registry.feed_store is None  # nothing before the configuration is complete
    app = config.make_wsgi_app()
    try:
        store = app.registry.feed_store
        assert isinstance(store, FeedStore)
        store.save_data(store.collection("tenders"), {"_id": "t1", "public_modified": 5.0}, insert=True, modified=False)
        assert [item["id"] for item in TestApp(app).get("/api/2.5/tenders").json["data"]] == ["t1"]
        assert "feed_mode" in {index["name"] for index in store.collection("tenders").list_indexes()}
    finally:
        shutdown(app.registry)


def test_autocommit_starts_the_sequencer_with_the_feeds_added_after_the_include(settings: dict[str, str]) -> None:
    config = Configurator(
        settings=dict(settings, **{"feed.order": "commit", "feed.sequencer": "thread"}), autocommit=True
    )
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    app = config.make_wsgi_app()
    try:
        sequencer = app.registry.feed_sequencer
        assert sequencer is not None
        assert sequencer.wait_ready(timeout=30)
    finally:
        shutdown(app.registry)


def test_autocommit_reports_a_bad_accessor_when_the_app_is_created(settings: dict[str, str]) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    try:
        config = Configurator(settings=settings, autocommit=True)
        config.include("openprocurement_feed")
        config.set_feed_store(store, collection=lambda store, name: store.database["elsewhere"])
        config.add_feed("tenders")
        with pytest.raises(ConfigurationExecutionError, match="returned the collection 'elsewhere' for 'tenders'"):
            config.make_wsgi_app()
    finally:
        store.close()


def test_the_host_store_after_the_packages_store_exists_is_an_error(settings: dict[str, str]) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    config.commit()
    try:
        with pytest.raises(ConfigurationError, match=r"the feed store was already created \(FeedStore"):
            config.set_feed_store(store)
    finally:
        shutdown(config.registry)
        store.close()


def test_the_host_store_twice_under_autocommit_is_an_error(settings: dict[str, str]) -> None:
    example = load_example()
    store = example.MongodbStore(settings)
    config = Configurator(settings=settings, autocommit=True)
    config.include("openprocurement_feed")
    try:
        config.set_feed_store(store)
        with pytest.raises(ConfigurationError, match="set_feed_store: called twice"):
            config.set_feed_store(store)
    finally:
        store.close()


@pytest.mark.parametrize("stamped", [False, True], ids=["unstamped", "stamp_public_ts"])
def test_a_legacy_public_ts_offset_is_read_natively_when_the_store_stamps_public_ts(
    settings: dict[str, str], stamped: bool
) -> None:
    """Upstream stamps ``public_ts`` (the write's cluster time) on every
    write, and its crawlers may hold offsets of that form. A host store that
    says so (``stamp_public_ts = True``, the setup page's walk-through) has
    them read on ``public_ts``, exactly after the item they name; without it
    they are read as a time a margin early (nothing lost, items re-sent)."""
    from bson.timestamp import Timestamp

    example = load_example()

    class Store(example.MongodbStore):  # type: ignore[misc, name-defined]
        stamp_public_ts = stamped

    store = Store(settings)
    store.add_collection("tenders", example.TenderCollection)
    try:
        config = Configurator(
            settings=dict(settings, **{"feed.route_prefix": ""}), autocommit=True, route_prefix="/api/2.5"
        )
        config.include("openprocurement_feed")
        config.set_feed_store(store, collection=lambda store, name: store.collection_named(name))
        config.add_feed("tenders")
        app = config.make_wsgi_app()
        stamps = [(1778583599.5, Timestamp(1778583599, 1)), (1778583600.5, Timestamp(1778583600, 3))]
        stamps.append((1778583601.5, Timestamp(1778583601, 1)))
        store.tenders.collection.insert_many(
            {
                "_id": f"{number:032x}",
                "public_modified": modified,
                "public_ts": ts,
                "is_public": True,
                "is_test": False,
                "dateModified": "2026-05-12T14:00:00+03:00",
            }
            for number, (modified, ts) in enumerate(stamps)
        )
        # the offset of the second item, as upstream wrote it
        page = TestApp(app).get("/api/2.5/tenders?offset=1778583600.0000000003").json
        ids = [item["id"] for item in page["data"]]
        if stamped:
            assert ids == [f"{2:032x}"]
            assert page["next_page"]["offset"].startswith("1778583601.5.1.")
        else:
            assert ids == [f"{number:032x}" for number in range(3)]
        shutdown(app.registry)
    finally:
        store.close()


def test_the_walk_through_covers_the_move_from_upstream() -> None:
    """The setup page's upstream walk-through names what a host moving from
    upstream needs: its listing routes replaced, the route prefix, legacy
    ``public_ts`` offsets, its masks and its settings; the example app it
    describes uses ``replaces=``."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "setup.rst").read_text(encoding="utf-8")
    walk = text[text.index("Moving an existing API, step by step") : text.index("The save contract\n---")]
    for needle in (
        "autocommit=True",
        'replaces="Tenders"',
        "feed.route_prefix =",
        "stamp_public_ts = True",
        "TENDER_MASK_MAPPING_RAW",
        '"is_masked"',
        "SECONDARY_PREFERRED",
        "feed.watermark_seconds",
        "feed.timezone",
    ):
        assert needle in walk, needle
    example = (root / "examples" / "upstream_host.py").read_text(encoding="utf-8")
    assert 'replaces="Tenders"' in example and "autocommit=True" in example
