"""The reconcile endpoint of every feed (SPEC G.2).

``GET {route_prefix}/feeds/{feed}/reconcile`` answers the feed's horizon as
JSON; ``POST ...?until=<µs>`` answers a Negentropy V1 message with the
server's message (``application/octet-stream``); both with the feed's query
parameters (``mode``; a scoped feed's scope as a parameter of its name) and
the feed's permission. The view parses, asks the store for the records
(:mod:`openprocurement_feed.store.reconcile`) and renders bytes: it builds
no database filter.

Hostile input never reaches the database: the body's size is checked
before it is read (``Content-Length``, and the read itself is bounded), the
message is decoded and checked whole, ``until`` parsed, before the one read
that tells the feed's horizon. Every refusal is a JSON error that names the
problem (400; 501 for a feed whose ids have no records; 503 with
``Retry-After`` while the aggregates catch up).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from cornice import Service
from pyramid.config import Configurator
from pyramid.httpexceptions import HTTPForbidden
from pyramid.request import Request
from pyramid.response import Response

from ..reconcile.endpoint import PROTOCOL, endpoint_path
from ..reconcile.errors import ProtocolError, UnsupportedVersion
from ..reconcile.items import MAX_TIMESTAMP
from ..reconcile.negentropy import Negentropy
from ..reconcile.wire import MODE_ID_LIST, decode_message
from ..store.reconcile import (
    FEED,
    AggregateStorage,
    Horizon,
    NotReconcilable,
    ReconcileUnavailable,
    UntilAboveHorizon,
    open_reconcile,
)
from ..store.state import feed_state
from .errors import error_body

log = logging.getLogger("openprocurement_feed.reconcile")

OCTET_STREAM = "application/octet-stream"
DIGITS_RE = re.compile(r"[0-9]{1,20}", re.ASCII)


def reconcile_route_name(name: str) -> str:
    """The route (and cornice service) name of feed ``name``'s reconcile endpoint."""
    return f"openprocurement_feed.{name}.reconcile"


def reconcile_path(route_prefix: str, name: str) -> str:
    """Where feed ``name``'s reconcile endpoint is served."""
    return endpoint_path(route_prefix, name)


def error_response(status: int, name: str, description: str, location: str = "querystring", **headers: str) -> Response:
    """A JSON error response in the feed's error shape."""
    response = Response(json_body=error_body(location, name, description), status=status)
    response.headers.update(headers)
    return response


class RequestError(Exception):
    """A request the endpoint refuses (its response)."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _param(request: Request, name: str) -> str | None:
    values = request.GET.getall(name)
    return str(values[-1]) if values else None


def parse_until(raw: str | None) -> int:
    """``until``: microseconds, a non-negative integer below 2**64 - 1."""
    if raw is None:
        raise RequestError(error_response(400, "until", "until is required: take it from GET"))
    if not DIGITS_RE.fullmatch(raw) or int(raw) >= MAX_TIMESTAMP:
        raise RequestError(
            error_response(400, "until", f"Invalid until {raw[:40]!r}: expected microseconds, an integer below 2**64-1")
        )
    return int(raw)


def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused before it is read whole when over ``limit``."""
    length = request.content_length
    if length is not None and length > limit:
        raise RequestError(
            error_response(400, "body", f"message of {length} bytes over the frame size limit of {limit} bytes", "body")
        )
    body = request.body_file.read(limit + 1)
    if len(body) > limit:
        raise RequestError(error_response(400, "body", f"message over the frame size limit of {limit} bytes", "body"))
    return bytes(body)


def scope_of(request: Request, feed: Any) -> str | None:
    """A scoped feed's scope value (its parameter, required)."""
    if not feed.scope:
        return None
    value = _param(request, feed.scope)
    if not value:
        raise RequestError(error_response(400, feed.scope, f"{feed.scope} is required: the feed's scope"))
    return value


def check_restricted(request: Request, feed: Any) -> None:
    """501 when this client is not shown the ``dateModified`` of restricted objects."""
    policy = feed.policy
    if not policy.restricted:
        return
    if "dateModified" in policy.safe_fields and "dateModified" not in policy.masks:
        return
    if policy.sees_everything(request):
        return
    raise RequestError(
        error_response(
            501,
            "feed",
            "this feed masks the dateModified of restricted objects for this client: they have no reconcile record",
            "url",
        )
    )


def source_of(request: Request, feed: Any) -> Any:
    """The store's view of the feed's records for this request."""
    store = request.feed_store
    settings = request.registry.feed_settings
    return open_reconcile(
        store,
        store.feed_collection(feed.collection),
        feed.order,
        _param(request, "mode") or "",
        feed.filter_field if feed.scope else None,
        scope_of(request, feed),
        aggregates=settings.reconcile_aggregates,
        feed_limit=settings.reconcile_feed_limit,
    )


def differences(query: bytes, answer: bytes) -> int:
    """The ids on one side only in the id lists of a round: the client's
    lists and the server's answer to them cover the same ranges (both
    messages well formed: the query was checked whole before it was
    answered)."""
    theirs = {ident for rng in decode_message(query) if rng.mode == MODE_ID_LIST for ident in rng.ids}
    ours = {ident for rng in decode_message(answer) if rng.mode == MODE_ID_LIST for ident in rng.ids}
    return len(theirs ^ ours)


def _observe(request: Request, feed: Any, what: str, received: int = 0, sent: int = 0, found: int = 0) -> None:
    metrics = feed_state(request.registry).metrics
    observe = getattr(metrics, "observe_reconcile", None)
    if observe is not None:
        observe(feed.name, what, received, sent, found)


def reconcile_get(feed: Any) -> Callable[[Request], Response]:
    """The ``GET`` view: the horizon, as JSON."""

    def view(request: Request) -> Response:
        try:
            check_restricted(request, feed)
            source = source_of(request, feed)
            horizon = source.horizon()
            with source.storage(horizon.until) as storage:
                count = storage.size()
                if not isinstance(storage, AggregateStorage):
                    horizon = Horizon(horizon.until, FEED)
        except RequestError as error:
            return error.response
        except NotReconcilable as error:
            return error_response(501, "feed", str(error), "url")
        except ReconcileUnavailable as error:
            return error_response(503, "feed", str(error), "url", **{"Retry-After": str(error.retry_after)})
        _observe(request, feed, "session")
        settings = request.registry.feed_settings
        return Response(
            json_body={
                "until": horizon.until,
                "protocol": PROTOCOL,
                "frame_size_limit": settings.reconcile_frame_size_limit,
                "records": count,
                "source": horizon.source,
            }
        )

    return view


def reconcile_post(feed: Any) -> Callable[[Request], Response]:
    """The ``POST`` view: the answer to one Negentropy message."""

    def view(request: Request) -> Response:
        settings = request.registry.feed_settings
        limit = settings.reconcile_frame_size_limit
        try:
            check_restricted(request, feed)
            until = parse_until(_param(request, "until"))
            body = read_body(request, limit)
            try:
                decode_message(body)
            except UnsupportedVersion as error:
                _observe(request, feed, "round", len(body), len(error.answer))
                return Response(body=error.answer, content_type=OCTET_STREAM)
            except ProtocolError as error:
                return error_response(400, "body", f"malformed reconcile message: {error}", "body")
            source = source_of(request, feed)
            with source.storage(until) as storage:
                answer = Negentropy(storage, frame_size_limit=limit).reconcile(body)
        except RequestError as error:
            return error.response
        except UntilAboveHorizon as error:
            return error_response(400, "until", str(error))
        except NotReconcilable as error:
            return error_response(501, "feed", str(error), "url")
        except ReconcileUnavailable as error:
            return error_response(503, "feed", str(error), "url", **{"Retry-After": str(error.retry_after)})
        _observe(request, feed, "round", len(body), len(answer), differences(body, answer))
        return Response(body=answer, content_type=OCTET_STREAM)

    return view


def path_name(path: str) -> str:
    """The last segment of a feed's path (``/tenders-watermark`` →
    ``tenders-watermark``): the name a client finds the feed's reconcile
    endpoint by (:func:`~openprocurement_feed.client.reconcile.reconcile_url`);
    empty where it is a route parameter."""
    segment = path.rstrip("/").rpartition("/")[2]
    return "" if "{" in segment else segment


def by_path(segment: str, feed: Any, make: Callable[[Any], Callable[[Request], Response]]) -> Callable[..., Any]:
    """A view of the endpoint at ``feeds/{segment}/reconcile`` for ``feed``,
    whose path ends in ``segment``: it serves the feed *named* ``segment``
    where there is one (whichever of the two was registered first holds the
    URL), with that feed's permission."""

    def view(request: Request) -> Response:
        target = feed_state(request.registry).definitions.get(segment, feed)
        if target.permission and not request.has_permission(target.permission):
            raise HTTPForbidden()
        return make(target)(request)

    return view


def add_reconcile(config: Configurator, feed: Any, route_prefix: str) -> None:
    """Register feed ``feed``'s reconcile endpoint (``GET`` and ``POST``),
    at ``feeds/{name}/reconcile``, and at ``feeds/{segment}/reconcile``
    too where the feed's path ends in another word (a client derives the
    endpoint from the feed's URL: ``/tenders-watermark`` →
    ``/feeds/tenders-watermark/reconcile``)."""
    service = Service(
        name=reconcile_route_name(feed.name),
        path=reconcile_path(route_prefix, feed.name),
        description=f"Reconcile a copy of the {feed.name} feed (Negentropy V1)",
    )
    service.add_view("GET", reconcile_get(feed), permission=feed.permission)
    service.add_view("POST", reconcile_post(feed), permission=feed.permission)
    config.add_cornice_service(service)
    segment = path_name(feed.path)
    if segment and segment != feed.name:
        alias = Service(
            name=reconcile_route_name(feed.name) + ".by_path",
            path=reconcile_path(route_prefix, segment),
            description=f"Reconcile a copy of the {feed.name} feed (Negentropy V1), by its path",
        )
        alias.add_view("GET", by_path(segment, feed, reconcile_get))
        alias.add_view("POST", by_path(segment, feed, reconcile_post))
        config.add_cornice_service(alias)
