"""Where a feed's route sits among the host's routes.

Pyramid tries the routes in the order they were added and stops at the
first whose pattern and predicates match: a route added before a feed that
matches the feed's path for ``GET`` takes its requests (Pyramid does not go
on to the next route when the first has no view for the method: it answers
404 or, for a cornice service, 405). Two cases, checked once every route of
the configuration exists (:func:`place_feed_route`, an action ordered after
the routes are connected):

* ``add_feed(..., replaces="Tenders")``: the feed takes over the ``GET`` of
  the host's route or cornice service ``Tenders`` (for a cornice resource,
  the service of its ``collection_path``, ``collection_Tenders``). The feed's
  route carries ``request_method="GET"`` and is moved to the place of that
  route in the routes mapper, just before it: ``GET`` (and ``HEAD``) match
  the feed first, every other method goes on to the host's route. The place
  matters for the cost of every feed request: a route appended after
  upstream's ~1,700 routes pays ~1,700 pattern matches first.
* without ``replaces``: the feed's route stays where it was added, and a
  route before it that matches the feed's path for ``GET`` is a
  configuration error naming that route.

A route "matches for GET" when its pattern matches the feed's path and its
predicates cannot refuse a ``GET``: none, or only a ``request_method`` that
allows ``GET``. A route with other predicates (``header``,
``request_param``, ``accept``, custom predicates such as upstream's
``procurementMethodType``) matches only some requests; it is not reported.
"""

from __future__ import annotations

import re
from typing import Any

from pyramid.exceptions import ConfigurationError
from pyramid.interfaces import IRoutesMapper
from pyramid.predicates import RequestMethodPredicate

#: A route parameter in a pattern: ``{name}`` or ``{name:regex}``.
PARAM_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[^{}]*(?:\{[^{}]*\}[^{}]*)*)?\}")
#: The value given to each route parameter of the feed's sample path.
SAMPLE_VALUE = "0"


def sample_path(route: Any) -> str:
    """A concrete path the route ``route`` matches (each parameter ``0``)."""
    path = PARAM_RE.sub(SAMPLE_VALUE, route.pattern)
    return path if path.startswith("/") else "/" + path


def matches_every_get(route: Any) -> bool:
    """True when nothing but the path decides whether ``route`` takes a
    ``GET``: no predicates, or only a ``request_method`` allowing it."""
    for predicate in route.predicates:
        if not isinstance(predicate, RequestMethodPredicate) or "GET" not in predicate.val:
            return False
    return True


def shadowing_routes(routelist: list[Any], route: Any) -> list[Any]:
    """The routes before ``route`` that take every ``GET`` of its path."""
    path = sample_path(route)
    before = routelist[: routelist.index(route)]
    return [other for other in before if other.match(path) is not None and matches_every_get(other)]


def shown(route: Any) -> str:
    """The route's pattern with the leading ``/`` it matches with (an
    included configuration's prefix comes without it)."""
    pattern: str = route.pattern
    return "/" + pattern.lstrip("/")


def describe(route: Any) -> str:
    """``'name' (pattern '/x')``."""
    return f"{route.name!r} (pattern {shown(route)!r})"


def replaced_route(mapper: Any, feed_name: str, route: Any, replaces: str) -> Any:
    """The host's route that ``replaces`` names: the route (or cornice
    service) of that name, or a cornice resource's collection service
    ``collection_<name>``, whichever matches the feed's path."""
    path = sample_path(route)
    named = [mapper.get_route(name) for name in (replaces, "collection_" + replaces)]
    named = [found for found in named if found is not None and found is not route]
    for found in named:
        if found.match(path) is not None:
            return found
    where = f"add_feed({feed_name!r}, replaces={replaces!r})"
    if named:
        patterns = " or ".join(describe(found) for found in named)
        raise ConfigurationError(f"{where}: the route {patterns} does not serve the feed's path {shown(route)!r}.")
    on_path = [other.name for other in mapper.get_routes() if other is not route and other.match(path) is not None]
    hint = f"; the routes on {shown(route)!r}: {', '.join(map(repr, on_path))}" if on_path else ""
    raise ConfigurationError(f"{where}: no route or cornice service is named {replaces!r}{hint}.")


def place_feed_route(registry: Any, feed_name: str, route_name: str, replaces: str | None) -> None:
    """Put the feed's route where it belongs, or say what shadows it.

    With ``replaces``, move it just before the host's route it names. Then
    a route before it that takes every ``GET`` of its path is a
    :class:`~pyramid.exceptions.ConfigurationError` naming that route.
    """
    mapper = registry.queryUtility(IRoutesMapper)
    route = mapper.get_route(route_name)
    routelist = mapper.routelist
    if replaces:
        target = replaced_route(mapper, feed_name, route, replaces)
        routelist.remove(route)
        routelist.insert(routelist.index(target), route)
    shadows = shadowing_routes(routelist, route)
    if not shadows:
        return
    names = ", ".join(describe(other) for other in shadows)
    if replaces:
        raise ConfigurationError(
            f"add_feed({feed_name!r}, replaces={replaces!r}): GET {shown(route)} is also served by the "
            f"route {names}, before {replaces!r}; the feed would never answer."
        )
    raise ConfigurationError(
        f"add_feed({feed_name!r}): GET {shown(route)} is served by the route {names}, added before the "
        f"feed; pass replaces={shadows[0].name!r} to serve the feed in its place (its other methods "
        "stay with it)."
    )
