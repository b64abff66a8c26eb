"""Throughput of a full sync by the reference crawler, with and without
fetching the whole objects.

Creates tenders through the demo API on a real HTTP server (embedded
database, the demo's write delay off), then syncs the feed from scratch with
:class:`openprocurement_feed.client.FeedSync`: at ``limit`` 100 and 1000
reading the feed items only, then at ``limit`` 100 with ``fetch_objects``
(``sync --fetch``: ``GET {feed}/{id}`` for every item) at one object request
at a time and at :data:`FETCH_CONCURRENCY`. It prints items/s, objects/s,
requests, duplicates delivered and the time spent waiting for the server:
feed pages (as a share of the sync's time) and objects (summed over the
fetching threads, and as the share of the sync's time the crawler was
blocked on objects).
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from openprocurement_feed.client import Batch, FeedSync, item_key
from openprocurement_feed.demo.load import create_tenders
from openprocurement_feed.demo.server import DemoServer

from .common import table

WATERMARK = 0.2
#: Object requests in flight in the concurrent ``--fetch`` run.
FETCH_CONCURRENCY = 8


class TimedSession(requests.Session):
    """A session that adds up the time spent waiting for HTTP answers
    (thread-safe: the object fetcher shares it between threads)."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = 0.0
        self.requests = 0
        self._lock = threading.Lock()

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        started = time.perf_counter()
        try:
            return super().request(*args, **kwargs)
        finally:
            with self._lock:
                self.waited += time.perf_counter() - started
                self.requests += 1


@dataclass
class SyncRun:
    """The figures of one full sync."""

    limit: int
    fetch: str
    items: int
    objects: int
    seconds: float
    feed_requests: int
    duplicates: int
    feed_wait: float
    object_wait: float
    blocked_on_objects: float
    complete: bool


def sync_once(feed_url: str, limit: int, state: Path, ids: set[str], concurrency: int = 0) -> SyncRun:
    """One full sync from scratch; ``concurrency`` > 0 fetches the objects."""
    delivered: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    blocked = [0.0]

    def handle(batch: Batch) -> None:
        delivered.extend(batch.items)
        objects.extend(batch.objects or ())

    session = TimedSession()
    object_session = TimedSession() if concurrency else None
    if object_session is not None:
        adapter = requests.adapters.HTTPAdapter(pool_maxsize=concurrency)
        object_session.mount("http://", adapter)
    with FeedSync(
        feed_url,
        handle,
        state,
        limit=limit,
        session=session,
        fetch_objects=bool(concurrency),
        fetch_concurrency=max(concurrency, 1),
        object_session=object_session,
    ) as sync:
        if sync.objects is not None:
            fetch_page = sync.objects.fetch_page

            def timed_fetch(items: Any) -> Any:
                started = time.perf_counter()
                try:
                    return fetch_page(items)
                finally:
                    blocked[0] += time.perf_counter() - started

            sync.objects.fetch_page = timed_fetch  # type: ignore[method-assign]
        started = time.perf_counter()
        stats = sync.run()
        elapsed = time.perf_counter() - started
    complete = {item["id"] for item in delivered} == ids
    if concurrency:
        complete = complete and {obj["id"] for obj in objects} == ids
    return SyncRun(
        limit=limit,
        fetch=f"{concurrency} at once" if concurrency else "no",
        items=stats.items,
        objects=stats.objects,
        seconds=elapsed,
        feed_requests=session.requests,
        duplicates=len(delivered) - len({item_key(item) for item in delivered}),
        feed_wait=session.waited,
        object_wait=object_session.waited if object_session else 0.0,
        blocked_on_objects=blocked[0],
        complete=complete,
    )


def report(runs: list[SyncRun], tenders: int) -> str:
    """The crawler table."""
    rows = [
        [
            run.limit,
            run.fetch,
            run.items,
            run.objects,
            f"{run.seconds:.2f}",
            f"{run.items / run.seconds:.0f}",
            f"{run.objects / run.seconds:.0f}",
            run.feed_requests,
            run.duplicates,
            f"{100 * run.feed_wait / run.seconds:.0f}%",
            f"{run.object_wait:.2f}",
            f"{100 * run.blocked_on_objects / run.seconds:.0f}%" + ("" if run.complete else "  INCOMPLETE"),
        ]
        for run in runs
    ]
    return (
        f"Full sync of {tenders} tenders by the reference crawler (demo API on waitress, "
        "write delay off):\n"
        + table(
            [
                "limit",
                "fetch",
                "items",
                "objects",
                "seconds",
                "items/s",
                "objects/s",
                "feed requests",
                "duplicates",
                "feed wait",
                "object wait s",
                "blocked on objects",
            ],
            rows,
        )
        + "\nfeed wait = time waiting for feed pages / sync time (a page prefetched during the "
        "object fetch overlaps it); object wait s = time waiting for objects, summed over the "
        "fetching threads; blocked on objects = the share of the sync spent in a page's object "
        "fetch."
    )


def run(tenders: int) -> None:
    """Print the figures of a full sync of ``tenders`` tenders."""
    with tempfile.TemporaryDirectory(prefix="feed-sync-bench-") as folder:
        server = DemoServer(
            {
                "mongodb.uri": "embedded://" + str(Path(folder) / "db"),
                "mongodb.db_name": "sync_bench",
                "feed.watermark_seconds": str(WATERMARK),
                "demo.write_delay_ms": "0",
            },
            threads=FETCH_CONCURRENCY + 4,
        ).start()
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # a full queue is the point
        try:
            started = time.perf_counter()
            ids = set(create_tenders(server.api_url, tenders, seed=1))
            print(f"created {tenders} tenders in {time.perf_counter() - started:.1f} s", flush=True)
            time.sleep(WATERMARK + 0.2)
            runs = []
            plan = ((100, 0), (1000, 0), (100, 1), (100, FETCH_CONCURRENCY))
            for number, (limit, concurrency) in enumerate(plan):
                runs.append(
                    sync_once(
                        server.api_url + "/tenders", limit, Path(folder) / f"state-{number}.json", ids, concurrency
                    )
                )
            print(report(runs, tenders), flush=True)
        finally:
            server.close()
