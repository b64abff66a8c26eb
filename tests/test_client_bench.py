"""Throughput of a full sync (a benchmark: prints figures, asserts only
completeness). Skipped unless ``CLIENT_BENCH`` is set::

    CLIENT_BENCH=3000 .venv/bin/python -m pytest tests/test_client_bench.py -s -q
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from openprocurement_feed.client import Batch, FeedSync, item_key
from openprocurement_feed.demo.load import create_tenders
from openprocurement_feed.demo.server import DemoServer

COUNT = int(os.environ.get("CLIENT_BENCH") or 0)

pytestmark = [
    pytest.mark.skipif(not COUNT, reason="set CLIENT_BENCH=<tenders> to run the benchmark"),
    pytest.mark.timeout(900),
]


class TimedSession(requests.Session):
    """A session that adds up the time spent waiting for HTTP answers."""

    waited = 0.0

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        started = time.perf_counter()
        try:
            return super().request(*args, **kwargs)
        finally:
            self.waited += time.perf_counter() - started


def test_full_sync_throughput(mongodb_uri: str, db_name: str, tmp_path: Path) -> None:
    watermark = 0.2
    server = DemoServer({
        "mongodb.uri": mongodb_uri, "mongodb.db_name": db_name,
        "feed.watermark_seconds": str(watermark),
    }).start()
    try:
        started = time.perf_counter()
        ids = create_tenders(server.api_url, COUNT, seed=1)
        print(f"\ncreated {COUNT} tenders in {time.perf_counter() - started:.1f} s")
        time.sleep(watermark + 0.2)
        for limit in (100, 1000):
            delivered: list[dict[str, Any]] = []

            def handle(batch: Batch) -> None:
                delivered.extend(batch.items)

            state = tmp_path / f"state-{limit}.json"
            session = TimedSession()
            with FeedSync(server.api_url + "/tenders", handle, state, limit=limit, session=session) as sync:
                started = time.perf_counter()
                stats = sync.run()
                elapsed = time.perf_counter() - started
            repeats = len(delivered) - len({item_key(item) for item in delivered})
            requests_made = stats.pages + stats.polls + 1  # + the empty page ending the history
            print(
                f"limit={limit}: {stats.items} items in {elapsed:.2f} s = {stats.items / elapsed:.0f} items/s; "
                f"{requests_made} requests ({stats.backward_pages} backward pages, "
                f"{stats.forward_pages} forward pages, {stats.polls} empty forward polls); "
                f"duplicates delivered: {repeats}, filtered: {stats.duplicates}; "
                f"waiting for the server: {session.waited:.2f} s ({100 * session.waited / elapsed:.0f} %)"
            )
            assert {item["id"] for item in delivered} == set(ids)
    finally:
        server.close()
