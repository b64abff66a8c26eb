"""Who is asking: the demo trusts the ``REMOTE_USER`` the server sets.

A front server (or WebTest's ``extra_environ``) that authenticated the
client puts its user id in the WSGI environ's ``REMOTE_USER``; clients
cannot set it through a header. The user id decides what a restricted
tender shows (its owner sees it in full) and is stored as the ``owner`` of
the tenders that user creates. Every view stays open.
"""

from __future__ import annotations

from typing import Any

from pyramid.request import Request
from pyramid.security import Allowed


class RemoteUserSecurityPolicy:
    """A Pyramid security policy whose identity is ``REMOTE_USER``."""

    def identity(self, request: Request) -> str | None:
        """The user id the server authenticated, or None."""
        user = request.environ.get("REMOTE_USER")
        return user if isinstance(user, str) and user else None

    def authenticated_userid(self, request: Request) -> str | None:
        """The same as :meth:`identity`."""
        return self.identity(request)

    def permits(self, request: Request, context: Any, permission: str) -> Allowed:
        """Everything: the demo has no permissions."""
        return Allowed("the demo API is open")

    def remember(self, request: Request, userid: Any, **kw: Any) -> list[tuple[str, str]]:
        return []

    def forget(self, request: Request, **kw: Any) -> list[tuple[str, str]]:
        return []
