"""The commit-to-visible delay: writes at a steady rate through the demo
API, each held open in its transaction for ``demo.write_delay_ms`` (as in
the race experiment); two crawlers poll the same documents through a
commit-ordered feed and a watermark feed (``W = 1 s``). Reported: the time
from a write's acknowledgement until its crawler saw it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pymongo import MongoClient

from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.race.crawler import Crawler
from openprocurement_feed.race.feed import FeedClient
from openprocurement_feed.race.load import LoggingWriter, create_many

from ..common import percentile, status, table
from .workload import WATERMARK, WRITERS

#: Small and large tenders the delay figure's writers patch.
DELAY_TENDERS = 70
#: How long a write stays open in its transaction after its stamp (ms).
WRITE_DELAY_MS = "5-40"
#: Seconds between two polls of a crawler that is at the head of its feed.
POLL_INTERVAL = 0.05


@dataclass
class DelayRow:
    """What one crawler saw of the acknowledged writes."""

    feed: str
    acked: int
    seen: int
    finals_missed: int
    delays_ms: list[float]

    def quantile(self, fraction: float) -> str:
        return f"{percentile(self.delays_ms, fraction):.0f}" if self.delays_ms else "-"


def delays_of(writers: Sequence[LoggingWriter], crawler: Crawler, feed: str) -> DelayRow:
    """How long after its acknowledgement the crawler saw each version, and
    how many tenders' last versions it never saw (a version overwritten
    before it became visible has no delay; a missed last version is a loss)."""
    delays = []
    acked = 0
    finals: dict[str, tuple[str, float]] = {}
    for writer in writers:
        for tender_id, date_modified, at in writer.acks:
            acked += 1
            seen = crawler.log.seen.get(tender_id, {}).get(date_modified)
            if seen is not None:
                delays.append(max(0.0, seen - at) * 1000.0)
            if tender_id not in finals or finals[tender_id][1] < at:
                finals[tender_id] = (date_modified, at)
    missed = sum(1 for tender_id, (date, _) in finals.items() if not crawler.log.saw(tender_id, date))
    return DelayRow(feed, acked, len(delays), missed, delays)


def _split(ids: list[str], parts: int) -> list[list[str]]:
    return [ids[number::parts] for number in range(parts)]


def measure_delay(database: EmbeddedServer, seconds: float, rate: float) -> list[DelayRow]:
    """Writes at ``rate``/s for ``seconds`` through the commit-ordered demo
    API; one crawler on its feed, one on a watermark feed of the same data."""
    db_name = "bench_sequencer_delay"
    common = {"mongodb.uri": database.uri, "mongodb.db_name": db_name, "feed.watermark_seconds": repr(WATERMARK)}
    commit = DemoServer(
        dict(common, **{"feed.order": "commit", "feed.sequencer": "thread", "demo.write_delay_ms": WRITE_DELAY_MS}),
        threads=16,
    )
    watermark = DemoServer(common, threads=8)
    crawlers: list[Crawler] = []
    writers: list[LoggingWriter] = []
    try:
        commit.start()
        watermark.start()
        status(f"sequencer: creating {2 * DELAY_TENDERS} tenders for the delay figure")
        ids = create_many(commit.api_url, DELAY_TENDERS, large=False, seed=1)
        ids += create_many(commit.api_url, DELAY_TENDERS, large=True, seed=2)
        crawlers = [
            Crawler(FeedClient(server.api_url + "/tenders"), POLL_INTERVAL, name=name)
            for name, server in (("commit", commit), ("watermark", watermark))
        ]
        for crawler in crawlers:
            crawler.start()
        time.sleep(WATERMARK + 0.5)  # both crawlers at the head of their feeds
        writers = [
            LoggingWriter(commit.api_url, share, rate=rate / WRITERS, seed=10 + number, name=f"writer-{number}")
            for number, share in enumerate(_split(ids, WRITERS))
        ]
        status(
            f"sequencer: {rate:g} writes/s for {seconds:g} s, transactions held "
            f"{WRITE_DELAY_MS} ms, two crawlers polling"
        )
        for writer in writers:
            writer.start()
        time.sleep(seconds)
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(timeout=30)
        time.sleep(WATERMARK + 1.0)  # let both feeds show the last writes
    finally:
        for crawler in crawlers:
            crawler.stop()
            crawler.join(timeout=30)
            crawler.drain()
            crawler.client.close()
        watermark.close()
        commit.close()
        client: MongoClient = MongoClient(database.uri)
        client.drop_database(db_name)
        client.close()
    return [
        delays_of(writers, crawler, feed)
        for crawler, feed in zip(crawlers, ("commit order", f"watermark W = {WATERMARK:g} s"), strict=False)
    ]


def delay_report(rows: Sequence[DelayRow], seconds: float, rate: float) -> str:
    """The delay figures as a table."""
    body = table(
        ["feed", "writes acked", "versions seen", "last versions missed", "median ms", "p90 ms", "p99 ms", "max ms"],
        [
            [
                row.feed,
                row.acked,
                row.seen,
                row.finals_missed,
                f"{statistics.median(row.delays_ms):.0f}" if row.delays_ms else "-",
                row.quantile(0.9),
                row.quantile(0.99),
                f"{max(row.delays_ms):.0f}" if row.delays_ms else "-",
            ]
            for row in rows
        ],
    )
    return (
        f"Commit-to-visible delay: {rate:g} patches/s for {seconds:g} s through the demo API "
        f"({WRITERS} writers, {2 * DELAY_TENDERS} tenders, transactions held {WRITE_DELAY_MS} "
        f"ms after the stamp), crawlers polling every {POLL_INTERVAL * 1000:.0f} ms when at "
        "the head:\n"
        f"{body}\n"
        "delay = from the write's acknowledgement to the crawler's first page showing that "
        "version; versions overwritten before they became visible have none (the watermark "
        "feed skips more of them). last versions missed = tenders whose final version the "
        "crawler never saw (a loss; 0 expected)."
    )
