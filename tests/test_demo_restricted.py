"""The demo's tenders feed is restricted as upstream's: a restricted tender
shows only ``id``, ``restricted``, ``dateModified`` and the placeholders of
its masked fields to anyone but its owner (the ``REMOTE_USER`` that created
it, without an auth file)."""

from __future__ import annotations

from typing import Any

from conftest import wait_watermark

from openprocurement_feed.demo import TENDER_MASKS

OWNER = {"REMOTE_USER": "broker"}
FIELDS = "opt_fields=procuringEntity,status,tenderID,mode,dateCreated,public_modified"


def test_a_restricted_tender_shows_its_masks_to_others(demo_app: Any) -> None:
    secret = demo_app.post_json(
        "/api/2.5/tenders",
        {"data": {"procuringEntity": {"name": "secret"}, "config": {"restricted": True}}},
        extra_environ=OWNER,
    ).json["data"]
    plain = demo_app.post_json(
        "/api/2.5/tenders", {"data": {"procuringEntity": {"name": "plain"}}}, extra_environ=OWNER
    ).json["data"]
    assert secret["owner"] == "broker"
    wait_watermark()
    for query in (FIELDS, FIELDS + "&mode=_all_", FIELDS + "&descending=1"):
        data = {item["id"]: item for item in demo_app.get(f"/api/2.5/tenders?{query}").json["data"]}
        assert data[secret["id"]] == {
            "id": secret["id"],
            "restricted": True,
            "dateModified": secret["dateModified"],
            "procuringEntity": TENDER_MASKS["procuringEntity"],
        }
        assert data[plain["id"]]["procuringEntity"]["name"] == "plain"
        other = demo_app.get(f"/api/2.5/tenders?{query}", extra_environ={"REMOTE_USER": "someone"}).json["data"]
        assert "secret" not in str(other)
    mine = demo_app.get(f"/api/2.5/tenders?{FIELDS}", extra_environ=OWNER).json["data"]
    assert {item["id"]: item for item in mine}[secret["id"]]["procuringEntity"]["name"] == "secret"


def test_a_client_cannot_set_the_owner(demo_app: Any) -> None:
    response = demo_app.post_json("/api/2.5/tenders", {"data": {"owner": "broker"}}, status=422)
    assert "owner" in response.json["errors"][0]["description"]


def test_the_demo_security_policy_without_auth_file_is_open_and_keeps_no_session(demo_app: Any) -> None:
    """REMOTE_USER names the user; every permission but view_restricted is
    granted; nothing is remembered."""
    from pyramid.testing import DummyRequest

    from openprocurement_feed.demo.security import DemoSecurityPolicy
    from openprocurement_feed.store.restricted import RESTRICTED_PERMISSION

    policy = DemoSecurityPolicy()
    request = DummyRequest(environ={"REMOTE_USER": "broker"})
    assert policy.authenticated_userid(request) == "broker"
    assert policy.permits(request, None, "view") and policy.permits(request, None, "edit")
    assert not policy.permits(request, None, RESTRICTED_PERMISSION)
    assert policy.authenticated_userid(DummyRequest()) is None
    assert policy.remember(request, "broker") == [] and policy.forget(request) == []
