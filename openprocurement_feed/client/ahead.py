"""How a sync requests its pages: a long-poll in a helper thread, so that
stopping the sync ends the wait at once, and, while a page's objects are
fetched, the next page requested ahead in the background."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from .errors import SyncStopped
from .http import FeedHTTP, Page


class PageRequests:
    """The page requests of one :class:`~.sync.FeedSync`.

    :param http: the feed's :class:`~.http.FeedHTTP`.
    :param stopping: the sync's stop event: set, it ends a long-poll wait and
        a request ahead that waits to retry.
    :param ahead: request the next page in the background
        (:meth:`request_ahead`); only with object fetching.
    """

    def __init__(self, http: FeedHTTP, stopping: threading.Event, ahead: bool = False) -> None:
        self.http = http
        self.stopping = stopping
        self.executor: ThreadPoolExecutor | None = None
        if ahead:
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="feed-prefetch")
        #: the next page requested ahead, per direction (descending or not)
        self.ahead: dict[bool, tuple[str, Future[Page]]] = {}

    def fetch(self, offset: str | None, descending: bool, longpoll: bool) -> Page:
        """The page at ``offset``: the one requested ahead when it is that
        one, else a new request (a long-poll when ``longpoll``)."""
        ahead = self.ahead.pop(descending, None)
        if ahead is not None and ahead[0] == (offset or ""):
            return ahead[1].result()
        return self.wait_for(offset) if longpoll else self.http.fetch(offset, descending=descending, wait=False)

    def wait_for(self, offset: str | None) -> Page:
        """A long-poll request, in a helper thread so that a stop ends the
        wait at once (the request itself is abandoned: it ends at the
        server's answer or its timeout)."""
        future: Future[Page] = Future()

        def request() -> None:
            try:
                future.set_result(self.http.fetch(offset, False, True))
            except BaseException as error:  # handed to the waiting thread
                future.set_exception(error)

        # a daemon thread, not an executor's: exiting never waits for it
        threading.Thread(target=request, name="feed-longpoll", daemon=True).start()
        while not future.done():
            if self.stopping.wait(0.05):
                raise SyncStopped("stopped while waiting for changes")
        return future.result()

    def request_ahead(self, page: Page, descending: bool) -> None:
        """Request the page after ``page`` in the background (with ``ahead``
        only): history goes on while it has items, changes while pages are
        full."""
        if self.executor is None:
            return
        if not descending and len(page.items) < (page.limit or self.http.limit):
            return
        offset = page.next_offset
        future = self.executor.submit(self.http.fetch, offset, descending, False)
        self.ahead[descending] = (offset, future)

    def forget(self) -> None:
        """Drop the pages requested ahead (their offsets no longer hold)."""
        self.ahead.clear()

    def close(self) -> None:
        """Stop the background requests (a request ahead waiting to retry
        gives up at once)."""
        if self.executor is not None:
            self.stopping.set()
            self.executor.shutdown(wait=True, cancel_futures=True)
