"""The crawl: newest page first, history backward, changes forward.

:class:`FeedSync` drives :class:`~.http.FeedHTTP` the way the protocol
intends:

1. ``GET feed?descending=1``: the newest page. Its ``prev_page`` offset seeds
   the forward cursor, its ``next_page`` offset the backward one.
2. Forward first: ``GET feed?offset=<forward>`` while pages come back full;
   fresh changes are always handled before older history.
3. Then one backward page, ``GET feed?descending=1&offset=<backward>``, until
   a page with empty ``data`` ends the backward crawl.
4. Caught up (backward done, last forward page short): return, or poll the
   forward cursor every ``poll_interval`` seconds.

After the handler returned for a page, the page's items are remembered for
de-duplication and the new cursors are written to the state file: delivery is
at least once, a restart resumes where the last saved page ended.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import requests

from .ahead import PageRequests

# Batch, Handler, SyncStats and the directions are imported from here too.
from .batch import BACKWARD as BACKWARD
from .batch import FORWARD as FORWARD
from .batch import Batch as Batch
from .batch import Handler as Handler
from .batch import SyncStats as SyncStats
from .dedup import SeenItems
from .errors import FeedError, OffsetRejected, SyncStopped
from .http import DEFAULT_LIMIT, FeedHTTP, Page, RetryEvent, RetryPolicy
from .objects import DEFAULT_CONCURRENCY, ObjectFetcher
from .state import FeedIdentity, StateFile, StateKeeper, SyncState

log = logging.getLogger(__name__)

#: Seconds ``FeedSync(longpoll=...)`` asks a caught-up request to wait.
DEFAULT_LONGPOLL = 25.0
#: An empty long-poll answer quicker than this did not wait (a server
#: shutting down): the client pauses ``poll_interval`` before asking again.
MIN_LONGPOLL_WAIT = 0.05


class FeedSync:
    """Follow one feed into ``handler``, resumable through ``state``.

    :param url: the feed URL, e.g. ``https://host/api/2.5/tenders``.
    :param handler: called with a :class:`Batch` per page with new items.
    :param state: the state file path (or a :class:`StateFile`, or any
        :class:`~.state.StateKeeper`); None keeps the position in memory only.
    :param mode: ``mode`` query parameter (``test``, ``_all_``); None takes
        it from the URL.
    :param opt_fields: extra fields to ask for; None takes them from the URL.
    :param limit: page size to ask for.
    :param poll_interval: seconds between forward polls once caught up.
    :param longpoll: seconds a caught-up forward request of a following
        sync (``run(follow=True)``) asks the server to wait for the next
        change (``feed=longpoll``, SPEC E; default 25, 0: never); a one-shot
        sync ends at the head without waiting. A server that long-polls (its ``next_page`` echoes
        ``feed=longpoll``) is asked again at once after an empty answer;
        one that does not is polled every ``poll_interval``.
    :param dedup_size: how many item versions to remember for filtering
        duplicates.
    :param retry: the :class:`~.http.RetryPolicy` for each request.
    :param timeout: ``(connect, read)`` HTTP timeouts in seconds.
    :param session: a :class:`requests.Session` to use.
    :param sleep: how to wait (default: an interruptible wait that
        :meth:`stop` cuts short).
    :param clock: a monotonic clock in seconds.
    :param on_progress: called with :attr:`stats` after every request.
    :param on_retry: called with a :class:`~.http.RetryEvent` before a wait.
    :param max_restarts: offset rejections in a row (without a page
        fetched in between) before giving up with :class:`~.errors.FeedError`.
    :param fetch_objects: also read the whole object of every new item
        (``GET {feed}/{id}``, :class:`~.objects.ObjectFetcher`) and hand them
        to the handler as :attr:`Batch.objects`; while a page's objects are
        fetched, the next page is already requested.
    :param fetch_concurrency: object requests in flight at most.
    :param object_session: a :class:`requests.Session` for the objects.
    :param on_caught_up: called each time a following sync finds the feed
        caught up, before it waits for the next change (a periodic job that
        must not run while the crawl is behind).

    :raises ~openprocurement_feed.client.StateMismatch: the state file belongs
        to another feed.
    :raises ~openprocurement_feed.client.StateError: the state file is
        unreadable.
    """

    def __init__(
        self,
        url: str,
        handler: Handler,
        state: str | os.PathLike[str] | StateKeeper | None = None,
        *,
        mode: str | None = None,
        opt_fields: Iterable[str] | None = None,
        limit: int = DEFAULT_LIMIT,
        poll_interval: float = 1.0,
        longpoll: float = DEFAULT_LONGPOLL,
        dedup_size: int = 100_000,
        retry: RetryPolicy = RetryPolicy(),
        timeout: float | tuple[float, float] = (10.0, 60.0),
        session: requests.Session | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_progress: Callable[[SyncStats], None] | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
        max_restarts: int = 3,
        fetch_objects: bool = False,
        fetch_concurrency: int = DEFAULT_CONCURRENCY,
        object_session: requests.Session | None = None,
        on_caught_up: Callable[[], None] | None = None,
    ) -> None:
        if fetch_concurrency < 1:
            raise ValueError(f"fetch_concurrency must be >= 1, got {fetch_concurrency}")
        self.handler = handler
        self.poll_interval = poll_interval
        self.clock = clock
        self.on_progress = on_progress
        self.on_retry = on_retry
        self.max_restarts = max_restarts
        self.on_caught_up = on_caught_up
        self._sleep_function = sleep
        self._stopping = threading.Event()
        self.http = FeedHTTP(
            url,
            mode=mode,
            opt_fields=opt_fields,
            limit=limit,
            session=session,
            timeout=timeout,
            retry=retry,
            sleep=self._sleep,
            clock=clock,
            on_retry=self._retried,
            longpoll=longpoll,
        )
        self.state_file: StateKeeper | None
        if state is None or isinstance(state, StateKeeper):
            self.state_file = state
        else:
            self.state_file = StateFile(state)
        try:
            self.state = self.state_file.load(self.feed) if self.state_file is not None else SyncState(feed=self.feed)
        except BaseException:
            self.http.close()
            raise
        self.objects: ObjectFetcher | None = None
        #: whether the running :meth:`run` follows the feed (only then does a
        #: caught-up request long-poll: a one-shot sync ends at the head)
        self._following = False
        if fetch_objects:
            self.objects = ObjectFetcher(self.http, fetch_concurrency, object_session)
        self._pages = PageRequests(self.http, self._stopping, ahead=fetch_objects)
        self.seen = SeenItems(dedup_size)
        self.stats = SyncStats(backward_done=self.state.backward_done)
        resumed = self.state.started
        self._repeat_pending = {FORWARD: resumed, BACKWARD: resumed and not self.state.backward_done}
        self._restarted = False
        self._rejections_in_row = 0

    @property
    def feed(self) -> FeedIdentity:
        """The feed this client follows (URL, mode, opt_fields)."""
        return self.http.identity

    # -- control ---------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`run` to return after the page in hand (thread-safe and
        signal-safe). A stopped client stays stopped: make a new one to go
        on (it resumes from the state file)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stopping.is_set()

    def close(self) -> None:
        """Close the HTTP connections (and stop the object fetcher's threads)."""
        self._pages.close()
        if self.objects is not None:
            self.objects.close()
        self.http.close()

    def __enter__(self) -> FeedSync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sleep(self, seconds: float) -> None:
        if self._sleep_function is not None:
            self._sleep_function(seconds)
            stopped = self._stopping.is_set()
        else:
            stopped = self._stopping.wait(seconds)
        if stopped:
            raise SyncStopped("stopped while waiting")

    def _retried(self, event: RetryEvent) -> None:
        self.stats.retries += 1
        self.stats.last_retry = event
        if self.on_retry is not None:
            self.on_retry(event)

    # -- the crawl -------------------------------------------------------

    def run(self, follow: bool = False) -> SyncStats:
        """Sync until caught up (``follow=False``) or until :meth:`stop`.

        Returns :attr:`stats`. Exceptions of the handler propagate (the page
        it failed on is not saved, so a restart delivers it again).

        :raises ~openprocurement_feed.client.FeedUnavailable: the retry policy
            gave up.
        :raises ~openprocurement_feed.client.FeedError: the feed answered
            something the client cannot follow.
        """
        if not self.stats.started_at:
            self.stats.started_at = self.clock()
        self._following = follow
        try:
            while not self._stopping.is_set():
                try:
                    if not self._step(follow):
                        break
                except OffsetRejected as error:
                    self._restart(error)
        except SyncStopped:
            pass
        finally:
            self.stats.elapsed = self.clock() - self.stats.started_at
            self.stats.stopped = self._stopping.is_set()
        return self.stats

    def _step(self, follow: bool) -> bool:
        """One round: the first page, or forward then maybe backward.
        False when the sync is caught up and not following."""
        if not self.state.started:
            self._first_page()
            return True
        offset = self.state.forward_offset
        page = self._fetch(offset, descending=False)
        self._accept(page, FORWARD)
        if len(page.items) >= (page.limit or self.http.limit):
            if page.next_offset != offset:
                return True  # more changes waiting: forward again before history
            log.warning(
                "%s returned a full page without moving the forward offset %r; not asking again before the next poll",
                self.feed.url,
                offset,
            )
        if not self.state.backward_done:
            self._backward_page()
            return True
        self.stats.caught_up_at = page.started_at
        self._progress()
        if not follow:
            return False
        if self.on_caught_up is not None:
            self.on_caught_up()
        self._sleep(self.pause_after(page))
        return True

    def pause_after(self, page: Page) -> float:
        """Seconds to wait after the empty forward ``page`` before asking
        again: none after a long-poll that waited, the server's
        ``Retry-After`` when it gave one (over its cap of waiters), else the
        poll interval (a server that answered at once: it does not long-poll,
        or it is shutting down)."""
        if page.retry_after is not None:
            return page.retry_after
        if page.longpoll and self.clock() - page.started_at >= MIN_LONGPOLL_WAIT:
            return 0.0
        return self.poll_interval

    def _first_page(self) -> None:
        page = self._fetch(None, descending=True)
        if page.prev_offset is None:
            raise FeedError(
                f'{self.feed.url} returned no "prev_page" for a descending request; '
                "it does not follow the openprocurement feed protocol"
            )
        if page.items:
            self._handle(page, BACKWARD)
            self.state.forward_offset = page.prev_offset
            self.state.backward_offset = page.next_offset
        else:  # an empty feed: everything to come arrives forward
            self.state.forward_offset = ""
            self.state.backward_done = True
        self._save(page)

    def _backward_page(self) -> None:
        offset = self.state.backward_offset
        page = self._fetch(offset, descending=True)
        if page.items and page.next_offset == offset:
            raise FeedError(
                f"{self.feed.url} returned a page of history without moving the backward "
                f"offset {offset!r}; the crawl cannot go on"
            )
        if not page.items:
            self.state.backward_done = True
            log.info("Backward crawl of %s done", self.feed.url)
        else:
            self._handle(page, BACKWARD)
            self.state.backward_offset = page.next_offset
        self._save(page)

    def _accept(self, page: Page, direction: str) -> None:
        """Handle a forward page and move the forward cursor past it."""
        if not page.items:
            self.stats.polls += 1
            self._progress()
            return
        self._handle(page, direction)
        self.state.forward_offset = page.next_offset
        self._save(page)

    def _fetch(self, offset: str | None, descending: bool) -> Page:
        # long-poll only when following, once the history is done: a
        # one-shot sync ends at the head without waiting for a change,
        # and an empty forward page must not hold up the backward crawl
        wait = self._following and self.state.backward_done and not descending and self.http.longpoll > 0
        page = self._pages.fetch(offset, descending, wait)
        if offset:
            self._rejections_in_row = 0
        return page

    def _handle(self, page: Page, direction: str) -> None:
        """Hand the new items of ``page`` to the handler, then remember them.

        With ``fetch_objects``, the next page is requested in the background
        and the items' objects are fetched before the handler is called.
        """
        fresh, dropped = self.seen.fresh(page.items)
        self.stats.duplicates += dropped
        self._pages.request_ahead(page, direction == BACKWARD)
        if fresh:
            may_repeat = self._repeat_pending[direction] or (self._restarted and self.seen.evicted > 0)
            batch = Batch(items=fresh, direction=direction, may_repeat=may_repeat)
            if self.objects is not None:
                fetched = self.objects.fetch_page(fresh)
                self.stats.objects += len(fetched.objects)
                self.stats.objects_missing += len(fetched.missing)
                batch = Batch(
                    items=fresh,
                    direction=direction,
                    may_repeat=may_repeat,
                    objects=fetched.objects,
                    missing=tuple(fetched.missing),
                )
            self.handler(batch)
            for item in fresh:
                self.seen.add(item)
        self._repeat_pending[direction] = False
        self.stats.items += len(fresh)
        self.stats.pages += 1
        if direction == FORWARD:
            self.stats.forward_pages += 1
        else:
            self.stats.backward_pages += 1
        self.state.items_handled += len(fresh)
        self.state.pages_handled += 1

    def _save(self, page: Page) -> None:
        if self.state_file is not None:
            self.state_file.save(self.state)
        self.stats.backward_done = self.state.backward_done
        self._progress()

    def _progress(self) -> None:
        self.stats.elapsed = self.clock() - self.stats.started_at
        if self.on_progress is not None:
            self.on_progress(self.stats)

    def _restart(self, error: OffsetRejected) -> None:
        """The server rejected an offset: start over from the newest page,
        keeping the de-duplication memory."""
        self._rejections_in_row += 1
        if self._rejections_in_row > self.max_restarts:
            raise FeedError(
                f"{self.feed.url} rejected {self._rejections_in_row} offsets in a row (last: {error}); giving up"
            ) from None
        log.warning("%s; starting over from the newest page of %s", str(error), self.feed.url)
        self._pages.forget()
        self.state.reset()
        self.state.restarts += 1
        self.stats.restarts += 1
        self._restarted = True
        self._repeat_pending = {FORWARD: False, BACKWARD: False}
        if self.state_file is not None:
            self.state_file.save(self.state)
        self.stats.backward_done = False
        self._progress()


def sync_feed(
    url: str,
    handler: Handler,
    state: str | os.PathLike[str] | None = None,
    follow: bool = False,
    **options: Any,
) -> SyncStats:
    """Sync the feed at ``url`` into ``handler`` once (or keep following);
    ``options`` are those of :class:`FeedSync`. Returns the stats."""
    with FeedSync(url, handler, state, **options) as client:
        return client.run(follow=follow)
