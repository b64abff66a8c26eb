"""Long-poll feeds (SPEC E): delay to a crawler and the database's CPU.

``python -m benchmarks longpoll [--changes N] [--wait-seconds S]``, on the
embedded database through the threaded demo server, in both orders
(watermark with ``W = 1 s``; commit with ``feed.sequencer = thread``):

1. **Delay**: one writer PATCHes a tender about every 0.6 s; three crawlers
   follow the feed at its head, one long-polling, one polling every 1 s and
   one every 0.1 s. The table shows, per crawler, the median and p99 delay
   from the PATCH's acknowledgement to the crawler holding that version.
2. **Database CPU**: 1, 5, 10 and 50 crawlers at the head of a quiet feed for
   ``--wait-seconds``, long-polling, then polling every 1 s; the CPU seconds
   the database process (and its children) spent meanwhile
   (:meth:`EmbeddedServer.cpu_seconds`), beside the same span with no crawler at all. The
   last rows compare the two ways the notifier could follow a commit feed's
   checkpoint while one waiter waits: a change stream on the state document
   (what it does) and reading the document every 50 ms (its fallback).
   ``tests/test_longpoll_capacity.py`` reuses the crawlers.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.longpoll.notifier import STREAM_AWAIT_MS
from openprocurement_feed.store.orders import STATE_ID, positions_name
from openprocurement_feed.testing import make_settings

from .common import percentile, status, table

WATERMARK_SECONDS = 1.0
CRAWLER_COUNTS = (1, 5, 10, 50)


class Crawler(threading.Thread):
    """Follows the feed's ``next_page`` from the head: long-polling, or
    polling every ``interval`` seconds; notes when it first held each
    ``(id, dateModified)``."""

    def __init__(self, base: str, offset: str, longpoll: bool, interval: float = 1.0, timeout: float = 25.0) -> None:
        super().__init__(daemon=True)
        self.base, self.offset, self.longpoll, self.interval = base, offset, longpoll, interval
        self.timeout = timeout
        self.over_cap = 0
        self.seen: dict[tuple[str, str], float] = {}
        self.stopping = threading.Event()
        self.session = requests.Session()

    def run(self) -> None:
        while not self.stopping.is_set():
            query = f"offset={self.offset}" + (f"&feed=longpoll&timeout={self.timeout:g}" if self.longpoll else "")
            try:
                response = self.session.get(f"{self.base}?{query}", timeout=60)
                page = response.json()
            except (requests.RequestException, ValueError):
                if self.stopping.wait(0.1):
                    break
                continue
            now = time.monotonic()
            for item in page["data"]:
                self.seen.setdefault((item["id"], item["dateModified"]), now)
            self.offset = page["next_page"]["offset"]
            if response.headers.get("Retry-After"):  # over the server's cap of waiters
                self.over_cap += 1
                self.stopping.wait(float(response.headers["Retry-After"]))
            elif not page["data"] and not self.longpoll:
                self.stopping.wait(self.interval)

    def stop(self) -> None:
        self.stopping.set()


def start_server(embedded: EmbeddedServer, order: str, db_name: str, threads: int = 80) -> DemoServer:
    extra = {"feed.watermark_seconds": str(WATERMARK_SECONDS), "feed.longpoll_max_waiters": "60"}
    if order == "commit":
        extra.update({"feed.order": "commit", "feed.sequencer": "thread"})
    settings = make_settings(embedded.uri, db_name)
    settings.update(extra)
    server = DemoServer(settings, threads=threads).start()
    if order == "commit":
        server.registry.feed_sequencer.wait_ready(timeout=30)
    return server


def head(server: DemoServer) -> str:
    offset = ""
    while True:
        page = requests.get(f"{server.api_url}/tenders?limit=1000&offset={offset}", timeout=30).json()
        if not page["data"]:
            return offset
        offset = page["next_page"]["offset"]


def delays(embedded: EmbeddedServer, order: str, changes: int) -> list[list[str]]:
    """Part 1 for one order: rows of the delay table."""
    server = start_server(embedded, order, f"bench_longpoll_delay_{order}")
    try:
        tenders = [
            requests.post(f"{server.api_url}/tenders", json={"data": {"title": "t"}}, timeout=30).json()["data"]
            for _ in range(5)
        ]
        time.sleep(WATERMARK_SECONDS + 0.3)
        offset = head(server)
        base = f"{server.api_url}/tenders"
        crawlers = {
            "long-poll": Crawler(base, offset, True),
            "poll every 1 s": Crawler(base, offset, False, 1.0),
            "poll every 0.1 s": Crawler(base, offset, False, 0.1),
        }
        for crawler in crawlers.values():
            crawler.start()
        time.sleep(1.0)
        acks: dict[tuple[str, str], float] = {}
        for number in range(changes):
            tender = tenders[number % len(tenders)]
            patched = requests.patch(
                f"{base}/{tender['id']}", json={"data": {"title": f"t{number}"}}, timeout=30
            ).json()["data"]
            acks[(patched["id"], patched["dateModified"])] = time.monotonic()
            time.sleep(0.6)
        time.sleep(WATERMARK_SECONDS + 1.5)
        rows = []
        for name, crawler in crawlers.items():
            crawler.stop()
            found = [crawler.seen[key] - ack for key, ack in acks.items() if key in crawler.seen]
            lost = len(acks) - len(found)
            rows.append(
                [
                    f"{order}: {name}",
                    f"{statistics.median(found) * 1000:.0f}" if found else "-",
                    f"{percentile(found, 0.99) * 1000:.0f}" if found else "-",
                    str(lost),
                ]
            )
        server.registry.feed_longpoll.stop()
        return rows
    finally:
        server.close()


def measure(
    embedded: EmbeddedServer, seconds: float, start: Callable[[], list[Any]], stop: Callable[[], None]
) -> float:
    """Database CPU seconds over ``seconds`` while what ``start`` started runs."""
    start()
    time.sleep(1.0)  # settle: connections made, waiters registered
    before = embedded.cpu_seconds() or 0.0
    time.sleep(seconds)
    spent = (embedded.cpu_seconds() or 0.0) - before
    stop()
    return spent


def cpu(embedded: EmbeddedServer, order: str, seconds: float) -> list[list[str]]:
    """Part 2 for one order: rows of the CPU table."""
    server = start_server(embedded, order, f"bench_longpoll_cpu_{order}")
    rows = []
    try:
        requests.post(f"{server.api_url}/tenders", json={"data": {"title": "t"}}, timeout=30)
        time.sleep(WATERMARK_SECONDS + 0.3)
        offset = head(server)
        base = f"{server.api_url}/tenders"
        idle = measure(embedded, seconds, list, lambda: None)
        rows.append([f"{order}: no crawler", "-", f"{idle:.2f}"])
        for count in CRAWLER_COUNTS:
            for longpoll in (True, False):
                # the waits end just after the measured span: no waiter outlives its row
                wait = min(55.0, seconds + 2.0)
                crawlers = [Crawler(base, offset, longpoll, 1.0, wait) for _ in range(count)]

                def start(crawlers: list[Crawler] = crawlers) -> list[Any]:
                    for crawler in crawlers:
                        crawler.start()
                    return crawlers

                def stop(crawlers: list[Crawler] = crawlers) -> None:
                    for crawler in crawlers:
                        crawler.stop()
                    for crawler in crawlers:
                        crawler.join(60)

                status(f"{order}: {count} crawler(s), {'long-poll' if longpoll else 'poll 1 s'}, {seconds:g} s")
                spent = measure(embedded, seconds, start, stop)
                way = "long-poll" if longpoll else "poll every 1 s"
                over = sum(crawler.over_cap for crawler in crawlers)
                if over:
                    way += f" ({over} over the cap)"
                rows.append([f"{order}: {count} crawler(s)", way, f"{spent:.2f}"])
        if order == "commit":
            rows.append(
                [
                    "commit: notifier alone",
                    "state doc every 50 ms (fallback)",
                    f"{notifier_read_cost(embedded, server, seconds):.2f}",
                ]
            )
            rows.append(
                [
                    "commit: notifier alone",
                    "change stream (used)",
                    f"{change_stream_cost(embedded, server, seconds):.2f}",
                ]
            )
    finally:
        server.close()
    return rows


def notifier_read_cost(embedded: EmbeddedServer, server: DemoServer, seconds: float) -> float:
    """Database CPU of reading the checkpoint every 50 ms (the notifier's
    fallback where a change stream cannot be opened)."""
    positions = server.registry.feed_store.db[positions_name("tenders")]
    stopping = threading.Event()

    def loop() -> None:
        while not stopping.wait(0.05):
            positions.find_one({"_id": STATE_ID}, {"checkpoint": 1})

    return run_loop(embedded, seconds, loop, stopping)


def change_stream_cost(embedded: EmbeddedServer, server: DemoServer, seconds: float) -> float:
    """Database CPU of a change stream on the checkpoint's state document
    (the notifier's way)."""
    positions = server.registry.feed_store.db[positions_name("tenders")]
    stopping = threading.Event()

    def loop() -> None:
        with positions.watch([{"$match": {"documentKey._id": STATE_ID}}], max_await_time_ms=STREAM_AWAIT_MS) as stream:
            while not stopping.is_set():
                stream.try_next()

    return run_loop(embedded, seconds, loop, stopping)


def run_loop(embedded: EmbeddedServer, seconds: float, loop: Callable[[], None], stopping: threading.Event) -> float:
    """Database CPU of ``loop`` running in a thread until ``stopping``."""
    thread = threading.Thread(target=loop, daemon=True)

    def start() -> list[Any]:
        thread.start()
        return [thread]

    def stop() -> None:
        stopping.set()
        thread.join(5)

    return measure(embedded, seconds, start, stop)


def run(changes: int = 20, wait_seconds: float = 10.0) -> None:
    """Print both tables."""
    embedded = EmbeddedServer().start()
    try:
        rows: list[list[str]] = []
        for order in ("watermark", "commit"):
            status(f"{order}: {changes} PATCHes, three crawlers")
            rows += delays(embedded, order, changes)
        print(f"PATCH acknowledgement -> crawler holding the version ({changes} changes, W = {WATERMARK_SECONDS:g} s)")
        print(table(["crawler", "median ms", "p99 ms", "lost"], rows))
        print()
        rows = []
        for order in ("watermark", "commit"):
            rows += cpu(embedded, order, wait_seconds)
        print(f"Database CPU seconds in {wait_seconds:g} s with crawlers at the head of a quiet feed")
        print(table(["crawlers", "how", "db CPU s"], rows))
    finally:
        embedded.stop()
