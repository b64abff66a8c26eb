"""The cost of the Prometheus metrics: the same requests with metrics on and off.

Two demo apps on the same embedded server and data, one with
``feed.metrics_path`` set (the feed tween counts and times every feed page)
and one without (nothing registered), are driven in process through
``webtest.TestApp``, in interleaved batches so that drift in the server or
the machine hits both alike:

* the second page of an ascending crawl (limit 100 and 1000);
* a request that is not a feed request (an unmatched path, 404 from Pyramid
  alone): the tween's cost on the rest of the app.

Reported per request: wall time and this process's CPU time (the database
server is another process), median over the batches, and the on/off ratio.
Then what the pieces cost on their own, precise where the page figures are
not (a few microseconds hide in the noise of a page): the feed tween around a
handler that returns at once, for a feed request and for any other request;
``FeedMetrics.observe_page`` per call in this process's registry and in
multi-process mode (a subprocess with ``PROMETHEUS_MULTIPROC_DIR``: values
written to memory-mapped files); one scrape of the metrics path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from openprocurement_feed.demo import main
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.feed.views import ITEMS_KEY, feed_route_name

from .common import median_ms, seed_tenders, status, table, wall_and_cpu

DB_NAME = "bench_metrics_cost"
METRICS_PATH = "/api/2.5/metrics"
#: Requests per batch; each batch is timed as a whole.
BATCH = 10
#: Calls of the ``observe_page`` micro-benchmark.
OBSERVE_CALLS = 100_000

#: Times ``observe_page`` in a fresh interpreter in multi-process mode.
MULTIPROCESS_PROBE = """
    import os
    import timeit
    from openprocurement_feed.operations.metrics_recorder import FeedMetrics
    metrics = FeedMetrics.from_environ(os.environ)
    assert metrics.multiprocess
    calls = {calls}
    seconds = timeit.timeit(lambda: metrics.observe_page("tenders", 200, 0.004, 100), number=calls)
    print(seconds / calls)
"""


@dataclass
class MetricsCostRow:
    """Median per-request milliseconds of one request, metrics off and on."""

    what: str
    off_ms: float
    on_ms: float
    off_cpu_ms: float
    on_cpu_ms: float

    @property
    def ratio(self) -> float:
        return self.on_ms / self.off_ms

    @property
    def cpu_ratio(self) -> float:
        return self.on_cpu_ms / self.off_cpu_ms


def batched(call: Callable[[], Any], batch: int) -> tuple[float, float]:
    """Wall and CPU seconds per call of ``batch`` calls."""

    def run() -> None:
        for _ in range(batch):
            call()

    wall, cpu = wall_and_cpu(run)
    return wall / batch, cpu / batch


def compare(off: Callable[[], Any], on: Callable[[], Any], rounds: int, what: str) -> MetricsCostRow:
    """Interleaved batches of each way (the order alternating every round)."""
    for _ in range(3):  # warm up both
        off()
        on()
    samples: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for number in range(rounds):
        ways = [("off", off), ("on", on)]
        for name, call in ways if number % 2 == 0 else reversed(ways):
            samples[name].append(batched(call, BATCH))
    return MetricsCostRow(
        what,
        median_ms([wall for wall, _ in samples["off"]]),
        median_ms([wall for wall, _ in samples["on"]]),
        median_ms([cpu for _, cpu in samples["off"]]),
        median_ms([cpu for _, cpu in samples["on"]]),
    )


def observe_cost_multiprocess() -> float | None:
    """Seconds per ``observe_page`` call in multi-process mode (None if the
    probe failed)."""
    with tempfile.TemporaryDirectory() as folder:
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(MULTIPROCESS_PROBE.format(calls=OBSERVE_CALLS))],
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": folder},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if result.returncode != 0:
        status(f"metrics cost: the multi-process probe failed: {result.stderr.strip()}")
        return None
    return float(result.stdout.strip())


def tween_cost(registry: Any, feed: bool) -> float:
    """Seconds the feed tween adds to one request (a feed page of 100 items,
    or a request of another route), around a handler that returns at once."""
    from types import SimpleNamespace

    from pyramid.request import Request
    from pyramid.response import Response

    from openprocurement_feed.operations.metrics import metrics_tween_factory

    response = Response(status=200)
    request = Request.blank("/api/2.5/tenders")
    request.environ[ITEMS_KEY] = 100
    request.matched_route = SimpleNamespace(name=feed_route_name("tenders") if feed else "other")

    def handler(request: Any) -> Response:
        return response

    tween = metrics_tween_factory(handler, registry)
    bare = timeit.timeit(lambda: handler(request), number=OBSERVE_CALLS)
    wrapped = timeit.timeit(lambda: tween(request), number=OBSERVE_CALLS)
    return max(0.0, wrapped - bare) / OBSERVE_CALLS


@dataclass
class PieceCosts:
    """Microseconds of the metrics' pieces on their own."""

    tween_feed_us: float
    tween_other_us: float
    observe_us: float
    observe_multiprocess_us: float | None
    scrape_ms: float
    scrape_bytes: int


def measure(
    docs: int = 3000, repeat: int = 30, limits: Sequence[int] = (100, 1000)
) -> tuple[list[MetricsCostRow], PieceCosts]:
    """Time every request ``repeat`` batches of :data:`BATCH` per way."""
    from pymongo import MongoClient
    from webtest import TestApp

    rows = []
    with EmbeddedServer() as database:
        settings = {
            "mongodb.uri": database.uri,
            "mongodb.db_name": DB_NAME,
            "feed.watermark_seconds": "1",
        }
        client: MongoClient = MongoClient(database.uri, tz_aware=True)
        status(f"metrics cost: seeding {docs} tenders")
        seed_tenders(client[DB_NAME].tenders, docs)
        off = TestApp(main({}, **settings))
        on = TestApp(main({}, **dict(settings, **{"feed.metrics_path": METRICS_PATH})))
        try:
            assert off.app.registry.feed_metrics is None
            for limit in limits:
                path = off.get(f"/api/2.5/tenders?limit={limit}").json["next_page"]["path"]
                assert on.get(path).json == off.get(path).json
                status(f"metrics cost: limit={limit}, {repeat} batches of {BATCH} pages each way")
                rows.append(
                    compare(
                        lambda: off.get(path),
                        lambda: on.get(path),
                        repeat,
                        f"feed page, limit={limit}",
                    )
                )
            status(f"metrics cost: a non-feed request, {repeat} batches of {BATCH} each way")
            rows.append(
                compare(
                    lambda: off.get("/not-a-feed", status=404),
                    lambda: on.get("/not-a-feed", status=404),
                    repeat,
                    "not a feed (404, no route)",
                )
            )
            metrics = on.app.registry.feed_metrics
            tween_feed = tween_cost(on.app.registry, feed=True)
            tween_other = tween_cost(on.app.registry, feed=False)
            observe = (
                timeit.timeit(lambda: metrics.observe_page("tenders", 200, 0.004, 100), number=OBSERVE_CALLS)
                / OBSERVE_CALLS
            )
            scrapes = [wall_and_cpu(lambda: on.get(METRICS_PATH))[0] for _ in range(repeat)]
            size = len(on.get(METRICS_PATH).body)
        finally:
            off.app.registry.feed_store.close()
            on.app.registry.feed_store.close()
            client.close()
    status("metrics cost: observe_page in multi-process mode")
    multiprocess = observe_cost_multiprocess()
    pieces = PieceCosts(
        tween_feed * 1e6,
        tween_other * 1e6,
        observe * 1e6,
        multiprocess * 1e6 if multiprocess is not None else None,
        median_ms(scrapes),
        size,
    )
    return rows, pieces


def report(rows: Sequence[MetricsCostRow], pieces: PieceCosts, docs: int, repeat: int) -> str:
    """The figures as tables."""
    body = table(
        ["request", "off ms", "on ms", "ratio", "off CPU ms", "on CPU ms", "CPU ratio", "added CPU µs"],
        [
            [
                row.what,
                f"{row.off_ms:.3f}",
                f"{row.on_ms:.3f}",
                f"{row.ratio:.3f}",
                f"{row.off_cpu_ms:.3f}",
                f"{row.on_cpu_ms:.3f}",
                f"{row.cpu_ratio:.3f}",
                f"{(row.on_cpu_ms - row.off_cpu_ms) * 1000:+.1f}",
            ]
            for row in rows
        ],
    )
    multiprocess = f"{pieces.observe_multiprocess_us:.2f} µs" if pieces.observe_multiprocess_us is not None else "n/a"
    estimates = ", ".join(
        f"{row.what}: {(row.off_cpu_ms + pieces.tween_feed_us / 1000) / row.off_cpu_ms:.4f}"
        for row in rows
        if row.what.startswith("feed page")
    )
    return (
        f"Cost of the Prometheus metrics ({docs} tenders on the embedded server, TestApp in "
        f"process, median of {repeat} interleaved batches of {BATCH} requests):\n{body}\n"
        "ratio = metrics on / metrics off (wall time); CPU = this process's CPU time per "
        "request (the database server excluded). Differences of a few per cent between "
        "the batches are noise; the pieces below give the cost itself.\n\n"
        f"The feed tween adds {pieces.tween_feed_us:.2f} µs to a feed request and "
        f"{pieces.tween_other_us:.2f} µs to any other request; CPU ratio estimated from it: "
        f"{estimates}.\n"
        f"observe_page (count, time and items of one page): {pieces.observe_us:.2f} µs per call "
        f"in this process's registry, {multiprocess} in multi-process mode; one scrape of the "
        f"metrics path: {pieces.scrape_ms:.2f} ms ({pieces.scrape_bytes} bytes)."
    )


def run(docs: int = 3000, repeat: int = 30) -> None:
    """Measure and print (or say what to install)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        print("metrics: prometheus_client is not installed: pip install 'openprocurement_feed[metrics]'")
        return
    rows, pieces = measure(docs=docs, repeat=repeat)
    print(report(rows, pieces, docs, repeat))
