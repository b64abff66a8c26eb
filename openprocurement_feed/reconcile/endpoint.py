"""Where a feed's reconcile endpoint lives and which version it speaks
(SPEC G.2): the one definition the server's view and the client share."""

from __future__ import annotations

__all__ = ["PROTOCOL", "endpoint_path"]

#: The version of the endpoint's protocol (the answer's ``"protocol"``):
#: Negentropy V1 over ``application/octet-stream``.
PROTOCOL = 1


def endpoint_path(prefix: str, name: str) -> str:
    """The path of feed ``name``'s reconcile endpoint below ``prefix``
    (the feed's own path without its last segment, e.g. ``/api/2.5``)."""
    return f"{prefix}/feeds/{name}/reconcile"
