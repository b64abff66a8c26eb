"""The reference crawler: follow an openprocurement-style feed without losing
a change, across restarts and faults.

::

    from openprocurement_feed.client import FeedSync

    def handle(batch):
        for item in batch.items:
            index.upsert(item["id"], item)      # idempotent: delivery is at least once

    with FeedSync("https://host/api/2.5/tenders", handle, state="tenders.state") as sync:
        sync.run(follow=True)                   # until sync.stop()

Needs the ``client`` extra (``requests``, ``tenacity``; the command line
also uses ``tqdm``).
"""

from __future__ import annotations

from .dedup import SeenItems, item_key
from .errors import (
    FeedError,
    FeedUnavailable,
    OffsetRejected,
    StateError,
    StateMismatch,
    SyncError,
    SyncStopped,
)
from .http import FeedHTTP, Page, RetryEvent, RetryPolicy, parse_retry_after, user_agent
from .objects import FetchedPage, ObjectFetcher
from .sinks import JsonLinesWriter
from .state import FeedIdentity, StateFile, StateKeeper, SyncState
from .sync import BACKWARD, FORWARD, Batch, FeedSync, Handler, SyncStats, sync_feed

__all__ = [
    "BACKWARD",
    "FORWARD",
    "Batch",
    "FeedError",
    "FeedHTTP",
    "FeedIdentity",
    "FeedSync",
    "FeedUnavailable",
    "FetchedPage",
    "Handler",
    "JsonLinesWriter",
    "ObjectFetcher",
    "OffsetRejected",
    "Page",
    "RetryEvent",
    "RetryPolicy",
    "SeenItems",
    "StateError",
    "StateFile",
    "StateKeeper",
    "StateMismatch",
    "SyncError",
    "SyncState",
    "SyncStats",
    "SyncStopped",
    "item_key",
    "parse_retry_after",
    "sync_feed",
    "user_agent",
]
