"""The cost the extension adds to a feed page.

The same page is fetched three ways on the same embedded server and data:

* ``raw``: the pymongo query the feed sends for that page (captured by
  command monitoring: the same filter, watermark included, sort, projection
  and limit), run with ``list(collection.find(...))``;
* ``testapp``: the whole HTTP path in process (parameters, offset, store
  query, rendering, links, JSON) through ``webtest.TestApp``;
* ``waitress``: the same over a real waitress server on loopback.

The page is what a crawler asks for: the second page, after the first page's
``next_page`` offset (a tie-aware offset, so an inclusive query of
``limit + n`` rows). Medians of interleaved runs are reported with the ratio
to the raw query.

The CPU this process spends per page is measured precisely: ``iterations``
calls in a loop, the loop's total :func:`time.process_time` divided by the
count (one call's ``process_time`` moves in coarse steps), in ``rounds``
rounds that alternate the ways; the median round is reported. Beside the raw
query and the feed page, the *Pyramid floor* is the same page's JSON body
returned as a constant by a bare Pyramid view with Pyramid's stock ``json``
renderer, through WebTest: what any Pyramid view with that body costs. The
*query floor* is the same bare view running the page's raw driver query
before it returns the constant: the raw query and the floor in one request,
whose CPU is more than their sum (the work after the database's answer runs
with the caches the query's own work left, as the page's does). ``--profile`` prints
where the page's CPU goes (cProfile, by own time and by cumulative time).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import requests
from pymongo import MongoClient, monitoring
from pyramid.config import Configurator

from openprocurement_feed.demo import main
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.state import feed_state

from .common import median_ms, seed_tenders, status, table, timed

DB_NAME = "bench_feed_cost"


class FindRecorder(monitoring.CommandListener):
    """Keeps the ``find`` commands started on its client while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.finds: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on and event.command_name == "find":
            self.finds.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@dataclass
class CostRow:
    """Median milliseconds of one page, fetched each way."""

    limit: int
    items: int
    raw_ms: float
    testapp_ms: float
    http_ms: float
    raw_cpu_ms: float
    testapp_cpu_ms: float
    floor_cpu_ms: float = 0.0
    raw_batches_cpu_ms: float = 0.0
    #: the same three, by the requesting thread's CPU clock
    raw_thread_ms: float = 0.0
    testapp_thread_ms: float = 0.0
    floor_thread_ms: float = 0.0
    #: a bare Pyramid view running the raw query, then returning the body
    query_floor_cpu_ms: float = 0.0
    query_floor_thread_ms: float = 0.0

    @property
    def extension_cpu_ms(self) -> float:
        """The page's CPU on top of the raw driver query (``list(cursor)``)."""
        return self.testapp_cpu_ms - self.raw_cpu_ms

    @property
    def over_floor_cpu_ms(self) -> float:
        """The page's CPU above the raw driver query and the Pyramid floor."""
        return self.testapp_cpu_ms - self.raw_cpu_ms - self.floor_cpu_ms

    @property
    def over_query_floor_cpu_ms(self) -> float:
        """The page's CPU above the query floor (the bare view running the
        raw query in its request)."""
        return self.testapp_cpu_ms - self.query_floor_cpu_ms

    @property
    def extension_vs_batches_cpu_ms(self) -> float:
        """The page's CPU on top of the raw query read with ``to_list()``."""
        return self.testapp_cpu_ms - self.raw_batches_cpu_ms

    @property
    def testapp_ratio(self) -> float:
        return self.testapp_ms / self.raw_ms

    @property
    def http_ratio(self) -> float:
        return self.http_ms / self.raw_ms


def capture_page_queries(app: Any, path: str, uri: str) -> list[dict[str, Any]]:
    """The ``find`` commands the feed sends for ``path`` (a monitored store
    stands in for the app's store during one request)."""
    registry = app.app.registry
    recorder = FindRecorder()
    client: MongoClient = MongoClient(uri, event_listeners=[recorder], tz_aware=True)
    original = registry.feed_store
    settings = registry.feed_settings
    feed_state(registry).store = FeedStore(
        client,
        settings.db_name,
        watermark_seconds=settings.watermark_seconds,
        max_limit=settings.max_limit,
    )
    try:
        recorder.on = True
        app.get(path)
    finally:
        feed_state(registry).store = original
        client.close()
    return recorder.finds


def raw_page(client: MongoClient, finds: Sequence[dict[str, Any]], whole_batches: bool = False) -> list[dict[str, Any]]:
    """Run the captured queries with plain pymongo; the rows of the last.

    ``list(cursor)`` by default; ``whole_batches``: ``cursor.to_list()``
    (pymongo >= 4.9), the driver's cheapest way to return the rows, which
    the feed itself uses."""
    rows: list[dict[str, Any]] = []
    for find in finds:
        collection = client[DB_NAME][find["find"]]
        cursor = collection.find(
            find.get("filter", {}),
            find.get("projection"),
            sort=list(find.get("sort", {}).items()) or None,
            limit=find.get("limit", 0),
        )
        rows = cursor.to_list() if whole_batches and hasattr(cursor, "to_list") else list(cursor)
    return rows


def cpu_per_call(call: Any, iterations: int) -> tuple[float, float]:
    """CPU seconds per call: ``iterations`` calls in a loop, the loop's total
    :func:`time.process_time` (every thread of this process) and
    :func:`time.thread_time` (the calling thread only: without the driver's
    monitor threads and the idle HTTP server of the same process) divided by
    the count."""
    process, thread = time.process_time(), time.thread_time()
    for _ in range(iterations):
        call()
    return ((time.process_time() - process) / iterations, (time.thread_time() - thread) / iterations)


def floor_app(body: dict[str, Any], renderer: str, query: Any = None) -> Any:
    """A bare Pyramid app whose one view returns ``body`` (a constant) with
    ``renderer``, under WebTest: the floor of any Pyramid JSON page; with
    ``query``, the view calls it first (the raw driver query of the page)."""
    from webtest import TestApp

    def view(request: Any) -> dict[str, Any]:
        if query is not None:
            query()
        return body

    config = Configurator()
    config.add_route("page", "/page")
    config.add_view(view, route_name="page", renderer=renderer)
    return TestApp(config.make_wsgi_app())


def measure(
    docs: int = 3000,
    repeat: int = 30,
    limits: Sequence[int] = (100, 1000),
    profile: bool = False,
    iterations: int = 20,
    rounds: int = 3,
) -> list[CostRow]:
    """Time each page ``repeat`` times per way, measure the CPU per page over
    ``rounds`` loops of ``iterations`` calls per way; print the profile if
    asked."""
    from webtest import TestApp

    rows = []
    with EmbeddedServer() as database:
        settings = {
            "mongodb.uri": database.uri,
            "mongodb.db_name": DB_NAME,
            "feed.watermark_seconds": "1",
        }
        client: MongoClient = MongoClient(database.uri, tz_aware=True)
        status(f"feed cost: seeding {docs} tenders")
        seed_tenders(client[DB_NAME].tenders, docs)
        app = TestApp(main({}, **settings))
        server = DemoServer(settings, threads=4).start()
        http = requests.Session()
        try:
            for limit in limits:
                first = app.get(f"/api/2.5/tenders?limit={limit}").json
                path = first["next_page"]["path"]
                finds = capture_page_queries(app, path, database.uri)
                items = len(app.get(path).json["data"])
                assert len(raw_page(client, finds)) >= items
                for _ in range(3):  # warm up every way
                    raw_page(client, finds)
                    app.get(path)
                    http.get(server.url + path).raise_for_status()
                raw, inproc, wire = [], [], []
                status(f"feed cost: limit={limit}, {repeat} runs of each way ({path})")
                for _ in range(repeat):
                    raw.append(timed(lambda: raw_page(client, finds)))
                    inproc.append(timed(lambda: app.get(path)))
                    wire.append(timed(lambda: http.get(server.url + path).raise_for_status()))
                floor = floor_app(app.get(path).json, "json")
                floor.get("/page")
                query_floor = floor_app(app.get(path).json, "json", lambda: raw_page(client, finds))
                query_floor.get("/page")
                ways: dict[str, Any] = {
                    "raw": lambda: raw_page(client, finds),
                    "batches": lambda: raw_page(client, finds, True),
                    "page": lambda: app.get(path),
                    "floor": lambda: floor.get("/page"),
                    "query floor": lambda: query_floor.get("/page"),
                }
                cpu: dict[str, list[float]] = {name: [] for name in ways}
                thread: dict[str, list[float]] = {name: [] for name in ways}
                status(f"feed cost: limit={limit}, CPU: {rounds} rounds of {iterations} calls per way")
                for _ in range(rounds):
                    for name, call in ways.items():
                        process_seconds, thread_seconds = cpu_per_call(call, iterations)
                        cpu[name].append(process_seconds)
                        thread[name].append(thread_seconds)
                rows.append(
                    CostRow(
                        limit,
                        items,
                        median_ms(raw),
                        median_ms(inproc),
                        median_ms(wire),
                        median_ms(cpu["raw"]),
                        median_ms(cpu["page"]),
                        median_ms(cpu["floor"]),
                        median_ms(cpu["batches"]),
                        median_ms(thread["raw"]),
                        median_ms(thread["page"]),
                        median_ms(thread["floor"]),
                        median_ms(cpu["query floor"]),
                        median_ms(thread["query floor"]),
                    )
                )
                if profile:
                    print_profile(app, path, iterations, limit)
        finally:
            http.close()
            server.close()
            app.app.registry.feed_store.close()
            client.close()
    return rows


def print_profile(app: Any, path: str, repeat: int, limit: int) -> None:
    """cProfile of ``repeat`` in-process requests, timed by this process's
    CPU clock (the wait for the database is not counted): where the CPU goes."""
    profiler = cProfile.Profile(time.process_time)  # CPU, not the database's wait
    profiler.enable()
    for _ in range(repeat):
        app.get(path)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(30)
    print(f"\nProfile of {repeat} TestApp requests, limit={limit} (sorted by own time, then by cumulative time):")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))


def report(rows: Sequence[CostRow], docs: int, repeat: int, iterations: int = 20, rounds: int = 3) -> str:
    """The figures as tables: wall time with ratios, then client-side CPU."""
    cpu = table(
        [
            "limit",
            "items",
            "raw driver CPU ms",
            "raw to_list CPU ms",
            "page CPU ms",
            "extension CPU ms",
            "ext. vs to_list ms",
            "Pyramid floor CPU ms",
            "page - raw - floor ms",
            "query floor CPU ms",
            "page - query floor ms",
        ],
        [
            [
                row.limit,
                row.items,
                f"{row.raw_cpu_ms:.3f}",
                f"{row.raw_batches_cpu_ms:.3f}",
                f"{row.testapp_cpu_ms:.3f}",
                f"{row.extension_cpu_ms:.3f}",
                f"{row.extension_vs_batches_cpu_ms:.3f}",
                f"{row.floor_cpu_ms:.3f}",
                f"{row.over_floor_cpu_ms:.3f}",
                f"{row.query_floor_cpu_ms:.3f}",
                f"{row.over_query_floor_cpu_ms:.3f}",
            ]
            for row in rows
        ],
    )
    by_thread = table(
        [
            "limit",
            "items",
            "raw driver CPU ms",
            "page CPU ms",
            "extension CPU ms",
            "Pyramid floor CPU ms",
            "page - raw - floor ms",
            "query floor CPU ms",
            "page - query floor ms",
        ],
        [
            [
                row.limit,
                row.items,
                f"{row.raw_thread_ms:.3f}",
                f"{row.testapp_thread_ms:.3f}",
                f"{row.testapp_thread_ms - row.raw_thread_ms:.3f}",
                f"{row.floor_thread_ms:.3f}",
                f"{row.testapp_thread_ms - row.raw_thread_ms - row.floor_thread_ms:.3f}",
                f"{row.query_floor_thread_ms:.3f}",
                f"{row.testapp_thread_ms - row.query_floor_thread_ms:.3f}",
            ]
            for row in rows
        ],
    )
    body = table(
        ["limit", "items", "raw pymongo ms", "TestApp ms", "ratio", "waitress ms", "ratio", "extension ms"],
        [
            [
                row.limit,
                row.items,
                f"{row.raw_ms:.2f}",
                f"{row.testapp_ms:.2f}",
                f"{row.testapp_ratio:.3f}",
                f"{row.http_ms:.2f}",
                f"{row.http_ratio:.3f}",
                f"{row.testapp_ms - row.raw_ms:+.2f}",
            ]
            for row in rows
        ],
    )
    return (
        f"Cost of a feed page ({docs} tenders on the embedded server, second page of an "
        f"ascending crawl, median of {repeat} interleaved runs):\n{body}\n"
        "ratio = that way / raw pymongo query; extension ms = TestApp - raw (parameters, "
        "offset, tie handling, rendering, links, JSON).\n\n"
        f"CPU time of this process per page (the database server's time excluded): "
        f"{iterations} calls per loop, total process CPU / count, median of {rounds} "
        f"interleaved rounds:\n{cpu}\n"
        "raw driver = list(collection.find(...)) of the page's query; raw to_list = the same "
        "read with cursor.to_list() (whole batches, as the feed reads them); "
        "page = the feed page through WebTest; extension CPU ms = page - raw driver query "
        "(what the extension adds on any server: compare it with the raw query time of your "
        "MongoDB for an indexed page); ext. vs to_list = page - raw to_list; "
        "Pyramid floor = the same body returned as a constant "
        "by a bare Pyramid view with the stock json renderer, through WebTest; "
        "page - raw - floor = the page's CPU above the raw driver query and the Pyramid floor; "
        "query floor = the same bare view running the raw driver query in its request before "
        "returning the body (more than raw + floor: the work after the database's answer runs "
        "with the caches the query's work left); page - query floor = the page's CPU above it.\n\n"
        "The same loops by the requesting thread's CPU clock (time.thread_time: without the "
        "driver's monitor threads and the idle HTTP server of this process, so less noisy):\n"
        f"{by_thread}"
    )


def run(docs: int = 3000, repeat: int = 30, profile: bool = False, iterations: int = 20, rounds: int = 3) -> None:
    """Measure and print."""
    rows = measure(docs=docs, repeat=repeat, profile=profile, iterations=iterations, rounds=rounds)
    print(report(rows, docs, repeat, iterations, rounds))
