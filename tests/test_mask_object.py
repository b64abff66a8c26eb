"""``mask_object``: the feed's restricted rule for a host's object views —
the owner and holders of ``restricted_permission`` see the object whole,
everyone else sees the masked paths' placeholders."""

from __future__ import annotations

from typing import Any

import pytest
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError
from pyramid.security import Allowed, Denied
from pyramid.testing import DummyRequest

from openprocurement_feed.restricted import (
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
