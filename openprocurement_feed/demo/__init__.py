"""The demo application: a minimal openprocurement-style tender API with a feed.

``main`` is a ``pserve``-compatible app factory (``examples/demo.ini``)::

    POST  {prefix}/tenders        create a tender   → 201
    GET   {prefix}/tenders/{id}   read a tender     → 200 / 404
    PATCH {prefix}/tenders/{id}   change a tender   → 200 / 404 / 409
    GET   {prefix}/tenders        the feed (by the extension), in ``feed.order``
    GET   {prefix}/tenders-{order}  with ``demo.both_orders``: the same tenders
                                  in the other order (``watermark`` or ``commit``)

The ``tenders`` feeds are restricted as upstream's: a tender posted with
``"config": {"restricted": true}`` shows only ``id``, ``restricted`` and
``dateModified`` to everyone but its owner (the ``REMOTE_USER`` that
created it, :mod:`.security`).

Each write runs in one multi-document transaction; ``demo.write_delay_ms``
keeps it open for a random time after the stamp, so writes commit out of
stamp order as they do in production.
"""
from __future__ import annotations

from typing import Any

from pyramid.config import Configurator
from pyramid.router import Router

from .security import RemoteUserSecurityPolicy
from .settings import DemoSettings, DemoStats, parse_demo_settings
from .tenders import FEED_FIELDS, add_tender_routes

__all__ = ["DemoSettings", "includeme", "main", "parse_demo_settings"]


def includeme(config: Configurator) -> None:
    """Add the tender routes and the ``tenders`` feed (after the extension)."""
    import os

    demo_settings = parse_demo_settings(config.registry.settings or {}, os.environ)
    config.include("openprocurement_feed")
    config.registry.demo_settings = demo_settings
    config.registry.demo_stats = DemoStats()
    add_tender_routes(config)
    # Restricted as upstream's: a tender with "config": {"restricted": true}
    # shows only id, restricted and dateModified to everyone but its owner.
    restricted = dict(restricted=True, owner_fields=("owner",), safe_fields=("dateModified",))
    feed = config.add_feed("tenders", allowed_fields=FEED_FIELDS, **restricted)
    if demo_settings.both_orders:
        other = "watermark" if feed.order == "commit" else "commit"
        config.add_feed(
            f"tenders_{other}", path=f"tenders-{other}", collection=feed.collection,
            allowed_fields=FEED_FIELDS, order=other, **restricted,
        )


def main(global_config: dict[str, Any] | None, **settings: Any) -> Router:
    """The WSGI application of the demo API."""
    config = Configurator(settings=settings)
    config.set_security_policy(RemoteUserSecurityPolicy())
    config.include(includeme)
    return config.make_wsgi_app()
