"""``mask_object``: the feed's restricted rule for a host's object views —
the owner and holders of ``restricted_permission`` see the object whole,
everyone else sees the masked paths' placeholders."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError
from pyramid.request import Request
from pyramid.security import Allowed, Denied
from pyramid.testing import DummyRequest

from openprocurement_feed.store.restricted import (
    MASK_NUMBER,
    MASK_STRING,
    RESTRICTED_PERMISSION,
    ItemPolicy,
    mask_object,
)

DOC: dict[str, Any] = {
    "_id": "t1",
    "owner": "broker",
    "dateModified": "2026-01-01T00:00:00+00:00",
    "config": {"restricted": True},
    "title": "secret",
    "items": [{"description": "a", "quantity": 3}, {"description": "b"}, "not an object"],
    "value": {"amount": 10.0},
}
MASKS = {"title": MASK_STRING, "items.description": MASK_STRING, "items.quantity": MASK_NUMBER, "absent.x": 1}


class UserPolicy:
    """A security policy: the user in ``REMOTE_USER``; ``view_restricted``
    for the user ``reader`` alone."""

    def identity(self, request: Any) -> str | None:
        return request.environ.get("REMOTE_USER")

    def authenticated_userid(self, request: Any) -> str | None:
        return self.identity(request)

    def permits(self, request: Any, context: Any, permission: str) -> Allowed | Denied:
        if permission == RESTRICTED_PERMISSION:
            return Allowed("reader") if self.identity(request) == "reader" else Denied("no")
        return Allowed("open")


def request_as(config: Configurator, user: str | None) -> Any:
    request = DummyRequest(environ={"REMOTE_USER": user} if user else {})
    request.registry = config.registry
    return request


@pytest.fixture
def config(settings: dict[str, str]) -> Any:
    config = Configurator(settings=settings)
    config.set_security_policy(UserPolicy())
    config.include("openprocurement_feed")
    config.add_feed("tenders", restricted=True, masks=MASKS, restricted_permission=RESTRICTED_PERMISSION)
    config.add_feed("plans")
    config.add_feed("bare", restricted=True)
    config.commit()
    yield config
    config.registry.feed_store.close()


def test_others_get_a_masked_copy(config: Any) -> None:
    for user in (None, "someone"):
        masked = mask_object(request_as(config, user), "tenders", DOC)
        assert masked is not DOC
        assert masked["title"] == MASK_STRING
        assert masked["items"] == [
            {"description": MASK_STRING, "quantity": MASK_NUMBER},
            {"description": MASK_STRING},
            "not an object",
        ]
        assert masked["value"] == {"amount": 10.0}, "what the masks do not name is kept"
        assert "absent" not in masked
    assert DOC["title"] == "secret" and DOC["items"][0]["description"] == "a", "the document is not changed"


def test_the_owner_and_the_permission_holder_see_it_whole(config: Any) -> None:
    for user in ("broker", "reader"):
        assert mask_object(request_as(config, user), "tenders", DOC) is DOC


def test_unrestricted_objects_and_feeds_are_whole(config: Any) -> None:
    plain = dict(DOC, config={"restricted": False})
    assert mask_object(request_as(config, None), "tenders", plain) is plain
    assert mask_object(request_as(config, None), "plans", DOC) is DOC


def test_a_feed_without_masks_shows_the_object_as_its_feed_item(config: Any) -> None:
    assert mask_object(request_as(config, None), "bare", DOC) == {
        "id": "t1",
        "restricted": True,
        "dateModified": DOC["dateModified"],
    }


def test_the_feed_is_named_or_given(config: Any) -> None:
    feed = config.registry.feed_definitions["tenders"]
    request = request_as(config, None)
    assert (
        mask_object(request, feed, DOC)
        == mask_object(request, feed.policy, DOC)
        == mask_object(request, "tenders", DOC)
    )
    with pytest.raises(LookupError, match="no feed named 'nope'"):
        mask_object(request, "nope", DOC)
    with pytest.raises(TypeError, match="expected a feed name"):
        mask_object(request, 42, DOC)


def test_without_a_security_policy_no_one_holds_the_permission(settings: dict[str, str]) -> None:
    """Pyramid grants every permission when there is no policy: the rule
    does not, so a restricted object stays masked."""
    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_feed("tenders", restricted=True, masks=MASKS, restricted_permission=RESTRICTED_PERMISSION)
    config.commit()
    try:
        assert mask_object(request_as(config, "reader"), "tenders", DOC)["title"] == MASK_STRING
    finally:
        config.registry.feed_store.close()


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"masks": {"a..b": 1}}, "masks: 'a..b' is not a field name"),
        ({"masks": {"": 1}}, "masks: '' is not a field name"),
        ({"masks": ["title"]}, "masks must be a mapping"),
        ({"restricted_permission": ""}, "restricted_permission must be a permission name"),
    ],
)
def test_bad_masks_and_permissions_are_configuration_errors(arguments: dict[str, Any], message: str) -> None:
    values = {"masks": None, "restricted_permission": None, **arguments}
    with pytest.raises(ConfigurationError, match=message):
        ItemPolicy.build(True, ("owner",), ("dateModified",), values["masks"], None, values["restricted_permission"])


class KeyPrincipals:
    """A legacy authentication policy shaped like upstream's: the key of
    ``Authorization: Bearer <key>`` names a user; its principals are its
    group (``g:brokers``) and one ``a:<level>`` per accreditation letter."""

    USERS: ClassVar[dict[str, tuple[str, str, str]]] = {
        "key-plain": ("broker2", "brokers", "1234"),
        "key-r": ("broker_r", "brokers", "1234r"),
    }

    def user(self, request: Any) -> tuple[str, str, str] | None:
        method, _, key = request.headers.get("Authorization", "").partition(" ")
        return self.USERS.get(key) if method.lower() == "bearer" else None

    def authenticated_userid(self, request: Any) -> str | None:
        user = self.user(request)
        return None if user is None else user[0]

    def unauthenticated_userid(self, request: Any) -> str | None:
        return self.authenticated_userid(request)

    def effective_principals(self, request: Any) -> list[str]:
        from pyramid.authorization import Authenticated, Everyone

        user = self.user(request)
        if user is None:
            return [Everyone]
        return [Everyone, Authenticated, user[0], f"g:{user[1]}", *(f"a:{level}" for level in user[2])]

    def remember(self, request: Any, userid: Any, **kw: Any) -> list[Any]:
        return []

    def forget(self, request: Any, **kw: Any) -> list[Any]:
        return []


@pytest.mark.filterwarnings("ignore:Authentication and authorization policies have been deprecated")
@pytest.mark.parametrize("grant", [True, False], ids=["root-acl-grants-a:r", "root-acl-grants-nothing"])
def test_an_upstream_style_legacy_policy_and_acl(settings: dict[str, str], grant: bool) -> None:
    """A host on Pyramid's legacy authentication and ACL authorization
    policies (upstream's shape) wires the rule with one ACL entry on its
    root: ``(Allow, "a:r", RESTRICTED_PERMISSION)``. The owner sees the
    object whole through ``authenticated_userid``, whatever the ACL."""
    from pyramid.authorization import ACLAuthorizationPolicy, Allow, Everyone
    from pyramid.interfaces import IAuthenticationPolicy
    from webtest import TestApp
    from zope.interface import classImplements

    classImplements(KeyPrincipals, IAuthenticationPolicy)

    class Root:
        __acl__ = [(Allow, Everyone, "view")] + ([(Allow, "a:r", RESTRICTED_PERMISSION)] if grant else [])

        def __init__(self, request: Any) -> None:
            self.request = request

    config = Configurator(settings=settings, root_factory=Root)
    config.set_authentication_policy(KeyPrincipals())
    config.set_authorization_policy(ACLAuthorizationPolicy())
    config.include("openprocurement_feed")
    config.add_feed("tenders", restricted=True, masks=MASKS, restricted_permission=RESTRICTED_PERMISSION)
    config.add_route("tender", "/api/2.5/tenders/{id}")
    config.add_view(lambda request: mask_object(request, "tenders", DOC), route_name="tender", renderer="json")
    app = TestApp(config.make_wsgi_app())
    try:
        for key, whole in (("", False), ("key-plain", False), ("key-r", grant)):
            shown = app.get("/api/2.5/tenders/t1", headers={"Authorization": f"Bearer {key}"} if key else {}).json
            assert (shown["title"] == "secret") is whole, (key, shown)
        owned = dict(DOC, owner="broker2")
        request = Request.blank("/", headers={"Authorization": "Bearer key-plain"})
        request.registry = config.registry
        assert mask_object(request, "tenders", owned) is owned
    finally:
        config.registry.feed_store.close()
