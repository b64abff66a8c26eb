"""Access to the demo as upstream's, over WebTest: brokers' keys from
``demo.auth_file``, the owner's token issued once and stored as a hash, 401
for anonymous or unknown writers, 403 for a change without the token or by
another broker; restricted tenders masked in the object view for everyone
but their owner and brokers accredited ``r``."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import basic, wait_watermark
from pyramid.exceptions import ConfigurationError

from openprocurement_feed.demo import TENDER_MASKS
from openprocurement_feed.store.restricted import MASK_STRING

TENDERS = "/api/2.5/tenders"
AUTH = """\
[brokers]
broker = key-plain,1234
broker_r = key-r,1234r
other = key-other,1234

[bots]
bot = key-bot
"""
OWNER = {"Authorization": "Bearer key-plain"}
OTHER = {"Authorization": "Bearer key-other"}
ACCREDITED = {"Authorization": "Bearer key-r"}
SECRET_TITLE = "secret defence supply"
SECRET_ENTITY = "Military unit A0000"


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    path = tmp_path / "auth.ini"
    path.write_text(AUTH, encoding="utf-8")
    return path


@pytest.fixture
def app(settings: dict[str, str], auth_file: Path) -> Iterator[Any]:
    """The demo API with ``demo.auth_file`` set."""
    from webtest import TestApp

    from openprocurement_feed.demo import main

    wsgi = main({}, **settings, **{"demo.auth_file": str(auth_file)})
    yield TestApp(wsgi)
    wsgi.registry.feed_store.close()


def create(app: Any, data: dict[str, Any], headers: dict[str, str] = OWNER) -> tuple[dict[str, Any], str]:
    """POST a tender as ``headers``' broker: (its data, its access token)."""
    reply = app.post_json(TENDERS, {"data": data}, headers=headers, status=201).json
    return reply["data"], reply["access"]["token"]


def restricted(app: Any) -> tuple[dict[str, Any], str]:
    return create(
        app,
        {
            "title": SECRET_TITLE,
            "procuringEntity": {"name": SECRET_ENTITY, "identifier": {"scheme": "UA-EDR", "id": "12345678"}},
            "items": [{"description": "rifle scopes", "quantity": 40}],
            "config": {"restricted": True},
        },
    )


def assert_error(body: dict[str, Any], location: str, name: str) -> None:
    """Upstream's error body: status and one error with its three keys."""
    assert body["status"] == "error"
    (error,) = body["errors"]
    assert set(error) == {"location", "name", "description"}
    assert (error["location"], error["name"]) == (location, name), error


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer unknown"}, basic("unknown"), {"Authorization": "Digest key-plain"}],
    ids=["anonymous", "unknown-bearer", "unknown-basic", "other-scheme"],
)
def test_writes_without_a_known_key_are_401(app: Any, headers: dict[str, str]) -> None:
    response = app.post_json(TENDERS, {"data": {"title": "x"}}, headers=headers, status=401)
    assert_error(response.json, "header", "Authorization")
    assert response.headers["WWW-Authenticate"].startswith("Basic")
    data, token = create(app, {"title": "mine"})
    response = app.patch_json(
        f"{TENDERS}/{data['id']}?acc_token={token}", {"data": {"title": "x"}}, headers=headers, status=401
    )
    assert_error(response.json, "header", "Authorization")
    assert app.get(f"{TENDERS}/{data['id']}").json["data"]["title"] == "mine"


def test_create_records_the_owner_and_returns_the_token_once(app: Any) -> None:
    data, token = create(app, {"title": "Fuel"}, basic("key-plain"))
    assert data["owner"] == "broker"
    assert len(token) == 32 and int(token, 16) >= 0
    assert "owner_token" not in data
    again = app.get(f"{TENDERS}/{data['id']}", headers=OWNER).json
    assert "access" not in again and token not in json.dumps(again)
    assert app.post_json(TENDERS, {"data": {"owner_token": "x"}}, headers=OWNER, status=422)


def test_the_token_is_stored_only_as_its_hash(app: Any) -> None:
    data, token = create(app, {"title": "Fuel"})
    app.patch_json(f"{TENDERS}/{data['id']}", {"data": {"title": "Gas"}, "access": {"token": token}}, headers=OWNER)
    stored = app.app.registry.feed_store.collection("tenders").find_one({"_id": data["id"]})
    assert stored["owner_token"] == hashlib.sha512(token.encode()).hexdigest()
    assert token not in json.dumps(stored, default=str)


@pytest.mark.parametrize("where", ["query", "header", "body"])
def test_the_owner_with_its_token_changes_the_object(app: Any, where: str) -> None:
    data, token = create(app, {"title": "Fuel"})
    url, body, headers = f"{TENDERS}/{data['id']}", {"data": {"title": "Diesel"}}, dict(OWNER)
    if where == "query":
        url += f"?acc_token={token}"
    elif where == "header":
        headers["X-Access-Token"] = token
    else:
        body["access"] = {"token": token}
    patched = app.patch_json(url, body, headers=headers, status=200).json["data"]
    assert patched["title"] == "Diesel" and patched["owner"] == "broker"


@pytest.mark.parametrize(
    "headers, token",
    [(OWNER, None), (OWNER, "0" * 32), (OTHER, "right"), (ACCREDITED, "right")],
    ids=["owner-without-token", "owner-wrong-token", "other-broker-with-token", "accredited-broker-with-token"],
)
def test_a_change_without_the_token_or_by_another_broker_is_403(
    app: Any, headers: dict[str, str], token: str | None
) -> None:
    data, right = create(app, {"title": "Fuel"})
    query = "" if token is None else f"?acc_token={right if token == 'right' else token}"
    response = app.patch_json(f"{TENDERS}/{data['id']}{query}", {"data": {"title": "x"}}, headers=headers, status=403)
    assert_error(response.json, "url", "permission")
    assert app.get(f"{TENDERS}/{data['id']}").json["data"]["title"] == "Fuel"
    stored = app.app.registry.feed_store.collection("tenders").find_one({"_id": data["id"]})
    assert stored["_rev"].startswith("1-"), "nothing was written"


def test_a_token_of_another_object_does_not_open_this_one(app: Any) -> None:
    mine, _ = create(app, {"title": "Fuel"})
    _, other_token = create(app, {"title": "Other"})
    app.patch_json(
        f"{TENDERS}/{mine['id']}?acc_token={other_token}", {"data": {"title": "x"}}, headers=OWNER, status=403
    )


def test_an_unknown_object_is_404_for_a_known_broker(app: Any) -> None:
    app.patch_json(f"{TENDERS}/{'0' * 32}?acc_token=x", {"data": {"title": "x"}}, headers=OWNER, status=404)


@pytest.mark.parametrize("headers", [{}, OTHER], ids=["anonymous", "unaccredited-broker"])
def test_a_restricted_object_view_is_masked_for_others(app: Any, headers: dict[str, str]) -> None:
    data, _ = restricted(app)
    shown = app.get(f"{TENDERS}/{data['id']}", headers=headers).json["data"]
    text = json.dumps(shown, ensure_ascii=False)
    assert SECRET_TITLE not in text and SECRET_ENTITY not in text and "rifle" not in text and "12345678" not in text
    assert shown["title"] == MASK_STRING
    assert shown["procuringEntity"] == TENDER_MASKS["procuringEntity"]
    assert shown["items"] == [{"description": MASK_STRING, "quantity": 0.0}]
    assert shown["id"] == data["id"] and shown["config"] == {"restricted": True}


@pytest.mark.parametrize("headers", [OWNER, ACCREDITED], ids=["owner", "broker-accredited-r"])
def test_a_restricted_object_view_is_whole_for_its_owner_and_accredited_brokers(
    app: Any, headers: dict[str, str]
) -> None:
    data, _ = restricted(app)
    shown = app.get(f"{TENDERS}/{data['id']}", headers=headers).json["data"]
    assert shown == data
    assert shown["title"] == SECRET_TITLE and shown["procuringEntity"]["name"] == SECRET_ENTITY


def test_the_owners_patch_reply_is_whole(app: Any) -> None:
    data, token = restricted(app)
    reply = app.patch_json(
        f"{TENDERS}/{data['id']}?acc_token={token}", {"data": {"status": "active.tendering"}}, headers=OWNER
    ).json["data"]
    assert reply["title"] == SECRET_TITLE, "the owner's reply is whole"


def test_the_feed_shows_a_restricted_tender_to_accredited_brokers(app: Any) -> None:
    """The listing and the object view follow one rule: accreditation ``r``
    shows the feed item in full too."""
    data, _ = restricted(app)
    wait_watermark()
    query = f"{TENDERS}?opt_fields=procuringEntity,status"
    for headers, whole in ((ACCREDITED, True), (OWNER, True), (OTHER, False), ({}, False)):
        (item,) = [i for i in app.get(query, headers=headers).json["data"] if i["id"] == data["id"]]
        assert (item["procuringEntity"]["name"] == SECRET_ENTITY) is whole, (headers, item)
        assert ("restricted" in item) is not whole


def test_a_bot_may_create_but_not_see_restricted(app: Any) -> None:
    """Accreditation ``r`` counts for brokers only; any known user may create."""
    data, _ = restricted(app)
    create(app, {"title": "by a bot"}, {"Authorization": "Bearer key-bot"})
    shown = app.get(f"{TENDERS}/{data['id']}", headers={"Authorization": "Bearer key-bot"}).json["data"]
    assert shown["title"] == MASK_STRING


def test_without_auth_file_writes_are_open_with_one_warning(
    settings: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    from webtest import TestApp

    from openprocurement_feed.demo import main

    with caplog.at_level(logging.WARNING, logger="openprocurement_feed"):
        wsgi = main({}, **settings)
    try:
        warnings = [r for r in caplog.records if "demo.auth_file is not set" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        app = TestApp(wsgi)
        reply = app.post_json(TENDERS, {"data": {"title": "open"}}, status=201).json
        app.patch_json(f"{TENDERS}/{reply['data']['id']}", {"data": {"title": "changed"}}, status=200)
        # the token is issued anyway, and stored as its hash only
        stored = wsgi.registry.feed_store.collection("tenders").find_one({"_id": reply["data"]["id"]})
        assert stored["owner_token"] == hashlib.sha512(reply["access"]["token"].encode()).hexdigest()
        # a restricted tender created anonymously has no owner: masked to all
        secret = app.post_json(TENDERS, {"data": {"title": SECRET_TITLE, "config": {"restricted": True}}}).json
        assert app.get(f"{TENDERS}/{secret['data']['id']}").json["data"]["title"] == MASK_STRING
        # anyone may patch it, but the reply is masked like the object view
        patched = app.patch_json(f"{TENDERS}/{secret['data']['id']}", {"data": {"status": "active.tendering"}})
        assert patched.json["data"]["title"] == MASK_STRING and patched.json["data"]["status"] == "active.tendering"
    finally:
        wsgi.registry.feed_store.close()


def test_with_an_auth_file_no_warning(
    settings: dict[str, str], auth_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from openprocurement_feed.demo import main

    with caplog.at_level(logging.INFO, logger="openprocurement_feed"):
        wsgi = main({}, **settings, **{"demo.auth_file": str(auth_file)})
    wsgi.registry.feed_store.close()
    assert not [r for r in caplog.records if "demo.auth_file is not set" in r.getMessage()]
    assert any("need a key of the 4 users" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "content, message",
    [
        ("[brokers]\nbroker = \n", "user 'broker' of \\[brokers\\] has no key"),
        ("[brokers]\nbroker = k,12 r\n", "accreditations '12 r' must be digits and lower-case letters"),
        ("[brokers]\na = k\nb = k,1\n", "user 'b' of \\[brokers\\] has the key of user 'a'"),
        ("# nobody\n", "it names no user"),
        ("broker = k\n", "File contains no section headers"),
        ("[brokers]\n[brokers]\n", "section 'brokers' already exists"),
    ],
)
def test_a_bad_auth_file_is_a_clear_error(settings: dict[str, str], tmp_path: Path, content: str, message: str) -> None:
    from openprocurement_feed.demo import main

    path = tmp_path / "auth.ini"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigurationError, match=rf"auth file .*auth.ini.*demo.auth_file.*{message}"):
        main({}, **settings, **{"demo.auth_file": str(path)})


def test_a_missing_auth_file_is_a_clear_error(settings: dict[str, str], tmp_path: Path) -> None:
    from openprocurement_feed.demo import main

    with pytest.raises(ConfigurationError, match=r"Cannot read the auth file .*nowhere.ini.*No such file"):
        main({}, **settings, **{"demo.auth_file": str(tmp_path / "nowhere.ini")})
    with pytest.raises(ConfigurationError, match=r"demo.auth_file.*no_such_package"):
        main({}, **settings, **{"demo.auth_file": "no_such_package.sub:auth.ini"})


def test_the_packaged_auth_file_has_demo_brokers_and_demo_ini_uses_it() -> None:
    from openprocurement_feed.demo.auth import PACKAGED_AUTH_FILE, read_auth_file

    users = read_auth_file(PACKAGED_AUTH_FILE)
    assert users.key_of() == "demo-broker-key"
    assert users.key_of(accreditation="r") == "demo-broker-r-key"
    demo_ini = Path(__file__).resolve().parent.parent / "examples" / "demo.ini"
    assert f"demo.auth_file = {PACKAGED_AUTH_FILE}" in demo_ini.read_text(encoding="utf-8")


def test_credentials_and_tokens_parsing() -> None:
    from pyramid.testing import DummyRequest

    from openprocurement_feed.demo.auth import access_token, credentials_key, token_matches

    def request(**headers: str) -> Any:
        return DummyRequest(headers=headers)

    assert credentials_key(request(Authorization="Bearer k")) == "k"
    assert credentials_key(request(**basic("k"))) == "k"
    assert credentials_key(request(Authorization="Basic !!notbase64")) is None
    assert credentials_key(request(Authorization="Basic " + base64.b64encode(b"\xe9:").decode())) == "é"
    assert credentials_key(request(Authorization="Bearer")) is None
    assert credentials_key(request()) is None
    assert access_token(request(**{"X-Access-Token": "t"})) == "t"
    assert access_token(DummyRequest(params={"acc_token": "q"})) == "q"
    assert not token_matches(None, "x") and not token_matches("t", None) and not token_matches("t", "")


@pytest.mark.parametrize(
    "charset", ["", "; charset=x-unknown", "; charset=rot13"], ids=["utf-8", "unknown", "not-text"]
)
def test_the_token_of_a_body_in_any_charset(charset: str) -> None:
    """``access.token`` of a JSON body; a charset without a text codec is
    no token (the view answers such a body 422), never an error."""
    from pyramid.request import Request

    from openprocurement_feed.demo.auth import access_token

    body = b'{"data": {}, "access": {"token": "t"}}'
    request = Request.blank("/", method="PATCH", body=body, content_type="application/json" + charset)
    assert access_token(request) == ("t" if not charset else None)
