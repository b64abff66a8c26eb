"""What one ``save_data`` costs the embedded server, by collection size.

``python -m benchmarks save`` saves 100 tenders of about 20 KB in a
collection of 140 and of 2000 documents, each save in a transaction of its
own (as the demo writes) and each outside one, interleaved, and prints the
database process's CPU per save (its CPU time over the saves, read from
``/proc``). Inside a transaction ``save_data`` writes by ``_id`` and reads
the stamp back; outside one it sends one ``findAndModify``, which the
embedded server runs as a scan of the whole collection.
"""

from __future__ import annotations

import statistics
from typing import Any

from pymongo import MongoClient

from openprocurement_feed.embedded.server import EmbeddedServer, process_tree_cpu_seconds
from openprocurement_feed.store.database import FeedStore

from .common import table

SIZES = (140, 2000)
SAVES = 100
PAD = 20_000
WAYS = ("transaction", "plain")


def _save(store: FeedStore, client: MongoClient[Any], collection: Any, doc: dict[str, Any], way: str) -> Any:
    if way == "plain":
        return store.save_data(collection, doc)
    with client.start_session() as session, session.start_transaction():
        return store.save_data(collection, doc, session=session)


def measure(server: EmbeddedServer, size: int, rounds: int = 3) -> dict[str, float]:
    """Median DB CPU ms per save of each way, in a collection of ``size``."""
    assert server.process is not None
    client: MongoClient[Any] = MongoClient(server.uri)
    store = FeedStore(client, "bench_save")
    collection = store.db[f"tenders_{size}"]
    collection.drop()
    docs = {}
    for number in range(size):
        saved = store.save_data(collection, {"_id": f"t{number:05d}", "pad": "x" * PAD}, insert=True)
        docs[saved["_id"]] = saved
    picked = sorted(docs)[:: max(1, size // SAVES)][:SAVES]
    figures: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(rounds):
        for way in WAYS:
            before = process_tree_cpu_seconds(server.process.pid) or 0.0
            for doc_id in picked:
                docs[doc_id] = _save(store, client, collection, dict(docs[doc_id], pad="y" * PAD), way)
            after = process_tree_cpu_seconds(server.process.pid) or 0.0
            figures[way].append((after - before) * 1000.0 / len(picked))
    client.close()
    return {way: statistics.median(values) for way, values in figures.items()}


def run() -> None:
    """Print the table."""
    rows = []
    with EmbeddedServer() as server:
        for size in SIZES:
            print(f"save: {SAVES} saves per way in a collection of {size}", flush=True)
            figures = measure(server, size)
            rows.append(
                [
                    size,
                    f"{figures['transaction']:.2f}",
                    f"{figures['plain']:.2f}",
                    f"{figures['plain'] / figures['transaction']:.1f}",
                ]
            )
    print(
        "Database CPU per save_data of a 20 KB tender (ms, median of 3 rounds):\n"
        + table(["documents", "in a transaction", "outside one", "outside / in"], rows)
    )
