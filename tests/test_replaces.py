"""``add_feed(..., replaces=...)``: the feed takes over the ``GET`` of a
host's cornice resource on the same path, in that route's place; a feed
shadowed for ``GET`` by an earlier route is a configuration error naming it.

The host is shaped like upstream openprocurement.api: an autocommitting
``Configurator`` with ``route_prefix="/api/2.5"`` (and the feed's own prefix
empty), one cornice resource ``Tenders`` serving ``POST`` and ``GET`` on
``/tenders``, routes before and after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cornice.resource import add_resource
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError
from pyramid.interfaces import IRoutesMapper
from pyramid.request import Request
from webtest import TestApp

from openprocurement_feed import shutdown
from openprocurement_feed.feed.views import feed_route_name

FEED_ROUTE = feed_route_name("tenders")


def tenders_resource() -> type:
    """A fresh cornice resource class like upstream's ``Tenders`` (a class
    per test: cornice keeps its services on the class)."""

    class TendersResource:
        def __init__(self, request: Request, context: Any = None) -> None:
            self.request = request

        def collection_get(self) -> dict[str, Any]:
            return {"host": "listing"}

        def collection_post(self) -> dict[str, Any]:
            self.request.response.status = 201
            return {"host": "created"}

        def get(self) -> dict[str, Any]:
            return {"host": "tender", "id": self.request.matchdict["tender_id"]}

    return add_resource(TendersResource, name="Tenders", collection_path="/tenders", path="/tenders/{tender_id}")


def add_fillers(config: Configurator, prefix: str, count: int = 5) -> None:
    """Unrelated host routes (upstream has ~1,700)."""
    for number in range(count):
        config.add_route(f"{prefix}{number}", f"/{prefix}{number}/{{id}}")


def upstream_config(settings: dict[str, str], autocommit: bool) -> Configurator:
    """The host's Configurator, with the package included."""
    config = Configurator(
        settings=dict(settings, **{"feed.route_prefix": ""}), autocommit=autocommit, route_prefix="/api/2.5"
    )
    config.include("cornice")
    config.include("openprocurement_feed")
    return config


def host_routes(config: Configurator, extra: Callable[[Configurator], None] | None = None) -> None:
    """Fillers, the resource, fillers: the host's own routes."""
    add_fillers(config, "before")
    if extra is not None:
        extra(config)
    config.add_cornice_resource(tenders_resource())
    add_fillers(config, "after")


def route_names(app: Any) -> list[str]:
    return [route.name for route in app.registry.getUtility(IRoutesMapper).get_routes()]


@pytest.fixture(params=[True, False], ids=["autocommit", "default"])
def autocommit(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def apps() -> Iterator[list[Any]]:
    """Apps to shut down after the test."""
    made: list[Any] = []
    yield made
    for app in made:
        shutdown(app.registry)


def put_tender(app: Any) -> None:
    store = app.registry.feed_store
    store.save_data(store.collection("tenders"), {"_id": "t1", "public_modified": 5.0}, insert=True, modified=False)


@pytest.mark.parametrize("feed_first", [False, True], ids=["host-then-feed", "feed-then-host"])
def test_the_feed_takes_over_get_and_the_host_keeps_post(
    settings: dict[str, str], autocommit: bool, apps: list[Any], feed_first: bool
) -> None:
    config = upstream_config(settings, autocommit)
    if feed_first:
        config.add_feed("tenders", replaces="Tenders")
    host_routes(config)
    if not feed_first:
        config.add_feed("tenders", replaces="Tenders")
    app = config.make_wsgi_app()
    apps.append(app)
    put_tender(app)
    web = TestApp(app)
    page = web.get("/api/2.5/tenders").json
    assert [item["id"] for item in page["data"]] == ["t1"]
    assert page["next_page"]["path"].startswith("/api/2.5/tenders?")
    web.head("/api/2.5/tenders", status=200)
    assert web.post_json("/api/2.5/tenders", {"data": {}}, status=201).json == {"host": "created"}
    assert web.get("/api/2.5/tenders/abc").json == {"host": "tender", "id": "abc"}
    # a method neither serves: the host's cornice answer
    web.patch_json("/api/2.5/tenders", {}, status=405)
    # the feed sits where the host's route is, just before it
    names = route_names(app)
    assert names.index(FEED_ROUTE) == names.index("collection_Tenders") - 1
    host_before = [name for name in names[: names.index(FEED_ROUTE)] if not name.startswith("openprocurement_feed.")]
    # (cornice adds the item service "Tenders" before the collection's)
    assert host_before == [*(f"before{n}" for n in range(5)), "Tenders"]
    # the host's later routes keep their order (the feed's own paths, such
    # as its reconcile endpoint, may follow them: no host path is theirs)
    host_after = [name for name in names if not name.startswith("openprocurement_feed.")]
    assert host_after[-5:] == [f"after{n}" for n in range(5)]
    # cornice still finds the host's service by the path (its CORS, its 405s)
    assert app.registry.cornice_services["/api/2.5/tenders"].name == "collection_Tenders"


def test_the_exact_route_name_of_the_collection_service_works_too(settings: dict[str, str], apps: list[Any]) -> None:
    config = upstream_config(settings, autocommit=True)
    host_routes(config)
    config.add_feed("tenders", replaces="collection_Tenders")
    app = config.make_wsgi_app()
    apps.append(app)
    web = TestApp(app)
    assert "next_page" in web.get("/api/2.5/tenders").json
    assert web.post_json("/api/2.5/tenders", {"data": {}}, status=201).json == {"host": "created"}


def test_a_shadowed_feed_is_a_configuration_error_naming_the_route(settings: dict[str, str], autocommit: bool) -> None:
    config = upstream_config(settings, autocommit)
    host_routes(config)
    config.add_feed("tenders")
    with pytest.raises(ConfigurationError) as caught:
        config.make_wsgi_app()
    message = str(caught.value)
    assert (
        "add_feed('tenders'): GET /api/2.5/tenders is served by the route 'collection_Tenders' "
        "(pattern '/api/2.5/tenders'), added before the feed; pass replaces='collection_Tenders'"
    ) in message
    assert "test_replaces.py" in message  # the add_feed line


def test_without_replaces_the_host_route_first_would_take_every_get(settings: dict[str, str]) -> None:
    """What the error prevents: the host's listing answers the feed's path."""
    config = upstream_config(settings, autocommit=True)
    host_routes(config)
    routes = config.registry.getUtility(IRoutesMapper)
    assert routes.get_route("collection_Tenders").match("/api/2.5/tenders") is not None
    assert TestApp(config.make_wsgi_app()).get("/api/2.5/tenders").json == {"host": "listing"}


def test_another_route_before_the_replaced_one_is_named(settings: dict[str, str], autocommit: bool) -> None:
    config = upstream_config(settings, autocommit)
    host_routes(config, lambda config: config.add_route("catch_all", "/{resource}"))
    config.add_feed("tenders", replaces="Tenders")
    with pytest.raises(ConfigurationError) as caught:
        config.make_wsgi_app()
    assert (
        "add_feed('tenders', replaces='Tenders'): GET /api/2.5/tenders is also served by the route "
        "'catch_all' (pattern '/api/2.5/{resource}'), before 'Tenders'"
    ) in str(caught.value)


class ProcurementMethodType:
    """A route predicate like upstream's: the posted data's type."""

    def __init__(self, value: str, config: Configurator) -> None:
        self.value = value

    def text(self) -> str:
        return f"procurementMethodType = {self.value}"

    phash = text

    def __call__(self, info: dict[str, Any], request: Request) -> bool:
        if request.method != "POST":
            return False
        return bool(request.json_body.get("data", {}).get("procurementMethodType") == self.value)


def test_routes_that_refuse_some_gets_are_not_reported(settings: dict[str, str], apps: list[Any]) -> None:
    """A POST-only route and a route with a custom predicate (upstream's
    per-procedure ``procurementMethodType`` resources) before the feed."""

    def extra(config: Configurator) -> None:
        config.add_route("create", "/tenders", request_method="POST")
        config.add_route_predicate("procurementMethodType", ProcurementMethodType)
        config.add_route("by_type", "/tenders", procurementMethodType="belowThreshold")

    config = upstream_config(settings, autocommit=True)
    host_routes(config, extra)
    config.add_feed("tenders", replaces="Tenders")
    app = config.make_wsgi_app()
    apps.append(app)
    assert "next_page" in TestApp(app).get("/api/2.5/tenders").json


def test_a_post_only_host_route_needs_no_replaces(settings: dict[str, str], apps: list[Any]) -> None:
    config = upstream_config(settings, autocommit=False)
    config.add_route("create", "/tenders", request_method="POST")
    config.add_view(lambda request: {"created": True}, route_name="create", renderer="json")
    config.add_feed("tenders")
    app = config.make_wsgi_app()
    apps.append(app)
    web = TestApp(app)
    assert "next_page" in web.get("/api/2.5/tenders").json
    assert web.post_json("/api/2.5/tenders", {}).json == {"created": True}


def test_replaces_an_unknown_route_lists_the_routes_on_the_path(settings: dict[str, str], autocommit: bool) -> None:
    config = upstream_config(settings, autocommit)
    host_routes(config)
    config.add_feed("tenders", replaces="Tender")
    with pytest.raises(ConfigurationError) as caught:
        config.make_wsgi_app()
    assert (
        "add_feed('tenders', replaces='Tender'): no route or cornice service is named 'Tender'; "
        "the routes on '/api/2.5/tenders': 'collection_Tenders'."
    ) in str(caught.value)


def test_replaces_a_route_of_another_path_is_an_error(settings: dict[str, str]) -> None:
    config = upstream_config(settings, autocommit=True)
    host_routes(config)
    config.add_feed("tenders", replaces="before0")
    with pytest.raises(ConfigurationError) as caught:
        config.make_wsgi_app()
    assert (
        "add_feed('tenders', replaces='before0'): the route 'before0' (pattern '/api/2.5/before0/{id}') "
        "does not serve the feed's path '/api/2.5/tenders'."
    ) in str(caught.value)


@pytest.mark.parametrize("value", ["", 5])
def test_replaces_must_be_a_route_name(settings: dict[str, str], value: Any) -> None:
    config = upstream_config(settings, autocommit=True)
    with pytest.raises(ConfigurationError, match=r"add_feed\('tenders'\): replaces="):
        config.add_feed("tenders", replaces=value)


def test_a_scoped_feed_replaces_a_scoped_host_route(settings: dict[str, str], apps: list[Any]) -> None:
    def listing(request: Request) -> dict[str, Any]:
        return {"host": "listing"}

    config = upstream_config(settings, autocommit=True)
    config.add_route("Submissions", "/frameworks/{framework_id}/submissions")
    config.add_view(listing, route_name="Submissions", renderer="json")
    created = {"host": "created"}
    config.add_view(lambda request: created, route_name="Submissions", request_method="POST", renderer="json")
    config.add_feed(
        "framework_submissions",
        path="frameworks/{framework_id}/submissions",
        collection="submissions",
        scope="framework_id",
        scope_field="frameworkID",
        replaces="Submissions",
    )
    app = config.make_wsgi_app()
    apps.append(app)
    web = TestApp(app)
    assert web.get("/api/2.5/frameworks/a/submissions").json["data"] == []
    assert web.post_json("/api/2.5/frameworks/a/submissions", {}).json == {"host": "created"}


def upstream_resources(config: Configurator) -> None:
    """Upstream's own shape (openprocurement.api 1.0.274): the listing
    resource ``Tenders`` on ``/tenders`` limited to ``GET``, and one resource
    per procedure type whose collection route takes the ``POST`` of its
    ``procurementMethodType``."""

    class BelowThresholdTenderResource:
        def __init__(self, request: Request, context: Any = None) -> None:
            self.request = request

        def collection_post(self) -> dict[str, Any]:
            self.request.response.status = 201
            return {"host": "created"}

    class TendersListResource:
        def __init__(self, request: Request, context: Any = None) -> None:
            self.request = request

        def get(self) -> dict[str, Any]:
            return {"host": "listing"}

    config.add_route_predicate("procurementMethodType", ProcurementMethodType)
    add_fillers(config, "before")
    config.add_cornice_resource(
        add_resource(
            BelowThresholdTenderResource,
            name="belowThreshold:Tenders",
            collection_path="/tenders",
            path="/tenders/{tender_id}",
            procurementMethodType="belowThreshold",
        )
    )
    config.add_cornice_resource(
        add_resource(TendersListResource, name="Tenders", path="/tenders", request_method=("GET",))
    )
    add_fillers(config, "after")


def test_upstreams_own_shape(settings: dict[str, str], apps: list[Any]) -> None:
    # autocommit only, as upstream: cornice reads the route predicates
    # registered when it adds a service
    config = upstream_config(settings, autocommit=True)
    upstream_resources(config)
    config.add_feed("tenders", replaces="Tenders")
    app = config.make_wsgi_app()
    apps.append(app)
    web = TestApp(app)
    assert "next_page" in web.get("/api/2.5/tenders").json
    created = web.post_json("/api/2.5/tenders", {"data": {"procurementMethodType": "belowThreshold"}}, status=201)
    assert created.json == {"host": "created"}
    names = route_names(app)
    assert names.index(FEED_ROUTE) == names.index("Tenders") - 1


def test_upstreams_own_shape_without_replaces_names_the_listing(settings: dict[str, str]) -> None:
    config = upstream_config(settings, autocommit=True)
    upstream_resources(config)
    config.add_feed("tenders")
    with pytest.raises(ConfigurationError) as caught:
        config.make_wsgi_app()
    # the procedure's collection route (a custom predicate) is not named
    assert "is served by the route 'Tenders' (pattern '/api/2.5/tenders'), added before the feed" in str(caught.value)
