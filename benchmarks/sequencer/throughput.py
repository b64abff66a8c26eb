"""The sequencer's throughput: transactional ``store.save_data`` writes by
writer threads, as fast as the server answers, while a
:class:`~openprocurement_feed.commit.sequencer.Sequencer` follows them; then
the sequencer stopped, documents written, and started again to catch up.
Reported: writes/s, events/s stamped, batches, the backlog when the writers
stopped and how long the checkpoint took to cover every write."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bson.timestamp import Timestamp
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from openprocurement_feed.commit.sequencer import CollectionSequencer, Sequencer
from openprocurement_feed.demo.load import WORDS, sample_tender
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.store.database import ConflictError, FeedStore
from openprocurement_feed.store.orders import COMMITTED_TS, positions_name

from ..common import seed_tenders, status, table
from .workload import COLLECTION, WRITERS

#: Documents the throughput writers rewrite (each writer its own share).
THROUGHPUT_DOCS = 400
#: How long the checkpoint may take to cover the writes before giving up.
COVER_TIMEOUT = 30.0


class TransactionalWriter(threading.Thread):
    """Transactional ``save_data`` writes as fast as the server answers.

    With ``docs``, it rewrites them in turn (they are its own: no other
    writer touches them); without, it inserts new tenders. It stops when
    asked or after ``budget`` writes. ``last`` is the ``(_id, _rev)`` of its
    last write: its writes commit one after the other, so that one has the
    highest commit position of them all.
    """

    def __init__(
        self, store: FeedStore, docs: Sequence[dict[str, Any]] = (), budget: int | None = None, seed: int = 0
    ) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.collection = store.collection(COLLECTION)
        self.docs = list(docs)
        self.budget = budget
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.writes = 0
        self.errors = 0
        self.last: tuple[Any, str] | None = None

    def next_document(self) -> tuple[dict[str, Any], bool]:
        """The document of the next write, and whether it is an insert."""
        if not self.docs:
            data = sample_tender(self.rng)
            data.update(_id=uuid.uuid4().hex, status="active")
            return data, True
        doc = dict(self.docs[self.writes % len(self.docs)])
        doc["title"] = " ".join(self.rng.choice(WORDS) for _ in range(5))
        return doc, False

    def write_once(self) -> None:
        """One write in its own transaction (transient errors retried by pymongo)."""
        doc, insert = self.next_document()
        with self.store.client.start_session() as session:
            saved = session.with_transaction(
                lambda s: self.store.save_data(self.collection, doc, insert=insert, session=s)
            )
        if not insert:
            self.docs[self.writes % len(self.docs)] = saved
        self.last = (saved["_id"], saved["_rev"])
        self.writes += 1

    def refresh(self) -> None:
        """Reload the document of the next write (after a conflict: a retried
        commit that had succeeded)."""
        if self.docs:
            turn = self.writes % len(self.docs)
            self.docs[turn] = self.collection.find_one({"_id": self.docs[turn]["_id"]})

    def run(self) -> None:
        while not self.stopping.is_set() and (self.budget is None or self.writes < self.budget):
            try:
                self.write_once()
            except ConflictError:
                self.errors += 1
                self.refresh()
            except PyMongoError:
                self.errors += 1
                self.stopping.wait(0.01)


def run_writers(writers: Sequence[TransactionalWriter], seconds: float | None = None) -> float:
    """Run ``writers`` for ``seconds`` (or until their budgets are spent);
    returns the seconds they ran."""
    started = time.perf_counter()
    for writer in writers:
        writer.start()
    if seconds is not None:
        time.sleep(seconds)
        for writer in writers:
            writer.stopping.set()
    for writer in writers:
        writer.join()
    return time.perf_counter() - started


def newest_write(positions: Collection, writers: Iterable[TransactionalWriter]) -> Timestamp | None:
    """The highest position among the writers' last writes (the highest of
    all their writes), or None while one of them has no entry yet."""
    last = dict(writer.last for writer in writers if writer.last is not None)
    entries = {row["_id"]: row for row in positions.find({"_id": {"$in": list(last)}}, {"rev": 1, COMMITTED_TS: 1})}
    if any(entries.get(doc_id, {}).get("rev") != rev for doc_id, rev in last.items()):
        return None
    return max((row[COMMITTED_TS] for row in entries.values()), default=None)


def wait_covered(
    follower: CollectionSequencer,
    positions: Collection,
    writers: Sequence[TransactionalWriter],
    since: float,
    timeout: float = COVER_TIMEOUT,
) -> float | None:
    """Seconds from ``since`` (a ``perf_counter`` time) until the checkpoint
    of ``follower`` covers every write of ``writers``; None after ``timeout``.

    Covering the newest write covers them all: the checkpoint promises that
    every change at or below it has its entry.
    """
    deadline = time.perf_counter() + timeout
    newest = None
    while time.perf_counter() < deadline:
        if newest is None:
            newest = newest_write(positions, writers)
        checkpoint = follower.stats.checkpoint
        if newest is not None and checkpoint is not None and checkpoint >= newest:
            return time.perf_counter() - since
        time.sleep(0.005)
    return None


@dataclass
class FollowRow:
    """The sequencer following writers that write as fast as they can."""

    writers: int
    seconds: float
    writes: int
    errors: int
    events: int
    stamped: int
    batches: int
    backlog: int
    cover_seconds: float | None
    delay: dict[str, float | None] = field(default_factory=dict)

    @property
    def kept_up(self) -> bool:
        """The checkpoint covered every write within a second of the writers' stop."""
        return self.cover_seconds is not None and self.cover_seconds <= 1.0


@dataclass
class CatchUpRow:
    """The sequencer catching up with writes made while it was stopped."""

    writes: int
    write_seconds: float
    events: int
    batches: int
    seconds: float | None


def follow(store: FeedStore, seconds: float) -> tuple[Sequencer, FollowRow]:
    """Writers rewrite seeded tenders for ``seconds`` with a sequencer
    following; returns the (still running) sequencer and the figures."""
    collection = store.collection(COLLECTION)
    positions = store.collection(positions_name(COLLECTION))
    docs = list(collection.find())
    sequencer = Sequencer(store.db, {COLLECTION: ()}).start()
    if not sequencer.wait_ready():
        raise RuntimeError(f"the sequencer did not start: {sequencer.errors}")
    follower = sequencer.followers[0]
    writers = [TransactionalWriter(store, docs[number::WRITERS], seed=number) for number in range(WRITERS)]
    status(f"sequencer: {WRITERS} writers for {seconds:g} s, as fast as answered")
    events_before, stamped_before, batches_before = (
        follower.stats.events,
        follower.stats.stamped,
        follower.stats.batches,
    )
    ran = run_writers(writers, seconds)
    stopped = time.perf_counter()
    events = follower.stats.events - events_before
    stamped = follower.stats.stamped - stamped_before
    batches = follower.stats.batches - batches_before
    writes = sum(writer.writes for writer in writers)
    cover = wait_covered(follower, positions, writers, since=stopped)
    return sequencer, FollowRow(
        WRITERS,
        ran,
        writes,
        sum(writer.errors for writer in writers),
        events,
        stamped,
        batches,
        max(0, writes - events),
        cover,
        follower.stats.delay_summary(),
    )


def catch_up(store: FeedStore, sequencer: Sequencer, count: int) -> CatchUpRow:
    """Stop ``sequencer``, insert ``count`` tenders, start a new sequencer
    and time how long its checkpoint takes to cover them."""
    sequencer.stop()
    positions = store.collection(positions_name(COLLECTION))
    shares = [count // WRITERS + (1 if number < count % WRITERS else 0) for number in range(WRITERS)]
    writers = [TransactionalWriter(store, budget=share, seed=100 + number) for number, share in enumerate(shares)]
    status(f"sequencer: stopped; {count} tenders inserted; catching up")
    write_seconds = run_writers(writers)
    started = time.perf_counter()
    restarted = Sequencer(store.db, {COLLECTION: ()}).start()
    try:
        follower = restarted.followers[0]
        seconds = wait_covered(follower, positions, writers, since=started)
        return CatchUpRow(
            sum(writer.writes for writer in writers),
            write_seconds,
            follower.stats.events,
            follower.stats.batches,
            seconds,
        )
    finally:
        restarted.stop()


def measure_throughput(
    database: EmbeddedServer,
    seconds: float,
    catch_up_count: int,
) -> tuple[FollowRow, CatchUpRow]:
    """The follow and catch-up figures on a fresh database."""
    client: MongoClient = MongoClient(database.uri, tz_aware=True)
    store = FeedStore(client, "bench_sequencer_throughput")
    try:
        seed_tenders(store.collection(COLLECTION), THROUGHPUT_DOCS)
        sequencer, followed = follow(store, seconds)
        try:
            caught_up = catch_up(store, sequencer, catch_up_count)
        finally:
            sequencer.stop()
    finally:
        client.drop_database(store.db.name)
        store.close()
    return followed, caught_up


def _ms(seconds: float | None, timeout: float = COVER_TIMEOUT) -> str:
    return f"> {timeout * 1000:.0f}" if seconds is None else f"{seconds * 1000:.0f}"


def _rate(count: int, seconds: float | None) -> str:
    return "-" if not seconds else f"{count / seconds:.0f}"


def _delay(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def throughput_report(followed: FollowRow, caught_up: CatchUpRow) -> str:
    """The throughput figures as two tables."""
    follow_table = table(
        [
            "writers",
            "seconds",
            "writes",
            "writes/s",
            "write errors",
            "events",
            "events/s",
            "entries stamped",
            "batches",
            "events/batch",
            "backlog at stop",
            "covered after ms",
            "kept up",
        ],
        [
            [
                followed.writers,
                f"{followed.seconds:.1f}",
                followed.writes,
                _rate(followed.writes, followed.seconds),
                followed.errors,
                followed.events,
                _rate(followed.events, followed.seconds),
                followed.stamped,
                followed.batches,
                f"{followed.events / followed.batches:.1f}" if followed.batches else "-",
                followed.backlog,
                _ms(followed.cover_seconds),
                "yes" if followed.kept_up else "NO",
            ]
        ],
    )
    delay = followed.delay
    catch_table = table(
        ["writes", "written in s", "writes/s", "events", "batches", "caught up in ms", "events/s catching up"],
        [
            [
                caught_up.writes,
                f"{caught_up.write_seconds:.1f}",
                _rate(caught_up.writes, caught_up.write_seconds),
                caught_up.events,
                caught_up.batches,
                _ms(caught_up.seconds),
                _rate(caught_up.events, caught_up.seconds),
            ]
        ],
    )
    return (
        "Sequencer throughput: transactional save_data writes as fast as answered, one "
        "document per transaction, the sequencer in a thread of the same process:\n"
        f"{follow_table}\n"
        "events/s = change events the sequencer handled while the writers ran; backlog at "
        "stop = writes acknowledged but not yet handled when they stopped; covered after = "
        "time from the stop until the checkpoint covered every write; kept up = within 1 s.\n"
        f"Commit-to-checkpoint delay (event wallTime to the checkpoint covering it), ms: "
        f"median {_delay(delay.get('median'))}, p99 {_delay(delay.get('p99'))}, "
        f"max {_delay(delay.get('max'))}.\n\n"
        "Catch-up: the sequencer stopped, tenders inserted (transactional save_data), the "
        "sequencer started again from its resume token:\n"
        f"{catch_table}\n"
        "caught up in = from the start until its checkpoint covered every insert."
    )
