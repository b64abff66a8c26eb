"""A page's cost: the second page of an ascending crawl of the same
tenders in commit order and in watermark order, wall time and this
process's CPU time, and the round-trip time of each of the page's queries."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymongo import MongoClient, monitoring

from openprocurement_feed import commit_listings, shutdown
from openprocurement_feed.commit.sequencer import Sequencer
from openprocurement_feed.demo import main
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.orders import COMMITTED_TS
from openprocurement_feed.store.state import feed_state

from ..common import median_ms, seed_tenders, status, table, wall_and_cpu
from .workload import COLLECTION, WATERMARK

FEED_PATH = "/api/2.5/tenders"

#: The queries of a page, as :class:`QueryTimes` names them, in page order.
QUERIES = ("checkpoint read", "positions", "documents by _id", "watermark query")


class QueryTimes(monitoring.CommandListener):
    """Round-trip times (ms, as the driver saw them) of the feed's ``find``
    commands, by the query they are (:data:`QUERIES`), while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.started_finds: dict[int, str] = {}
        self.times: dict[str, list[float]] = {name: [] for name in QUERIES}

    @staticmethod
    def query(command: Mapping[str, Any]) -> str:
        """Which query of a page ``command`` is, by its filter."""
        filter_ = command.get("filter") or {}
        if COMMITTED_TS in filter_:
            return "positions"
        if isinstance(filter_.get("_id"), Mapping) and "$in" in filter_["_id"]:
            return "documents by _id"
        if "is_public" in filter_:
            return "watermark query"
        return "checkpoint read"

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on and event.command_name == "find":
            self.started_finds[event.request_id] = self.query(event.command)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        name = self.started_finds.pop(event.request_id, None)
        if name is not None:
            self.times[name].append(event.duration_micros / 1000.0)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.started_finds.pop(event.request_id, None)

    def medians(self) -> dict[str, float | None]:
        """The median time of each query (None: the page never sent it)."""
        return {name: statistics.median(times) if times else None for name, times in self.times.items()}


@dataclass
class PageCostRow:
    """Median wall and CPU milliseconds of one page in each order, and the
    median round trip of each query the pages sent."""

    limit: int
    items: int
    commit_ms: float
    watermark_ms: float
    commit_cpu_ms: float
    watermark_cpu_ms: float
    queries_ms: dict[str, float | None] = field(default_factory=dict)


def backfill_positions(store: FeedStore, listing: Sequence[str] = ()) -> None:
    """Give every seeded tender its position (a sequencer's backfill) with
    ``listing`` in its entry, and publish the checkpoint; the sequencer is
    stopped again."""
    sequencer = Sequencer(store.db, {COLLECTION: ()}, listings={COLLECTION: listing}).start()
    try:
        if not sequencer.wait_ready(timeout=60):
            raise RuntimeError(f"the sequencer did not backfill: {sequencer.errors}")
    finally:
        sequencer.stop()


def monitored_app(settings: Mapping[str, str], listener: QueryTimes) -> Any:
    """The demo app as a ``webtest.TestApp`` whose store reports its
    commands to ``listener`` (the same store, on a monitored client)."""
    from webtest import TestApp

    app = main({}, **settings)
    registry = app.registry
    feed_settings = registry.feed_settings
    registry.feed_store.close()
    client: MongoClient = MongoClient(settings["mongodb.uri"], event_listeners=[listener], tz_aware=True)
    feed_state(registry).store = FeedStore(
        client,
        feed_settings.db_name,
        watermark_seconds=feed_settings.watermark_seconds,
        max_limit=feed_settings.max_limit,
    )
    return TestApp(app)


def time_pages(apps: Mapping[str, Any], limit: int, repeat: int, listener: QueryTimes) -> PageCostRow:
    """The second page at ``limit`` in each order, ``repeat`` interleaved
    runs after three warm-up runs."""
    paths = {name: app.get(f"{FEED_PATH}?limit={limit}").json["next_page"]["path"] for name, app in apps.items()}
    items = {name: len(app.get(paths[name]).json["data"]) for name, app in apps.items()}
    if items["commit"] != items["watermark"]:
        raise RuntimeError(f"the orders' second pages differ in size: {items}")
    wall: dict[str, list[float]] = {name: [] for name in apps}
    cpu: dict[str, list[float]] = {name: [] for name in apps}
    status(f"sequencer: page cost, limit={limit}, {repeat} runs of each order")
    listener.times = {name: [] for name in QUERIES}
    for run in range(repeat + 3):
        listener.on = run >= 3  # the first runs warm up
        for name, app in apps.items():
            spent, used = wall_and_cpu(functools.partial(app.get, paths[name]))
            if listener.on:
                wall[name].append(spent)
                cpu[name].append(used)
    listener.on = False
    return PageCostRow(
        limit,
        items["commit"],
        median_ms(wall["commit"]),
        median_ms(wall["watermark"]),
        median_ms(cpu["commit"]),
        median_ms(cpu["watermark"]),
        listener.medians(),
    )


def measure_page_cost(
    database: EmbeddedServer, docs: int, repeat: int, limits: Sequence[int] = (100, 1000)
) -> list[PageCostRow]:
    """The second page of an ascending crawl of the same tenders in both orders."""
    db_name = "bench_sequencer_pages"
    common = {"mongodb.uri": database.uri, "mongodb.db_name": db_name, "feed.watermark_seconds": repr(WATERMARK)}
    client: MongoClient = MongoClient(database.uri, tz_aware=True)
    store = FeedStore(client, db_name)
    status(f"sequencer: seeding {docs} tenders and their positions for the page cost")
    seed_tenders(store.collection(COLLECTION), docs)
    listener = QueryTimes()
    apps = {
        "commit": monitored_app(dict(common, **{"feed.order": "commit"}), listener),
        "watermark": monitored_app(common, listener),
    }
    backfill_positions(store, commit_listings(apps["commit"].app.registry)[COLLECTION])
    try:
        return [time_pages(apps, limit, repeat, listener) for limit in limits]
    finally:
        for app in apps.values():
            shutdown(app.app.registry)
        client.drop_database(db_name)
        store.close()


def _query_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def page_cost_report(rows: Sequence[PageCostRow], docs: int, repeat: int) -> str:
    """The page cost figures as two tables: the pages, then their queries."""
    body = table(
        ["limit", "items", "commit ms", "watermark ms", "ratio", "commit CPU ms", "watermark CPU ms", "CPU ratio"],
        [
            [
                row.limit,
                row.items,
                f"{row.commit_ms:.2f}",
                f"{row.watermark_ms:.2f}",
                f"{row.commit_ms / row.watermark_ms:.2f}",
                f"{row.commit_cpu_ms:.2f}",
                f"{row.watermark_cpu_ms:.2f}",
                f"{row.commit_cpu_ms / row.watermark_cpu_ms:.2f}",
            ]
            for row in rows
        ],
    )
    queries = table(
        ["limit", *(f"{name} ms" for name in QUERIES)],
        [[row.limit, *(_query_ms(row.queries_ms.get(name)) for name in QUERIES)] for row in rows],
    )
    return (
        f"Cost of a commit-ordered page beside a watermark page ({docs} tenders, their "
        f"positions backfilled, second page of an ascending crawl through TestApp, median of "
        f"{repeat} interleaved runs):\n{body}\n"
        "ratio = commit / watermark; CPU = this process only (the server excluded).\n\n"
        "Where the time goes: median round trip of each query of those pages (command "
        "monitoring). A commit page reads the checkpoint and pages the positions, whose "
        "entries carry the listing, in one causally consistent session (documents by _id "
        "only while a changed listing is re-materialized); a watermark page is one query:\n"
        f"{queries}\n"
        "These are the embedded server's timings (it sorts in memory and scans more than "
        "MongoDB would), not MongoDB's: judge a production deployment with "
        "'openprocurement-feed explain --order commit'."
    )
