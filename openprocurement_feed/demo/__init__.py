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
JSON body, an unknown path included. The OpenAPI document of all of it is
served at ``{prefix}/feeds/openapi.json`` (:mod:`.openapi`).

With ``demo.auth_file`` (:mod:`.auth`), writes need a broker's key, and a
change also the object's access token (issued once by the create, as
``"access": {"token": ...}``); without it writes are open, and a warning
says so at start-up (:mod:`.security`).

The ``tenders`` feeds and object views are restricted as upstream's: a
tender posted with ``"config": {"restricted": true}`` is shown in full to
its owner and to brokers accredited ``r`` only; everyone else sees its feed
item as ``id``, ``restricted``, ``dateModified`` and the placeholders of
:data:`TENDER_MASKS`, and its object with those fields masked.

Each write runs in one multi-document transaction; ``demo.write_delay_ms``
keeps it open for a random time after the stamp, so writes commit out of
stamp order as they do in production.
"""

from __future__ import annotations

import logging
from typing import Any

from pyramid.config import Configurator
from pyramid.router import Router

from ..feed.startup import defer
from ..store.restricted import MASK_DATE, MASK_ID, MASK_NUMBER, MASK_STRING, MASK_STRING_EN, RESTRICTED_PERMISSION
from .api import add_error_views, add_resource_routes
from .auth import read_auth_file
from .idempotency import KEYS, ensure_key_expiry
from .openapi import demo_openapi
from .resources import CONTRACTS, PLANS, RESOURCES, TENDERS, Resource
from .security import DemoSecurityPolicy
from .settings import DemoSettings, DemoStats, parse_demo_settings

__all__ = ["RESOURCES", "TENDER_MASKS", "DemoSettings", "Resource", "includeme", "main", "parse_demo_settings"]

log = logging.getLogger(__name__)

#: What a restricted tender shows instead of its own values to everyone but
#: its owner and brokers accredited ``r``: in its feed item (the fields a
#: page asks for) and in its object view (every path).
TENDER_MASKS = {
    "title": MASK_STRING,
    "title_en": MASK_STRING_EN,
    "description": MASK_STRING,
    "description_en": MASK_STRING_EN,
    "procuringEntity": {"name": MASK_STRING, "identifier": {"scheme": "UA-EDR", "id": MASK_ID}},
    "value.amount": MASK_NUMBER,
    "items.description": MASK_STRING,
    "items.description_en": MASK_STRING_EN,
    "items.quantity": MASK_NUMBER,
    "items.deliveryAddress": {"countryName": MASK_STRING},
    "items.deliveryDate.startDate": MASK_DATE,
    "items.deliveryDate.endDate": MASK_DATE,
    "lots.title": MASK_STRING,
    "lots.description": MASK_STRING,
    "lots.value.amount": MASK_NUMBER,
    "documents.title": MASK_STRING,
    "documents.url": MASK_STRING,
    "bids": [],
    "awards.suppliers": [],
    "contracts.suppliers": [],
}


def includeme(config: Configurator) -> None:
    """Add the routes of every resource and their feeds (after the extension)."""
    import os

    demo_settings = parse_demo_settings(config.registry.settings or {}, os.environ)
    users = None if demo_settings.auth_file is None else read_auth_file(demo_settings.auth_file)
    config.include("openprocurement_feed")
    config.registry.demo_settings = demo_settings
    config.registry.demo_users = users
    config.registry.demo_stats = DemoStats()
    registry = config.registry
    # once the store exists (order -10): the keys expire (.idempotency)
    defer(config, lambda: _expire_keys(registry), order=0)
    for resource in RESOURCES:
        add_resource_routes(config, resource)
    add_error_views(config)
    # The resources' operations in the OpenAPI document of the feeds.
    config.add_openapi_paths(demo_openapi)
    # Restricted as upstream's: a tender with "config": {"restricted": true}
    # is masked for everyone but its owner and brokers accredited "r".
    restricted: dict[str, Any] = dict(
        restricted=True,
        owner_fields=("owner",),
        safe_fields=("dateModified",),
        masks=TENDER_MASKS,
        restricted_permission=RESTRICTED_PERMISSION,
    )
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


def _expire_keys(registry: Any) -> None:
    """The keys' TTL index; the API works without it (the keys are then
    kept): a database that refuses it, or is out of reach, is a warning."""
    from pymongo.errors import PyMongoError

    seconds = registry.demo_settings.idempotency_ttl_seconds
    try:
        ensure_key_expiry(registry.feed_store.collection(KEYS), seconds)
    except PyMongoError as error:
        log.warning("Could not create the TTL index of %s (the keys will not expire): %s", KEYS, error)
    else:
        log.info("Idempotency keys expire %d s after their create", seconds)


def main(global_config: dict[str, Any] | None, **settings: Any) -> Router:
    """The WSGI application of the demo API, with its security policy over
    ``demo.auth_file`` (:class:`.security.DemoSecurityPolicy`)."""
    config = Configurator(settings=settings)
    config.include(includeme)
    users = config.registry.demo_users
    config.set_security_policy(DemoSecurityPolicy(users))
    if users is None:
        log.warning(
            "demo.auth_file is not set: anyone may create and change objects of the demo API "
            "(set it to an auth file of brokers' keys to require them)"
        )
    else:
        log.info("Demo API writes need a key of the %d users of %s", len(users), users.source)
    return config.make_wsgi_app()
