"""The paging invariant, property-based, on the real store.

A history interleaves writes and crawler reads. A write stamps one or more
documents (one stamp for all: a tie) with ``now - delay``, as a write that
started ``delay`` ago and commits now; a read fetches one page of random size.
Two crawlers follow the feed: one forward from the start, one that seeds from
the newest page (descending) and then reads history backwards and news
forwards. After the history, once the watermark has passed, both must have
seen every document's latest version at least once, provided every delay is
below W. With W = 0 a late commit is lost: the same tool finds it. Neither
crawler is ever sent a row twice except as part of the tie group at its own
offset.

The same crawlers then follow a commit-ordered feed (SPEC D) with a
sequencer running: transactions that write several documents at once (one
tie group), transactions held open while later writes commit and are read
past, pages of 1 to 4 rows that cut the groups, both directions. There the
invariant holds with no watermark at all.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import FlakyFailure
from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.collection import Collection

from openprocurement_feed.commit.sequencer import Sequencer
from openprocurement_feed.feed.views import page_offsets
from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.offset import parse_offset
from openprocurement_feed.store.orders import COMMIT, COMMITTED_TS, STATE_ID, FeedOrder, positions_name, row_position

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
class Crawler:
    """What every crawler shares: the feed order it reads, what it saw, and
    the repeats it was sent that the tie rule does not explain.

    A *row* is ``(id, version, key)``, ``key`` being the feed order's sort
    value (``public_modified`` or ``committed_ts``). The tie rule allows a
    row to be sent again only as part of the tie group at the offset the
    crawler sent (the group is re-sent when its count or hash no longer
    matches); any other repeat is *stray*.
    """

    store: FeedStore
    collection: Any
    order: str | None = None
    seen: set[tuple[str, int]] = field(default_factory=set)
    rows: set[tuple[str, int, Any]] = field(default_factory=set)
    stray: list[tuple[str, int, Any]] = field(default_factory=list)

    def fetch(self, raw: str, descending: bool, limit: int) -> list[dict[str, Any]]:
        """One page after ``raw`` (the opaque offset), recorded."""
        offset = parse_offset(raw) if raw else None
        rows = self.store.feed_page(
            self.collection,
            FIELDS,
            offset=offset,
            descending=descending,
            limit=limit,
            order=self.order,
        )
        value_of = self.feed_order.row_value
        for row in rows:
            delivered = (row["_id"], row["version"], value_of(row))
            if delivered in self.rows and (offset is None or value_of(row) != offset.value):
                self.stray.append(delivered)
            self.rows.add(delivered)
            self.seen.add((row["_id"], row["version"]))
        return rows

    @property
    def feed_order(self) -> FeedOrder:
        return self.store.feed_order(self.order)

    def offsets(self, rows: list[dict[str, Any]], raw: str) -> tuple[str, str]:
        """The page's ``(next, prev)`` offsets, as the view writes them."""
        return page_offsets(rows, raw, self.feed_order)


@dataclass
class ForwardCrawler(Crawler):
    """Follows the feed forward from the start with the opaque offsets."""

    raw: str = ""

    def read(self, limit: int) -> int:
        rows = self.fetch(self.raw, False, limit)
        self.raw = self.offsets(rows, self.raw)[0]
        return len(rows)

    def drain(self) -> None:
        while self.read(3) == 3:
            pass


@dataclass
class BackForthCrawler(Crawler):
    """Seeds from the newest page (descending), then alternates a page of
    history (descending from the seed's oldest) and a page of news (forward
    from the seed's newest), as a databridge does."""

    seeded: bool = False
    back: str | None = None
    forth: str = ""
    turn: int = 0

    def read(self, limit: int) -> int:
        if not self.seeded:
            rows = self.fetch("", True, limit)
            self.seeded = True
            if rows:
                self.back, self.forth = self.offsets(rows, "")
            return len(rows)
        self.turn += 1
        if self.turn % 2 and self.back is not None:
            rows = self.fetch(self.back, True, limit)
            self.back = self.offsets(rows, self.back)[0] if rows else None
            return len(rows)
        rows = self.fetch(self.forth, False, limit)
        self.forth = self.offsets(rows, self.forth)[0]
        return len(rows)

    def drain(self) -> None:
        if not self.seeded:
            self.read(3)
        while self.back is not None:
            rows = self.fetch(self.back, True, 3)
            self.back = self.offsets(rows, self.back)[0] if rows else None
        while True:
            rows = self.fetch(self.forth, False, 3)
            self.forth = self.offsets(rows, self.forth)[0]
            if len(rows) < 3:
                break


def crawl_report(docs: dict[str, dict[str, Any]], crawlers: list[Crawler]) -> dict[str, Any]:
    """What each crawler missed of the latest versions, and its stray repeats."""
    latest = {(key, doc["version"]) for key, doc in docs.items()}
    forward, back_forth = crawlers
    return {
        "forward": sorted(latest - forward.seen),
        "back_forth": sorted(latest - back_forth.seen),
        "stray": forward.stray + back_forth.stray,
    }


def stamp(delay_ms: int) -> float:
    """``now - delay`` rounded down to the stamp grain, in seconds with ms."""
    grain = STAMP_GRAIN_MS / 1000.0
    value = math.floor((time.time() - delay_ms / 1000.0) / grain) * grain
    return round(value, 3)


def replay(store: FeedStore, history: list[Step]) -> dict[str, Any]:
    """Play ``history`` on a fresh collection; what each crawler missed and
    the repeats the tie rule does not explain."""
    collection = store.collection("paging_" + uuid.uuid4().hex[:10])
    try:
        crawlers: list[Crawler] = [ForwardCrawler(store, collection), BackForthCrawler(store, collection)]
        docs: dict[str, dict[str, Any]] = {}
        for step in history:
            if step[0] in ("write", "late"):
                _, numbers, delay = step
                if step[0] == "late":  # stamped halfway between two documents' stamps
                    low, high = (docs[f"doc{number}"]["public_modified"] for number in delay)
                    value = round((low + high) / 2, 3)
                else:
                    value = stamp(delay)
                for number in numbers:
                    key = f"doc{number}"
                    doc = dict(docs.get(key) or {"_id": key, "status": "active", "version": 0})
                    doc["version"] += 1
                    doc["dateModified"] = f"v{doc['version']}"
                    doc["public_modified"] = value
                    docs[key] = store.save_data(collection, doc, insert=doc["version"] == 1, modified=False)
            elif step[0] == "read":
                for crawler in crawlers:
                    crawler.read(step[1])
            else:
                time.sleep(step[1] / 1000.0)
        time.sleep(store.watermark_seconds + 0.05)
        for crawler in crawlers:
            crawler.drain()
        return crawl_report(docs, crawlers)
    finally:
        collection.drop()


def make_store(mongo_client: MongoClient, db: str, watermark: float) -> FeedStore:
    return FeedStore(mongo_client, db, watermark_seconds=watermark)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories)
def test_every_latest_version_is_seen_when_delays_are_below_w(
    mongo_client: MongoClient, module_db: str, history: list[Step]
) -> None:
    missed = replay(make_store(mongo_client, module_db, W), history)
    assert missed == {"forward": [], "back_forth": [], "stray": []}


#: doc0, then doc2 150 ms later; both crawlers read past doc2 (and the
#: back-forth one through its history); then doc1 commits with a stamp 100 ms
#: old: less than W, so the watermark must keep it from being lost.
LATE_COMMIT: list[Step] = [
    ("write", [0], 0),
    ("pause", 150),
    ("write", [2], 0),
    ("read", 4),
    ("read", 4),
    ("read", 4),
    ("write", [1], 100),
    ("read", 4),
    ("read", 4),
]
#: The same with doc1 stamped between doc0's and doc2's stamps whatever the
#: reads took (on a loaded machine they can take longer than 100 ms, and a
#: stamp 100 ms old then lies after doc2's): behind both crawlers.
LATE_COMMIT_BEHIND: list[Step] = [
    ("late", [1], (0, 2)) if step[0] == "write" and step[1] == [1] else step for step in LATE_COMMIT
]


def test_counter_example_without_watermark(mongo_client: MongoClient, module_db: str) -> None:
    missed = replay(make_store(mongo_client, module_db, 0.0), LATE_COMMIT_BEHIND)
    assert missed["forward"] == [("doc1", 1)]
    assert missed["back_forth"] == [("doc1", 1)]


def test_same_history_with_watermark_loses_nothing(mongo_client: MongoClient, module_db: str) -> None:
    missed = replay(make_store(mongo_client, module_db, W), LATE_COMMIT)
    assert missed == {"forward": [], "back_forth": [], "stray": []}


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
            histories,
            loses,
            settings=settings(max_examples=300, deadline=None, database=None, phases=[Phase.generate]),
        )
    except FlakyFailure:
        pass  # found once; replaying it did not lose again (timing)
    assert losing


# -- the same invariant in commit order (SPEC D) ---------------------------------
#
# A commit-ordered history writes through real sessions with real ``$$NOW``
# stamps: a ``write`` step stores one or more documents, each in its own
# write or all in one transaction (a tie group: one ``clusterTime``); an
# ``open`` step starts a transaction that stays open while later steps write
# and read, and a ``commit`` step commits it (its stamps are old, its
# position is new: the watermark's race). A ``read`` step may first wait
# until the sequencer's checkpoint covers every committed write, so that
# pages hold the groups they cut; otherwise it reads whatever the
# checkpoint allows at that moment.

#: Most transactions open at once in a commit-ordered history.
MAX_OPEN = 2
#: Seconds to wait for the sequencer to cover a write before failing.
SETTLE_TIMEOUT = 10.0

commit_writes = st.tuples(
    st.just("write"),
    st.lists(st.integers(0, DOCS - 1), min_size=1, max_size=4, unique=True),
    st.booleans(),
)
#: A transaction of two to four documents: one tie group.
commit_transactions = st.tuples(
    st.just("write"),
    st.lists(st.integers(0, DOCS - 1), min_size=2, max_size=4, unique=True),
    st.just(True),
)
commit_opens = st.tuples(st.just("open"), st.lists(st.integers(0, DOCS - 1), min_size=1, max_size=4, unique=True))
commit_commits = st.tuples(st.just("commit"), st.integers(0, MAX_OPEN - 1))
commit_reads = st.tuples(st.just("read"), st.integers(1, 4), st.booleans())
commit_histories = st.lists(
    st.one_of(commit_writes, commit_transactions, commit_opens, commit_commits, commit_reads, commit_reads, pauses),
    min_size=1,
    max_size=24,
)


@dataclass
class CommitWorld:
    """A fresh collection of a commit-ordered feed with its own sequencer,
    and what has been written to it.

    ``docs`` holds each document's latest committed version; ``pending``
    the open transactions, each with the versions it wrote; ``locked`` the
    documents an open transaction wrote (no other step writes them until it
    commits, so no write ever waits on another); ``events`` counts the
    committed writes, one change event each.
    """

    store: FeedStore
    collection: Collection
    sequencer: Sequencer
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: list[tuple[ClientSession, dict[str, dict[str, Any]]]] = field(default_factory=list)
    locked: set[str] = field(default_factory=set)
    events: int = 0

    @classmethod
    def open(cls, store: FeedStore) -> CommitWorld:
        name = "commit_" + uuid.uuid4().hex[:10]
        # Created up front: a transaction that created it would hold every
        # other write to it until its commit.
        store.db.create_collection(name)
        collection = store.collection(name)
        positions = store.collection(positions_name(collection.name))
        store.ensure_feed_indexes(positions, (), COMMITTED_TS)
        sequencer = Sequencer(store.db, {collection.name: ()}).start()
        assert sequencer.wait_ready(), sequencer.errors
        return cls(store, collection, sequencer)

    @property
    def positions(self) -> Collection:
        return self.store.collection(positions_name(self.collection.name))

    def next_version(self, key: str) -> dict[str, Any]:
        doc = dict(self.docs.get(key) or {"_id": key, "status": "active", "version": 0})
        doc["version"] += 1
        doc["dateModified"] = f"v{doc['version']}"
        return doc

    def save(self, key: str, session: ClientSession) -> dict[str, Any]:
        doc = self.next_version(key)
        return self.store.save_data(self.collection, doc, insert=doc["version"] == 1, session=session)

    def write(self, keys: list[str], together: bool) -> None:
        """Write ``keys`` (the unlocked ones): one transaction, or one write each."""
        keys = [key for key in keys if key not in self.locked]
        client = self.store.client
        if together and len(keys) > 1:
            with client.start_session() as session, session.start_transaction():
                saved = {key: self.save(key, session) for key in keys}
            self.docs.update(saved)
        else:
            for key in keys:
                with client.start_session() as session:
                    self.docs[key] = self.save(key, session)
        self.events += len(keys)

    def begin(self, keys: list[str]) -> None:
        """Open a transaction that writes ``keys`` (the unlocked ones) and
        stays open."""
        keys = [key for key in keys if key not in self.locked]
        if not keys or len(self.pending) >= MAX_OPEN:
            return
        session = self.store.client.start_session()
        session.start_transaction()
        self.pending.append((session, {key: self.save(key, session) for key in keys}))
        self.locked.update(keys)

    def commit(self, number: int) -> None:
        """Commit one of the open transactions (if any)."""
        if not self.pending:
            return
        session, saved = self.pending.pop(number % len(self.pending))
        session.commit_transaction()
        session.end_session()
        self.docs.update(saved)
        self.locked.difference_update(saved)
        self.events += len(saved)

    def commit_all(self) -> None:
        while self.pending:
            self.commit(0)

    def settle(self) -> None:
        """Wait until the sequencer has handled every committed write and
        the published checkpoint (as a page reads it) covers their entries."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        follower = self.sequencer.followers[0]
        while follower.stats.events < self.events:
            assert time.monotonic() < deadline, "the sequencer did not follow the writes"
            assert not self.sequencer.errors, self.sequencer.errors
            time.sleep(0.002)
        if not self.docs:
            return
        entries = self.positions.find({"_id": {"$in": list(self.docs)}}, {COMMITTED_TS: 1})
        newest = max(entry[COMMITTED_TS] for entry in entries)
        while True:
            state = self.positions.find_one({"_id": STATE_ID}, {"checkpoint": 1}) or {}
            if state.get("checkpoint") is not None and state["checkpoint"] >= newest:
                return
            assert time.monotonic() < deadline, "the checkpoint did not cover the writes"
            time.sleep(0.002)

    def close(self) -> None:
        for session, _ in self.pending:
            session.abort_transaction()
            session.end_session()
        self.pending.clear()
        self.sequencer.stop()
        self.collection.drop()
        self.positions.drop()


def replay_commit(store: FeedStore, history: Sequence[Step]) -> dict[str, Any]:
    """Play a commit-ordered ``history``; what each crawler missed once
    every transaction has committed and the checkpoint covers it, and the
    repeats the tie rule does not explain."""
    world = CommitWorld.open(store)
    try:
        crawlers: list[Crawler] = [
            ForwardCrawler(store, world.collection, COMMIT),
            BackForthCrawler(store, world.collection, COMMIT),
        ]
        for step in history:
            if step[0] == "write":
                world.write([f"doc{number}" for number in step[1]], together=step[2])
            elif step[0] == "open":
                world.begin([f"doc{number}" for number in step[1]])
            elif step[0] == "commit":
                world.commit(step[1])
            elif step[0] == "read":
                if step[2]:
                    world.settle()
                for crawler in crawlers:
                    crawler.read(step[1])
            else:
                time.sleep(step[1] / 1000.0)
        world.commit_all()
        world.settle()
        for crawler in crawlers:
            crawler.drain()
        return crawl_report(world.docs, crawlers)
    finally:
        world.close()


@settings(
    max_examples=18,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=commit_histories)
def test_commit_order_loses_nothing_and_repeats_only_tie_groups(
    mongo_client: MongoClient, module_db: str, history: list[Step]
) -> None:
    """In commit order, with transactions committing long after their
    stamps and pages of 1 to 4 rows cutting their tie groups, both crawlers
    see every document's latest version, and a row is sent twice only as
    part of the tie group at the crawler's own offset. The watermark plays
    no part: the store runs with W = 0."""
    missed = replay_commit(make_store(mongo_client, module_db, 0.0), history)
    assert missed == {"forward": [], "back_forth": [], "stray": []}


#: LATE_COMMIT in commit order: doc1's transaction takes its stamp first
#: and commits after both crawlers have read past doc0 and doc2.
LATE_TRANSACTION: tuple[Step, ...] = (
    ("open", [1]),
    ("write", [0], False),
    ("pause", 150),
    ("write", [2], False),
    ("read", 4, True),
    ("read", 4, True),
    ("read", 4, True),
    ("commit", 0),
    ("read", 4, True),
    ("read", 4, True),
)


def test_late_commit_in_commit_order_needs_no_watermark(mongo_client: MongoClient, module_db: str) -> None:
    """The history that loses doc1 in watermark order with W = 0 loses
    nothing in commit order with W = 0: doc1's position is its commit."""
    missed = replay_commit(make_store(mongo_client, module_db, 0.0), LATE_TRANSACTION)
    assert missed == {"forward": [], "back_forth": [], "stray": []}


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 7])
def test_pages_cut_inside_transactions_send_each_row_once(
    mongo_client: MongoClient, module_db: str, limit: int
) -> None:
    """Tie groups of one transaction (5 and 3 documents) between single
    writes: whatever page size cuts them, a forward crawl from the start and
    a backward crawl from the newest page each send every document exactly
    once, in ``(committed_ts, _id)`` order (nothing changes meanwhile, so
    no group needs to be re-sent)."""
    store = make_store(mongo_client, module_db, 0.0)
    world = CommitWorld.open(store)
    try:
        world.write(["a0"], together=False)
        world.write([f"t{number}" for number in (4, 1, 3, 0, 2)], together=True)
        world.write(["b0"], together=False)
        world.write(["u2", "u0", "u1"], together=True)
        world.write(["c0"], together=False)
        world.settle()
        positions = {
            entry["_id"]: entry[COMMITTED_TS]
            for entry in world.positions.find({"_id": {"$in": list(world.docs)}}, {COMMITTED_TS: 1})
        }
        assert len({positions[f"t{number}"] for number in range(5)}) == 1, "one transaction, one position"
        assert len({positions[f"u{number}"] for number in range(3)}) == 1
        expected = ["a0", "t0", "t1", "t2", "t3", "t4", "b0", "u0", "u1", "u2", "c0"]

        for descending in (False, True):
            crawler = Crawler(store, world.collection, COMMIT)
            raw, served, cuts = "", [], 0
            while True:
                rows = crawler.fetch(raw, descending, limit)
                if rows and raw and row_position(rows[0]) == parse_offset(raw).value:
                    cuts += 1  # this page goes on with the group the last one cut
                served += [row["_id"] for row in rows]
                raw = crawler.offsets(rows, raw)[0]
                if not rows or (not descending and len(rows) < limit):
                    break
            assert served == (expected[::-1] if descending else expected)
            assert crawler.stray == []
            if limit < 5:
                assert cuts > 0, "a page ended inside the five-document group"
    finally:
        world.close()
