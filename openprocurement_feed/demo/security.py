"""Who is asking, and what they may do: the demo's security policy.

With ``demo.auth_file`` (:mod:`.auth`), a client is the user whose key its
``Authorization`` header carries, and:

* ``create`` (``POST``, and the first check of a ``PATCH``) needs a known
  user: an anonymous client or an unknown key gets **401**;
* ``edit`` (a change of one object, checked on the stored object) needs
  the object's owner **and** its access token: anyone else, or the owner
  without the token, gets **403**;
* ``view_restricted`` (:data:`~openprocurement_feed.store.restricted.RESTRICTED_PERMISSION`)
  is granted to brokers accredited ``r``: they see restricted objects in
  full in the feeds and the object views, as their owners do;
* every read is open.

Without an auth file the demo trusts the ``REMOTE_USER`` a front server
sets (WebTest's ``extra_environ`` in the tests; clients cannot set it
through a header), writes are open to everyone, and no one holds
``view_restricted``: a restricted object is shown in full to its owner alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyramid.request import Request
from pyramid.security import Allowed, Denied

from ..store.restricted import RESTRICTED_PERMISSION
from .auth import ACCR_RESTRICTED, BROKERS, TOKEN_FIELD, AuthUsers, User, access_token, credentials_key, token_matches

#: The permission of a create (and of any write, before the object is read).
CREATE = "create"
#: The permission of a change of one object (context: :class:`OwnedObject`).
EDIT = "edit"


@dataclass(frozen=True)
class OwnedObject:
    """The context of an ``edit``: the stored document being changed."""

    doc: dict[str, Any]
    owner_field: str = "owner"


class DemoSecurityPolicy:
    """A Pyramid security policy over the users of an auth file, or over
    ``REMOTE_USER`` when ``users`` is None (open writes)."""

    def __init__(self, users: AuthUsers | None = None) -> None:
        self.users = users

    def identity(self, request: Request) -> User | None:
        """The user of the request's key (or ``REMOTE_USER``), or None."""
        if self.users is None:
            name = request.environ.get("REMOTE_USER")
            return User(name, "remote") if isinstance(name, str) and name else None
        return self.users.find(credentials_key(request))

    def authenticated_userid(self, request: Request) -> str | None:
        """The user's name: what ``owner`` holds on the objects it creates."""
        user = self.identity(request)
        return None if user is None else user.name

    def permits(self, request: Request, context: Any, permission: str) -> Allowed | Denied:
        """Decide ``permission`` for the request (see the module's rules)."""
        user = self.identity(request)
        if permission == RESTRICTED_PERMISSION:
            if user is not None and user.group == BROKERS and user.accredited(ACCR_RESTRICTED):
                return Allowed(f"{user.name} is a broker accredited {ACCR_RESTRICTED!r}")
            return Denied("restricted objects are shown in full to their owner and accredited brokers only")
        if self.users is None:
            return Allowed("the demo has no auth file: writes are open")
        if permission == CREATE:
            return Allowed("a known user") if user is not None else Denied("not authenticated")
        if permission == EDIT:
            if user is None:
                return Denied("not authenticated")
            doc = context.doc if isinstance(context, OwnedObject) else {}
            owner_field = context.owner_field if isinstance(context, OwnedObject) else "owner"
            if doc.get(owner_field) != user.name:
                return Denied(f"{user.name} is not the owner")
            if not token_matches(access_token(request), doc.get(TOKEN_FIELD)):
                return Denied("the access token is missing or wrong")
            return Allowed(f"{user.name} owns the object and holds its token")
        return Allowed("reads are open")

    def remember(self, request: Request, userid: Any, **kw: Any) -> list[tuple[str, str]]:
        """Nothing: the demo keeps no session."""
        return []

    def forget(self, request: Request, **kw: Any) -> list[tuple[str, str]]:
        """Nothing: the demo keeps no session."""
        return []
