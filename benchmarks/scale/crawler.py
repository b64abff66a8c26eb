"""The full crawl, in a process of its own: ``python -m benchmarks.scale.crawler URL``.

The reference crawler (:class:`~openprocurement_feed.client.sync.FeedSync`,
what ``openprocurement-feed sync`` runs) from an empty state to the end of
the feed's history (or until its time budget is spent); it prints one JSON line: the pages, the items, the
clock time at which each page was handed over (seconds from the start) and
the process's peak RSS.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from typing import Any

from openprocurement_feed.client.errors import SyncStopped
from openprocurement_feed.client.sync import Batch, FeedSync


def peak_rss_kb() -> int:
    """This process's own peak RSS in KB (``VmHWM``): a child started by
    ``subprocess`` (vfork, exec) starts its ``ru_maxrss`` at its parent's."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:  # not Linux
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def crawl(url: str, limit: int = 100, budget: float = 0.0) -> dict[str, Any]:
    """The crawl; stopped after ``budget`` seconds when it is not 0."""
    times: list[float] = []
    items = 0
    started = time.monotonic()

    def handler(batch: Batch) -> None:
        nonlocal items
        items += len(batch.items)
        times.append(time.monotonic() - started)

    with FeedSync(url, handler, limit=limit, longpoll=0, timeout=(10.0, 600.0)) as client:
        timer = threading.Timer(budget, client.stop) if budget > 0 else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            stats = client.run(follow=False)
        except SyncStopped:
            stats = client.stats
        if timer is not None:
            timer.cancel()
    return {
        "pages": len(times),
        "items": items,
        "requests_pages": stats.pages,
        "stopped": bool(client.stopping and not stats.backward_done),
        "seconds": time.monotonic() - started,
        "times": [round(value, 4) for value in times],
        "max_rss_kb": peak_rss_kb(),
    }


if __name__ == "__main__":
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    budget = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    print(json.dumps(crawl(sys.argv[1], limit, budget)), flush=True)
