"""The paging invariant, property-based, on the real store.

A history interleaves writes and crawler reads. A write stamps one or more
documents (one stamp for all: a tie) with ``now - delay``, as a write that
started ``delay`` ago and commits now; a read fetches one page of random size.
Two crawlers follow the feed: one forward from the start, one that seeds from
the newest page (descending) and then reads history backwards and news
forwards. After the history, once the watermark has passed, both must have
seen every document's latest version at least once, provided every delay is
below W. With W = 0 a late commit is lost: the same tool finds it.
"""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.errors import FlakyFailure
from hypothesis import strategies as st
from pymongo import MongoClient

from openprocurement_feed.database import FeedStore
from openprocurement_feed.offset import parse_offset
from openprocurement_feed.views import page_offsets

W = 0.2
#: Longest start→commit delay of a generated write: below W with a margin.
MAX_DELAY_MS = 150
#: Stamps are rounded down to this many ms, so that writes tie often.
STAMP_GRAIN_MS = 5
DOCS = 6
FIELDS = ("dateModified", "version")

Step = tuple[Any, ...]
writes = st.tuples(
    st.just("write"),
    st.lists(st.integers(0, DOCS - 1), min_size=1, max_size=3, unique=True),
    st.integers(0, MAX_DELAY_MS),
)
reads = st.tuples(st.just("read"), st.integers(1, 4))
pauses = st.tuples(st.just("pause"), st.integers(0, 25))
histories = st.lists(st.one_of(writes, reads, pauses), min_size=1, max_size=24)


@pytest.fixture(scope="module")
def module_db(mongo_client: MongoClient) -> Iterator[str]:
    """A database for this module (hypothesis reruns a test many times)."""
    name = "test_paging_" + uuid.uuid4().hex[:8]
    yield name
    mongo_client.drop_database(name)


@dataclass
class ForwardCrawler:
    """Follows the feed forward from the start with the opaque offsets."""

    store: FeedStore
    collection: Any
    raw: str = ""
    seen: set[tuple[str, int]] = field(default_factory=set)

    def read(self, limit: int) -> int:
        offset = parse_offset(self.raw) if self.raw else None
        rows = self.store.feed_page(self.collection, FIELDS, offset=offset, limit=limit)
        self.seen.update((row["_id"], row["version"]) for row in rows)
        self.raw = page_offsets(rows, self.raw)[0]
        return len(rows)

    def drain(self) -> None:
        while self.read(3) == 3:
            pass


@dataclass
class BackForthCrawler:
    """Seeds from the newest page (descending), then alternates a page of
    history (descending from the seed's oldest) and a page of news (forward
    from the seed's newest), as a databridge does."""

    store: FeedStore
    collection: Any
    seeded: bool = False
    back: str | None = None
    forth: str = ""
    seen: set[tuple[str, int]] = field(default_factory=set)
    turn: int = 0

    def _page(self, raw: str, descending: bool, limit: int) -> list[dict[str, Any]]:
        offset = parse_offset(raw) if raw else None
        rows = self.store.feed_page(
            self.collection, FIELDS, offset=offset, descending=descending, limit=limit
        )
        self.seen.update((row["_id"], row["version"]) for row in rows)
        return rows

    def read(self, limit: int) -> int:
        if not self.seeded:
            rows = self._page("", True, limit)
            self.seeded = True
            if rows:
                self.back, self.forth = page_offsets(rows, "")
            return len(rows)
        self.turn += 1
        if self.turn % 2 and self.back is not None:
            rows = self._page(self.back, True, limit)
            self.back = page_offsets(rows, self.back)[0] if rows else None
            return len(rows)
        rows = self._page(self.forth, False, limit)
        self.forth = page_offsets(rows, self.forth)[0]
        return len(rows)

    def drain(self) -> None:
        if not self.seeded:
            self.read(3)
        while self.back is not None:
            rows = self._page(self.back, True, 3)
            self.back = page_offsets(rows, self.back)[0] if rows else None
        while True:
            rows = self._page(self.forth, False, 3)
            self.forth = page_offsets(rows, self.forth)[0]
            if len(rows) < 3:
                break


def stamp(delay_ms: int) -> float:
    """``now - delay`` rounded down to the stamp grain, in seconds with ms."""
    grain = STAMP_GRAIN_MS / 1000.0
    value = math.floor((time.time() - delay_ms / 1000.0) / grain) * grain
    return round(value, 3)


def replay(store: FeedStore, history: list[Step]) -> dict[str, Any]:
    """Play ``history`` on a fresh collection; what each crawler missed."""
    collection = store.collection("paging_" + uuid.uuid4().hex[:10])
    try:
        crawlers = [ForwardCrawler(store, collection), BackForthCrawler(store, collection)]
        docs: dict[str, dict[str, Any]] = {}
        for step in history:
            if step[0] == "write":
                _, numbers, delay = step
                value = stamp(delay)
                for number in numbers:
                    key = f"doc{number}"
                    doc = dict(docs.get(key) or {"_id": key, "status": "active", "version": 0})
                    doc["version"] += 1
                    doc["dateModified"] = f"v{doc['version']}"
                    doc["public_modified"] = value
                    docs[key] = store.save_data(
                        collection, doc, insert=doc["version"] == 1, modified=False
                    )
            elif step[0] == "read":
                for crawler in crawlers:
                    crawler.read(step[1])
            else:
                time.sleep(step[1] / 1000.0)
        time.sleep(store.watermark_seconds + 0.05)
        for crawler in crawlers:
            crawler.drain()
        latest = {(key, doc["version"]) for key, doc in docs.items()}
        return {
            "forward": sorted(latest - crawlers[0].seen),
            "back_forth": sorted(latest - crawlers[1].seen),
        }
    finally:
        collection.drop()


def make_store(mongo_client: MongoClient, db: str, watermark: float) -> FeedStore:
    return FeedStore(mongo_client, db, watermark_seconds=watermark)


@settings(
    max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories)
def test_every_latest_version_is_seen_when_delays_are_below_w(
    mongo_client: MongoClient, module_db: str, history: list[Step]
) -> None:
    missed = replay(make_store(mongo_client, module_db, W), history)
    assert missed == {"forward": [], "back_forth": []}


#: doc0, then doc2 150 ms later; both crawlers read past doc2 (and the
#: back-forth one through its history); then doc1 commits with a stamp 100 ms
#: old: between doc0 and doc2, behind both crawlers.
LATE_COMMIT: list[Step] = [
    ("write", [0], 0), ("pause", 150), ("write", [2], 0),
    ("read", 4), ("read", 4), ("read", 4),
    ("write", [1], 100), ("read", 4), ("read", 4),
]


def test_counter_example_without_watermark(mongo_client: MongoClient, module_db: str) -> None:
    missed = replay(make_store(mongo_client, module_db, 0.0), LATE_COMMIT)
    assert missed["forward"] == [("doc1", 1)]
    assert missed["back_forth"] == [("doc1", 1)]


def test_same_history_with_watermark_loses_nothing(mongo_client: MongoClient, module_db: str) -> None:
    missed = replay(make_store(mongo_client, module_db, W), LATE_COMMIT)
    assert missed == {"forward": [], "back_forth": []}


def test_the_search_finds_a_loss_when_w_is_zero(mongo_client: MongoClient, module_db: str) -> None:
    """The property is not vacuous: with W = 0, random histories lose documents.

    Losses without the watermark depend on timing (a late commit, or a
    rewrite that lands on the same stamp as the version a crawler just
    passed), so the first losing history is recorded rather than replayed.
    """
    store = make_store(mongo_client, module_db, 0.0)
    losing: list[list[Step]] = []

    def loses(history: list[Step]) -> bool:
        if replay(store, history)["forward"]:
            losing.append(history)
            return True
        return False

    try:
        find(
            histories, loses,
            settings=settings(max_examples=300, deadline=None, database=None, phases=[Phase.generate]),
        )
    except FlakyFailure:
        pass  # found once; replaying it did not lose again (timing)
    assert losing
