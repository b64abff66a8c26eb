"""The OpenAPI document: generated from the registered feeds (and the demo's
hook), valid OpenAPI 3.1, served at ``{route_prefix}/feeds/openapi.json``
unless ``feed.openapi = false``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openapi_spec_validator import validate
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError
from webtest import TestApp

from openprocurement_feed import parse_settings, shutdown
from openprocurement_feed.demo.auth import PACKAGED_AUTH_FILE
from openprocurement_feed.feed.openapi import openapi_document, path_template
from openprocurement_feed.store.state import feed_state

URI = "mongodb://127.0.0.1:27017/?replicaSet=rs0"
DOC = "/api/2.5/feeds/openapi.json"


def resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node``, or what its ``$ref`` points at."""
    while "$ref" in node:
        found: Any = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            found = found[part]
        node = found
    return node


def parameters(document: dict[str, Any], operation: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """An operation's parameters by ``(in, name)``."""
    found = {}
    for parameter in operation.get("parameters", []):
        parameter = resolve(document, parameter)
        found[(parameter["in"], parameter["name"])] = parameter
    return found


def host_app(settings: dict[str, str], **extra: str) -> Any:
    """A host with a scoped feed, a restricted one and an operation of its own."""
    config = Configurator(settings=dict(settings, **extra))
    config.include("openprocurement_feed")
    config.add_feed(
        "submissions",
        path="frameworks/{frameworkID}/submissions",
        scope="frameworkID",
        allowed_fields=("status", "qualificationID"),
    )
    config.add_feed("tenders", restricted=True, allowed_fields=("status",))
    config.add_feed("plans", permission="view_plans")
    config.add_openapi_paths(
        lambda registry: {
            "paths": {
                "/api/2.5/tenders": {
                    "post": {"operationId": "createTender", "responses": {"201": {"description": "Made"}}}
                }
            },
            "tags": [{"name": "host"}, {"name": "feeds"}],
        }
    )
    return config.make_wsgi_app()


@pytest.fixture
def host(settings: dict[str, str]) -> Iterator[TestApp]:
    app = host_app(settings)
    yield TestApp(app)
    shutdown(app.registry)


def test_the_demos_document_is_valid_openapi_31(demo_app: TestApp) -> None:
    response = demo_app.get(DOC)
    assert response.content_type == "application/json"
    document = response.json
    assert document["openapi"] == "3.1.0"
    validate(document)  # raises on an invalid document
    assert document["servers"] == [{"url": "http://localhost"}]


def test_every_feed_and_demo_route_is_in_it(demo_app: TestApp) -> None:
    document = demo_app.get(DOC).json
    registry = demo_app.app.registry
    assert registry.feed_definitions  # the demo has feeds
    for feed in registry.feed_definitions.values():
        operation = document["paths"][feed.route_path]["get"]
        assert operation["operationId"] == f"feed_{feed.name}"
        names = {name for _, name in parameters(document, operation)}
        assert {"offset", "limit", "descending", "opt_fields", "mode", "feed", "timeout"} <= names
        page = resolve(document, operation["responses"]["200"]["content"]["application/json"]["schema"])
        assert page["required"] == ["data", "next_page"]
        assert set(operation["responses"]) == {"200", "400", "404", "503"}
    paths = document["paths"]
    for name, key in (("tenders", "tender_id"), ("plans", "plan_id"), ("contracts", "contract_id")):
        # the create beside the feed's GET on one path
        assert set(paths[f"/api/2.5/{name}"]) == {"get", "post"}
        assert set(paths[f"/api/2.5/{name}/{{{key}}}"]) == {"get", "patch"}
        created = paths[f"/api/2.5/{name}"]["post"]["responses"]["201"]["content"]["application/json"]["schema"]
        assert created["required"] == ["data", "access"]
    # no auth file: no security
    assert "security" not in paths["/api/2.5/tenders"]["post"]
    assert "securitySchemes" not in document["components"]


def test_limits_come_from_the_settings(feed_settings_factory: Any) -> None:
    from openprocurement_feed.demo import main

    app = main(
        {},
        **feed_settings_factory(),
        **{"feed.max_limit": "300", "feed.longpoll_max_seconds": "20", "feed.longpoll_default_seconds": "15"},
    )
    try:
        document = TestApp(app).get(DOC).json
    finally:
        shutdown(app.registry)
    components = document["components"]["parameters"]
    assert "clamped to [1, 300]" in components["limit"]["description"]
    assert "0 to 20 (default 15)" in components["timeout"]["description"]
    page = document["components"]["schemas"]["Page_tenders"]
    assert page["properties"]["data"]["maxItems"] == 300


def test_a_scoped_feed_shows_its_parameter(host: TestApp) -> None:
    document = host.get(DOC).json
    validate(document)
    operation = document["paths"]["/api/2.5/frameworks/{frameworkID}/submissions"]["get"]
    scope = parameters(document, operation)[("path", "frameworkID")]
    assert scope["required"] is True
    assert scope["schema"]["type"] == "string"
    allowed = parameters(document, operation)[("query", "opt_fields")]
    assert "qualificationID, status" in allowed["description"]
    # served: the scope is a real route parameter
    host.get("/api/2.5/frameworks/f1/submissions", status=200)


def test_a_restricted_feed_says_so(host: TestApp) -> None:
    document = host.get(DOC).json
    item = document["components"]["schemas"]["Page_tenders"]["properties"]["data"]["items"]
    assert item["properties"]["restricted"] == {
        "const": True,
        "description": item["properties"]["restricted"]["description"],
    }
    scoped = document["components"]["schemas"]["Page_submissions"]["properties"]["data"]["items"]
    assert "restricted" not in scoped["properties"]


def test_a_feed_with_a_permission_may_answer_401_and_403(host: TestApp) -> None:
    document = host.get(DOC).json
    assert {"401", "403"} <= set(document["paths"]["/api/2.5/plans"]["get"]["responses"])
    assert "401" not in document["paths"]["/api/2.5/tenders"]["get"]["responses"]


def test_a_hook_adds_operations_beside_the_feeds(host: TestApp) -> None:
    document = host.get(DOC).json
    assert set(document["paths"]["/api/2.5/tenders"]) == {"get", "post"}
    assert [tag["name"] for tag in document["tags"]] == ["feeds", "host"]


def test_the_demo_with_an_auth_file_declares_its_schemes(feed_settings_factory: Any) -> None:
    from openprocurement_feed.demo import main

    app = main({}, **feed_settings_factory(), **{"demo.auth_file": PACKAGED_AUTH_FILE})
    try:
        document = openapi_document(app.registry)
    finally:
        shutdown(app.registry)
    validate(document)
    assert "servers" not in document
    schemes = document["components"]["securitySchemes"]
    assert {schemes["brokerBasic"]["scheme"], schemes["brokerBearer"]["scheme"]} == {"basic", "bearer"}
    patch = document["paths"]["/api/2.5/tenders/{tender_id}"]["patch"]
    assert patch["security"] == [{"brokerBasic": []}, {"brokerBearer": []}]
    assert {"401", "403"} <= set(patch["responses"])
    assert ("query", "acc_token") in parameters(document, patch)
    assert ("header", "X-Access-Token") in parameters(document, patch)


def test_the_document_can_be_turned_off(settings: dict[str, str]) -> None:
    app = host_app(settings, **{"feed.openapi": "false"})
    try:
        TestApp(app).get(DOC, status=404)
        # the directive stays: hosts call it whatever the setting
        assert len(feed_state(app.registry).openapi_hooks) == 1
    finally:
        shutdown(app.registry)


def test_the_document_follows_the_route_prefix(settings: dict[str, str]) -> None:
    config = Configurator(settings=dict(settings, **{"feed.route_prefix": ""}), route_prefix="/api/2.3")
    config.include("openprocurement_feed")
    config.add_feed("plans")
    app = config.make_wsgi_app()
    try:
        document = TestApp(app).get("/api/2.3/feeds/openapi.json").json
    finally:
        shutdown(app.registry)
    assert list(document["paths"]) == ["/api/2.3/plans", "/api/2.3/feeds/plans/reconcile"]


def test_path_templates_drop_pyramids_regular_expressions() -> None:
    assert path_template("/api/{kind}/{id:\\d{4}}/x") == ("/api/{kind}/{id}/x", {"kind": None, "id": "\\d{4}"})
    assert path_template("plain") == ("/plain", {})


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_bad_setting_is_a_clear_error(value: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_settings({"mongodb.uri": URI, "feed.openapi": value}, {})
    assert str(caught.value) == f"Invalid setting 'feed.openapi': {value!r}; expected true or false."
    assert parse_settings({"mongodb.uri": URI}, {"FEED_OPENAPI": "off"}).openapi is False
    assert parse_settings({"mongodb.uri": URI}, {}).openapi is True
