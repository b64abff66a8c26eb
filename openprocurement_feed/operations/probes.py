"""Probes for orchestrators: is the worker alive, can it serve pages?

The health view (:mod:`.health`) gives the promise's verdict, and a verdict
of ``at-risk`` or ``violated`` is about the feed (a sequencer behind, a slow
write), not about the worker that answers: a load balancer or a Kubernetes
probe that took it for the worker's health would drop every worker at once.
Two cheaper answers sit beside it, at ``{feed.health_path}/live`` and
``{feed.health_path}/ready``:

* :func:`live_view` — 200 ``{"status": "alive"}``, no database query: the
  process runs and its WSGI threads answer (a liveness probe: restart the
  worker when it fails);
* :func:`ready_view` — one ``ping`` command, sent with the store's read
  preference and bounded by :data:`READY_TIMEOUT_SECONDS`: 200
  ``{"status": "ready"}`` when the database answers it, 503 with the JSON
  error body of an outage when it does not (a readiness probe: send no
  traffic meanwhile). A sequencer behind, or a commit-ordered feed before
  its first checkpoint, does not make a worker unready.

Both are registered with ``NO_PERMISSION_REQUIRED`` (a kubelet sends no
credentials; the answers disclose nothing) and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import logging
from typing import Any

from pyramid.request import Request

from ..feed.errors import RETRY_AFTER_SECONDS, error_body
from ..store.state import feed_state

log = logging.getLogger("openprocurement_feed.probes")  # its name from before the package had subpackages

#: The most a readiness ping waits for the database (seconds): below the
#: one-second default ``timeoutSeconds`` of a Kubernetes probe, so that an
#: unreachable database is answered with a 503, not with a probe timeout.
READY_TIMEOUT_SECONDS = 0.5
LIVE_ROUTE = "openprocurement_feed.health.live"
READY_ROUTE = "openprocurement_feed.health.ready"


def live_view(request: Request) -> dict[str, Any]:
    """``GET {health_path}/live``: 200 ``{"status": "alive"}``, no query."""
    request.response.headers["Cache-Control"] = "no-store"
    return {"status": "alive"}


def ping(db: Any, timeout: float = READY_TIMEOUT_SECONDS) -> str | None:
    """None when ``db`` answers a ``ping`` within ``timeout`` seconds (with
    its own read preference), else the driver's error as text."""
    import pymongo
    from pymongo.errors import PyMongoError

    try:
        with pymongo.timeout(timeout):
            db.command("ping", read_preference=db.read_preference)
    except PyMongoError as error:
        return str(error) or type(error).__name__
    return None


def ready_view(request: Request) -> dict[str, Any]:
    """``GET {health_path}/ready``: 200 while the database answers a ping,
    503 (with ``Retry-After``) while it cannot be reached."""
    request.response.headers["Cache-Control"] = "no-store"
    failure = ping(feed_state(request.registry).require_store().db)
    if failure is None:
        return {"status": "ready"}
    log.warning("Not ready: the database did not answer a ping: %s", failure)
    request.response.status = 503
    request.response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return error_body("body", "database", "The database is unavailable; retry later")


def include_probes(config: Any, health_path: str) -> None:
    """Register the two probe routes under ``health_path`` and their views."""
    from pyramid.security import NO_PERMISSION_REQUIRED

    for route, suffix, view in ((LIVE_ROUTE, "live", live_view), (READY_ROUTE, "ready", ready_view)):
        config.add_route(route, f"{health_path}/{suffix}")
        config.add_view(
            view, route_name=route, renderer="json", request_method="GET", permission=NO_PERMISSION_REQUIRED
        )


__all__ = ["READY_TIMEOUT_SECONDS", "include_probes", "live_view", "ping", "ready_view"]
