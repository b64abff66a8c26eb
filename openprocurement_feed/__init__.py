"""openprocurement_feed: a paginated feed that never loses a document.

``config.include("openprocurement_feed")`` registers:

* :func:`feed_state` ``(registry)`` — the package's state on the registry
  (:class:`~.store.state.FeedState`: the settings, the store, the feeds, the
  follower, the waiters, the metrics); the names below are its fields, also
  readable as the registry aliases ``registry.feed_<field>``;
* ``registry.feed_settings`` — the parsed :class:`~.settings.FeedSettings`;
* ``request.feed_now`` — the request's time, which ``save_data`` stamps
  ``dateModified`` with;
* ``registry.feed_store`` / ``request.feed_store`` — when the configuration
  is committed (under ``Configurator(autocommit=True)``: when the
  application is created, :mod:`.startup`), a :class:`~.database.FeedStore` (the embedded database is
  started first when ``mongodb.uri = embedded://``; its handle is
  ``registry.feed_embedded``), or the host's own store given to the
  ``config.set_feed_store(store, collection=...)`` directive
  (:mod:`.stores`: then no client of ours and no embedded server);
* the ``config.add_feed(...)`` directive, and one feed per name listed in
  ``feed.resources``; one log line per feed at start-up;
* the URL-bytes tween (:mod:`.tweens`): a path or query string that is not
  UTF-8 gets a JSON 400 (404 for an undecodable ``offset``), never a 500;
* JSON error views: 409 for a write conflict, 503 while the database is
  unreachable, when a feed query runs past ``feed.max_time_ms``, on any
  other database error or when a commit-ordered feed has no checkpoint
  yet; for a host's writes (:mod:`.save_errors`), 503 ``not_saved`` when
  the database did not write and 504 ``outcome_unknown`` when it did not
  confirm a write that may have been applied;
* the health view at ``feed.health_path`` (:mod:`.health`): per feed, the
  start-to-commit lag its follower saw, the checkpoint and a verdict;
* the probes for orchestrators at ``{feed.health_path}/live`` (no query) and
  ``{feed.health_path}/ready`` (503 only while the database cannot be
  reached), without a permission (:mod:`.probes`);
* with ``feed.openapi`` on (the default), the OpenAPI 3.1 document of the
  feeds at ``{route_prefix}/feeds/openapi.json`` and the
  ``config.add_openapi_paths(hook)`` directive through which a host adds its
  own operations (:mod:`.openapi`);
* with ``feed.metrics_path`` set, ``registry.feed_metrics``, the Prometheus
  metrics view at that path and the tween that counts feed pages
  (:mod:`.metrics`, the ``metrics`` extra); nothing when it is empty;
* ``registry.feed_longpoll`` — the :class:`~.longpoll.LongPollNotifier` of
  ``feed=longpoll`` requests (SPEC E), whose thread starts with the first
  waiter;
* with ``feed.sequencer = thread``, ``registry.feed_sequencer``: a
  :class:`~.sequencer.Sequencer` following the collections of every
  commit-ordered feed and observing those of the other feeds, started when
  the configuration is committed (``observe``: observers only).
"""

from __future__ import annotations

# First, before Pyramid is imported: in the command-line process only, it
# filters the import-time warning of a dependency (see .quiet).
from . import quiet as _quiet  # noqa: F401

# isort: split
import logging
import os
import traceback
from datetime import datetime, timezone
from typing import Any

from pyramid.config import Configurator
from pyramid.request import Request
from pyramid.tweens import INGRESS

from .commit.plan import feed_plan
from .feed.errors import add_error_views
from .feed.openapi import add_openapi_paths, include_openapi
from .feed.renderers import RENDERER, FeedJSONRenderer
from .feed.startup import defer
from .feed.tweens import TWEEN_NAME
from .feed.views import FeedDefinition, add_feed
from .operations.health import VerdictLog, checkpoint_ages, feed_figures, health_view, lag_windows
from .operations.probes import include_probes
from .save_errors import NotSaved, SaveError, SaveOutcomeUnknown, save_error
from .settings import FeedSettings, load_timezone, parse_settings
from .store.backend import FeedBackend, HostStore, apply_numbers, set_feed_store
from .store.database import ConflictError, FeedStore, FeedStoreMixin, MissingRevision
from .store.offset import (
    InvalidOffset,
    Offset,
    compose_offset,
    compose_position,
    parse_offset,
)
from .store.state import FeedState, assigned_store, attach_feed_state, feed_state, find_feed_state, role_store

log = logging.getLogger(__name__)

__all__ = [
    "ConflictError",
    "FeedDefinition",
    "FeedSettings",
    "FeedState",
    "FeedStore",
    "FeedStoreMixin",
    "HostStore",
    "InvalidOffset",
    "MissingRevision",
    "NotSaved",
    "Offset",
    "SaveError",
    "SaveOutcomeUnknown",
    "commit_collections",
    "commit_listings",
    "compose_offset",
    "compose_position",
    "feed_state",
    "includeme",
    "parse_offset",
    "parse_settings",
    "reconcile_collections",
    "save_error",
    "set_feed_store",
    "shutdown",
]


def _feed_store(request: Request) -> FeedBackend | None:
    """``request.feed_store``: the registry's store."""
    store: FeedBackend | None = feed_state(request.registry).store
    return store


def _feed_now(request: Request) -> datetime:
    """The request's time: what ``save_data`` stamps ``dateModified`` with."""
    return datetime.now(timezone.utc)


def _start_embedded(settings: FeedSettings) -> Any:
    from .embedded.server import EmbeddedServer

    return EmbeddedServer(storage_path=settings.embedded_path, extra_args=settings.embedded_args).start()


def _create_store(registry: Any) -> None:
    """Create the ready-made store (and the embedded server it needs),
    unless the host gave its own to ``config.set_feed_store``."""
    state = feed_state(registry)
    if state.host_store is not None:
        return
    given = assigned_store(registry, state)
    if given is not None:
        if callable(getattr(given, "feed_collection", None)):
            state.store = given
        else:
            # The host assigned its own store to registry.feed_store: serve
            # through it as set_feed_store would (or say what it lacks).
            state.store = HostStore(given)
            apply_numbers(given, state.settings)
        return
    settings = state.settings
    uri = settings.uri
    if settings.embedded:
        state.embedded = _start_embedded(settings)
        uri = state.embedded.uri
    state.store = FeedStore.from_settings(settings, uri=uri)


def commit_collections(registry: Any) -> dict[str, tuple[str, ...]]:
    """The collections of the registry's commit-ordered feeds, each with the
    scope fields its feeds filter on: what a sequencer must follow
    (:func:`~.commit.plan.feed_plan`)."""
    return dict(feed_plan(find_feed_state(registry)).collections)


def commit_listings(registry: Any) -> dict[str, tuple[str, ...]]:
    """The listing of each commit-ordered feed collection (:mod:`.listing`):
    every field any of its commit-ordered feeds may show (default and
    allowed fields) and the fields their restricted rule reads, which the
    sequencer copies into the entries (:func:`~.commit.plan.feed_plan`)."""
    return dict(feed_plan(find_feed_state(registry)).listings)


def reconcile_collections(registry: Any) -> dict[str, tuple[str, ...]]:
    """The collections whose reconciliation aggregates the followers keep
    (every feed's, with the scope fields of its feeds), or none with
    ``feed.reconcile_aggregates = false`` (:func:`~.commit.plan.feed_plan`)."""
    return dict(feed_plan(find_feed_state(registry)).aggregates)


def watermark_collections(registry: Any) -> list[str]:
    """The collections of the registry's watermark-ordered feeds (followed
    observe-only, to measure the lag the watermark bets on)."""
    return list(feed_plan(find_feed_state(registry)).observed)


def _start_sequencer(registry: Any) -> None:
    """Start the in-process follower: ``thread`` sequences the commit-ordered
    feeds and observes the others; ``observe`` only observes."""
    from .commit.sequencer import Sequencer

    state = feed_state(registry)
    settings = state.settings
    plan = feed_plan(state)
    if settings.sequencer != "thread":
        plan = plan.observing_only()
    if plan.empty or state.sequencer is not None:
        return
    store = role_store(registry, settings.sequencer_app_name)
    state.sequencer = Sequencer.from_plan(
        store.db, plan, lag_window_seconds=settings.lag_window_seconds, metrics=state.metrics
    ).start()


def _create_longpoll(registry: Any) -> None:
    from .longpoll.notifier import include_longpoll

    state = feed_state(registry)
    if state.longpoll is None:
        state.longpoll = include_longpoll(state, role_store(registry, state.settings.longpoll_app_name))


def shutdown(registry: Any) -> None:
    """Stop what the include started: the long-poll waiters (answered at
    once), the in-process sequencer, the connections of the store and of
    each role's client and the embedded database (each if present)."""
    state = find_feed_state(registry)
    if state is None:
        return
    if state.longpoll is not None:
        state.longpoll.stop()
    if state.sequencer is not None:
        state.sequencer.stop()
        state.sequencer = None
    store = state.store
    for other in state.role_stores.values():
        if other is not store:
            other.close()
    state.role_stores = {}
    if store is not None:
        store.close()
    if state.embedded is not None:
        state.embedded.stop()


def caller_info(note: str) -> tuple[str, int, str, str]:
    """The ``(file, line, function, source)`` of the first caller outside
    Pyramid and this package (the host's ``config.include`` line), with
    ``note`` appended to the source: where a conflict report points."""
    import pyramid

    skipped = (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.abspath(pyramid.__file__)))
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not os.path.abspath(frame.filename).startswith(skipped):
            return (frame.filename, frame.lineno or 0, frame.name, f"{frame.line}  # {note}")
    return ("<settings>", 0, "includeme", note)


def warn_doubled_prefix(config_prefix: str | None, feed_prefix: str) -> None:
    """Warn when ``feed.route_prefix`` repeats the ``Configurator``'s own
    ``route_prefix`` (the feeds would answer at ``/api/2.5/api/2.5/...``)."""
    outer = "/" + (config_prefix or "").strip("/")
    if feed_prefix and outer == feed_prefix:
        log.warning(
            "feed.route_prefix %r repeats the Configurator's route_prefix %r: the feeds are served at %s/...; "
            "set 'feed.route_prefix =' (empty) to serve them at %s/...",
            feed_prefix,
            outer,
            outer + feed_prefix,
            outer,
        )


def includeme(config: Configurator) -> None:
    """Parse the settings, create the store and add the ``add_feed`` directive.

    Including twice is harmless: the second include reuses the first store.
    """
    registry = config.registry
    config.include("cornice")
    config.add_directive("add_feed", add_feed)
    config.add_directive("set_feed_store", set_feed_store, action_wrap=False)
    config.add_directive("add_openapi_paths", add_openapi_paths)
    if find_feed_state(registry) is not None:
        return
    settings = parse_settings(registry.settings or {}, os.environ)
    state = attach_feed_state(registry, FeedState(settings=settings))
    config.add_renderer(RENDERER, FeedJSONRenderer(zone=load_timezone(settings.timezone)))
    warn_doubled_prefix(config.route_prefix, settings.route_prefix)
    config.add_tween(TWEEN_NAME, under=INGRESS)
    # Prometheus metrics (.metrics): with feed.metrics_path set,
    # the state's metrics, the metrics view and the feed tween; before the
    # database starts, so a missing prometheus_client fails start-up cleanly.
    if settings.metrics_path:
        from .operations.metrics import include_metrics

        metrics = state.metrics = include_metrics(config, settings.metrics_path, settings.metrics_permission)
        metrics.add_scrape_hook(lambda: checkpoint_ages(registry))
        metrics.add_lag_window_hook(lambda: lag_windows(registry))
        metrics.add_health_hook(lambda: feed_figures(registry))
    # Deferred until the configuration is complete (also under an
    # autocommitting Configurator, .startup), so that the host may still call
    # config.set_feed_store: no client, no embedded server before then.
    defer(config, lambda: _create_store(registry), order=-10)
    defer(config, lambda: _create_longpoll(registry), order=-5)
    config.add_request_method(_feed_store, "feed_store", reify=True)
    config.add_request_method(_feed_now, "feed_now", reify=True)
    add_error_views(config)
    state.verdicts = VerdictLog()
    config.add_route("openprocurement_feed.health", settings.health_path)
    config.add_view(
        health_view,
        route_name="openprocurement_feed.health",
        renderer="json",
        request_method="GET",
        permission=settings.health_permission,
    )
    # Liveness and readiness probes for orchestrators, beside the verdict.
    include_probes(config, settings.health_path)
    # The OpenAPI document of the feeds (and of what hosts add to it).
    include_openapi(config, settings)
    if settings.sequencer in ("thread", "observe"):
        # Late, so that the feeds added after the include are known.
        defer(config, lambda: _start_sequencer(registry), order=10, discriminator=("openprocurement_feed.sequencer",))
    if settings.resources:
        info = caller_info(f"feed.resources = {' '.join(settings.resources)}")
        for name in settings.resources:
            config.add_feed(name, _info=info)
