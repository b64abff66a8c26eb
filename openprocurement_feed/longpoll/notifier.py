"""Long-poll feeds (SPEC E): ``feed=longpoll`` requests wait for the next change.

A forward request whose page comes out empty becomes a *waiter*: it blocks on
its own :class:`threading.Event` and sends no database query while it waits.
One :class:`LongPollNotifier` per process (the state's ``longpoll``) follows
what the feeds' upper bounds depend on, and only while at least one waiter
waits:

* commit order: the sequencer's checkpoint in the positions collection's
  state document (:data:`~.orders.STATE_ID`), through a change stream on that
  document (one thread per followed collection, blocked in the stream's
  awaited ``getMore``). The sequencer moves the checkpoint only when events
  arrive, so a moved checkpoint means a write committed. The stream sees a
  move once it commits, and while nothing moves it costs the database one
  awaited read per :data:`STREAM_AWAIT_MS`, whatever the number of waiters.
  Where a stream cannot be opened the thread falls back to one ``find_one``
  by ``_id`` every :data:`DEFAULT_INTERVAL`;
* watermark order: the newest ``public_modified`` of the collection and the
  database's ``$$NOW``, one aggregate per followed collection per tick over
  the stamps newer than the last one seen (a range of the feed index); a new stamp becomes visible at stamp + ``W``
  by the database clock, and the waiters are woken then.

The notifier wakes the waiters of a collection whose offset the new bound
passes (waiters without a comparable offset are always woken). A woken waiter
reads its page once; if it is still empty (the change was outside its scope
or ``mode``, or a draft) it waits for the rest of its timeout.

At most ``feed.longpoll_max_waiters`` requests wait per process; a request
over the cap is answered at once with ``Retry-After: 1``. :meth:`stop`
(called by :func:`openprocurement_feed.shutdown`) answers every waiter at
once. A waiter whose client went away is released at its timeout at the
latest: WSGI gives an application no portable way to learn of a closed
connection while it waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bson.timestamp import Timestamp
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

from ..settings import DEFAULT_MAX_WAITERS
from ..store.offset import Offset
from ..store.orders import COMMIT, PUBLIC_MODIFIED, STATE_ID, now_seconds, positions_name
from .waiters import FeedCounters, Rows, Waiter, Watch, passes, waiter_key
from .waiters import Key as Key

if TYPE_CHECKING:
    from ..store.state import FeedState

log = logging.getLogger("openprocurement_feed.longpoll")  # its name from before the package had subpackages

#: Seconds between two reads of a commit feed's checkpoint while anyone
#: waits, where its change stream cannot be opened (the commit order's own
#: delay is a few tens of milliseconds).
DEFAULT_INTERVAL = 0.05
#: The longest a commit feed's change stream waits for an event in one
#: ``getMore``: how soon its thread notices that nobody waits any more, or
#: that the notifier stops.
STREAM_AWAIT_MS = 250
#: Seconds between two reads of a watermark feed's newest stamp, at most: a
#: stamp read before stamp + ``W`` is woken at stamp + ``W``, so while this
#: is at most ``W`` the delay is ``W`` whatever it is
#: (:func:`watermark_read_interval`). Two reads a second per followed
#: collection, whatever the number of waiters: fewer than five crawlers
#: polling once a second (``python -m benchmarks longpoll`` compares them).
WATERMARK_INTERVAL = 0.5
#: ... and at least (a ``W`` below twice this is woken up to this late).
MIN_WATERMARK_INTERVAL = 0.25
#: Seconds after stamp + ``W`` a watermark waiter is woken: the page's own
#: ``$$NOW - W`` (millisecond resolution) must already include the stamp.
WAKE_MARGIN = 0.003
#: Seconds a woken watermark waiter waits before it reads again when its
#: page still showed nothing, doubled each time: the notifier estimates the
#: database's clock to within a round trip, which a loaded machine stretches
#: past :data:`WAKE_MARGIN`, and no later stamp would wake it again.
WATERMARK_RECHECKS = (0.05, 0.1, 0.2, 0.4, 0.8)
#: Watermark stamps waiting to become visible, at most, per collection (an
#: older one dropped is covered by a newer one, woken a little later).
MAX_PENDING = 64
#: The outcomes of a long-poll request, as counted in the stats.
WOKEN, TIMEOUT, OVER_CAP, SHUTDOWN = "woken", "timeout", "over_cap", "shutdown"
#: ... and of one whose client went away while it waited.
GONE = "gone"
#: Seconds between two looks at whether a waiter's client is still there
#: (where the server can tell: waitress's ``waitress.client_disconnected``).
DISCONNECT_CHECK_SECONDS = 0.5


def watermark_read_interval(watermark_seconds: float, longest: float = WATERMARK_INTERVAL) -> float:
    """Seconds between two reads of a watermark feed's newest stamp: half of
    ``W`` (a stamp is then read well before stamp + ``W``, when its waiters
    are woken), within ``[MIN_WATERMARK_INTERVAL, longest]``."""
    return min(longest, max(MIN_WATERMARK_INTERVAL, watermark_seconds / 2))


class LongPollNotifier:
    """The waiters of one process and the thread that wakes them.

    :param store: the feed store (its ``db`` and ``feed_collection``).
    :param watermark_seconds: ``W`` of the watermark feeds.
    :param max_waiters: the cap, or a callable giving it (resolved when a
        request would wait: the server's thread count may be learnt late).
    :param interval: seconds between two reads of a commit feed's
        checkpoint while anyone waits on it.
    :param watermark_interval: the longest between two reads of a watermark
        feed's newest stamp (:func:`watermark_read_interval` of ``W``).
    :param metrics: the app's :class:`~.metrics.FeedMetrics`, or None.

    The thread starts with the first waiter and sleeps, with no query,
    whenever nobody waits.
    """

    def __init__(
        self,
        store: Any,
        watermark_seconds: float,
        max_waiters: int | Callable[[], int] = DEFAULT_MAX_WAITERS,
        interval: float = DEFAULT_INTERVAL,
        metrics: Any = None,
        watermark_interval: float = WATERMARK_INTERVAL,
    ) -> None:
        self.store = store
        self.watermark_seconds = watermark_seconds
        self._max_waiters = max_waiters
        self.interval = interval
        self.watermark_interval = watermark_read_interval(watermark_seconds, watermark_interval)
        self.metrics = metrics
        self._cond = threading.Condition()
        self._watches: dict[tuple[str, str], Watch] = {}
        self._counters: dict[str, FeedCounters] = {}
        self._waiting = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: reads of the bounds made so far (tests and benchmarks look)
        self.polls = 0

    # -- figures -----------------------------------------------------------

    @property
    def max_waiters(self) -> int:
        """The cap on waiters in this process."""
        cap = self._max_waiters
        return cap() if callable(cap) else cap

    @property
    def waiting(self) -> int:
        """The requests waiting now."""
        return self._waiting

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stopping

    def counters(self, feed: str) -> FeedCounters:
        """The figures of ``feed`` (zeros for a feed that never long-polled)."""
        with self._cond:
            return self._counters.setdefault(feed, FeedCounters())

    def report(self) -> dict[str, dict[str, int]]:
        """Every long-polled feed's figures."""
        with self._cond:
            return {name: counters.as_dict() for name, counters in self._counters.items()}

    # -- waiting -----------------------------------------------------------

    def wait(
        self,
        feed: str,
        collection: str,
        order: str,
        offset: Offset | None,
        timeout: float,
        read: Callable[[], Rows],
        read_started: float,
        disconnected: Callable[[], bool] | None = None,
    ) -> tuple[Rows, str]:
        """Wait up to ``timeout`` seconds for ``read()`` to return rows.

        The caller read an empty page, which it began at ``read_started``
        (``time.monotonic()``). Returns the rows to answer (possibly empty)
        and the outcome: :data:`WOKEN`, :data:`TIMEOUT`, :data:`OVER_CAP`
        (answer at once with ``Retry-After``), :data:`SHUTDOWN` or
        :data:`GONE`: ``disconnected()`` (looked at every
        :data:`DISCONNECT_CHECK_SECONDS`, no query) said the client went
        away, and its thread is released at once.
        """
        deadline = time.monotonic() + timeout
        waiter = Waiter(waiter_key(order, offset))
        with self._cond:
            counters = self._counters.setdefault(feed, FeedCounters())
            if self._stopping:
                counters.answered += 1
                return [], SHUTDOWN
            if self._waiting >= self.max_waiters:
                counters.over_cap += 1
                counters.answered += 1
                self._count(feed, OVER_CAP)
                return [], OVER_CAP
            watch = self._watches.get((order, collection))
            if watch is None:
                watch = self._watches[(order, collection)] = Watch(order, collection)
            watch.waiters.add(waiter)
            self._waiting += 1
            counters.waiting += 1
            if watch.changed_at >= read_started and passes(watch.head, waiter.key):
                waiter.event.set()  # the bound moved while the page was read
            self._ensure_thread(watch)
            self._cond.notify_all()
        self._gauge(feed, 1)
        rows: Rows = []
        outcome = TIMEOUT
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if disconnected is not None:
                    if not waiter.event.wait(min(remaining, DISCONNECT_CHECK_SECONDS)):
                        if disconnected():
                            outcome = GONE
                            break
                        continue
                elif not waiter.event.wait(remaining):
                    break
                if self.stopping:  # the property: stop() runs in another thread
                    outcome = SHUTDOWN
                    break
                waiter.event.clear()
                with self._cond:
                    counters.wakeups += 1
                self._count(feed, "wakeup")
                rows = read()
                if not rows and order != COMMIT:
                    rows = self._read_again(waiter, read, deadline)
                if rows:
                    outcome = WOKEN
                    break
        finally:
            with self._cond:
                watch.waiters.discard(waiter)
                self._waiting -= 1
                counters.waiting -= 1
                counters.answered += 1
                if outcome == TIMEOUT:
                    counters.timeouts += 1
                if outcome == GONE:
                    counters.gone += 1
            self._gauge(feed, -1)
        if outcome == TIMEOUT:
            self._count(feed, TIMEOUT)
        return rows, outcome

    def _read_again(self, waiter: Waiter, read: Callable[[], Rows], deadline: float) -> Rows:
        """A watermark waiter woken by a stamp whose page still shows
        nothing: read again after each of :data:`WATERMARK_RECHECKS` (a
        new wake or a stop cuts the pause short), until rows or the
        deadline."""
        for pause in WATERMARK_RECHECKS:
            if time.monotonic() + pause >= deadline:
                break
            if waiter.event.wait(pause):
                waiter.event.clear()
            if self.stopping:
                break
            rows = read()
            if rows:
                return rows
        return []

    def stop(self, timeout: float = 2.0) -> None:
        """Answer every waiter at once and end the thread (within ``timeout``)."""
        with self._cond:
            self._stopping = True
            for watch in self._watches.values():
                for waiter in watch.waiters:
                    waiter.event.set()
            self._cond.notify_all()
            threads = [self._thread, *(watch.thread for watch in self._watches.values())]
        deadline = time.monotonic() + timeout
        for thread in threads:
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    # -- the notifier thread -----------------------------------------------

    def _ensure_thread(self, watch: Watch) -> None:
        """Start the thread that follows ``watch`` (under ``_cond``): its
        own for a commit feed, the shared one for watermark feeds."""
        if watch.order == COMMIT:
            if watch.thread is None or not watch.thread.is_alive():
                watch.thread = threading.Thread(
                    target=self._follow_commit, args=(watch,), name=f"feed-longpoll-{watch.collection}", daemon=True
                )
                watch.thread.start()
        elif self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="feed-longpoll", daemon=True)
            self._thread.start()

    def _watermark_waiting(self) -> bool:
        """True while a waiter waits on a watermark feed (under ``_cond``)."""
        return any(watch.waiters for watch in self._watches.values() if watch.order != COMMIT)

    def _run(self) -> None:
        """The watermark feeds' thread: reads their newest stamps."""
        while True:
            with self._cond:
                while not self._stopping and not self._watermark_waiting():
                    self._cond.wait()  # nobody waits: no query at all
                if self._stopping:
                    return
                now = time.monotonic()
                watches = [
                    watch
                    for watch in self._watches.values()
                    if watch.order != COMMIT and watch.waiters and watch.next_read <= now
                ]
            for watch in watches:
                watch.next_read = now + self.watermark_interval
                self._read_bound(watch)
            pause = self._fire_due()
            with self._cond:
                if not self._stopping:
                    self._cond.wait(pause)

    def _read_bound(self, watch: Watch) -> None:
        """:meth:`_poll`, logging (not raising) what goes wrong."""
        try:
            self._poll(watch)
        except PyMongoError as error:
            log.warning("Long-poll notifier: reading the bound of %r failed: %s", watch.collection, error)
        except Exception:  # a bug must not leave every waiter to its timeout silently
            log.exception("Long-poll notifier: reading the bound of %r failed", watch.collection)

    def _idle(self, watch: Watch) -> bool:
        """Wait until someone waits on ``watch``; True when stopping instead."""
        with self._cond:
            while not self._stopping and not watch.waiters:
                self._cond.wait()  # nobody waits: no query at all
            return self._stopping

    def _busy(self, watch: Watch) -> bool:
        """True while someone waits on ``watch`` and the notifier runs."""
        with self._cond:
            return bool(watch.waiters) and not self._stopping

    def _follow_commit(self, watch: Watch) -> None:
        """A commit feed's thread: follows its checkpoint while anyone waits."""
        while not self._idle(watch):
            try:
                self._stream_checkpoint(watch)
            except PyMongoError as error:
                log.warning(
                    "Long-poll notifier: the change stream on %r failed (%s); reading its checkpoint every %g s",
                    positions_name(watch.collection),
                    error,
                    self.interval,
                )
                while self._busy(watch):
                    self._read_bound(watch)
                    with self._cond:
                        if not self._stopping:
                            self._cond.wait(self.interval)
            except Exception:  # a bug must not leave every waiter to its timeout silently
                log.exception("Long-poll notifier: following the checkpoint of %r failed", watch.collection)
                with self._cond:
                    if not self._stopping:
                        self._cond.wait(1.0)

    def _stream_checkpoint(self, watch: Watch) -> None:
        """Follow the checkpoint through a change stream on the state
        document until nobody waits; the stream is opened before the
        document is read once, so no move between the two is missed."""
        positions = self.store.db.get_collection(positions_name(watch.collection), read_concern=ReadConcern("majority"))
        pipeline = [{"$match": {"documentKey._id": STATE_ID}}]
        with positions.watch(pipeline, max_await_time_ms=STREAM_AWAIT_MS) as stream:
            self._poll(watch)
            while self._busy(watch):
                began = time.monotonic()
                change = stream.try_next()
                self.polls += 1
                if change is None:
                    self._pause(began)
                    continue
                fields = (change.get("updateDescription") or {}).get("updatedFields") or {}
                checkpoint = fields.get("checkpoint", (change.get("fullDocument") or {}).get("checkpoint"))
                if isinstance(checkpoint, Timestamp):
                    self._advance_to(watch, checkpoint)
                elif change.get("operationType") in ("insert", "update", "replace"):
                    self._poll(watch)  # the event does not say: read the document

    def _pause(self, began: float) -> None:
        """After a read of a checkpoint stream that brought nothing, wait
        until ``interval`` after its start (or the stop).

        A server may end an awaited read early on any write to the database
        (the embedded server does): the pause keeps a notifier's stream to
        at most one read per ``interval`` however busy the database is, so
        waiters never take it from the writers. A moved checkpoint is still
        seen within ``interval``; a quiet database is read once per
        :data:`STREAM_AWAIT_MS` (docs/operations.rst, "Long-poll capacity")."""
        rest = self.interval - (time.monotonic() - began)
        if rest > 0:
            with self._cond:
                if not self._stopping:
                    self._cond.wait(rest)

    def _poll(self, watch: Watch) -> None:
        """Read one collection's bound once."""
        if watch.order == COMMIT:
            positions = self.store.db.get_collection(
                positions_name(watch.collection), read_concern=ReadConcern("majority")
            )
            state = positions.find_one({"_id": STATE_ID}, {"checkpoint": 1})
            self.polls += 1
            checkpoint = (state or {}).get("checkpoint")
            if isinstance(checkpoint, Timestamp):
                self._advance_to(watch, checkpoint)
            return
        asked = time.monotonic()
        match: dict[str, Any] = {"is_public": True}
        if watch.newest is not None:
            # only the stamps written since the last read: a range on the
            # feed index, not a sort of the collection (the embedded server
            # sorts in memory and applies a limit only after the sort)
            match[PUBLIC_MODIFIED] = {"$gt": watch.newest}
        found = list(
            self.store.feed_collection(watch.collection).aggregate(
                [
                    {"$match": match},
                    {"$group": {"_id": None, "stamp": {"$max": f"${PUBLIC_MODIFIED}"}}},
                    {"$project": {"_id": 0, "stamp": 1, "now": now_seconds()}},
                ]
            )
        )
        answered = time.monotonic()
        self.polls += 1
        if not found or not isinstance(found[0].get("stamp"), (int, float)):
            return
        stamp, now = float(found[0]["stamp"]), float(found[0]["now"])
        if watch.newest is not None and stamp <= watch.newest:
            return
        watch.newest = stamp
        # the database clock read "now" about halfway through the round trip
        due = (asked + answered) / 2 + (stamp + self.watermark_seconds - now) + WAKE_MARGIN
        with self._cond:
            watch.pending.append((due, stamp))
            del watch.pending[:-MAX_PENDING]

    def _fire_due(self) -> float:
        """Make the watermark stamps whose time has come visible; the pause
        until the next tick (sooner when a stamp is due before it)."""
        pause = self.interval
        now = time.monotonic()
        with self._cond:
            watches = [watch for watch in self._watches.values() if watch.order != COMMIT]
        for watch in watches:
            if watch.waiters:
                pause = min(pause, max(0.0, watch.next_read - now))
            with self._cond:
                due = [stamp for at, stamp in watch.pending if at <= now]
                watch.pending = [(at, stamp) for at, stamp in watch.pending if at > now]
                upcoming = min((at for at, _ in watch.pending), default=None)
            if due:
                self._advance(watch, max(due))
            if upcoming is not None:
                pause = min(pause, max(0.0, upcoming - now))
        return pause

    def _advance_to(self, watch: Watch, checkpoint: Timestamp) -> None:
        """A commit feed's checkpoint read: wake its waiters if it moved."""
        if watch.head is None or checkpoint > watch.head:
            self._advance(watch, checkpoint)

    def _advance(self, watch: Watch, bound: Timestamp | float) -> None:
        """The bound of ``watch`` moved to ``bound``: wake the waiters it passes."""
        with self._cond:
            if watch.head is not None and not passes(bound, watch.head):
                return
            watch.head = bound
            watch.changed_at = time.monotonic()
            for waiter in watch.waiters:
                if passes(bound, waiter.key):
                    waiter.event.set()

    # -- metrics -----------------------------------------------------------

    def _gauge(self, feed: str, delta: int) -> None:
        if self.metrics is not None:
            self.metrics.longpoll_waiting(feed, delta)

    def _count(self, feed: str, what: str) -> None:
        if self.metrics is not None:
            self.metrics.longpoll_event(feed, what)


def default_max_waiters(threads: int | None) -> int:
    """Half the server's threads when known (at least 1), else
    :data:`~.settings.DEFAULT_MAX_WAITERS`."""
    if threads:
        return max(1, threads // 2)
    return DEFAULT_MAX_WAITERS


def include_longpoll(state: FeedState, store: Any) -> LongPollNotifier:
    """The notifier of ``state``'s long-poll waiters, reading through
    ``store`` (its thread starts with the first waiter).

    Without ``feed.longpoll_max_waiters``, the cap is half of the state's
    ``server_threads`` when the server set it (the demo server does), else
    :data:`~.settings.DEFAULT_MAX_WAITERS`. ``store`` is the store of a
    client of its own named ``feed.longpoll_app_name``, which connects with
    the first waiter (:func:`~.store.state.role_store`).
    """
    settings = state.settings

    def cap() -> int:
        if settings.longpoll_max_waiters is not None:
            return int(settings.longpoll_max_waiters)
        return default_max_waiters(state.server_threads)

    return LongPollNotifier(store, settings.watermark_seconds, max_waiters=cap, metrics=state.metrics)
