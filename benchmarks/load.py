"""Sustained load on the demo API: crawlers and writers at once, on loopback.

Writers create and patch tenders (each writer owns its own tenders, so there
are no write conflicts); crawlers follow ``next_page`` forward from the start
and keep polling. When the time is up the writers stop, the watermark passes,
each crawler drains the feed, and its view of every tender (id → last
``dateModified``) is compared with the database: a crawler is *complete* when
it holds every public tender at its latest version.

``python -m benchmarks load --duration 60`` prints requests/s, errors and the
latency of feed pages; ``tests/test_load.py`` runs a short version.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests
from pymongo import MongoClient

from openprocurement_feed.demo.load import WORDS, create_tenders, sample_tender
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer

from .common import percentile, table

DB_NAME = "bench_load"


@dataclass
class Tally:
    """Requests of one worker: count, errors (with their first reasons) and
    latencies in seconds."""

    requests: int = 0
    errors: int = 0
    reasons: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        self.errors += 1
        if len(self.reasons) < 5:
            self.reasons.append(reason)


class Writer(threading.Thread):
    """Creates (one in ``create_every``) and patches its own tenders."""

    def __init__(self, api_url: str, ids: list[str], seed: int, rate: float = 0.0, create_every: int = 5) -> None:
        super().__init__(name=f"load-writer-{seed}", daemon=True)
        self.api_url = api_url
        self.ids = list(ids)
        self.rng = random.Random(seed)
        self.rate = rate
        self.create_every = create_every
        self.tally = Tally()
        self.stopping = threading.Event()

    def write(self, http: requests.Session, number: int) -> None:
        started = time.perf_counter()
        try:
            if number % self.create_every == 0:
                response = http.post(f"{self.api_url}/tenders", json={"data": sample_tender(self.rng)}, timeout=30)
                expected = 201
            else:
                tender_id = self.rng.choice(self.ids)
                title = " ".join(self.rng.choice(WORDS) for _ in range(5))
                response = http.patch(
                    f"{self.api_url}/tenders/{tender_id}", json={"data": {"title": title}}, timeout=30
                )
                expected = 200
        except requests.RequestException as error:
            self.tally.requests += 1
            self.tally.fail(f"write: {error}")
            return
        self.tally.requests += 1
        self.tally.latencies.append(time.perf_counter() - started)
        if response.status_code != expected:
            self.tally.fail(f"write: HTTP {response.status_code} {response.text[:200]}")
        elif expected == 201:
            self.ids.append(response.json()["data"]["id"])

    def run(self) -> None:
        interval = 1.0 / self.rate if self.rate > 0 else 0.0
        next_at = time.monotonic()
        number = 1
        with requests.Session() as http:
            while not self.stopping.is_set():
                self.write(http, number)
                number += 1
                if interval:
                    next_at += interval
                    self.stopping.wait(max(0.0, next_at - time.monotonic()))


class Crawler(threading.Thread):
    """Follows the feed forward from the start, polling at its end."""

    def __init__(self, api_url: str, name: str, limit: int = 100, poll: float = 0.2) -> None:
        super().__init__(name=name, daemon=True)
        self.url = f"{api_url}/tenders?limit={limit}"
        self.poll = poll
        self.seen: dict[str, str] = {}
        self.items = 0
        self.pages = 0
        self.tally = Tally()
        self.stopping = threading.Event()
        self.http = requests.Session()

    def page(self) -> int | None:
        """Fetch one page; the number of items, None on an error."""
        started = time.perf_counter()
        try:
            response = self.http.get(self.url, timeout=30)
        except requests.RequestException as error:
            self.tally.requests += 1
            self.tally.fail(f"feed: {error}")
            return None
        self.tally.requests += 1
        self.tally.latencies.append(time.perf_counter() - started)
        if response.status_code != 200:
            self.tally.fail(f"feed: HTTP {response.status_code} {response.text[:200]}")
            return None
        body = response.json()
        for item in body["data"]:
            self.seen[item["id"]] = item["dateModified"]
        self.items += len(body["data"])
        self.pages += 1
        self.url = body["next_page"]["uri"]
        return len(body["data"])

    def run(self) -> None:
        while not self.stopping.is_set():
            got = self.page()
            if not got:
                self.stopping.wait(self.poll)

    def drain(self, max_pages: int = 10_000) -> None:
        """After the run: read on until an empty page."""
        for _ in range(max_pages):
            got = self.page()
            if got == 0:
                return
            if got is None:
                time.sleep(self.poll)


@dataclass
class LoadResult:
    """What a load run did and measured."""

    duration: float
    writers: list[Tally]
    crawlers: list[Crawler]
    expected: dict[str, str]
    tenders: int

    @property
    def requests(self) -> int:
        return sum(t.requests for t in self.writers) + sum(c.tally.requests for c in self.crawlers)

    @property
    def errors(self) -> int:
        return sum(t.errors for t in self.writers) + sum(c.tally.errors for c in self.crawlers)

    @property
    def reasons(self) -> list[str]:
        found = [r for t in self.writers for r in t.reasons]
        return found + [r for c in self.crawlers for r in c.tally.reasons]

    def missing(self, crawler: Crawler) -> dict[str, str]:
        """Tenders the crawler lacks or holds at an older version."""
        return {i: d for i, d in self.expected.items() if crawler.seen.get(i) != d}

    @property
    def complete(self) -> list[bool]:
        return [not self.missing(crawler) for crawler in self.crawlers]

    def feed_latencies(self) -> list[float]:
        return [s for c in self.crawlers for s in c.tally.latencies]

    def write_latencies(self) -> list[float]:
        return [s for t in self.writers for s in t.latencies]


def _progress_line(started: float, duration: float, writers: list[Writer], crawlers: list[Crawler]) -> None:
    count = sum(w.tally.requests for w in writers) + sum(c.tally.requests for c in crawlers)
    errors = sum(w.tally.errors for w in writers) + sum(c.tally.errors for c in crawlers)
    elapsed = time.monotonic() - started
    line = f"load: {elapsed:5.1f}/{duration:.0f} s, {count} requests, {errors} errors"
    if sys.stderr.isatty():
        print("\r" + line, end="", file=sys.stderr, flush=True)
    elif round(elapsed) % 10 == 0:
        print(line, file=sys.stderr, flush=True)


def run_load(
    duration: float = 60.0,
    crawlers: int = 4,
    writers: int = 4,
    tenders: int = 100,
    write_rate: float = 0.0,
    watermark: float = 0.5,
    write_delay: str = "0-5",
    progress: bool = True,
    report: Callable[[str], None] | None = None,
) -> LoadResult:
    """Run the load and return the result (figures and completeness).

    :param write_rate: writes per second per writer (0: as fast as answered).
    """
    say = report or (lambda message: print(message, file=sys.stderr, flush=True))
    with EmbeddedServer() as database:
        settings = {
            "mongodb.uri": database.uri,
            "mongodb.db_name": DB_NAME,
            "feed.watermark_seconds": str(watermark),
            "demo.write_delay_ms": write_delay,
        }
        with DemoServer(settings, threads=max(8, crawlers + writers + 2)) as server:
            say(f"load: creating {tenders} tenders")
            ids = create_tenders(server.api_url, tenders, seed=1)
            share = max(1, len(ids) // max(1, writers))
            writer_threads = [
                Writer(server.api_url, ids[n * share : (n + 1) * share] or ids, seed=n, rate=write_rate)
                for n in range(writers)
            ]
            crawler_threads = [Crawler(server.api_url, f"load-crawler-{n}") for n in range(crawlers)]
            say(f"load: {writers} writers and {crawlers} crawlers for {duration:.0f} s")
            started = time.monotonic()
            for thread in [*writer_threads, *crawler_threads]:
                thread.start()
            while time.monotonic() - started < duration:
                time.sleep(min(1.0, max(0.0, duration - (time.monotonic() - started))))
                if progress:
                    _progress_line(started, duration, writer_threads, crawler_threads)
            for writer in writer_threads:
                writer.stopping.set()
            for writer in writer_threads:
                writer.join(timeout=60)
            elapsed = time.monotonic() - started
            if progress and sys.stderr.isatty():
                print(file=sys.stderr)
            for crawler in crawler_threads:
                crawler.stopping.set()
            for crawler in crawler_threads:
                crawler.join(timeout=60)
            time.sleep(watermark + 0.2)  # every acknowledged write is now older than W
            say("load: writers stopped; crawlers drain the feed")
            for crawler in crawler_threads:
                crawler.drain()
            client: MongoClient = MongoClient(database.uri)
            try:
                expected = {
                    doc["_id"]: doc["dateModified"]
                    for doc in client[DB_NAME].tenders.find({"is_public": True, "is_test": False}, {"dateModified": 1})
                }
            finally:
                client.close()
            for crawler in crawler_threads:
                crawler.http.close()
    return LoadResult(
        duration=elapsed,
        writers=[w.tally for w in writer_threads],
        crawlers=crawler_threads,
        expected=expected,
        tenders=len(expected),
    )


def format_result(result: LoadResult) -> str:
    """The figures of a load run."""
    feed = result.feed_latencies()
    writes = result.write_latencies()
    write_count = sum(t.requests for t in result.writers)
    feed_count = sum(c.tally.requests for c in result.crawlers)
    rows = [
        [
            "feed pages",
            feed_count,
            f"{feed_count / result.duration:.1f}",
            f"{percentile(feed, 0.5) * 1000:.1f}",
            f"{percentile(feed, 0.99) * 1000:.1f}",
            sum(c.tally.errors for c in result.crawlers),
        ],
        [
            "writes",
            write_count,
            f"{write_count / result.duration:.1f}",
            f"{percentile(writes, 0.5) * 1000:.1f}",
            f"{percentile(writes, 0.99) * 1000:.1f}",
            sum(t.errors for t in result.writers),
        ],
        ["all", result.requests, f"{result.requests / result.duration:.1f}", "", "", result.errors],
    ]
    lines = [
        f"Sustained load: {len(result.writers)} writers, {len(result.crawlers)} crawlers, "
        f"{result.duration:.1f} s on loopback; {result.tenders} public tenders at the end.",
        table(["requests", "count", "per second", "p50 ms", "p99 ms", "errors"], rows),
    ]
    for crawler, complete in zip(result.crawlers, result.complete, strict=False):
        missing = result.missing(crawler)
        state = "complete" if complete else f"INCOMPLETE: {len(missing)} tenders missing or stale"
        lines.append(f"{crawler.name}: {crawler.pages} pages, {crawler.items} items, {state}")
    for reason in result.reasons:
        lines.append(f"error: {reason}")
    return "\n".join(lines)


def run(
    duration: float = 60.0, crawlers: int = 4, writers: int = 4, tenders: int = 100, write_rate: float = 0.0
) -> int:
    """Run, print, and return 0 when there was no error and every crawler is complete."""
    result = run_load(duration, crawlers, writers, tenders, write_rate)
    print(format_result(result))
    return 0 if result.errors == 0 and all(result.complete) else 1
