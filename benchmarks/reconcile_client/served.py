"""A seeded demo feed served over HTTP on loopback with the reconcile
endpoint, in one order, and waiting until the endpoint answers for the whole
seeded set."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import requests

from openprocurement_feed.client.reconcile import FeedReconciler
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer

from ..common import insert_public_tenders, status

WATERMARK = 0.5
#: The HTTP read timeout of a round: the embedded database answers a round
#: that reads many cut buckets in tens of seconds at 100,000 tenders.
ROUND_TIMEOUT = 1800.0
#: Seconds to wait for the endpoint to answer for the whole seeded set.
READY_TIMEOUT = 1800.0


@dataclass
class Served:
    """A seeded feed being served."""

    order: str
    server: DemoServer
    versions: dict[str, str]
    full_crawl: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.api_url + "/tenders"


def seed_public_tenders(collection: Any, count: int, seed: int = 1) -> dict[str, str]:
    """Insert ``count`` real-shaped public tenders stamped over the past
    months, a minute apart, as the store stamps them; their id → dateModified."""
    rng = random.Random(seed)  # nosec B311 - sample documents
    start = datetime.now(timezone.utc) - timedelta(days=120)
    moments = (start + timedelta(seconds=number * 60, microseconds=rng.randint(0, 999_999)) for number in range(count))
    return insert_public_tenders(collection, moments, rng, status="active", batch_size=5000)


@contextlib.contextmanager
def served_feed(order: str, tenders: int, folder: Path, aggregates: bool = True) -> Iterator[Served]:
    """The demo app in ``order`` on a fresh database, then ``tenders``
    tenders inserted behind its back (its follower builds the aggregates
    from the change stream, as it keeps them day to day), once its reconcile
    endpoint answers for all of them."""
    from pymongo import MongoClient

    with EmbeddedServer(str(folder / f"db-{order}")) as database:
        settings = {
            "mongodb.uri": database.uri,
            "mongodb.db_name": "reconcile_bench",
            "feed.watermark_seconds": str(WATERMARK),
            "feed.order": order,
            "feed.sequencer": "thread",
            "demo.write_delay_ms": "0",
            "feed.reconcile_aggregates": "true" if aggregates else "false",
        }
        server = DemoServer(settings, threads=8).start()
        try:
            wait_ready(server, {}, order)
            client: MongoClient[Any] = MongoClient(database.uri)
            started = time.monotonic()
            versions = seed_public_tenders(client["reconcile_bench"]["tenders"], tenders)
            client.close()
            status(f"reconcile client, {order}: {tenders} tenders inserted in {time.monotonic() - started:.0f} s")
            wait_ready(server, versions, order)
            yield Served(order, server, versions)
        finally:
            server.close()


def answers_rounds(server: DemoServer, versions: dict[str, str]) -> bool:
    """Whether a check of the whole set goes through (no ``503`` while the
    aggregates catch up)."""
    from openprocurement_feed.client import FeedUnavailable

    try:
        with FeedReconciler(server.api_url + "/tenders", timeout=(10.0, ROUND_TIMEOUT)) as reconciler:
            reconciler.run(versions.items(), recheck=False)
    except FeedUnavailable:
        return False
    return True


def wait_ready(server: DemoServer, versions: dict[str, str], order: str, timeout: float = READY_TIMEOUT) -> None:
    """Wait until the endpoint's horizon covers the seeded records and its
    rounds answer."""
    count = len(versions)
    url = server.api_url + "/feeds/tenders/reconcile"
    started = time.monotonic()
    last = ""
    while True:
        response = requests.get(url, timeout=600)
        seen = f"HTTP {response.status_code}"
        if response.status_code == 200:
            records = response.json().get("records")
            if records == count and answers_rounds(server, versions):
                status(
                    f"reconcile client, {order}: the endpoint answers for {count} records "
                    f"after {time.monotonic() - started:.0f} s"
                )
                return
            seen += f", {records} records"
        if seen != last:
            status(f"reconcile client, {order}: waiting for the endpoint ({seen})")
            last = seen
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"the reconcile endpoint did not answer for {count} records within {timeout:.0f} s")
        time.sleep(2.0)
