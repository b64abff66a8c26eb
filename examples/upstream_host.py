"""An existing openprocurement-style API that adopts the feed with its own store.

Shaped like upstream's: an autocommitting ``Configurator`` with
``route_prefix="/api/2.5"``, one ``MongodbStore`` (one ``MongoClient``) kept
as ``registry.mongodb``, whose ``list``/``save_data`` take the pymongo
collection, per-resource collection classes on top, and a cornice resource
``Tenders`` serving ``POST`` (create) and ``GET`` (its own listing) on
``/tenders``. Adopting the feed takes a few lines: mix
:class:`~openprocurement_feed.FeedStoreMixin` into the store class, include
the package, hand the store to ``config.set_feed_store``, set
``feed.route_prefix`` empty (the ``Configurator`` has the prefix), and let
each feed take over its listing's ``GET``:
``config.add_feed("tenders", ..., replaces="Tenders")``.

Resources:

* ``POST/PATCH {prefix}/tenders[/{tender_id}]`` (the host's ``Tenders``
  resource) and the ``tenders`` feed, which serves its ``GET`` in its place,
  restricted (a tender posted with ``"config": {"restricted": true}`` shows
  only ``id``, ``restricted``, ``dateModified`` and its masked ``title`` to
  everyone but its owner, the user who posted it; its object view, by the
  same rule, ``mask_object``);
* ``POST {prefix}/frameworks/{framework_id}/submissions``, the unscoped
  ``submissions`` feed and the feed scoped by framework (both restricted
  the same way).

Users log in with HTTP Basic authentication, from the ``auth.users``
setting (``name:password`` pairs). Run it on a throwaway embedded database::

    python examples/upstream_host.py   # serves http://127.0.0.1:6544
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from cornice.resource import add_resource
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern
from pyramid.authentication import extract_http_basic_credentials
from pyramid.config import Configurator
from pyramid.request import Request
from pyramid.router import Router
from pyramid.security import Allowed

from openprocurement_feed import FeedStoreMixin
from openprocurement_feed.store.restricted import MASK_STRING, mask_object

PREFIX = "/api/2.5"
TENDER_FIELDS = ("status", "title", "tenderID", "owner", "config")
#: What a restricted tender shows instead, in the feed and the object view.
TENDER_MASKS = {"title": MASK_STRING}


class MongodbStore(FeedStoreMixin):
    """The application's one store: one client, one database, and the
    collection classes of its resources (``store.tenders``)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = settings
        self.collections: dict[str, BaseCollection] = {}
        self.connection: MongoClient = MongoClient(
            os.environ.get("MONGODB_URI", settings["mongodb.uri"]), tz_aware=True
        )
        self.database = self.connection.get_database(
            os.environ.get("DB_NAME", settings["mongodb.db_name"]),
            read_preference=ReadPreference.PRIMARY,
            write_concern=WriteConcern(w="majority"),
            read_concern=ReadConcern("local"),
        )

    def __getattr__(self, name: str) -> Any:
        collections = self.__dict__.get("collections", {})
        if name in collections:
            return collections[name]
        raise AttributeError(f"MongodbStore has no attribute {name}")

    def add_collection(self, name: str, cls: type[BaseCollection]) -> None:
        self.collections[name] = cls(self, self.settings)

    def collection_named(self, name: str) -> Collection:
        """The pymongo collection called ``name`` (for ``set_feed_store``)."""
        for resource in self.collections.values():
            if resource.collection.name == name:
                return resource.collection
        raise LookupError(f"no collection class keeps the collection {name!r}")

    @staticmethod
    def get(collection: Collection, uid: str) -> dict[str, Any] | None:
        return collection.find_one({"_id": uid}, projection={"is_public": False, "is_test": False})

    def close(self) -> None:
        self.connection.close()


class BaseCollection:
    """One resource's collection; its name from ``mongodb.<object>_collection``."""

    object_name = "dummy"

    def __init__(self, store: MongodbStore, settings: Mapping[str, Any]) -> None:
        self.store = store
        name = settings.get(f"mongodb.{self.object_name}_collection", self.object_name)
        self.collection: Collection = store.database.get_collection(name)

    def get(self, uid: str) -> dict[str, Any] | None:
        return self.store.get(self.collection, uid)

    def save(self, data: dict[str, Any], insert: bool = False) -> dict[str, Any]:
        return self.store.save_data(self.collection, data, insert=insert)


class TenderCollection(BaseCollection):
    object_name = "tenders"


class SubmissionCollection(BaseCollection):
    object_name = "submissions"


class BasicAuthPolicy:
    """HTTP Basic users from ``auth.users`` (``name:password`` pairs);
    every view is open, the identity only decides what a feed shows."""

    def __init__(self, users: str) -> None:
        self.users = dict(pair.split(":", 1) for pair in users.split() if ":" in pair)

    def identity(self, request: Request) -> str | None:
        credentials = extract_http_basic_credentials(request)
        if credentials and self.users.get(credentials.username) == credentials.password:
            return str(credentials.username)
        return None

    def authenticated_userid(self, request: Request) -> str | None:
        return self.identity(request)

    def permits(self, request: Request, context: Any, permission: str) -> Allowed:
        return Allowed("open")

    def remember(self, request: Request, userid: str, **kw: Any) -> list[Any]:
        return []

    def forget(self, request: Request, **kw: Any) -> list[Any]:
        return []


def public(doc: Mapping[str, Any]) -> dict[str, Any]:
    data = {key: value for key, value in doc.items() if not key.startswith(("_", "public_"))}
    data["id"] = doc["_id"]
    return data


def create_tender(request: Request) -> dict[str, Any]:
    body = request.json_body["data"]
    tender = {"_id": uuid.uuid4().hex, "status": "active", **body, "owner": request.authenticated_userid}
    saved = request.registry.mongodb.tenders.save(tender, insert=True)
    request.response.status = 201
    return {"data": public(saved)}


def get_tender(request: Request) -> dict[str, Any]:
    doc = request.registry.mongodb.tenders.get(request.matchdict["tender_id"])
    if doc is None:
        request.response.status = 404
        return {"status": "error"}
    # The tenders feed's restricted rule, for the object view too.
    return {"data": public(mask_object(request, "tenders", doc))}


def patch_tender(request: Request) -> dict[str, Any]:
    tenders = request.registry.mongodb.tenders
    doc = tenders.collection.find_one({"_id": request.matchdict["tender_id"]})
    if doc is None:
        request.response.status = 404
        return {"status": "error"}
    doc.update(request.json_body["data"])
    return {"data": public(tenders.save(doc))}


class TendersResource:
    """Upstream's ``Tenders`` resource: ``POST /tenders`` creates, ``GET
    /tenders`` is the host's own listing, ``PATCH /tenders/{tender_id}``
    updates. The ``tenders`` feed takes over the listing's ``GET``
    (``replaces="Tenders"``); the other methods stay here."""

    def __init__(self, request: Request, context: Any = None) -> None:
        self.request = request

    def collection_post(self) -> dict[str, Any]:
        return create_tender(self.request)

    def collection_get(self) -> dict[str, Any]:
        # the listing the feed replaces (never reached once it does)
        return {"data": [{"id": doc["_id"]} for doc in self.request.registry.mongodb.tenders.collection.find()]}

    def get(self) -> dict[str, Any]:
        return get_tender(self.request)

    def patch(self) -> dict[str, Any]:
        return patch_tender(self.request)


add_resource(TendersResource, name="Tenders", collection_path="/tenders", path="/tenders/{tender_id}")


def create_submission(request: Request) -> dict[str, Any]:
    submission = {
        "_id": uuid.uuid4().hex,
        "status": "active",
        **request.json_body["data"],
        "frameworkID": request.matchdict["framework_id"],
        "owner": request.authenticated_userid,
    }
    saved = request.registry.mongodb.submissions.save(submission, insert=True)
    request.response.status = 201
    return {"data": public(saved)}


def main(global_config: dict[str, Any] | None, **settings: Any) -> Router:
    """The WSGI application."""
    # The Configurator has the prefix: the feeds get none of their own (the
    # ini's "feed.route_prefix =").
    settings = {"feed.route_prefix": "", **settings}
    config = Configurator(settings=settings, autocommit=True, route_prefix=PREFIX)
    config.set_security_policy(BasicAuthPolicy(settings.get("auth.users", "")))
    config.include("openprocurement_feed")

    # The application's one store, as before; the mixin gives it the feed.
    store = MongodbStore(settings)
    store.add_collection("tenders", TenderCollection)
    store.add_collection("submissions", SubmissionCollection)
    config.registry.mongodb = store
    config.set_feed_store(store, collection=lambda store, name: store.collection_named(name))

    # The host's own resources and routes, as before.
    config.add_cornice_resource(TendersResource)
    config.add_route("submissions.create", "/frameworks/{framework_id}/submissions", request_method="POST")
    config.add_view(create_submission, route_name="submissions.create", renderer="json")

    # The feeds: "tenders" takes over the GET of the Tenders resource, in its
    # place among the routes; POST and PATCH stay with the resource.
    config.add_feed(
        "tenders",
        allowed_fields=TENDER_FIELDS,
        restricted=True,
        owner_fields=("owner",),
        safe_fields=("dateModified",),
        replaces="Tenders",
        masks=TENDER_MASKS,
    )
    config.add_feed("submissions", allowed_fields=("status", "frameworkID", "owner"), restricted=True)
    config.add_feed(
        "framework_submissions",
        path="frameworks/{framework_id}/submissions",
        collection="submissions",
        scope="framework_id",
        scope_field="frameworkID",
        allowed_fields=("status", "owner"),
        restricted=True,
    )
    return config.make_wsgi_app()


if __name__ == "__main__":  # pragma: no cover - a manual run
    from wsgiref.simple_server import make_server

    from openprocurement_feed.embedded.server import EmbeddedServer

    with EmbeddedServer() as server:
        app = main(
            {},
            **{
                "mongodb.uri": server.uri,
                "mongodb.db_name": "upstream_host",
                "auth.users": "broker:secret",
                **dict(a.split("=", 1) for a in sys.argv[1:]),
            },
        )
        print(f"Serving on http://127.0.0.1:6544{PREFIX}/tenders", flush=True)
        make_server("127.0.0.1", 6544, app).serve_forever()
