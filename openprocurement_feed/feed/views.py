"""The feed views: query parameters → ``store.feed_page()`` → page and links.

:func:`add_feed` is the ``config.add_feed`` directive. Each feed is a cornice
service ``GET {route_prefix}/{path}``; the view never builds a database
filter beyond the scope equality, and the store never sees HTTP.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cornice import Service
from pymongo.errors import PyMongoError
from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationConflictError, ConfigurationError
from pyramid.request import Request

from ..longpoll.notifier import OVER_CAP
from ..store.orders import (
    ORDERS,
    PUBLIC_MODIFIED,
    WATERMARK,
    FeedOrder,
    order_kind,
)
from ..store.restricted import ItemPolicy, ItemView
from ..store.state import feed_state
from .pages import PLAIN_QUERY_RE as PLAIN_QUERY_RE
from .pages import page_link, page_offsets, render_item, render_items
from .pages import query_string as query_string
from .params import FeedParams, ParamError, parse_params
from .placement import place_feed_route
from .reconcile import add_reconcile
from .renderers import RENDERER
from .startup import defer

DISCRIMINATOR = "openprocurement_feed.feed"
#: The discriminator prefix of a feed's path: two feeds on one path conflict.
PATH_DISCRIMINATOR = "openprocurement_feed.feed-path"
#: The ``request.environ`` key where the feed view leaves the number of items
#: of the page it rendered (read by the metrics tween, :mod:`.metrics`).
ITEMS_KEY = "openprocurement_feed.items"
#: How many projections (one per ``opt_fields`` asked for) a feed view keeps.
PROJECTIONS_KEPT = 256
log = logging.getLogger("openprocurement_feed.views")  # its name from before the package had subpackages


def feed_route_name(name: str) -> str:
    """The route (and cornice service) name of feed ``name``."""
    return f"openprocurement_feed.{name}"


def prefixed(config_prefix: str | None, path: str) -> str:
    """``path`` under a ``Configurator``'s ``route_prefix``, joined the way
    ``config.add_route`` joins them (with the leading ``/`` the route matches
    with; an included configuration keeps its prefix without it)."""
    outer = (config_prefix or "").strip("/")
    if not outer:
        return path
    return "/" + outer + "/" + path.lstrip("/")


@dataclass(frozen=True)
class FeedDefinition:
    """One registered feed.

    ``scope`` names a route parameter whose value filters the feed on the
    document field ``scope_field`` (the same name unless given).
    """

    name: str
    path: str
    collection: str
    default_fields: tuple[str, ...] = ("dateModified",)
    allowed_fields: tuple[str, ...] = ()
    scope: str | None = None
    scope_field: str | None = None
    permission: str | None = None
    order: str = WATERMARK
    #: how items are shown, and to whom (:mod:`.restricted`)
    policy: ItemPolicy = field(default_factory=ItemPolicy)
    #: the URL path the feed is served at: ``feed.route_prefix`` and
    #: ``path`` under the ``Configurator``'s own ``route_prefix``
    route_path: str = ""

    def __post_init__(self) -> None:
        allowed = set(self.allowed_fields) | set(self.default_fields) | {PUBLIC_MODIFIED}
        object.__setattr__(self, "allowed_fields", tuple(sorted(allowed)))

    @property
    def filter_field(self) -> str | None:
        """The document field the scope filters on."""
        return self.scope_field or self.scope

    @property
    def kind(self) -> type[FeedOrder]:
        """The class of the feed's order: what differs between the orders
        is asked of it (:class:`~openprocurement_feed.store.orders.FeedOrder`)."""
        return order_kind(self.order)


def render_page(
    request: Request,
    feed: FeedDefinition,
    params: FeedParams,
    rows: Sequence[dict[str, Any]],
    order: FeedOrder | None = None,
) -> dict[str, Any]:
    """The JSON body of a feed page (SPEC A, "Response 200")."""
    fields = tuple(feed.default_fields) + params.opt_fields
    next_offset, prev_offset = page_offsets(rows, params.raw_offset, order)
    path, host_url = request.path, request.host_url
    if feed.policy.active:
        data = feed.policy.render_rows(request, rows, fields, render_item, render_items)
    else:
        data = render_items(rows, fields)
    body: dict[str, Any] = {
        "data": data,
        "next_page": page_link(request, params.link_params(next_offset), path, host_url),
    }
    if params.descending or params.raw_offset:
        body["prev_page"] = page_link(request, params.link_params(prev_offset, flip=True), path, host_url)
    return body


def _last_values(request: Request) -> dict[str, str]:
    """Each query parameter's last value (repeated parameters: the last wins)."""
    return {key: request.GET.getall(key)[-1] for key in request.GET}


def feed_validator(feed: FeedDefinition) -> Callable[..., None]:
    """A cornice validator that parses the feed's query string into
    ``request.validated["feed_params"]``, or adds a precise error."""

    def validate(request: Request, **kwargs: Any) -> None:
        settings = feed_state(request.registry).settings
        try:
            request.validated["feed_params"] = parse_params(
                _last_values(request),
                default_limit=settings.default_limit,
                max_limit=settings.max_limit,
                allowed_fields=feed.allowed_fields,
                default_fields=feed.default_fields,
                default_timeout=settings.longpoll_default_seconds,
                max_timeout=settings.longpoll_max_seconds,
            )
        except ParamError as error:
            request.errors.add("querystring", error.name, error.description)
            request.errors.status = error.status

    return validate


def feed_view(feed: FeedDefinition) -> Callable[[Request], dict[str, Any]]:
    """The ``GET`` view of one feed."""

    # the projection of each opt_fields asked for, computed once (bounded:
    # opt_fields are sorted subsets of the allowed fields)
    projections: dict[tuple[str, ...], tuple[str, ...]] = {}

    def projection(opt_fields: tuple[str, ...]) -> tuple[str, ...]:
        found = projections.get(opt_fields)
        if found is None:
            # only what the page shows, and what the item policy reads
            found = feed.policy.projection(feed.default_fields + opt_fields)
            if len(projections) < PROJECTIONS_KEPT:
                projections[opt_fields] = found
        return found

    def view(request: Request) -> dict[str, Any]:
        params: FeedParams = request.validated["feed_params"]
        filters = None
        if feed.scope:
            filters = {feed.filter_field: request.matchdict[feed.scope]}
        store = request.feed_store
        fields = projection(params.opt_fields)

        def read() -> list[dict[str, Any]]:
            return store.feed_page(  # type: ignore[no-any-return]
                store.feed_collection(feed.collection),
                fields,
                offset=params.offset,
                mode=params.mode,
                descending=params.descending,
                limit=params.limit,
                filters=filters,
                order=feed.order,
            )

        started = time.monotonic()
        rows = read()
        if params.longpoll and params.timeout > 0 and not rows:
            rows = long_poll(request, feed, params, read, rows, started)
        body = render_page(request, feed, params, rows, store.feed_order(feed.order))
        request.environ[ITEMS_KEY] = len(body["data"])
        return body

    return view


def long_poll(
    request: Request,
    feed: FeedDefinition,
    params: FeedParams,
    read: Callable[[], list[dict[str, Any]]],
    rows: list[dict[str, Any]],
    started: float,
) -> list[dict[str, Any]]:
    """Wait (SPEC E) for the rows after an empty page, through the process's
    notifier; over the cap (or without a notifier) answer at once with
    ``Retry-After: 1``. A page of only hidden rows (they move the offset
    on) is not empty: it is answered at once, like one with items."""
    notifier = feed_state(request.registry).longpoll
    if notifier is None:
        request.response.headers["Retry-After"] = "1"
        return rows
    # waitress tells when the client went away (with channel_request_lookahead)
    disconnected = request.environ.get("waitress.client_disconnected")
    found, outcome = notifier.wait(
        feed.name,
        feed.collection,
        feed.order,
        params.offset,
        params.timeout,
        read,
        started,
        disconnected=disconnected if callable(disconnected) else None,
    )
    if outcome == OVER_CAP:
        request.response.headers["Retry-After"] = "1"
    return found or rows


def add_feed(
    config: Configurator,
    name: str,
    path: str | None = None,
    collection: str | None = None,
    default_fields: Sequence[str] = ("dateModified",),
    allowed_fields: Sequence[str] = (),
    scope: str | None = None,
    scope_field: str | None = None,
    permission: str | None = None,
    order: str | None = None,
    restricted: bool = False,
    owner_fields: Sequence[str] = ("owner",),
    safe_fields: Sequence[str] = ("dateModified",),
    masks: Mapping[str, Any] | None = None,
    item_view: ItemView | None = None,
    replaces: str | None = None,
    restricted_permission: str | None = None,
    restricted_field: str | tuple[str, ...] = "config.restricted",
) -> FeedDefinition:
    """Register the feed ``name`` as ``GET {feed.route_prefix}/{path}``.

    :param path: the path under the route prefix (default: ``name``); with a
        ``scope``, it must contain ``{scope}``, e.g.
        ``frameworks/{frameworkID}/submissions``.
    :param collection: the feed's collection name (default: the
        ``mongodb.<name>_collection`` setting, else ``name``).
    :param default_fields: fields every item carries besides ``id``.
    :param allowed_fields: extra fields clients may ask for with
        ``opt_fields`` (``public_modified`` is always allowed).
    :param scope: a route parameter that filters the feed.
    :param permission: the Pyramid permission the view requires.
    :param order: ``"watermark"`` or ``"commit"`` (default: ``feed.order``);
        a commit-ordered feed needs a sequencer (``openprocurement-feed
        sequence`` or ``feed.sequencer = thread``).
    :param restricted: honour ``config.restricted`` on the documents: a
        restricted item shows only ``id``, ``"restricted": true`` and the
        ``safe_fields`` to everyone but its owner (:mod:`.restricted`).
    :param owner_fields: the document fields holding the owner's user id
        (compared with ``request.authenticated_userid``).
    :param safe_fields: the fields a restricted item shows to everyone.
    :param masks: field → the value a restricted item shows instead.
    :param item_view: ``item_view(request, row, fields) -> dict``: the
        host's rendering of the items shown in full.
    :param restricted_field: the document field (or a tuple of fields) whose
        true value marks a restricted object (default ``config.restricted``;
        ``("config.restricted", "is_masked")`` for upstream's tenders listing,
        which also masks rows by its older ``is_masked`` flag).
    :param restricted_permission: a Pyramid permission whose holders (by
        the host's security policy) see restricted items in full, as their
        owners do (``"view_restricted"`` for brokers accredited ``r``).
    :param replaces: the name of the host's route or cornice service (for a
        cornice resource, its name: the service of its ``collection_path``)
        whose ``GET`` the feed takes over: the feed's route is put in that
        route's place and carries ``request_method="GET"``, the other
        methods stay with the host (:mod:`.placement`).

    Once every route exists, a route added before the feed that takes every
    ``GET`` of its path (unless ``replaces`` names it) is a configuration
    error naming that route.

    Registering the same ``name`` twice, or two feeds on the same path, is a
    configuration conflict reported at the callers' lines.
    """
    state = feed_state(config.registry)
    settings = state.settings
    path = (path or name).strip("/")
    if scope and "{" + scope + "}" not in path:
        raise ConfigurationError(f"add_feed({name!r}): path {path!r} lacks the scope {{{scope}}}")
    order = order or settings.order
    if order not in ORDERS:
        raise ConfigurationError(f"add_feed({name!r}): invalid order {order!r}; expected one of {', '.join(ORDERS)}")
    listed = {name.split(".")[0] for name in (*default_fields, *allowed_fields)}
    own = sorted(listed & order_kind(order).reserved_fields)
    if own:
        raise ConfigurationError(
            f"add_feed({name!r}): {', '.join(own)} cannot be listed by a commit-ordered feed: "
            "positions entries carry fields of that name of their own (_id, committed_ts, committed_seq, rev, deleted)"
        )
    try:
        policy = ItemPolicy.build(
            restricted, owner_fields, safe_fields, masks, item_view, restricted_permission, restricted_field
        )
    except ConfigurationError as error:
        raise ConfigurationError(f"add_feed({name!r}): {error}") from None
    full_path = f"{settings.route_prefix}/{path}"
    feed = FeedDefinition(
        name=name,
        path=path,
        collection=collection or settings.collection_name(name),
        default_fields=tuple(default_fields),
        allowed_fields=tuple(allowed_fields),
        scope=scope,
        scope_field=scope_field,
        permission=permission,
        order=order,
        policy=policy,
        route_path=prefixed(config.route_prefix, full_path),
    )
    if replaces is not None and (not isinstance(replaces, str) or not replaces):
        raise ConfigurationError(f"add_feed({name!r}): replaces={replaces!r}; expected the name of a route")
    service = Service(
        name=feed_route_name(name),
        path=full_path,
        description=f"The {name} feed",
        # the route predicate: the host's route in the feed's place keeps
        # every other method
        **({"request_method": "GET"} if replaces else {}),
    )
    service.add_view(
        "GET",
        feed_view(feed),
        validators=(feed_validator(feed),),
        permission=permission,
        renderer=RENDERER,
    )
    registry = config.registry
    claim(config, (DISCRIMINATOR, name))
    claim(config, (PATH_DISCRIMINATOR, route_shape(feed.route_path)))
    services = registry.cornice_services
    service_key = (config.route_prefix or "") + full_path
    host_service = services.get(service_key)
    config.add_cornice_service(service)
    if replaces and host_service is not None:
        # cornice finds a route's service by its path first: the host's
        # service keeps its path (its CORS and fallback for the other methods)
        services[service_key] = host_service
    state.definitions[name] = feed
    add_reconcile(config, feed, settings.route_prefix)
    # after the routes are connected (order 0), before the feed starts
    defer(config, lambda: place_feed_route(registry, name, feed_route_name(name), replaces), order=1)

    def start() -> None:
        store = state.store
        check = getattr(store, "check_collection", None)
        if check is not None:
            check(feed.collection)
        create_indexes(store, feed)
        log.info(
            "Feed %r: GET %s, collection %r, %s order, W = %s s%s",
            name,
            feed.route_path,
            feed.collection,
            feed.order,
            settings.watermark_seconds,
            ", restricted" if policy.restricted else "",
        )

    defer(config, start, order=5)
    return feed


def claim(config: Configurator, discriminator: tuple[str, str]) -> None:
    """Claim a feed name or path for the current ``add_feed`` call.

    Pyramid lets an outer configuration override what an include
    registered; a feed registered twice is a mistake wherever the two calls
    are (``feed.resources`` and ``add_feed``, two includes), so a second
    claim raises a :class:`ConfigurationConflictError` at once, naming the
    feed and pointing at both callers' lines.
    """
    claims = feed_state(config.registry).claims
    info = config.action_info
    if discriminator in claims:
        raise ConfigurationConflictError({discriminator: [claims[discriminator], info]})
    claims[discriminator] = info


def route_shape(path: str) -> str:
    """``path`` with every ``{param}`` blanked: two paths of one shape match
    the same URLs."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def create_indexes(store: Any, feed: FeedDefinition) -> None:
    """Create the feed's indexes. The feed works without them, only slower:
    a database refusal (or a database out of reach) is a warning; any other
    error is a programming error and stops start-up."""
    scope_fields = [feed.filter_field] if feed.filter_field else []
    try:
        feed.kind.ensure_indexes(store, feed.collection, scope_fields)
    except PyMongoError as error:
        log.warning("Could not create the indexes of feed %r: %s", feed.name, error)
