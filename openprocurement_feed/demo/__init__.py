"""The demo application: a minimal openprocurement-style API with feeds.

``main`` is a ``pserve``-compatible app factory (``examples/demo.ini``). For
each resource — ``tenders``, ``plans`` and ``contracts``
(:mod:`.resources`)::

    POST  {prefix}/{resource}        create an object  → 201
    GET   {prefix}/{resource}/{id}   read an object    → 200 / 404
    PATCH {prefix}/{resource}/{id}   change an object  → 200 / 404 / 409
    GET   {prefix}/{resource}        its feed (by the extension), in ``feed.order``

and, with ``demo.both_orders``, ``GET {prefix}/tenders-{order}``: the same
tenders in the other order (``watermark`` or ``commit``). Every error is a
JSON body, an unknown path included.

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

from .api import add_error_views, add_resource_routes
from .resources import CONTRACTS, PLANS, RESOURCES, TENDERS, Resource
from .security import RemoteUserSecurityPolicy
from .settings import DemoSettings, DemoStats, parse_demo_settings

__all__ = ["RESOURCES", "DemoSettings", "Resource", "includeme", "main", "parse_demo_settings"]


def includeme(config: Configurator) -> None:
    """Add the routes of every resource and their feeds (after the extension)."""
    import os

    demo_settings = parse_demo_settings(config.registry.settings or {}, os.environ)
    config.include("openprocurement_feed")
    config.registry.demo_settings = demo_settings
    config.registry.demo_stats = DemoStats()
    for resource in RESOURCES:
        add_resource_routes(config, resource)
    add_error_views(config)
    # Restricted as upstream's: a tender with "config": {"restricted": true}
    # shows only id, restricted and dateModified to everyone but its owner.
    restricted = dict(restricted=True, owner_fields=("owner",), safe_fields=("dateModified",))
    feed = config.add_feed("tenders", allowed_fields=TENDERS.feed_fields, **restricted)
    config.add_feed("plans", allowed_fields=PLANS.feed_fields)
    config.add_feed("contracts", allowed_fields=CONTRACTS.feed_fields)
    if demo_settings.both_orders:
        other = "watermark" if feed.order == "commit" else "commit"
        config.add_feed(
            f"tenders_{other}",
            path=f"tenders-{other}",
            collection=feed.collection,
            allowed_fields=TENDERS.feed_fields,
            order=other,
            **restricted,
        )


def main(global_config: dict[str, Any] | None, **settings: Any) -> Router:
    """The WSGI application of the demo API."""
    config = Configurator(settings=settings)
    config.set_security_policy(RemoteUserSecurityPolicy())
    config.include(includeme)
    return config.make_wsgi_app()
