"""The detector: does a feed ever show a document inside a window it already served?

One check:

1. take a *snapshot*: the first page of the feed newest-first
   (``descending=1&opt_fields=public_modified``); its items span the window
   ``[oldest, newest]`` of ``public_modified``;
2. wait a little, so writes that were in flight can commit;
3. *re-fetch* forward from the snapshot's own offset (which is inclusive at
   ``oldest``) until past ``newest``;
4. every re-fetched version (id and ``public_modified``) that was not in the
   snapshot and lies in ``(oldest, newest]`` is a *late arrival*: it committed
   after a reader saw ``newest``, behind it. A crawler that had reached
   ``newest`` asks for ``public_modified > newest`` (or ``>=`` with the group
   already served) and never sees it.

What is *not* an anomaly:

* an item at exactly ``oldest``: the snapshot's page may have cut a group of
  equal stamps, so the rest of the group was simply not on the page;
* an item newer than ``newest``: a new write, the crawler will get it;
* a snapshot item that moved past ``newest``: it was rewritten, the crawler
  will get the new version.

A snapshot item re-fetched with another stamp that still lies inside the
window *is* reported (as a rewrite): that version was stamped behind
``newest`` and committed after the snapshot, so a crawler never sees it.

A commit-ordered feed (its offsets are positions) is not sorted by
``public_modified``, so the check is made as a crawler would see it
(:func:`late_in_feed_order`): after the wait, the feed is read forward from
the snapshot's oldest item and from its newest (the ``prev_page`` offset of
the snapshot); a document that the first read shows and that is neither in
the snapshot nor in the second read lay inside the window: a crawler that
had reached the newest item would never get it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..store.offset import is_position_offset
from .feed import FeedClient, FeedError, FeedItem

#: At most this many pages are read to re-fetch one window.
MAX_REFETCH_PAGES = 50
#: Commit order: how many times a late candidate is looked for again from
#: the snapshot's newest item (one ``wait`` apart) before it counts.
RECHECKS = 10


def late_arrivals(snapshot: Sequence[FeedItem], refetch: Iterable[FeedItem]) -> tuple[FeedItem, ...]:
    """The re-fetched versions a crawler holding the snapshot's newest would miss.

    A version is ``(id, public_modified)``; it is late when it was not in the
    snapshot and ``oldest < public_modified <= newest``.
    """
    if not snapshot:
        return ()
    stamps = [item.public_modified for item in snapshot]
    oldest, newest = min(stamps), max(stamps)
    seen = {(item.id, item.public_modified) for item in snapshot}
    late: list[FeedItem] = []
    for item in refetch:
        version = (item.id, item.public_modified)
        if oldest < item.public_modified <= newest and version not in seen:
            seen.add(version)
            late.append(item)
    return tuple(late)


def late_in_feed_order(
    snapshot: Sequence[FeedItem], from_oldest: Iterable[FeedItem], from_newest: Iterable[FeedItem]
) -> tuple[FeedItem, ...]:
    """The documents a crawler that had reached the snapshot's newest item
    would never get, in any feed order.

    ``from_oldest`` is read forward from the snapshot's oldest item,
    ``from_newest`` (read after it) forward from its newest, both to the end
    of the feed. A document in the first that is neither in the snapshot nor
    in the second lies inside the window already served. Documents are
    compared by id: a commit-ordered feed may show a document's newer content
    at its older position until its entry moves on.
    """
    known = {item.id for item in snapshot} | {item.id for item in from_newest}
    late: list[FeedItem] = []
    for item in from_oldest:
        if item.id not in known:
            known.add(item.id)
            late.append(item)
    return tuple(late)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    ``snapshot`` is newest first as the feed served it; ``late`` the late
    arrivals found by the re-fetch (empty: no anomaly).
    """

    at: float
    snapshot: tuple[FeedItem, ...]
    late: tuple[FeedItem, ...] = ()
    refetched: int = 0
    #: when the snapshot was read (wall clock; ``at`` is when the check ended)
    taken: float | None = None

    @property
    def anomaly(self) -> bool:
        """True when the check found a late arrival."""
        return bool(self.late)

    @property
    def oldest(self) -> float | None:
        return min((item.public_modified for item in self.snapshot), default=None)

    @property
    def newest(self) -> float | None:
        return max((item.public_modified for item in self.snapshot), default=None)

    @property
    def lags_ms(self) -> list[float]:
        """For each late arrival, how much older it is than the window's newest (ms)."""
        newest = self.newest
        if newest is None:
            return []
        return [round((newest - item.public_modified) * 1000.0, 1) for item in self.late]

    def is_rewrite(self, item: FeedItem) -> bool:
        """True when the late version belongs to a document the snapshot showed."""
        return any(shown.id == item.id for shown in self.snapshot)


class Detector:
    """Runs checks against one feed.

    :param wait: seconds between the snapshot and the re-fetch.
    """

    def __init__(self, client: FeedClient, wait: float = 0.2) -> None:
        self.client = client
        self.wait = wait

    def refetch(self, offset: str, newest: float | None = None) -> list[FeedItem]:
        """Items forward from ``offset`` until the first one past ``newest``
        (without ``newest``: to the end of the feed)."""
        items: list[FeedItem] = []
        for _ in range(MAX_REFETCH_PAGES):
            page = self.client.page(offset)
            items.extend(page.items)
            if not page.items or len(page.items) < self.client.limit:
                break  # the end of the feed
            if newest is not None and page.items[-1].public_modified > newest:
                break  # past the window
            offset = page.next_offset
        return items

    def check(self, sleep: Callable[[float], object] = time.sleep) -> CheckResult:
        """One snapshot, a wait and a re-fetch. Raises :class:`.FeedError`."""
        taken = time.time()
        snapshot = self.client.page(descending=True)
        if not snapshot.items:
            sleep(self.wait)
            return CheckResult(time.time(), ())
        sleep(self.wait)
        newest = max(item.public_modified for item in snapshot.items)
        if is_position_offset(snapshot.next_offset) and snapshot.prev_offset:
            refetched = self.refetch(snapshot.next_offset)
            from_newest = self.refetch(snapshot.prev_offset)
            late = late_in_feed_order(snapshot.items, refetched, from_newest)
            for _ in range(RECHECKS):
                if not late:
                    break
                # A document changed again between the two reads is hidden
                # until the sequencer gives it its new position: look again.
                sleep(self.wait)
                again = {item.id for item in self.refetch(snapshot.prev_offset)}
                late = tuple(item for item in late if item.id not in again)
        else:
            refetched = self.refetch(snapshot.next_offset, newest)
            late = late_arrivals(snapshot.items, refetched)
        return CheckResult(time.time(), snapshot.items, late, len(refetched), taken)


@dataclass
class DetectorStats:
    """Counts of a detector run: checks made, anomalies, all lags (ms), errors."""

    checks: int = 0
    failures: int = 0
    lags_ms: list[float] = field(default_factory=list)
    errors: int = 0
    anomalies: list[CheckResult] = field(default_factory=list)

    def add(self, result: CheckResult) -> None:
        self.checks += 1
        if result.anomaly:
            self.failures += 1
            self.lags_ms.extend(result.lags_ms)
            self.anomalies.append(result)


class DetectorThread(threading.Thread):
    """Checks continuously until stopped; read errors are counted, not raised."""

    def __init__(self, detector: Detector, name: str = "detector") -> None:
        super().__init__(name=name, daemon=True)
        self.detector = detector
        self.stats = DetectorStats()
        self.stopping = threading.Event()

    def stop(self) -> None:
        """Finish the current check and end."""
        self.stopping.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                result = self.detector.check(sleep=self.stopping.wait)
            except FeedError:
                self.stats.errors += 1
                self.stopping.wait(0.2)
                continue
            if result.snapshot and not self.stopping.is_set():
                self.stats.add(result)  # a check cut short by stop() is dropped
        self.detector.client.close()
