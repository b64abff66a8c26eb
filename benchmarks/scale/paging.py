"""A page of :data:`LIMIT` items: the first, the middle and the last page
of the feed, forward and descending, read by the store's ``feed_page`` (what
the feed's view runs) on a client of its own.

For each page: the database server process's CPU (``/proc``, before and
after, averaged over several reads so that the clock's ticks do not
dominate; the web and sequencer processes stopped meanwhile, SIGSTOP, and
the server's own idle rate taken off), and the
documents the server examined for it: every ``find`` the page sent,
explained (``executionStats``: ``totalDocsExamined``; the ``$$NOW`` of the
watermark's bound replaced by the time, which ``explain`` refuses); and the
matches the queries gather, each counted without its limit (what
``tests/test_windowed_reads.py`` counts).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pymongo import monitoring

from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.offset import Offset, parse_offset
from openprocurement_feed.store.orders import positions_name

from .build import DB_NAME, Build

LIMIT = 100
PAGES = ("first", "middle", "last")
DIRECTIONS = (("forward", False), ("descending", True))
#: Seconds of reads a page is measured for (at least :data:`MIN_READS`
#: reads, at most :data:`MAX_READS`; one where a read takes longer than
#: :data:`SLOW_SECONDS`).
BUDGET_SECONDS = 1.5
MIN_READS, MAX_READS = 3, 60
SLOW_SECONDS = 10.0
#: Seconds the server's idle CPU is measured for, before the pages, and
#: the rate (cores) below which it is quiet.
IDLE_SECONDS = 5.0
QUIET = 0.05
#: The fields of a ``find`` that ``explain`` is given again.
EXPLAINED = ("find", "filter", "sort", "limit", "projection", "skip", "hint")


@dataclass
class PageFigure:
    """One page: the database's CPU and the wall time per read, the queries
    it sent, the documents the server examined for them and the matches
    they gather."""

    cpu_ms: float
    wall_ms: float
    queries: int
    examined: int
    matches: int
    items: int
    reads: int
    #: each query: its collection, filter, limit, the documents examined and the matches
    queried: list[str] = field(default_factory=list)


class Finds(monitoring.CommandListener):
    """Every ``find`` sent while :attr:`enabled`."""

    def __init__(self) -> None:
        self.finds: list[dict[str, Any]] = []
        self.enabled = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.enabled and event.command_name == "find":
            self.finds.append({key: event.command[key] for key in EXPLAINED if key in event.command})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def without_now(value: Any, now: datetime) -> Any:
    """``value`` with every ``"$$NOW"`` replaced by ``now``."""
    if value == "$$NOW":
        return now
    if isinstance(value, dict):
        return {key: without_now(item, now) for key, item in value.items()}
    if isinstance(value, list):
        return [without_now(item, now) for item in value]
    return value


def examined(client: Any, finds: list[dict[str, Any]]) -> tuple[int, int, list[str]]:
    """The documents the server examined for ``finds`` (explained), the
    matches they gather (counted without their limits), and a line per query."""
    db = client[DB_NAME]
    now = datetime.now(timezone.utc)
    docs = matches = 0
    lines = []
    for command in finds:
        command = without_now(command, now)
        explained = db.command("explain", command, verbosity="executionStats")
        found = int((explained.get("executionStats") or {}).get("totalDocsExamined") or 0)
        matched = db[command["find"]].count_documents(command.get("filter") or {})
        docs += found
        matches += matched
        shown = {key: value for key, value in command["filter"].items() if key != "_id" or len(str(value)) < 80}
        lines.append(f"{command['find']} {shown} limit {command.get('limit')}: examined {found}, matches {matched}")
    return docs, matches, lines


def offset_at(build: Build, store: FeedStore, order: str, index: int) -> Offset:
    """The offset of a page boundary just past the ``index``-th tender (in
    feed order: ``public_modified``, which the backfill's positions follow)."""
    feed_order = store.feed_order(order)
    key = build.ids[index]
    if order == "commit":
        entry = store.db[positions_name("tenders")].find_one({"_id": key})
        if entry is None:
            raise RuntimeError(f"tender {key} has no position")
        value = feed_order.row_value(entry)
    else:
        value = build.values[index]
    return parse_offset(feed_order.compose(value, [key]))


def page_offsets(build: Build, store: FeedStore, order: str, descending: bool) -> dict[str, Offset | None]:
    size = build.size
    if descending:
        wheres = {"middle": size // 2, "last": min(LIMIT, size - 1)}
    else:
        wheres = {"middle": size // 2, "last": max(size - LIMIT - 1, 0)}
    return {"first": None, **{page: offset_at(build, store, order, index) for page, index in wheres.items()}}


def idle_cpu(build: Build, seconds: float | None = None) -> float:
    """The server's CPU seconds per second while nobody reads a page: the
    lowest rate of one-second slices (a query a stopped process had sent
    still runs on the server for a while), for at least ``seconds``, until
    the server is quiet or six times as long."""
    seconds = seconds or IDLE_SECONDS
    rates = []
    started = time.monotonic()
    while True:
        cpu = build.database.cpu_seconds() or 0.0
        time.sleep(min(1.0, seconds))
        rates.append(((build.database.cpu_seconds() or 0.0) - cpu) / min(1.0, seconds))
        elapsed = time.monotonic() - started
        if (elapsed >= seconds and min(rates) < QUIET) or elapsed >= 6 * seconds:
            return min(rates)


def pages(build: Build, order: str) -> dict[str, PageFigure]:
    """The six pages of ``order``: key ``"<page> <direction>"``."""
    finds = Finds()
    client = build.client(event_listeners=[finds])
    explaining = build.client()
    store = FeedStore(client, DB_NAME, watermark_seconds=1.0)
    collection = store.collection("tenders")
    figures: dict[str, PageFigure] = {}
    paused = build.pause()  # the web and sequencer processes' idle reads would count as the pages'
    idle = idle_cpu(build)
    try:
        for direction, descending in DIRECTIONS:
            for page, offset in page_offsets(build, store, order, descending).items():

                def read(offset: Offset | None = offset, descending: bool = descending) -> list[Any]:
                    return store.feed_page(
                        collection, ["dateModified"], offset=offset, limit=LIMIT, descending=descending, order=order
                    )

                started = time.perf_counter()
                read()  # the window hints learnt, as a crawler's earlier pages teach them
                first = time.perf_counter() - started
                if first > SLOW_SECONDS:
                    reads = 1
                else:
                    reads = max(MIN_READS, min(MAX_READS, math.ceil(BUDGET_SECONDS / max(first, 0.001))))
                cpu = build.database.cpu_seconds() or 0.0
                started = time.perf_counter()
                finds.finds.clear()
                finds.enabled = True
                rows = read()
                finds.enabled = False
                for _ in range(reads - 1):
                    read()
                wall = time.perf_counter() - started
                # less what the server spends meanwhile on the followers' and web
                # processes' idle reads (their change streams' getMore)
                used = max((build.database.cpu_seconds() or 0.0) - cpu - idle * wall, 0.0)
                docs, matches, lines = examined(explaining, finds.finds)
                figures[f"{page} {direction}"] = PageFigure(
                    used * 1000 / reads, wall * 1000 / reads, len(finds.finds), docs, matches, len(rows), reads, lines
                )
    finally:
        build.resume(paused)
        client.close()
        explaining.close()
    return figures
