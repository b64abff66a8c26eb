"""The commit-ordered feed (SPEC D): its sequencer, its delay and its page cost.

Every figure is measured in the same run, on the embedded server:

* **throughput**: writer threads make transactional ``store.save_data``
  writes, as fast as the server answers, while a
  :class:`~openprocurement_feed.commit.sequencer.Sequencer` follows them; then the
  sequencer is stopped, documents are written, and it is started again to
  catch up. Reported: writes/s, events/s stamped, batches, the backlog when
  the writers stopped and how long the checkpoint took to cover every write.
* **delay**: writes at a steady rate through the demo API, each held open in
  its transaction for ``demo.write_delay_ms`` (as in the race experiment);
  two crawlers poll the same documents through a commit-ordered feed and a
  watermark feed (``W = 1 s``). Reported: the time from a write's
  acknowledgement until its crawler saw it.
* **page cost**: the second page of an ascending crawl of the same tenders in
  commit order and in watermark order, wall time and this process's CPU time.
"""

from __future__ import annotations

import functools
import random
import statistics
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bson.timestamp import Timestamp
from pymongo import MongoClient, monitoring
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from openprocurement_feed import commit_listings, shutdown
from openprocurement_feed.commit.sequencer import CollectionSequencer, Sequencer
from openprocurement_feed.demo import main
from openprocurement_feed.demo.load import WORDS, sample_tender
from openprocurement_feed.demo.server import DemoServer
from openprocurement_feed.embedded.server import EmbeddedServer
from openprocurement_feed.race.crawler import Crawler
from openprocurement_feed.race.feed import FeedClient
from openprocurement_feed.race.load import LoggingWriter, create_many
from openprocurement_feed.store.database import ConflictError, FeedStore
from openprocurement_feed.store.orders import COMMITTED_TS, positions_name

from .common import median_ms, percentile, seed_tenders, status, table, wall_and_cpu

COLLECTION = "tenders"
#: Writer threads of the throughput figure (as many as the race experiment's).
WRITERS = 8
#: Documents the throughput writers rewrite (each writer its own share).
THROUGHPUT_DOCS = 400
#: How long the checkpoint may take to cover the writes before giving up.
COVER_TIMEOUT = 30.0
#: The watermark of the feed the commit-ordered feed is compared with.
WATERMARK = 1.0
#: Small and large tenders the delay figure's writers patch.
DELAY_TENDERS = 70
#: How long a write stays open in its transaction after its stamp (ms).
WRITE_DELAY_MS = "5-40"
#: Seconds between two polls of a crawler that is at the head of its feed.
POLL_INTERVAL = 0.05
FEED_PATH = "/api/2.5/tenders"


# -- throughput ---------------------------------------------------------------


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


# -- commit-to-visible delay ----------------------------------------------------


@dataclass
class DelayRow:
    """What one crawler saw of the acknowledged writes."""

    feed: str
    acked: int
    seen: int
    finals_missed: int
    delays_ms: list[float]

    def quantile(self, fraction: float) -> str:
        return f"{percentile(self.delays_ms, fraction):.0f}" if self.delays_ms else "-"


def delays_of(writers: Sequence[LoggingWriter], crawler: Crawler, feed: str) -> DelayRow:
    """How long after its acknowledgement the crawler saw each version, and
    how many tenders' last versions it never saw (a version overwritten
    before it became visible has no delay; a missed last version is a loss)."""
    delays = []
    acked = 0
    finals: dict[str, tuple[str, float]] = {}
    for writer in writers:
        for tender_id, date_modified, at in writer.acks:
            acked += 1
            seen = crawler.log.seen.get(tender_id, {}).get(date_modified)
            if seen is not None:
                delays.append(max(0.0, seen - at) * 1000.0)
            if tender_id not in finals or finals[tender_id][1] < at:
                finals[tender_id] = (date_modified, at)
    missed = sum(1 for tender_id, (date, _) in finals.items() if not crawler.log.saw(tender_id, date))
    return DelayRow(feed, acked, len(delays), missed, delays)


def _split(ids: list[str], parts: int) -> list[list[str]]:
    return [ids[number::parts] for number in range(parts)]


def measure_delay(database: EmbeddedServer, seconds: float, rate: float) -> list[DelayRow]:
    """Writes at ``rate``/s for ``seconds`` through the commit-ordered demo
    API; one crawler on its feed, one on a watermark feed of the same data."""
    db_name = "bench_sequencer_delay"
    common = {"mongodb.uri": database.uri, "mongodb.db_name": db_name, "feed.watermark_seconds": repr(WATERMARK)}
    commit = DemoServer(
        dict(common, **{"feed.order": "commit", "feed.sequencer": "thread", "demo.write_delay_ms": WRITE_DELAY_MS}),
        threads=16,
    )
    watermark = DemoServer(common, threads=8)
    crawlers: list[Crawler] = []
    writers: list[LoggingWriter] = []
    try:
        commit.start()
        watermark.start()
        status(f"sequencer: creating {2 * DELAY_TENDERS} tenders for the delay figure")
        ids = create_many(commit.api_url, DELAY_TENDERS, large=False, seed=1)
        ids += create_many(commit.api_url, DELAY_TENDERS, large=True, seed=2)
        crawlers = [
            Crawler(FeedClient(server.api_url + "/tenders"), POLL_INTERVAL, name=name)
            for name, server in (("commit", commit), ("watermark", watermark))
        ]
        for crawler in crawlers:
            crawler.start()
        time.sleep(WATERMARK + 0.5)  # both crawlers at the head of their feeds
        writers = [
            LoggingWriter(commit.api_url, share, rate=rate / WRITERS, seed=10 + number, name=f"writer-{number}")
            for number, share in enumerate(_split(ids, WRITERS))
        ]
        status(
            f"sequencer: {rate:g} writes/s for {seconds:g} s, transactions held "
            f"{WRITE_DELAY_MS} ms, two crawlers polling"
        )
        for writer in writers:
            writer.start()
        time.sleep(seconds)
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(timeout=30)
        time.sleep(WATERMARK + 1.0)  # let both feeds show the last writes
    finally:
        for crawler in crawlers:
            crawler.stop()
            crawler.join(timeout=30)
            crawler.drain()
            crawler.client.close()
        watermark.close()
        commit.close()
        client: MongoClient = MongoClient(database.uri)
        client.drop_database(db_name)
        client.close()
    return [
        delays_of(writers, crawler, feed)
        for crawler, feed in zip(crawlers, ("commit order", f"watermark W = {WATERMARK:g} s"), strict=False)
    ]


def delay_report(rows: Sequence[DelayRow], seconds: float, rate: float) -> str:
    """The delay figures as a table."""
    body = table(
        ["feed", "writes acked", "versions seen", "last versions missed", "median ms", "p90 ms", "p99 ms", "max ms"],
        [
            [
                row.feed,
                row.acked,
                row.seen,
                row.finals_missed,
                f"{statistics.median(row.delays_ms):.0f}" if row.delays_ms else "-",
                row.quantile(0.9),
                row.quantile(0.99),
                f"{max(row.delays_ms):.0f}" if row.delays_ms else "-",
            ]
            for row in rows
        ],
    )
    return (
        f"Commit-to-visible delay: {rate:g} patches/s for {seconds:g} s through the demo API "
        f"({WRITERS} writers, {2 * DELAY_TENDERS} tenders, transactions held {WRITE_DELAY_MS} "
        f"ms after the stamp), crawlers polling every {POLL_INTERVAL * 1000:.0f} ms when at "
        "the head:\n"
        f"{body}\n"
        "delay = from the write's acknowledgement to the crawler's first page showing that "
        "version; versions overwritten before they became visible have none (the watermark "
        "feed skips more of them). last versions missed = tenders whose final version the "
        "crawler never saw (a loss; 0 expected)."
    )


# -- page cost ------------------------------------------------------------------


#: The queries of a page, as :class:`QueryTimes` names them, in page order.
QUERIES = ("checkpoint read", "positions", "documents by _id", "watermark query")


class QueryTimes(monitoring.CommandListener):
    """Round-trip times (ms, as the driver saw them) of the feed's ``find``
    commands, by the query they are (:data:`QUERIES`), while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.started_finds: dict[int, str] = {}
        self.times: dict[str, list[float]] = {name: [] for name in QUERIES}

    @staticmethod
    def query(command: Mapping[str, Any]) -> str:
        """Which query of a page ``command`` is, by its filter."""
        filter_ = command.get("filter") or {}
        if COMMITTED_TS in filter_:
            return "positions"
        if isinstance(filter_.get("_id"), Mapping) and "$in" in filter_["_id"]:
            return "documents by _id"
        if "is_public" in filter_:
            return "watermark query"
        return "checkpoint read"

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.on and event.command_name == "find":
            self.started_finds[event.request_id] = self.query(event.command)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        name = self.started_finds.pop(event.request_id, None)
        if name is not None:
            self.times[name].append(event.duration_micros / 1000.0)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.started_finds.pop(event.request_id, None)

    def medians(self) -> dict[str, float | None]:
        """The median time of each query (None: the page never sent it)."""
        return {name: statistics.median(times) if times else None for name, times in self.times.items()}


@dataclass
class PageCostRow:
    """Median wall and CPU milliseconds of one page in each order, and the
    median round trip of each query the pages sent."""

    limit: int
    items: int
    commit_ms: float
    watermark_ms: float
    commit_cpu_ms: float
    watermark_cpu_ms: float
    queries_ms: dict[str, float | None] = field(default_factory=dict)


def backfill_positions(store: FeedStore, listing: Sequence[str] = ()) -> None:
    """Give every seeded tender its position (a sequencer's backfill) with
    ``listing`` in its entry, and publish the checkpoint; the sequencer is
    stopped again."""
    sequencer = Sequencer(store.db, {COLLECTION: ()}, listings={COLLECTION: listing}).start()
    try:
        if not sequencer.wait_ready(timeout=60):
            raise RuntimeError(f"the sequencer did not backfill: {sequencer.errors}")
    finally:
        sequencer.stop()


def monitored_app(settings: Mapping[str, str], listener: QueryTimes) -> Any:
    """The demo app as a ``webtest.TestApp`` whose store reports its
    commands to ``listener`` (the same store, on a monitored client)."""
    from webtest import TestApp

    app = main({}, **settings)
    registry = app.registry
    feed_settings = registry.feed_settings
    registry.feed_store.close()
    client: MongoClient = MongoClient(settings["mongodb.uri"], event_listeners=[listener], tz_aware=True)
    registry.feed_store = FeedStore(
        client,
        feed_settings.db_name,
        watermark_seconds=feed_settings.watermark_seconds,
        max_limit=feed_settings.max_limit,
    )
    return TestApp(app)


def time_pages(apps: Mapping[str, Any], limit: int, repeat: int, listener: QueryTimes) -> PageCostRow:
    """The second page at ``limit`` in each order, ``repeat`` interleaved
    runs after three warm-up runs."""
    paths = {name: app.get(f"{FEED_PATH}?limit={limit}").json["next_page"]["path"] for name, app in apps.items()}
    items = {name: len(app.get(paths[name]).json["data"]) for name, app in apps.items()}
    if items["commit"] != items["watermark"]:
        raise RuntimeError(f"the orders' second pages differ in size: {items}")
    wall: dict[str, list[float]] = {name: [] for name in apps}
    cpu: dict[str, list[float]] = {name: [] for name in apps}
    status(f"sequencer: page cost, limit={limit}, {repeat} runs of each order")
    listener.times = {name: [] for name in QUERIES}
    for run in range(repeat + 3):
        listener.on = run >= 3  # the first runs warm up
        for name, app in apps.items():
            spent, used = wall_and_cpu(functools.partial(app.get, paths[name]))
            if listener.on:
                wall[name].append(spent)
                cpu[name].append(used)
    listener.on = False
    return PageCostRow(
        limit,
        items["commit"],
        median_ms(wall["commit"]),
        median_ms(wall["watermark"]),
        median_ms(cpu["commit"]),
        median_ms(cpu["watermark"]),
        listener.medians(),
    )


def measure_page_cost(
    database: EmbeddedServer, docs: int, repeat: int, limits: Sequence[int] = (100, 1000)
) -> list[PageCostRow]:
    """The second page of an ascending crawl of the same tenders in both orders."""
    db_name = "bench_sequencer_pages"
    common = {"mongodb.uri": database.uri, "mongodb.db_name": db_name, "feed.watermark_seconds": repr(WATERMARK)}
    client: MongoClient = MongoClient(database.uri, tz_aware=True)
    store = FeedStore(client, db_name)
    status(f"sequencer: seeding {docs} tenders and their positions for the page cost")
    seed_tenders(store.collection(COLLECTION), docs)
    listener = QueryTimes()
    apps = {
        "commit": monitored_app(dict(common, **{"feed.order": "commit"}), listener),
        "watermark": monitored_app(common, listener),
    }
    backfill_positions(store, commit_listings(apps["commit"].app.registry)[COLLECTION])
    try:
        return [time_pages(apps, limit, repeat, listener) for limit in limits]
    finally:
        for app in apps.values():
            shutdown(app.app.registry)
        client.drop_database(db_name)
        store.close()


def _query_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def page_cost_report(rows: Sequence[PageCostRow], docs: int, repeat: int) -> str:
    """The page cost figures as two tables: the pages, then their queries."""
    body = table(
        ["limit", "items", "commit ms", "watermark ms", "ratio", "commit CPU ms", "watermark CPU ms", "CPU ratio"],
        [
            [
                row.limit,
                row.items,
                f"{row.commit_ms:.2f}",
                f"{row.watermark_ms:.2f}",
                f"{row.commit_ms / row.watermark_ms:.2f}",
                f"{row.commit_cpu_ms:.2f}",
                f"{row.watermark_cpu_ms:.2f}",
                f"{row.commit_cpu_ms / row.watermark_cpu_ms:.2f}",
            ]
            for row in rows
        ],
    )
    queries = table(
        ["limit", *(f"{name} ms" for name in QUERIES)],
        [[row.limit, *(_query_ms(row.queries_ms.get(name)) for name in QUERIES)] for row in rows],
    )
    return (
        f"Cost of a commit-ordered page beside a watermark page ({docs} tenders, their "
        f"positions backfilled, second page of an ascending crawl through TestApp, median of "
        f"{repeat} interleaved runs):\n{body}\n"
        "ratio = commit / watermark; CPU = this process only (the server excluded).\n\n"
        "Where the time goes: median round trip of each query of those pages (command "
        "monitoring). A commit page reads the checkpoint and pages the positions, whose "
        "entries carry the listing, in one causally consistent session (documents by _id "
        "only while a changed listing is re-materialized); a watermark page is one query:\n"
        f"{queries}\n"
        "These are the embedded server's timings (it sorts in memory and scans more than "
        "MongoDB would), not MongoDB's: judge a production deployment with "
        "'openprocurement-feed explain --order commit'."
    )


def measure_rematerialize(database: EmbeddedServer, docs: int) -> str:
    """A field added to a commit-ordered feed of ``docs`` tenders: the
    sequencer's re-materialization of the entries (wall time and the
    database's CPU)."""
    db_name = "bench_sequencer_listing"
    client: MongoClient = MongoClient(database.uri, tz_aware=True)
    store = FeedStore(client, db_name)
    try:
        status(f"sequencer: seeding {docs} tenders for the listing change")
        seed_tenders(store.collection(COLLECTION), docs)
        before = ("dateModified", "public_modified")
        sequencer = Sequencer(store.db, {COLLECTION: ()}, listings={COLLECTION: before}).start()
        if not sequencer.wait_ready(timeout=120):
            raise RuntimeError(f"the sequencer did not backfill: {sequencer.errors}")
        sequencer.stop()
        follower = CollectionSequencer(
            store.db[COLLECTION], listing=(*before, "status", "title"), lag_window_seconds=60.0
        )
        cpu = database.cpu_seconds()
        started = time.perf_counter()
        follower.check_listing(follower.load_state())  # as a sequencer's start with the new feeds
        assert follower.rematerializer is not None
        follower.rematerializer.join()
        wall = time.perf_counter() - started
        done = "listing_target" not in follower.load_state()
        used = (database.cpu_seconds() or 0.0) - (cpu or 0.0)
        count = follower.stats.rematerialized
        return (
            f"Changing a feed's fields: 2 fields added to a commit-ordered feed of {docs} tenders "
            f"({count} public entries): re-materialized in {wall:.1f} s, {used:.1f} s of the "
            f"database's CPU ({used * 1000 / max(count, 1):.2f} ms per entry){'' if done else ' (superseded)'}."
        )
    finally:
        client.drop_database(db_name)
        store.close()


def run(
    seconds: float = 6.0, catch_up_count: int = 2000, rate: float = 70.0, docs: int = 3000, repeat: int = 30
) -> None:
    """Measure and print the three figures."""
    with EmbeddedServer() as database:
        followed, caught_up = measure_throughput(database, seconds, catch_up_count)
        print(throughput_report(followed, caught_up), end="\n\n", flush=True)
        delays = measure_delay(database, seconds, rate)
        print(delay_report(delays, seconds, rate), end="\n\n", flush=True)
        pages = measure_page_cost(database, docs, repeat)
        print(page_cost_report(pages, docs, repeat), flush=True)
        print("\n" + measure_rematerialize(database, docs), flush=True)
