"""What a long-poll waiter waits on, in each order: the watchers of the bounds.

A feed's pages end at a bound its order keeps: a sequenced order's
(:attr:`~openprocurement_feed.store.orders.FeedOrder.sequenced`, the commit
order) is the sequencer's checkpoint, the watermark order's is the newest
public stamp once ``W`` has passed. The notifier
(:class:`~.notifier.LongPollNotifier`) holds the waiters; a watcher follows
the bound of the collections waited on in its order, while anyone waits, and
hands each move to :meth:`~.notifier.LongPollNotifier.advance`, which wakes
the waiters it passes:

* :class:`CheckpointWatcher`: one thread per collection, blocked in a
  change stream on the positions' state document; where the stream cannot
  be opened, one read of the checkpoint per ``interval``;
* :class:`StampWatcher`: one thread for every watermark collection, reading
  the stamps newer than the last one seen each tick, and waking their
  waiters at stamp + ``W`` by the database's clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

from bson.timestamp import Timestamp
from pymongo import DESCENDING
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

from ..store.orders import PUBLIC_MODIFIED, STATE_ID, now_seconds, positions_name, read_checkpoint
from ..store.positions import CHECKPOINT
from ..store.windows import newest_row
from .waiters import Watch

log = logging.getLogger("openprocurement_feed.longpoll")

#: The longest a commit feed's change stream waits for an event in one
#: ``getMore``: how soon its thread notices that nobody waits any more, or
#: that the notifier stops.
STREAM_AWAIT_MS = 250
#: Seconds after stamp + ``W`` a watermark waiter is woken: the page's own
#: ``$$NOW - W`` (millisecond resolution) must already include the stamp.
WAKE_MARGIN = 0.003
#: Watermark stamps waiting to become visible, at most, per collection (an
#: older one dropped is covered by a newer one, woken a little later).
MAX_PENDING = 64


class WatcherHost(Protocol):
    """What a watcher asks of the notifier that holds the waiters
    (:class:`~.notifier.LongPollNotifier`)."""

    store: Any
    interval: float
    watermark_interval: float
    watermark_seconds: float
    polls: int

    @property
    def stopping(self) -> bool: ...

    @property
    def cond(self) -> threading.Condition: ...

    def watches(self) -> list[Watch]: ...

    def idle(self, watch: Watch) -> bool: ...

    def busy(self, watch: Watch) -> bool: ...

    def pause(self, seconds: float) -> None: ...

    def read_bound(self, watch: Watch) -> None: ...

    def advance(self, watch: Watch, bound: Timestamp | float) -> None: ...


class Watcher:
    """Follows the bounds of one order's watches for ``notifier``."""

    #: a woken waiter whose page still shows nothing reads it again a few
    #: times before it waits on (the bound it was woken by may not be
    #: visible to its page yet)
    recheck = False

    def __init__(self, notifier: WatcherHost) -> None:
        self.notifier = notifier

    def start(self, watch: Watch) -> None:
        """Make sure a thread follows ``watch`` (called under the notifier's lock)."""
        raise NotImplementedError

    def poll(self, watch: Watch) -> None:
        """Read the bound of ``watch`` once."""
        raise NotImplementedError

    def threads(self) -> list[threading.Thread | None]:
        """The threads this watcher started (the notifier joins them on stop)."""
        return []


class CheckpointWatcher(Watcher):
    """The bound of a sequenced order: the checkpoint of a positions collection."""

    def start(self, watch: Watch) -> None:
        if watch.thread is None or not watch.thread.is_alive():
            watch.thread = threading.Thread(
                target=self.follow, args=(watch,), name=f"feed-longpoll-{watch.collection}", daemon=True
            )
            watch.thread.start()

    def threads(self) -> list[threading.Thread | None]:
        return [watch.thread for watch in self.notifier.watches() if watch.watcher is self]

    def _positions(self, watch: Watch) -> Any:
        return self.notifier.store.db.get_collection(
            positions_name(watch.collection), read_concern=ReadConcern("majority")
        )

    def follow(self, watch: Watch) -> None:
        """A collection's thread: follows its checkpoint while anyone waits."""
        notifier = self.notifier
        while not notifier.idle(watch):
            try:
                self.stream(watch)
            except PyMongoError as error:
                log.warning(
                    "Long-poll notifier: the change stream on %r failed (%s); reading its checkpoint every %g s",
                    positions_name(watch.collection),
                    error,
                    notifier.interval,
                )
                while notifier.busy(watch):
                    notifier.read_bound(watch)
                    notifier.pause(notifier.interval)
            except Exception:  # a bug must not leave every waiter to its timeout silently
                log.exception("Long-poll notifier: following the checkpoint of %r failed", watch.collection)
                notifier.pause(1.0)

    def stream(self, watch: Watch) -> None:
        """Follow the checkpoint through a change stream on the state
        document until nobody waits; the stream is opened before the
        document is read once, so no move between the two is missed."""
        notifier = self.notifier
        pipeline = [{"$match": {"documentKey._id": STATE_ID}}]
        with self._positions(watch).watch(pipeline, max_await_time_ms=STREAM_AWAIT_MS) as stream:
            self.poll(watch)
            while notifier.busy(watch):
                began = time.monotonic()
                change = stream.try_next()
                notifier.polls += 1
                if change is None:
                    self._pause(began)
                    continue
                fields = (change.get("updateDescription") or {}).get("updatedFields") or {}
                checkpoint = fields.get(CHECKPOINT, (change.get("fullDocument") or {}).get(CHECKPOINT))
                if isinstance(checkpoint, Timestamp):
                    self._advance_to(watch, checkpoint)
                elif change.get("operationType") in ("insert", "update", "replace"):
                    self.poll(watch)  # the event does not say: read the document

    def _pause(self, began: float) -> None:
        """After a read of a checkpoint stream that brought nothing, wait
        until ``interval`` after its start (or the stop).

        A server may end an awaited read early on any write to the database
        (the embedded server does): the pause keeps a notifier's stream to
        at most one read per ``interval`` however busy the database is, so
        waiters never take it from the writers. A moved checkpoint is still
        seen within ``interval``; a quiet database is read once per
        :data:`STREAM_AWAIT_MS` (docs/operations.rst, "Long-poll capacity")."""
        rest = self.notifier.interval - (time.monotonic() - began)
        if rest > 0:
            self.notifier.pause(rest)

    def poll(self, watch: Watch) -> None:
        checkpoint, _ = read_checkpoint(self._positions(watch))
        self.notifier.polls += 1
        if checkpoint is not None:
            self._advance_to(watch, checkpoint)

    def _advance_to(self, watch: Watch, checkpoint: Timestamp) -> None:
        """A checkpoint read: wake the waiters if it moved."""
        if watch.head is None or checkpoint > watch.head:
            self.notifier.advance(watch, checkpoint)


class StampWatcher(Watcher):
    """The bound of the watermark order: the newest public stamp, once
    ``W`` has passed by the database's clock."""

    recheck = True

    def __init__(self, notifier: WatcherHost) -> None:
        super().__init__(notifier)
        self.thread: threading.Thread | None = None

    def start(self, watch: Watch) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self.run, name="feed-longpoll", daemon=True)
            self.thread.start()

    def threads(self) -> list[threading.Thread | None]:
        return [self.thread]

    def _mine(self) -> list[Watch]:
        return [watch for watch in self.notifier.watches() if watch.watcher is self]

    def _waiting(self) -> bool:
        """True while a waiter waits on a watermark feed (under the lock)."""
        return any(watch.waiters for watch in self._mine())

    def run(self) -> None:
        """The watermark feeds' thread: reads their newest stamps."""
        notifier = self.notifier
        while True:
            with notifier.cond:
                while not notifier.stopping and not self._waiting():
                    notifier.cond.wait()  # nobody waits: no query at all
                if notifier.stopping:
                    return
                now = time.monotonic()
                watches = [watch for watch in self._mine() if watch.waiters and watch.next_read <= now]
            for watch in watches:
                watch.next_read = now + notifier.watermark_interval
                notifier.read_bound(watch)
            notifier.pause(self.fire_due())

    def newest_stamp(self, watch: Watch) -> float | None:
        """The newest public stamp of the collection, read in windows of the
        stamp down from the present on the feed index (one page's cost,
        whatever the collection's size); None for a collection without one."""
        collection = self.notifier.store.feed_collection(watch.collection)
        sort = [(PUBLIC_MODIFIED, DESCENDING), ("_id", DESCENDING)]

        def run(query: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
            return list(collection.find(query, {PUBLIC_MODIFIED: 1}, sort=sort, limit=limit))

        row = newest_row(run, {"is_public": True}, PUBLIC_MODIFIED, 0.0)
        stamp = row.get(PUBLIC_MODIFIED) if row else None
        return float(stamp) if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) else None

    def poll(self, watch: Watch) -> None:
        notifier = self.notifier
        asked = time.monotonic()
        match: dict[str, Any] = {"is_public": True}
        if watch.newest is not None:
            # only the stamps written since the last read: a range on the
            # feed index, not a sort of the collection (the embedded server
            # sorts in memory and applies a limit only after the sort)
            match[PUBLIC_MODIFIED] = {"$gt": watch.newest}
        else:
            # the first read: from the newest stamp, not over every
            # document; a collection without one is watched from the key's
            # least value on (the search down from the present, some
            # twenty-five empty reads, is not made again at every poll)
            newest = self.newest_stamp(watch)
            if newest is None:
                watch.newest = 0.0
            match[PUBLIC_MODIFIED] = {"$gte": newest} if newest is not None else {"$gt": 0.0}
        found = list(
            notifier.store.feed_collection(watch.collection).aggregate(
                [
                    {"$match": match},
                    {"$group": {"_id": None, "stamp": {"$max": f"${PUBLIC_MODIFIED}"}}},
                    {"$project": {"_id": 0, "stamp": 1, "now": now_seconds()}},
                ]
            )
        )
        answered = time.monotonic()
        notifier.polls += 1
        if not found or not isinstance(found[0].get("stamp"), (int, float)):
            return
        stamp, now = float(found[0]["stamp"]), float(found[0]["now"])
        if watch.newest is not None and stamp <= watch.newest:
            return
        watch.newest = stamp
        # the database clock read "now" about halfway through the round trip
        due = (asked + answered) / 2 + (stamp + notifier.watermark_seconds - now) + WAKE_MARGIN
        with notifier.cond:
            watch.pending.append((due, stamp))
            del watch.pending[:-MAX_PENDING]

    def fire_due(self) -> float:
        """Make the stamps whose time has come visible; the pause until the
        next tick (sooner when a stamp is due before it)."""
        notifier = self.notifier
        pause = notifier.interval
        now = time.monotonic()
        with notifier.cond:
            watches = self._mine()
        for watch in watches:
            if watch.waiters:
                pause = min(pause, max(0.0, watch.next_read - now))
            with notifier.cond:
                due = [stamp for at, stamp in watch.pending if at <= now]
                watch.pending = [(at, stamp) for at, stamp in watch.pending if at > now]
                upcoming = min((at for at, _ in watch.pending), default=None)
            if due:
                notifier.advance(watch, max(due))
            if upcoming is not None:
                pause = min(pause, max(0.0, upcoming - now))
        return pause
