"""``ItemPolicy.render_rows``: a page's items as ``ItemPolicy.renderer``
gives them row by row, whatever the rows hold."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pyramid.interfaces import ISecurityPolicy

from openprocurement_feed.feed.pages import render_item, render_items
from openprocurement_feed.store.restricted import ItemPolicy


class Registry:
    def __init__(self, policy: bool) -> None:
        self.policy = policy

    def queryUtility(self, interface: Any) -> Any:
        return object() if self.policy and interface is ISecurityPolicy else None


class FakeRequest:
    """What the rule asks of a request, with the questions counted."""

    def __init__(self, user: str | None, granted: bool, security: bool = True) -> None:
        self.registry = Registry(security)
        self.user = user
        self.granted = granted
        self.asked: list[str] = []

    @property
    def authenticated_userid(self) -> str | None:
        self.asked.append("user")
        return self.user

    def has_permission(self, permission: str) -> bool:
        self.asked.append("permission")
        return self.granted


ROWS: list[dict[str, Any]] = [
    {"_id": "a", "dateModified": "d1", "title": "t1", "owner": "alice", "config": {"restricted": True}},
    {"_id": "b", "dateModified": "d2", "title": "t2", "owner": "bob", "config": {"restricted": True}},
    {"_id": "c", "dateModified": "d3", "title": "t3", "owner": "bob"},
    {"_id": "d", "dateModified": "d4", "owner": "bob", "config": {"restricted": False}},
    {"_id": "e", "dateModified": "d5", "title": "t5", "owner": "carol", "config": "restricted"},
    {"_id": "f", "title": "t6", "owner": "carol", "config": {"restricted": 1}, "is_masked": True},
    {"_id": "g", "dateModified": "d7", "title": "t7", "config": None, "is_masked": True},
    {"_id": "h", "dateModified": "d8", "title": "t8", "owner": "alice", "config": {"restricted": ""}},
]

POLICIES = {
    "plain rule": ItemPolicy(restricted=True),
    "masks": ItemPolicy(restricted=True, masks={"title": "Hidden"}),
    "every field safe": ItemPolicy(restricted=True, safe_fields=("*",), masks={"title": "Hidden"}),
    "permission": ItemPolicy(restricted=True, restricted_permission="view_restricted"),
    "two flags": ItemPolicy(restricted=True, restricted_field=("config.restricted", "is_masked")),
    "other flag": ItemPolicy(restricted=True, restricted_field="is_masked"),
    "not restricted": ItemPolicy(restricted=False),
    "item view": ItemPolicy(
        restricted=True, item_view=lambda request, row, fields: {"id": row["_id"], "seen": list(fields)}
    ),
}


@pytest.mark.parametrize(
    ("name", "user", "granted", "security", "fields"),
    [
        (name, user, granted, security, fields)
        for name, (user, granted, security), fields in itertools.product(
            POLICIES,
            [(None, False, True), ("alice", False, True), ("bob", True, True), ("bob", True, False)],
            [("dateModified",), ("dateModified", "title"), ()],
        )
    ],
)
def test_render_rows_gives_the_renderers_items(
    name: str, user: str | None, granted: bool, security: bool, fields: tuple[str, ...]
) -> None:
    policy = POLICIES[name]
    by_row, at_once = FakeRequest(user, granted, security), FakeRequest(user, granted, security)
    render = policy.renderer(by_row, render_item)
    expected = [render(row, fields) for row in ROWS]
    for plain in (render_items, None):
        at_once.asked.clear()
        found = policy.render_rows(at_once, ROWS, fields, render_item, plain)
        assert found == expected
        assert [list(item) for item in found] == [list(item) for item in expected]  # the keys' order too
        assert at_once.asked == by_row.asked  # the same questions, in the same order
