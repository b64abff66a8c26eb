"""Access to the demo over HTTP: the demo served by waitress on loopback with
the packaged auth file (what ``make run`` serves), driven by ``requests``
as a broker's client would be. The WSGI-level tests of the same rules are
in ``test_demo_auth.py``; these hold them through a real HTTP server, and
hostile credentials (undecodable bytes, huge tokens, bodies of the wrong
shape) get a 4xx, never a 5xx."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from conftest import basic
from pymongo import MongoClient

from openprocurement_feed.demo.auth import PACKAGED_AUTH_FILE
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.testing import make_settings, wait_watermark

#: starts servers or processes of its own (make test-unit leaves it out)
pytestmark = pytest.mark.server

#: The keys of the packaged auth file (openprocurement_feed/demo/auth.ini).
OWNER = {"Authorization": "Bearer demo-broker-key"}
OTHER = {"Authorization": "Bearer demo-broker2-key"}
ACCREDITED = {"Authorization": "Bearer demo-broker-r-key"}
SECRET_TITLE = "night-vision goggles"
SECRET_ENTITY = "Military unit B1111"


@pytest.fixture(scope="module")
def server(mongodb_uri: str, mongo_client: MongoClient[Any]) -> Iterator[DemoServer]:
    """The demo over HTTP with ``demo.auth_file``, for the whole module."""
    name = "test_" + uuid.uuid4().hex[:12]
    demo = DemoServer({**make_settings(mongodb_uri, name), "demo.auth_file": PACKAGED_AUTH_FILE}, threads=4)
    demo.start()
    try:
        yield demo
    finally:
        demo.close()
        mongo_client.drop_database(name)


@pytest.fixture
def api(server: DemoServer) -> str:
    return server.api_url


def create(api: str, data: dict[str, Any], headers: dict[str, str] = OWNER) -> tuple[str, str]:
    """POST a tender as ``headers``' broker: (its id, its access token)."""
    response = requests.post(f"{api}/tenders", json={"data": data}, headers=headers, timeout=30)
    assert response.status_code == 201, response.text
    body = response.json()
    return body["data"]["id"], body["access"]["token"]


def patch(api: str, tender_id: str, headers: dict[str, str], query: str = "", **body: Any) -> requests.Response:
    body.setdefault("data", {"status": "active.tendering"})
    return requests.patch(f"{api}/tenders/{tender_id}{query}", json=body, headers=headers, timeout=30)


def error_of(response: requests.Response) -> tuple[str, str]:
    """(location, name) of upstream's JSON error body, checked."""
    assert response.headers["Content-Type"].startswith("application/json"), response.text
    body = response.json()
    assert body["status"] == "error"
    (error,) = body["errors"]
    assert set(error) == {"location", "name", "description"}
    return error["location"], error["name"]


def stored(server: DemoServer, tender_id: str) -> dict[str, Any]:
    found: dict[str, Any] = server.registry.feed_store.collection("tenders").find_one({"_id": tender_id})
    return found


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer unknown"}, basic("unknown"), {"Authorization": "Digest demo-broker-key"}],
    ids=["anonymous", "unknown-bearer", "unknown-basic", "other-scheme"],
)
def test_writes_without_a_known_key_are_401(server: DemoServer, api: str, headers: dict[str, str]) -> None:
    response = requests.post(f"{api}/tenders", json={"data": {"title": "x"}}, headers=headers, timeout=30)
    assert response.status_code == 401
    assert error_of(response) == ("header", "Authorization")
    assert response.headers["WWW-Authenticate"].startswith("Basic")
    tender_id, token = create(api, {"title": "mine"})
    response = patch(api, tender_id, headers, f"?acc_token={token}")
    assert response.status_code == 401
    assert error_of(response) == ("header", "Authorization")
    assert stored(server, tender_id)["_rev"].startswith("1-"), "nothing was written"


def test_a_change_without_the_token_or_by_another_broker_is_403(server: DemoServer, api: str) -> None:
    tender_id, token = create(api, {"title": "Fuel"})
    cases = {
        "owner without the token": patch(api, tender_id, OWNER),
        "owner with a wrong token": patch(api, tender_id, OWNER, "?acc_token=" + "0" * 32),
        "another broker with the token": patch(api, tender_id, OTHER, f"?acc_token={token}"),
        "an accredited broker with the token": patch(api, tender_id, {**ACCREDITED, "X-Access-Token": token}),
    }
    for case, response in cases.items():
        assert response.status_code == 403, (case, response.text)
        assert error_of(response) == ("url", "permission"), case
    assert stored(server, tender_id)["_rev"].startswith("1-"), "nothing was written"


def test_the_owner_with_its_token_changes_the_object(server: DemoServer, api: str) -> None:
    tender_id, token = create(api, {"title": "Fuel"}, basic("demo-broker-key"))
    by_query = patch(api, tender_id, OWNER, f"?acc_token={token}", data={"title": "by query"})
    assert by_query.status_code == 200, by_query.text
    assert by_query.json()["data"]["title"] == "by query"
    by_header = patch(api, tender_id, {**basic("demo-broker-key"), "X-Access-Token": token}, data={"title": "header"})
    assert by_header.status_code == 200, by_header.text
    by_body = patch(api, tender_id, OWNER, data={"title": "by body"}, access={"token": token})
    assert by_body.status_code == 200, by_body.text
    assert requests.get(f"{api}/tenders/{tender_id}", timeout=30).json()["data"]["title"] == "by body"
    assert stored(server, tender_id)["_rev"].startswith("4-")


def test_a_restricted_tender_is_masked_for_others_and_the_token_is_not_stored(server: DemoServer, api: str) -> None:
    tender_id, token = create(
        api,
        {
            "title": SECRET_TITLE,
            "procuringEntity": {"name": SECRET_ENTITY, "identifier": {"scheme": "UA-EDR", "id": "87654321"}},
            "config": {"restricted": True},
        },
    )
    assert patch(api, tender_id, OWNER, f"?acc_token={token}").status_code == 200
    wait_watermark()
    for who, headers, whole in (
        ("anonymous", {}, False),
        ("unaccredited broker", OTHER, False),
        ("owner", OWNER, True),
        ("broker accredited r", ACCREDITED, True),
    ):
        reply = requests.get(f"{api}/tenders/{tender_id}", headers=headers, timeout=30)
        assert reply.status_code == 200
        text = reply.content.decode("utf-8")
        feed = requests.get(f"{api}/tenders?opt_fields=procuringEntity,status", headers=headers, timeout=30)
        (item,) = [item for item in feed.json()["data"] if item["id"] == tender_id]
        item_text = json.dumps(item, ensure_ascii=False)
        for secret in (SECRET_TITLE, SECRET_ENTITY, "87654321"):
            assert (secret in text) is whole, (who, secret, text)
        assert (SECRET_ENTITY in item_text) is whole, (who, item)
        assert token not in text and "owner_token" not in text, who
    document = stored(server, tender_id)
    assert token not in json.dumps(document, default=str), "the token is stored only as its hash"
    assert len(document["owner_token"]) == 128


RAW_TOKEN_BYTES = b"\xff\xfe\x80"


@pytest.mark.parametrize(
    "method, path, headers, body, statuses",
    [
        ("POST", "", {"Authorization": b"Bearer " + RAW_TOKEN_BYTES}, b'{"data": {}}', {401}),
        ("POST", "", {"Authorization": b"Basic " + base64.b64encode(RAW_TOKEN_BYTES + b":")}, b'{"data": {}}', {401}),
        ("POST", "", {"Authorization": "Basic !!not base64!!"}, b'{"data": {}}', {401}),
        ("POST", "", {"Authorization": "Basic"}, b'{"data": {}}', {401}),
        ("POST", "", {"Authorization": "Bearer    "}, b'{"data": {}}', {401}),
        ("POST", "", {"Authorization": "Bearer " + "k" * 100_000}, b'{"data": {}}', {401}),
        ("PATCH", "?acc_token=%FF%FE", OWNER, b'{"data": {}}', {400}),
        ("PATCH", "?acc_token=%00", OWNER, b'{"data": {}}', {403}),
        ("PATCH", "?acc_token=" + "a" * 200_000, OWNER, b'{"data": {}}', {403}),
        ("PATCH", "", {**OWNER, "X-Access-Token": RAW_TOKEN_BYTES}, b'{"data": {}}', {403}),
        ("PATCH", "", OWNER, json.dumps({"data": {}, "access": {"token": "a" * 5_000_000}}).encode(), {403}),
        ("PATCH", "", OWNER, b'{"data": {}, "access": []}', {422}),
        ("PATCH", "", OWNER, b'{"data": {}, "access": {"token": ["x"]}}', {422}),
        ("PATCH", "", OWNER, b'{"data": {}, "access": {"token": 1}}', {422}),
        ("POST", "", OWNER, b'{"data": {}, "access": ["x"]}', {422}),
        ("PATCH", "", OWNER, b'[{"data": {}}]', {422}),
        ("PATCH", "", OWNER, b'{"data": {}, "access": {"token": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}", {422}),
        ("PATCH", "", {**OWNER, "Content-Type": "application/json; charset=x-unknown"}, b'{"data": {}}', {422}),
        ("POST", "", {**OWNER, "Content-Type": "application/json; charset=rot13"}, b'{"data": {}}', {422}),
    ],
    ids=[
        "bearer-non-utf8",
        "basic-non-utf8",
        "basic-not-base64",
        "basic-empty",
        "bearer-blank",
        "bearer-100kb",
        "acc_token-non-utf8",
        "acc_token-nul",
        "acc_token-200kb",
        "x-access-token-non-utf8",
        "body-token-5mb",
        "body-access-list",
        "body-token-list",
        "body-token-number",
        "create-access-list",
        "body-list",
        "body-token-deep",
        "charset-unknown",
        "charset-not-text",
    ],
)
def test_hostile_credentials_get_a_4xx(
    server: DemoServer, api: str, method: str, path: str, headers: dict[str, Any], body: bytes, statuses: set[int]
) -> None:
    tender_id, _ = create(api, {"title": "target"})
    url = f"{api}/tenders" if method == "POST" else f"{api}/tenders/{tender_id}{path}"
    headers = {"Content-Type": "application/json", **headers}
    response = requests.request(method, url, data=body, headers=headers, timeout=60)
    assert response.status_code in statuses, (response.status_code, response.text[:300])
    error_of(response)
    assert stored(server, tender_id)["_rev"].startswith("1-"), "nothing was written"
