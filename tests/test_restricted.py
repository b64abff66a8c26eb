"""Restricted objects over HTTP: nothing of a restricted object leaks to
anyone but its owner, through any parameter or link, in the feed or the
object view, and a crawler still gets every restricted object's id and
position."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from upstream_example import BROKER, OTHER, post, served_example

from openprocurement_feed.store.restricted import MASK_STRING
from openprocurement_feed.testing import crawl, get_json, wait_visible

SECRET = "secret-defence-title"
ALL_FIELDS = "title,owner,config,status,tenderID,public_modified,dateCreated"


@pytest.fixture(scope="module", params=["watermark", "commit"])
def restricted_host(request: pytest.FixtureRequest, mongodb_uri: str) -> Iterator[dict[str, Any]]:
    """The example host app with 3 open and 3 restricted tenders (owned by
    ``broker``) and, in framework ``f``, one open and one restricted
    submission; shared by the module's tests (they only read)."""
    import uuid

    from pymongo import MongoClient

    from openprocurement_feed.testing import make_settings

    db_name = "test_" + uuid.uuid4().hex[:12]
    with served_example(make_settings(mongodb_uri, db_name), request.param) as (app, url):
        open_ids, secret_ids = [], []
        for number in range(6):
            restricted = number % 2 == 1
            data: dict[str, Any] = {
                "title": f"{SECRET}-{number}" if restricted else f"open-{number}",
                "tenderID": f"UA-{number}",
            }
            if restricted:
                data["config"] = {"restricted": True}
            tender = post(app, "/tenders", data, BROKER)
            (secret_ids if restricted else open_ids).append(tender["id"])
        open_sub = post(app, "/frameworks/f/submissions", {"title": "open-sub"}, BROKER)["id"]
        secret_sub = post(
            app, "/frameworks/f/submissions", {"title": f"{SECRET}-sub", "config": {"restricted": True}}, BROKER
        )["id"]
        everything = open_ids + secret_ids
        wait_visible(lambda: [i["id"] for i in crawl(url, "/api/2.5/tenders")], everything)
        wait_visible(lambda: [i["id"] for i in crawl(url, "/api/2.5/frameworks/f/submissions")], [open_sub, secret_sub])
        yield {
            "url": url,
            "open": open_ids,
            "secret": secret_ids,
            "open_sub": open_sub,
            "secret_sub": secret_sub,
            "order": request.param,
        }
    client: MongoClient = MongoClient(mongodb_uri)
    client.drop_database(db_name)
    client.close()


def assert_no_leak(body: Any) -> None:
    """No secret title, owner or config anywhere in a response body."""
    text = json.dumps(body)
    assert SECRET not in text
    for item in body.get("data", []) if isinstance(body, dict) else []:
        if item.get("restricted"):
            assert set(item) <= {"id", "restricted", "dateModified", "title"}, item
            assert item.get("title", MASK_STRING) == MASK_STRING, item


QUERIES = [
    f"opt_fields={ALL_FIELDS}",
    f"opt_fields={ALL_FIELDS}&mode=_all_",
    f"opt_fields={ALL_FIELDS}&descending=1",
    f"opt_fields={ALL_FIELDS}&descending=1&limit=1",
    f"opt_fields={ALL_FIELDS}&limit=1",
    f"opt_fields={ALL_FIELDS}&mode=test",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("who", ["anonymous", "other"])
def test_nothing_restricted_leaks_to_others(restricted_host: dict[str, Any], query: str, who: str) -> None:
    headers = OTHER if who == "other" else None
    url = restricted_host["url"]
    items = crawl(url, "/api/2.5/tenders", headers, query)
    # Every page body and link, both directions, followed to the end.
    status, body = get_json(f"{url}/api/2.5/tenders?{query}", headers)
    assert status == 200
    assert_no_leak(body)
    if "prev_page" in body:
        status, back = get_json(url + body["prev_page"]["path"], headers)
        assert status == 200
        assert_no_leak(back)
    for item in items:
        assert_no_leak({"data": [item]})
    if "mode=test" in query:
        assert items == []
        return
    shown = {item["id"]: item for item in items}
    # Nothing lost: every restricted id is there, as id, restricted,
    # dateModified and the masked title only.
    assert set(restricted_host["secret"]) <= set(shown)
    for tender_id in restricted_host["secret"]:
        assert set(shown[tender_id]) == {"id", "restricted", "dateModified", "title"}
        assert shown[tender_id]["title"] == MASK_STRING
        assert shown[tender_id]["restricted"] is True
    for tender_id in restricted_host["open"]:
        assert shown[tender_id]["title"].startswith("open-")
        assert shown[tender_id]["owner"] == "broker"


def test_the_owner_sees_everything(restricted_host: dict[str, Any]) -> None:
    items = crawl(restricted_host["url"], "/api/2.5/tenders", BROKER, f"opt_fields={ALL_FIELDS}")
    shown = {item["id"]: item for item in items}
    for tender_id in restricted_host["secret"]:
        item = shown[tender_id]
        assert item["title"].startswith(SECRET)
        assert item["owner"] == "broker"
        assert item["config"] == {"restricted": True}
        assert "restricted" not in item


@pytest.mark.parametrize("who", ["anonymous", "other"])
def test_the_object_view_masks_a_restricted_tender_for_others(restricted_host: dict[str, Any], who: str) -> None:
    """The host's ``GET /tenders/{id}`` applies the feed's rule through
    ``mask_object``: the masked title to everyone but the owner."""
    headers = OTHER if who == "other" else None
    for tender_id in restricted_host["secret"]:
        status, body = get_json(f"{restricted_host['url']}/api/2.5/tenders/{tender_id}", headers)
        assert status == 200
        assert body["data"]["title"] == MASK_STRING
        assert SECRET not in json.dumps(body)
    status, body = get_json(f"{restricted_host['url']}/api/2.5/tenders/{restricted_host['open'][0]}", headers)
    assert body["data"]["title"].startswith("open-")


def test_the_object_view_shows_everything_to_the_owner(restricted_host: dict[str, Any]) -> None:
    for tender_id in restricted_host["secret"]:
        status, body = get_json(f"{restricted_host['url']}/api/2.5/tenders/{tender_id}", BROKER)
        assert status == 200
        assert body["data"]["title"].startswith(SECRET)


def test_the_scoped_feed_hides_restricted_submissions(restricted_host: dict[str, Any]) -> None:
    url = restricted_host["url"]
    query = "opt_fields=status,owner,title&limit=1"
    anonymous = {i["id"]: i for i in crawl(url, "/api/2.5/frameworks/f/submissions", None, query)}
    assert set(anonymous) == {restricted_host["open_sub"], restricted_host["secret_sub"]}
    assert set(anonymous[restricted_host["secret_sub"]]) == {"id", "restricted", "dateModified"}
    assert anonymous[restricted_host["open_sub"]]["owner"] == "broker"
    owner = {i["id"]: i for i in crawl(url, "/api/2.5/frameworks/f/submissions", BROKER, query)}
    assert owner[restricted_host["secret_sub"]]["owner"] == "broker"
    unscoped = crawl(url, "/api/2.5/submissions", None, "opt_fields=owner,frameworkID")
    assert_no_leak({"data": unscoped})
    assert {i["id"] for i in unscoped} == set(anonymous)


def test_an_anonymous_crawler_loses_nothing(restricted_host: dict[str, Any]) -> None:
    """Forward in small pages, then backwards: every id, in one order, once."""
    url = restricted_host["url"]
    forward = [i["id"] for i in crawl(url, "/api/2.5/tenders", None, "limit=1")]
    assert sorted(forward) == sorted(restricted_host["open"] + restricted_host["secret"])
    status, first = get_json(f"{url}/api/2.5/tenders?descending=1&limit=2")
    backward = [i["id"] for i in first["data"]]
    path = first["next_page"]["path"]
    while True:
        status, page = get_json(url + path)
        assert status == 200
        if not page["data"]:
            break
        backward += [i["id"] for i in page["data"]]
        path = page["next_page"]["path"]
    assert backward == forward[::-1]


@pytest.mark.parametrize("bad", ["offset=garbage", "limit=x", "offset=" + quote(SECRET)])
def test_error_bodies_carry_nothing(restricted_host: dict[str, Any], bad: str) -> None:
    status, body = get_json(f"{restricted_host['url']}/api/2.5/tenders?opt_fields=title&{bad}")
    assert status in (400, 404)
    assert body["status"] == "error"
    text = json.dumps(body)
    for tender_id in restricted_host["secret"]:
        assert tender_id not in text
    assert "broker" not in text


class RemoteUserPolicy:
    """A host's security policy in brief: ``REMOTE_USER`` is the user; every
    permission is granted but ``view_restricted``, held by ``holders`` only."""

    def __init__(self, holders: tuple[str, ...] = ()) -> None:
        self.holders = holders

    def authenticated_userid(self, request: Any) -> Any:
        return request.environ.get("REMOTE_USER")

    def identity(self, request: Any) -> Any:
        return self.authenticated_userid(request)

    def permits(self, request: Any, context: Any, permission: str) -> bool:
        return permission != "view_restricted" or self.authenticated_userid(request) in self.holders


def test_restriction_arguments_are_checked(settings: dict[str, str]) -> None:
    from pyramid.config import Configurator
    from pyramid.exceptions import ConfigurationError

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    with pytest.raises(ConfigurationError, match=r"add_feed\('tenders'\): owner_fields .* string 'owner'"):
        config.add_feed("tenders", restricted=True, owner_fields="owner")
    with pytest.raises(ConfigurationError, match="needs at least one owner field or a restricted_permission"):
        config.add_feed("tenders", restricted=True, owner_fields=())
    with pytest.raises(ConfigurationError, match="item_view must be callable"):
        config.add_feed("tenders", item_view="nope")  # type: ignore[arg-type]


def test_masks_and_item_view(demo_app: Any, settings: dict[str, str]) -> None:
    """A mask replaces a requested field of a restricted item for others;
    ``item_view`` renders the items shown in full."""
    from pyramid.config import Configurator
    from webtest import TestApp

    from openprocurement_feed.testing import save_in_the_past

    def item_view(request: Any, row: dict[str, Any], fields: Any) -> dict[str, Any]:
        return {"id": row["_id"], "shown": sorted(name for name in fields if name in row)}

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_feed(
        "tenders", allowed_fields=("title",), restricted=True, masks={"title": "Hidden"}, item_view=item_view
    )
    app = config.make_wsgi_app()
    store = demo_app.app.registry.feed_store
    try:
        secret, plain = save_in_the_past(
            store,
            store.collection("tenders"),
            [
                {"title": SECRET, "config": {"restricted": True}, "owner": "broker"},
                {"title": "plain"},
            ],
        )
        data = TestApp(app).get("/api/2.5/tenders?opt_fields=title").json["data"]
        assert data[0] == {
            "id": secret["_id"],
            "restricted": True,
            "title": "Hidden",
            "dateModified": secret["dateModified"],
        }
        assert data[1] == {"id": plain["_id"], "shown": ["dateModified", "title"]}
    finally:
        app.registry.feed_store.close()


def test_upstreams_mask_mapping_masks_inside_listed_fields(demo_app: Any, settings: dict[str, str]) -> None:
    """Upstream's mapping (JSONPath through lists) masks inside the fields a
    restricted item shows; ``safe_fields=("*",)`` shows every asked field so,
    as upstream's restricted listings do. The owner sees the real values."""
    from pyramid.config import Configurator
    from webtest import TestApp

    from openprocurement_feed.testing import save_in_the_past

    config = Configurator(settings=settings)
    config.set_security_policy(RemoteUserPolicy())
    config.include("openprocurement_feed")
    config.add_feed(
        "tenders",
        allowed_fields=("title", "contracts"),
        restricted=True,
        safe_fields=("*",),
        masks={"$.contracts[*].suppliers[*].name": MASK_STRING, "title": MASK_STRING},
    )
    app = config.make_wsgi_app()
    store = demo_app.app.registry.feed_store
    contracts = [{"id": "c1", "suppliers": [{"name": "Real Supplier LLC", "scale": "micro"}, {"name": "Second"}]}]
    try:
        (secret,) = save_in_the_past(
            store,
            store.collection("tenders"),
            [{"title": SECRET, "config": {"restricted": True}, "owner": "broker", "contracts": contracts}],
        )
        (item,) = TestApp(app).get("/api/2.5/tenders?opt_fields=contracts,title").json["data"]
        assert item["title"] == MASK_STRING
        assert item["contracts"] == [
            {"id": "c1", "suppliers": [{"name": MASK_STRING, "scale": "micro"}, {"name": MASK_STRING}]}
        ]
        assert "Real Supplier" not in json.dumps(item) and SECRET not in json.dumps(item)
        owner = TestApp(app, extra_environ={"REMOTE_USER": "broker"})
        (mine,) = owner.get("/api/2.5/tenders?opt_fields=contracts,title").json["data"]
        assert mine["contracts"] == contracts and mine["title"] == SECRET
        stored = store.collection("tenders").find_one({"_id": secret["_id"]})
        assert stored["contracts"] == contracts  # masking never touches the stored document
    finally:
        app.registry.feed_store.close()


@pytest.mark.parametrize("path", ["$..name", "$.contracts[0].name", "$.contracts[?(@.id)]", "", "a..b"])
def test_a_mask_path_outside_the_supported_jsonpath_is_a_configuration_error(
    settings: dict[str, str], path: str
) -> None:
    from pyramid.config import Configurator
    from pyramid.exceptions import ConfigurationError

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    with pytest.raises(ConfigurationError, match=r"add_feed\('tenders'\): masks: .* is not a field name"):
        config.add_feed("tenders", restricted=True, masks={path: MASK_STRING})


def test_repeated_list_wildcards_in_a_mask_path_mask_as_upstream_does(settings: dict[str, str]) -> None:
    """Upstream's contract mapping holds ``$.changes[*].documents[*][*].title``
    (its ``$..documents`` replacement rules expand to it); jsonpath-ng reads
    the second ``[*]`` on a document as the document itself."""
    from pyramid.config import Configurator

    from openprocurement_feed.store.restricted import mask_key

    assert mask_key("$.changes[*].documents[*][*].title") == "changes.documents.title"
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    definition = config.add_feed(
        "contracts",
        allowed_fields=("changes",),
        restricted=True,
        safe_fields=("*",),
        masks={"$.changes[*].documents[*][*].title": MASK_STRING},
    )
    row = {
        "_id": "c1",
        "config": {"restricted": True},
        "changes": [{"documents": [{"title": SECRET, "format": "pdf"}, {"title": SECRET}]}],
    }
    item = definition.policy.restricted_item(row, ["changes"])
    assert item["changes"] == [{"documents": [{"title": MASK_STRING, "format": "pdf"}, {"title": MASK_STRING}]}]
    assert row["changes"][0]["documents"][0]["title"] == SECRET  # the row itself is left alone


def test_no_owner_fields_with_a_restricted_permission_masks_owners_too(demo_app: Any, settings: dict[str, str]) -> None:
    """Upstream's rule has no owner exemption (only roles and the ``r``
    accreditation see restricted objects in full): ``owner_fields=()`` with a
    ``restricted_permission`` masks the poster too."""
    from pyramid.config import Configurator
    from webtest import TestApp

    from openprocurement_feed.testing import save_in_the_past

    config = Configurator(settings=settings)
    config.set_security_policy(RemoteUserPolicy(holders=("admin",)))
    config.include("openprocurement_feed")
    config.add_feed(
        "tenders",
        allowed_fields=("title",),
        restricted=True,
        owner_fields=(),
        safe_fields=("*",),
        masks={"title": MASK_STRING},
        restricted_permission="view_restricted",
    )
    app = config.make_wsgi_app()
    store = demo_app.app.registry.feed_store
    try:
        save_in_the_past(
            store, store.collection("tenders"), [{"title": SECRET, "config": {"restricted": True}, "owner": "broker"}]
        )
        for user in (None, "broker"):
            environ = {"REMOTE_USER": user} if user else {}
            (item,) = TestApp(app, extra_environ=environ).get("/api/2.5/tenders?opt_fields=title").json["data"]
            assert item["title"] == MASK_STRING and item["restricted"] is True, user
        admin = TestApp(app, extra_environ={"REMOTE_USER": "admin"})
        (item,) = admin.get("/api/2.5/tenders?opt_fields=title").json["data"]
        assert item["title"] == SECRET
    finally:
        app.registry.feed_store.close()


def test_upstreams_is_masked_rows_are_masked_beside_restricted_ones(demo_app: Any, settings: dict[str, str]) -> None:
    """``restricted_field=("config.restricted", "is_masked")``: a row whose
    older ``is_masked`` flag is true is masked too (upstream's tenders
    listing applies both rules); a row with neither is shown as it is."""
    from pyramid.config import Configurator
    from webtest import TestApp

    from openprocurement_feed.testing import save_in_the_past

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_feed(
        "tenders",
        allowed_fields=("title",),
        restricted=True,
        safe_fields=("*",),
        masks={"title": MASK_STRING},
        restricted_field=("config.restricted", "is_masked"),
    )
    app = config.make_wsgi_app()
    store = demo_app.app.registry.feed_store
    try:
        masked, restricted, plain = save_in_the_past(
            store,
            store.collection("tenders"),
            [
                {"title": SECRET, "is_masked": True, "owner": "broker"},
                {"title": SECRET, "config": {"restricted": True}, "owner": "broker"},
                {"title": "plain", "is_masked": False},
            ],
        )
        data = TestApp(app).get("/api/2.5/tenders?opt_fields=title").json["data"]
        titles = {item["id"]: item["title"] for item in data}
        assert titles == {masked["_id"]: MASK_STRING, restricted["_id"]: MASK_STRING, plain["_id"]: "plain"}
    finally:
        app.registry.feed_store.close()


def test_a_bad_restricted_field_is_a_configuration_error(settings: dict[str, str]) -> None:
    from pyramid.config import Configurator
    from pyramid.exceptions import ConfigurationError

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    for bad in ("", "a..b", (), ("is_masked", 3)):
        with pytest.raises(ConfigurationError, match="restricted_field must be a field name"):
            config.add_feed("tenders", restricted=True, restricted_field=bad)  # type: ignore[arg-type]
