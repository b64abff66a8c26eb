"""The query plan of every feed query shape on the embedded server.

Seeds tenders with an ``owner`` scope field, creates the feed indexes
(``FeedStoreMixin.ensure_feed_indexes``) and prints the analysis of
:mod:`openprocurement_feed.operations.explain` — the same as ``openprocurement-feed
explain --scope-field owner`` against that database.
"""

from __future__ import annotations

from pymongo import MongoClient

from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.operations.explain import analyse, format_analysis
from openprocurement_feed.store.database import FeedStoreMixin

from .common import seed_tenders, status

DB_NAME = "bench_plans"


def run(docs: int = 3000) -> int:
    """Print the plans; returns how many shapes an index did not serve."""
    with EmbeddedServer() as database:
        client: MongoClient = MongoClient(database.uri, tz_aware=True)
        try:
            collection = client[DB_NAME].tenders
            status(f"plans: seeding {docs} tenders")
            seed_tenders(collection, docs)
            FeedStoreMixin().ensure_feed_indexes(collection, ["owner"])
            status("plans: explaining every feed query shape")
            analysis = analyse(collection, scope_field="owner")
        finally:
            client.close()
    print(format_analysis(analysis))
    return len(analysis.problems)
