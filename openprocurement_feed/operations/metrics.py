"""Prometheus metrics of the feeds (the optional ``metrics`` extra).

With ``feed.metrics_path`` set, :func:`include_metrics` (called by the
include) registers:

* ``registry.feed_metrics`` — a :class:`FeedMetrics`, the app's metrics (its
  own ``CollectorRegistry``, or the files of ``PROMETHEUS_MULTIPROC_DIR`` in
  multi-process mode); other parts of the app feed it through
  :meth:`FeedMetrics.observe_lag`, :meth:`FeedMetrics.set_checkpoint_age` and
  the scrape hooks;
* the route ``openprocurement_feed.metrics`` at ``feed.metrics_path``, whose
  view answers the Prometheus text format (permission
  ``feed.metrics_permission`` when set);
* the tween :func:`metrics_tween_factory`, just over Pyramid's exception view
  tween, which counts and times every feed request.

Recording a value never fails its caller: an error of prometheus_client
(a multi-process value with no folder, a full disk) is logged, counted in
:attr:`FeedMetrics.errors` and reported by the scrape as
``openprocurement_feed_metrics_errors_total``; the request is answered and
the sequencer follows on.

With ``feed.metrics_path`` empty the include registers none of this (and
``registry.feed_metrics`` is None): metrics cost nothing. ``prometheus_client``
is imported only here, when the metrics are on; without it start-up fails with
a :class:`~pyramid.exceptions.ConfigurationError`.

Multi-process mode (gunicorn-style workers) follows prometheus_client: set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory before the processes start;
every process writes its values to files there and a scrape of any worker
aggregates them. Counters and histograms add up; the checkpoint-age gauge
reports the most recently set value. Values computed at scrape time by the
scrape hooks come from shared state (the database), so every worker reports
them alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from pyramid.config import Configurator
from pyramid.exceptions import ConfigurationError
from pyramid.request import Request
from pyramid.response import Response
from pyramid.tweens import EXCVIEW

from ..feed.views import ITEMS_KEY, feed_route_name
from .metrics_recorder import FeedMetrics

ROUTE_NAME = "openprocurement_feed.metrics"
INSTALL_HINT = "pip install 'openprocurement_feed[metrics]'"


def metrics_tween_factory(handler: Callable[[Request], Response], registry: Any) -> Callable[[Request], Response]:
    """The tween that counts and times feed requests.

    A tween rather than a wrapper of the feed view: placed over the
    exception view tween, it sees the final response of every feed request,
    the cornice 400/404 answers of the validator (which never reach the
    view) and the 503s that exception views render, with the routing and
    rendering time included. It knows a feed request by its matched route
    after the handler returns, so any other request costs one clock read and
    one dictionary miss, and is not counted.
    """
    metrics: FeedMetrics = registry.feed_metrics
    routes = {feed_route_name(name): name for name in registry.feed_definitions}
    clock = time.perf_counter

    def feed_of(request: Request) -> str | None:
        route = request.matched_route
        return routes.get(route.name) if route is not None else None

    def tween(request: Request) -> Response:
        started = clock()
        try:
            response = handler(request)
        except Exception:  # no exception view answered it: the server says 500
            feed = feed_of(request)
            if feed is not None:
                metrics.observe_page(feed, 500, clock() - started)
            raise
        feed = feed_of(request)
        if feed is not None:
            status = response.status_int
            items = request.environ.get(ITEMS_KEY, 0) if status == 200 else 0
            metrics.observe_page(feed, status, clock() - started, items)
        return response

    return tween


def metrics_view(request: Request) -> Response:
    """The Prometheus text exposition of the app's metrics."""
    from prometheus_client import CONTENT_TYPE_LATEST

    response = Response(body=request.registry.feed_metrics.generate())
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    response.cache_control = "no-store"
    return response


def require_prometheus_client(setting: str = "feed.metrics_path") -> None:
    """Fail with a ConfigurationError naming ``setting`` and the extra to
    install when prometheus_client cannot be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as error:
        raise ConfigurationError(
            f"The setting {setting!r} turns the Prometheus metrics on, but "
            f"prometheus_client is not installed ({error}): {INSTALL_HINT}"
        ) from None


def include_metrics(config: Configurator, path: str, permission: str | None = None) -> FeedMetrics:
    """Register ``registry.feed_metrics``, the metrics route and view at
    ``path`` (with ``permission``) and the feed tween; return the metrics."""
    require_prometheus_client()
    metrics = FeedMetrics.from_environ(os.environ)
    config.registry.feed_metrics = metrics
    config.add_route(ROUTE_NAME, path)
    config.add_view(metrics_view, route_name=ROUTE_NAME, request_method="GET", permission=permission)
    config.add_tween("openprocurement_feed.operations.metrics.metrics_tween_factory", over=EXCVIEW)
    return metrics
