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
  awaited read per :data:`~.watchers.STREAM_AWAIT_MS`, whatever the number of waiters.
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

from ..settings import DEFAULT_MAX_WAITERS
from ..store.offset import Offset
from ..store.orders import order_kind
from .waiters import FeedCounters, Rows, Waiter, Watch, passes
from .waiters import Key as Key
from .watchers import STREAM_AWAIT_MS as STREAM_AWAIT_MS
from .watchers import CheckpointWatcher, StampWatcher, Watcher

if TYPE_CHECKING:
    from ..store.state import FeedState

log = logging.getLogger("openprocurement_feed.longpoll")  # its name from before the package had subpackages

#: Seconds between two reads of a commit feed's checkpoint while anyone
#: waits, where its change stream cannot be opened (the commit order's own
#: delay is a few tens of milliseconds).
DEFAULT_INTERVAL = 0.05
#: Seconds between two reads of a watermark feed's newest stamp, at most: a
#: stamp read before stamp + ``W`` is woken at stamp + ``W``, so while this
#: is at most ``W`` the delay is ``W`` whatever it is
#: (:func:`watermark_read_interval`). Two reads a second per followed
#: collection, whatever the number of waiters: fewer than five crawlers
#: polling once a second (``python -m benchmarks longpoll`` compares them).
WATERMARK_INTERVAL = 0.5
#: ... and at least (a ``W`` below twice this is woken up to this late).
MIN_WATERMARK_INTERVAL = 0.25
#: Seconds a woken watermark waiter waits before it reads again when its
#: page still showed nothing, doubled each time: the notifier estimates the
#: database's clock to within a round trip, which a loaded machine stretches
#: past :data:`~.watchers.WAKE_MARGIN`, and no later stamp would wake it again.
WATERMARK_RECHECKS = (0.05, 0.1, 0.2, 0.4, 0.8)
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
        #: what follows the bounds of each order's watches (:mod:`.watchers`)
        self.checkpoints = CheckpointWatcher(self)
        self.stamps = StampWatcher(self)
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
        kind = order_kind(order)
        waiter = Waiter(kind.waiter_key(offset))
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
                watcher: Watcher = self.checkpoints if kind.sequenced else self.stamps
                watch = self._watches[(order, collection)] = Watch(order, collection, watcher=watcher)
            watch.waiters.add(waiter)
            self._waiting += 1
            counters.waiting += 1
            if watch.changed_at >= read_started and passes(watch.head, waiter.key):
                waiter.event.set()  # the bound moved while the page was read
            watch.watcher.start(watch)
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
                if not rows and watch.watcher.recheck:
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
        """A waiter woken by a bound its page does not show yet (a watermark
        stamp): read again after each of :data:`WATERMARK_RECHECKS` (a
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
            threads = [*self.stamps.threads(), *self.checkpoints.threads()]
        deadline = time.monotonic() + timeout
        for thread in threads:
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    # -- what the watchers call ---------------------------------------------

    @property
    def cond(self) -> threading.Condition:
        """The lock (and condition) the waiters and the watches are kept under."""
        return self._cond

    def watches(self) -> list[Watch]:
        """Every watch (under :attr:`cond`)."""
        return list(self._watches.values())

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less when something is notified or the notifier stops."""
        with self._cond:
            if not self._stopping:
                self._cond.wait(seconds)

    def read_bound(self, watch: Watch) -> None:
        """Read the bound of ``watch`` once, logging (not raising) what goes wrong."""
        try:
            watch.watcher.poll(watch)
        except PyMongoError as error:
            log.warning("Long-poll notifier: reading the bound of %r failed: %s", watch.collection, error)
        except Exception:  # a bug must not leave every waiter to its timeout silently
            log.exception("Long-poll notifier: reading the bound of %r failed", watch.collection)

    def idle(self, watch: Watch) -> bool:
        """Wait until someone waits on ``watch``; True when stopping instead."""
        with self._cond:
            while not self._stopping and not watch.waiters:
                self._cond.wait()  # nobody waits: no query at all
            return self._stopping

    def busy(self, watch: Watch) -> bool:
        """True while someone waits on ``watch`` and the notifier runs."""
        with self._cond:
            return bool(watch.waiters) and not self._stopping

    def advance(self, watch: Watch, bound: Timestamp | float) -> None:
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
