"""openprocurement_feed: a paginated feed that never loses a document.

``config.include("openprocurement_feed")`` registers:

* ``registry.feed_settings`` — the parsed :class:`~.settings.FeedSettings`;
* ``registry.feed_store`` / ``request.feed_store`` — a
  :class:`~.database.FeedStore` (the embedded database is started first when
  ``mongodb.uri = embedded://``; its handle is ``registry.feed_embedded``);
* the ``config.add_feed(...)`` directive, and one feed per name listed in
  ``feed.resources``;
* JSON error views: 409 for a write conflict, 503 while the database is
  unreachable or when a feed query runs past ``feed.max_time_ms``.
"""
from __future__ import annotations

import os
from typing import Any

from pyramid.config import Configurator
from pyramid.request import Request

from .database import ConflictError, FeedStore, FeedStoreMixin
from .errors import conflict_view, database_unavailable_view, query_timeout_view
from .offset import InvalidOffset, Offset, compose_offset, parse_offset
from .settings import FeedSettings, parse_settings
from .views import FeedDefinition, add_feed

__all__ = [
    "ConflictError",
    "FeedDefinition",
    "FeedSettings",
    "FeedStore",
    "FeedStoreMixin",
    "InvalidOffset",
    "Offset",
    "compose_offset",
    "includeme",
    "parse_offset",
    "parse_settings",
]


def _feed_store(request: Request) -> FeedStore:
    return request.registry.feed_store


def _start_embedded(settings: FeedSettings) -> Any:
    from .embedded import EmbeddedServer

    return EmbeddedServer(storage_path=settings.embedded_path).start()


def includeme(config: Configurator) -> None:
    """Parse the settings, create the store and add the ``add_feed`` directive.

    Including twice is harmless: the second include reuses the first store.
    """
    from pymongo.errors import ConnectionFailure, ExecutionTimeout

    registry = config.registry
    config.include("cornice")
    config.add_directive("add_feed", add_feed, action_wrap=False)
    if getattr(registry, "feed_store", None) is not None:
        return
    settings = parse_settings(registry.settings or {}, os.environ)
    registry.feed_settings = settings
    uri = settings.uri
    registry.feed_embedded = None
    if settings.embedded:
        registry.feed_embedded = _start_embedded(settings)
        uri = registry.feed_embedded.uri
    registry.feed_store = FeedStore.from_settings(settings, uri=uri)
    config.add_request_method(_feed_store, "feed_store", reify=True)
    config.add_view(conflict_view, context=ConflictError, renderer="json")
    config.add_view(database_unavailable_view, context=ConnectionFailure, renderer="json")
    config.add_view(query_timeout_view, context=ExecutionTimeout, renderer="json")
    for name in settings.resources:
        config.add_feed(name)
