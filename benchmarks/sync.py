"""Throughput of a full sync by the reference crawler.

Creates tenders through the demo API on a real HTTP server (embedded
database), then syncs the feed from scratch with
:class:`openprocurement_feed.client.FeedSync` at ``limit`` 100 and 1000, and
prints items/s, requests, duplicates delivered and the share of time spent
waiting for the server.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from openprocurement_feed.client import Batch, FeedSync, item_key
from openprocurement_feed.demo.load import create_tenders
from openprocurement_feed.demo.server import DemoServer

WATERMARK = 0.2


class TimedSession(requests.Session):
    """A session that adds up the time spent waiting for HTTP answers."""

    waited = 0.0

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        started = time.perf_counter()
        try:
            return super().request(*args, **kwargs)
        finally:
            self.waited += time.perf_counter() - started


def sync_once(feed_url: str, limit: int, state: Path) -> tuple[list[dict[str, Any]], Any, float, float]:
    """One full sync from scratch: (items delivered, stats, seconds, seconds waiting)."""
    delivered: list[dict[str, Any]] = []

    def handle(batch: Batch) -> None:
        delivered.extend(batch.items)

    session = TimedSession()
    with FeedSync(feed_url, handle, state, limit=limit, session=session) as sync:
        started = time.perf_counter()
        stats = sync.run()
        elapsed = time.perf_counter() - started
    return delivered, stats, elapsed, session.waited


def run(tenders: int) -> None:
    """Print the figures of a full sync of ``tenders`` tenders."""
    with tempfile.TemporaryDirectory(prefix="feed-sync-bench-") as folder:
        server = DemoServer({
            "mongodb.uri": "embedded://" + str(Path(folder) / "db"),
            "mongodb.db_name": "sync_bench",
            "feed.watermark_seconds": str(WATERMARK),
        }).start()
        try:
            started = time.perf_counter()
            ids = set(create_tenders(server.api_url, tenders, seed=1))
            print(f"created {tenders} tenders in {time.perf_counter() - started:.1f} s", flush=True)
            time.sleep(WATERMARK + 0.2)
            print(f"{'limit':>6} {'items':>7} {'seconds':>8} {'items/s':>8} {'requests':>9} "
                  f"{'duplicates':>10} {'waiting':>8}")
            for limit in (100, 1000):
                delivered, stats, elapsed, waited = sync_once(
                    server.api_url + "/tenders", limit, Path(folder) / f"state-{limit}.json"
                )
                repeats = len(delivered) - len({item_key(item) for item in delivered})
                complete = {item["id"] for item in delivered} == ids
                requests_made = stats.pages + stats.polls + 1
                print(f"{limit:>6} {stats.items:>7} {elapsed:>8.2f} {stats.items / elapsed:>8.0f} "
                      f"{requests_made:>9} {repeats:>10} {100 * waited / elapsed:>7.0f}%"
                      + ("" if complete else "  INCOMPLETE"), flush=True)
        finally:
            server.close()
