"""The patch rate the demo API reaches, by document shape and collection size.

Serves the demo on the embedded database (a real HTTP server on loopback,
writes held open ``5-40`` ms), creates the tenders, then runs writer threads
that share one :class:`~openprocurement_feed.demo.load.Pacer` at the asked
rate for a few seconds and prints the rate achieved. The cases: small
tenders (one item, as the race experiment's) and real-shaped ones
(:mod:`openprocurement_feed.demo.documents`), each over a smaller and a
larger collection — what ``openprocurement-feed run --rate`` can get.
"""

from __future__ import annotations

import time

from openprocurement_feed.demo.load import (
    Pacer,
    PatchWriter,
    create_objects,
    create_tenders,
    writers_for_rate,
)
from openprocurement_feed.demo.server import DemoServer

from .common import status, table

WRITE_DELAY = (5, 40)
CASES = (("small", 100), ("small", 300), ("real-shaped", 100), ("real-shaped", 300))


def measure(kind: str, count: int, rate: float, seconds: float, writers: int) -> tuple[float, int, int]:
    """Patches per second achieved, errors and transaction retries."""
    settings = {
        "mongodb.uri": "embedded://",
        "mongodb.db_name": "demo_rate",
        "demo.write_delay_ms": "-".join(map(str, WRITE_DELAY)),
    }
    with DemoServer(settings, threads=2 * writers + 4) as server:
        api = server.api_url
        if kind == "small":
            targets: list[str | tuple[str, str]] = list(create_tenders(api, count, seed=1))
        else:
            targets = [("tenders", one) for one in create_objects(api, "tenders", count, seed=1)]
        pacer = Pacer(rate)
        pool = [PatchWriter(api, targets, pacer=pacer, seed=number) for number in range(writers)]
        started = time.monotonic()
        for writer in pool:
            writer.start()
        time.sleep(seconds)
        for writer in pool:
            writer.stop()
        for writer in pool:
            writer.join(timeout=10)
        elapsed = time.monotonic() - started
        patches = sum(writer.stats.patches for writer in pool)
        errors = sum(writer.stats.errors for writer in pool)
        return patches / elapsed, errors, server.registry.demo_stats.conflicts


def run(rate: float = 60.0, seconds: float = 10.0) -> None:
    """Print the achieved rate of every case."""
    writers = writers_for_rate(rate, WRITE_DELAY)
    rows = []
    for kind, count in CASES:
        status(f"demo rate: {count} {kind} tenders, {writers} writers at {rate:g}/s")
        achieved, errors, retries = measure(kind, count, rate, seconds, writers)
        rows.append((f"{count} {kind} tenders", writers, f"{rate:g}", f"{achieved:.1f}", errors, retries))
    print(
        f"Demo API patch rate ({seconds:g} s per case, writes held open "
        f"{WRITE_DELAY[0]}-{WRITE_DELAY[1]} ms, embedded database):"
    )
    print(table(("case", "writers", "asked/s", "achieved/s", "errors", "retries"), rows))
