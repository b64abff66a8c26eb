"""The feed page's CPU against a host's own listing view, in the same app.

An upstream-shaped host (``Configurator(autocommit=True,
route_prefix="/api/2.5")``, a cornice resource ``Tenders`` whose
``collection_get`` is the host's own listing, ``--routes`` filler routes
before it and as many after, as upstream's ~1,700) is built twice on the
same embedded server and data:

* ``host``: the host's listing serves ``GET /api/2.5/tenders``: the query
  upstream's listing sends (``public_modified`` after the offset, the
  watermark ``$$NOW - W`` by the database clock, sorted, limited), its
  ``pm.n.h`` offsets and its links built with ``route_path``;
* ``feed``: the same app with ``config.add_feed("tenders",
  replaces="Tenders")``: the feed in the host route's place;
* ``appended``: the same app with the feed on another path
  (``/tenders-feed``) added after every route, as a plain ``add_feed``
  puts it: each request matches every route before it.

The second page of each (after the first page's ``next_page``) at limits 100
and 1000 is fetched in loops through WebTest, interleaved, and the calling
thread's CPU per page (:func:`time.thread_time`) is the median of the
rounds; the table gives the ratio feed / host. ``python -m benchmarks host``.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from typing import Any

from cornice.resource import add_resource
from pymongo import ASCENDING, DESCENDING, MongoClient
from pyramid.config import Configurator
from pyramid.request import Request

from openprocurement_feed import FeedStoreMixin
from openprocurement_feed.embedded.server import EmbeddedServer

from .common import seed_tenders, status, table
from .feed_cost import cpu_per_call

PREFIX = "/api/2.5"
DB_NAME = "bench_host_listing"
LIMITS = (100, 1000)
WATERMARK = 1.0


class HostStore(FeedStoreMixin):
    """The host's one store: one client, one database."""

    def __init__(self, uri: str) -> None:
        self.connection: MongoClient[Any] = MongoClient(uri, tz_aware=True)
        self.database = self.connection[DB_NAME]

    def close(self) -> None:
        self.connection.close()


def offset_of(rows: Sequence[dict[str, Any]], value: float) -> str:
    """A ``pm.n.h`` offset: the value, how many rows share it, their ids' md5."""
    ids = sorted(row["_id"] for row in rows if row["public_modified"] == value)
    digest = hashlib.md5("".join(ids).encode(), usedforsecurity=False).hexdigest()
    return f"{value}.{len(ids)}.{digest}"


def host_listing(request: Request) -> dict[str, Any]:
    """A host's own listing view, as upstream's behaves: forward or
    backward from a ``pm.n.h`` offset, the watermark by the database clock."""
    query = request.params
    limit = min(int(query.get("limit") or 100), 1000)
    descending = bool(query.get("descending"))
    value, skip, digest = None, 0, ""
    if query.get("offset"):
        head, count, digest = query["offset"].rsplit(".", 2)
        value, skip = float(head), int(count)
    filters: dict[str, Any] = {"is_public": True, "is_test": False}
    if value is not None:
        operator = ("$lt" if descending else "$gt") + ("e" if skip else "")
        filters["public_modified"] = {operator: value}
    if not descending or value is None:
        now = {"$divide": [{"$toLong": "$$NOW"}, 1000]}
        filters["$expr"] = {"$lte": ["$public_modified", {"$subtract": [now, WATERMARK]}]}
    collection = request.registry.mongodb.database.tenders
    rows = list(
        collection.find(
            filters,
            {"dateModified": 1, "public_modified": 1},
            limit=limit + skip,
            sort=[("public_modified", DESCENDING if descending else ASCENDING)],
        )
    )
    if rows and skip and value is not None and offset_of(rows, value).endswith(f".{skip}.{digest}"):
        rows = [row for row in rows if row["public_modified"] != value]
    params: dict[str, Any] = {}
    if query.get("limit"):
        params["limit"] = limit
    if descending:
        params["descending"] = 1
    if rows:
        params["offset"] = offset_of(rows, rows[-1]["public_modified"])
    elif query.get("offset"):
        params["offset"] = query["offset"]
    data = [{"id": row["_id"], "dateModified": row["dateModified"]} for row in rows]
    path = request.route_path("collection_Tenders", _query=params)
    return {
        "data": data,
        "next_page": {"offset": params.get("offset", ""), "path": path, "uri": request.host_url + path},
    }


class Tenders:
    """Upstream's ``Tenders`` resource: the listing on ``GET /tenders``."""

    def __init__(self, request: Request, context: Any = None) -> None:
        self.request = request

    def collection_get(self) -> dict[str, Any]:
        return host_listing(self.request)


add_resource(Tenders, name="Tenders", collection_path="/tenders", path="/tenders/{id}")


def filler(request: Request) -> dict[str, Any]:
    """A route that is never asked for (upstream's other resources)."""
    return {}


def host_app(uri: str, routes: int, feed: str = "") -> Any:
    """The host app; ``feed="replaces"``: the feed takes over the listing's
    GET; ``feed="appended"``: the feed on its own path after every route."""
    from webtest import TestApp

    settings = {"mongodb.uri": uri, "mongodb.db_name": DB_NAME, "feed.route_prefix": ""}
    settings["feed.watermark_seconds"] = str(WATERMARK)
    config = Configurator(settings=settings, autocommit=True, route_prefix=PREFIX)
    config.include("openprocurement_feed")
    config.include("cornice")
    store = HostStore(uri)
    config.registry.mongodb = store
    config.set_feed_store(store)
    for number in range(routes):
        config.add_route(f"filler_{number}", f"/filler{number}/{{id}}/items")
        config.add_view(filler, route_name=f"filler_{number}", renderer="json")
    config.add_cornice_resource(Tenders)
    for number in range(routes, 2 * routes):
        config.add_route(f"filler_{number}", f"/filler{number}/{{id}}/items")
        config.add_view(filler, route_name=f"filler_{number}", renderer="json")
    if feed == "replaces":
        config.add_feed("tenders", replaces="Tenders")
    elif feed == "appended":
        config.add_feed("tenders", path="tenders-feed", collection="tenders")
    return TestApp(config.make_wsgi_app())


def measure(docs: int, routes: int, iterations: int = 10, rounds: int = 5) -> list[tuple[Any, ...]]:
    """Per limit: items per page, then the host's, the feed's and the
    appended feed's CPU ms per page."""
    rows = []
    with EmbeddedServer() as database:
        client: MongoClient[Any] = MongoClient(database.uri, tz_aware=True)
        status(f"host listing: seeding {docs} tenders")
        seed_tenders(client[DB_NAME].tenders, docs)
        apps = {
            "host": host_app(database.uri, routes),
            "feed": host_app(database.uri, routes, "replaces"),
            "appended": host_app(database.uri, routes, "appended"),
        }
        try:
            for limit in LIMITS:
                paths = {}
                for name, app in apps.items():
                    feed_path = "tenders-feed" if name == "appended" else "tenders"
                    first = app.get(f"{PREFIX}/{feed_path}?limit={limit}").json
                    paths[name] = first["next_page"]["path"]
                items = {name: len(apps[name].get(paths[name]).json["data"]) for name in apps}
                if len(set(items.values())) != 1:
                    raise RuntimeError(f"the pages differ at limit {limit}: {items}")
                cpu: dict[str, list[float]] = {name: [] for name in apps}
                status(f"host listing: limit={limit}, {rounds} rounds of {iterations} pages each")
                for _ in range(rounds):
                    for name, app in apps.items():
                        path = paths[name]
                        cpu[name].append(cpu_per_call(lambda app=app, path=path: app.get(path), iterations)[1] * 1000)
                rows.append((limit, items["feed"], *(statistics.median(cpu[name]) for name in apps)))
        finally:
            for app in apps.values():
                app.app.registry.mongodb.close()
            client.drop_database(DB_NAME)
            client.close()
    return rows


def run(docs: int = 3000, routes: int = 850) -> None:
    """Measure and print the table."""
    rows = measure(docs, routes)
    body = table(
        ["limit", "items", "host listing CPU ms", "feed CPU ms", "feed / host", "appended feed / host"],
        [
            [limit, items, f"{host:.2f}", f"{feed:.2f}", f"{feed / host:.2f}", f"{appended / host:.2f}"]
            for limit, items, host, feed, appended in rows
        ],
    )
    print(
        f"A host's own listing view against the feed in its place ({docs} tenders, {2 * routes} other routes, "
        "the second page, in process through WebTest; the calling thread's CPU per page, median of the rounds):\n"
        + body,
        flush=True,
    )
