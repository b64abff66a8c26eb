"""The full crawl, in a process of its own: ``python -m benchmarks.scale.crawler URL``.

The reference crawler (:class:`~openprocurement_feed.client.sync.FeedSync`,
what ``openprocurement-feed sync`` runs) from an empty state to the end of
the feed's history; it prints one JSON line: the pages, the items, the
clock time at which each page was handed over (seconds from the start) and
the process's peak RSS.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

from openprocurement_feed.client.sync import Batch, FeedSync


def crawl(url: str, limit: int = 100) -> dict[str, Any]:
    times: list[float] = []
    items = 0
    started = time.monotonic()

    def handler(batch: Batch) -> None:
        nonlocal items
        items += len(batch.items)
        times.append(time.monotonic() - started)

    with FeedSync(url, handler, limit=limit, longpoll=0, timeout=(10.0, 600.0)) as client:
        stats = client.run(follow=False)
    return {
        "pages": len(times),
        "items": items,
        "requests_pages": stats.pages,
        "seconds": time.monotonic() - started,
        "times": [round(value, 4) for value in times],
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


if __name__ == "__main__":
    print(json.dumps(crawl(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100)), flush=True)
