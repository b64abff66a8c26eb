"""A crawler that follows a feed forward as a real client does.

It starts without an offset, always continues from ``next_page.offset``
(opaque to it), and waits a little when a page is not full. Given a client
that long-polls (``FeedClient(longpoll=...)``), it asks again at once after a
page that is not full when the server held the request (``feed=longpoll``,
SPEC E), and waits only when the server did not (it does not long-poll, or it
is shutting down) or asked for it (``Retry-After``, over its cap). It remembers
every version (id and ``dateModified``) it was given and when it first saw it,
so that the experiment can count lost tenders, duplicates and feed delay.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .feed import FeedClient, FeedError, FeedPage

#: Pages whose reads a crawler's log keeps (a long ``check`` stays bounded).
KEPT_READS = 200_000
#: An empty long-poll answer quicker than this did not wait (a server
#: shutting down): the crawler pauses its poll interval before asking again.
MIN_LONGPOLL_WAIT = 0.05


@dataclass
class CrawlerLog:
    """What the crawler received.

    ``seen[id][dateModified]`` is the wall-clock time the version was first
    delivered; ``deliveries`` counts every item, ``duplicates`` the items
    that delivered a version already seen. ``stamps`` and ``reads`` keep
    what a picture of the run needs (:mod:`.trace`).
    """

    seen: dict[str, dict[str, float]] = field(default_factory=dict)
    #: ``stamps[id][dateModified]``: the version's ``public_modified``
    stamps: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the last :data:`KEPT_READS` pages read: ``(wall-clock time, items, the
    #: newest public_modified delivered so far)`` (in the watermark order,
    #: where its offset stands)
    reads: deque[tuple[float, int, float | None]] = field(default_factory=lambda: deque(maxlen=KEPT_READS))
    #: the newest ``public_modified`` delivered so far, any document
    reached: float | None = None
    #: the newest ``public_modified`` delivered per id
    newest: dict[str, float] = field(default_factory=dict)
    deliveries: int = 0
    duplicates: int = 0
    pages: int = 0
    errors: int = 0

    def saw(self, tender_id: str, date_modified: str) -> bool:
        """True when this version was delivered."""
        return date_modified in self.seen.get(tender_id, {})


class Crawler(threading.Thread):
    """Follows ``client``'s feed forward until stopped (the caller closes
    ``client`` when done with it).

    :param poll_interval: seconds to wait after a page that was not full
        (after a long-poll that waited: none).
    """

    def __init__(self, client: FeedClient, poll_interval: float = 0.05, name: str = "crawler") -> None:
        super().__init__(name=name, daemon=True)
        self.client = client
        self.poll_interval = poll_interval
        self.offset: str | None = None
        self.log = CrawlerLog()
        self.stopping = threading.Event()
        #: the pause before the next request, as :meth:`poll_once` left it
        self.pause = poll_interval

    def stop(self) -> None:
        """Finish the current page and end."""
        self.stopping.set()

    def poll_once(self, wait: bool = True) -> int:
        """Fetch the next page and record its items; returns their number
        (``wait``: the request may long-poll, when the client does)."""
        started = time.monotonic()
        page = self.client.page(self.offset, wait=wait)
        self.pause = self.pause_after(page, time.monotonic() - started)
        now = time.time()
        log = self.log
        log.pages += 1
        for item in page.items:
            versions = log.seen.setdefault(item.id, {})
            log.newest[item.id] = max(item.public_modified, log.newest.get(item.id, item.public_modified))
            log.deliveries += 1
            if item.date_modified in versions:
                log.duplicates += 1
            else:
                versions[item.date_modified] = now
                log.stamps.setdefault(item.id, {})[item.date_modified] = item.public_modified
            if log.reached is None or item.public_modified > log.reached:
                log.reached = item.public_modified
        log.reads.append((now, len(page.items), log.reached))
        if page.next_offset:
            self.offset = page.next_offset
        return len(page.items)

    def pause_after(self, page: FeedPage, took: float) -> float:
        """Seconds to wait after ``page`` (answered in ``took`` seconds) when
        it is not full: the server's ``Retry-After`` if it gave one, none
        after a long-poll that waited, else the poll interval."""
        if page.retry_after is not None:
            return page.retry_after
        if page.longpoll and took >= MIN_LONGPOLL_WAIT:
            return 0.0
        return self.poll_interval

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                count = self.poll_once()
            except FeedError:
                self.log.errors += 1
                self.stopping.wait(0.2)
                continue
            if count < self.client.limit and self.pause > 0:
                self.stopping.wait(self.pause)

    def drain(self, max_pages: int = 10_000) -> None:
        """Read on until a page is not full: the end of what is visible now.

        Call it after the thread has stopped; read errors end it early. It
        never long-polls.
        """
        for _ in range(max_pages):
            try:
                if self.poll_once(wait=False) < self.client.limit:
                    return
            except FeedError:
                self.log.errors += 1
                return
