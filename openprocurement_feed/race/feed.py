"""The race tool's and the checker's view of a feed: typed items with their stamps.

The HTTP side (building requests from the feed URL, reading and checking the
page, retrying what is worth retrying) is the reference crawler's reader,
:class:`~openprocurement_feed.client.http.FeedHTTP`; this module only asks it
for ``public_modified`` on every item and reads the items as
:class:`FeedItem`. Every failure becomes a :class:`FeedError` with a one-line
message that names the URL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from ..client.errors import FeedError, FeedUnavailable
from ..client.http import FeedHTTP, RetryPolicy, split_feed_url

PUBLIC_MODIFIED = "public_modified"

#: How hard the checker and the race tool try one page: a few quick retries
#: of 429, 5xx and connection errors, then the error is theirs to count or
#: report (the crawler's default policy tries for minutes).
CHECK_RETRY = RetryPolicy(initial_backoff=0.2, max_backoff=2.0, max_attempts=3, max_time=15.0)

__all__ = ["CHECK_RETRY", "FeedClient", "FeedError", "FeedItem", "FeedPage", "parse_item"]


@dataclass(frozen=True)
class FeedItem:
    """One feed item as the detector and the crawler need it."""

    id: str
    public_modified: float
    date_modified: str = ""


@dataclass(frozen=True)
class FeedPage:
    """One page: its items and the opaque offsets of its links."""

    items: tuple[FeedItem, ...]
    next_offset: str
    prev_offset: str | None = None
    #: the server echoed ``feed=longpoll`` in ``next_page``: it long-polls
    longpoll: bool = False
    #: the answer's ``Retry-After`` in seconds (a long-poll over the
    #: server's cap of waiters), or None
    retry_after: float | None = None


def parse_item(raw: Any, url: str, need_stamp: bool = True) -> FeedItem:
    """A :class:`FeedItem` from a JSON item; :class:`FeedError` when it is not one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise FeedError(f"{url} did not answer with a feed: an item has no 'id'")
    stamp = raw.get(PUBLIC_MODIFIED)
    if stamp is None and need_stamp:
        raise FeedError(
            f"{url}: feed items lack 'public_modified' (the feed does not offer opt_fields=public_modified)"
        )
    try:
        value = float(stamp) if stamp is not None else 0.0
    except (TypeError, ValueError):
        raise FeedError(f"{url}: an item's public_modified is not a number: {stamp!r}") from None
    return FeedItem(raw["id"], value, str(raw.get("dateModified", "")))


class FeedClient:
    """Fetches pages of the feed at ``url``, ``public_modified`` on every item.

    The URL's own query parameters (``mode=test`` for instance) are kept on
    every request (``mode`` given here overrides the URL's); ``offset``,
    ``descending`` and ``limit`` are set by the client, ``public_modified``
    always among the ``opt_fields``.

    :param retry: how hard to try one page (:data:`CHECK_RETRY` by default).
    :param sleep: how to wait between attempts.
    :param longpoll: seconds a forward request asks the server to wait for
        the next change (``feed=longpoll&timeout=...``, SPEC E); 0, the
        default, asks for none. A server that does not long-poll ignores it.
    """

    def __init__(
        self,
        url: str,
        limit: int = 100,
        timeout: float = 10.0,
        session: requests.Session | None = None,
        mode: str | None = None,
        retry: RetryPolicy = CHECK_RETRY,
        sleep: Callable[[float], None] = time.sleep,
        longpoll: float = 0.0,
    ) -> None:
        identity, _ = split_feed_url(url)
        self.http = FeedHTTP(
            url,
            mode=mode,
            opt_fields={*identity.opt_fields, PUBLIC_MODIFIED},
            limit=limit,
            session=session,
            timeout=timeout,
            retry=retry,
            sleep=sleep,
            longpoll=longpoll,
        )
        self.url = self.http.identity.url
        self.limit = limit
        self.timeout = timeout
        self.longpoll = longpoll

    def page(self, offset: str | None = None, descending: bool = False, wait: bool = True) -> FeedPage:
        """The page after ``offset`` (from the start without one); a forward
        request long-polls when ``longpoll`` is set and ``wait``."""
        try:
            page = self.http.fetch(offset, descending, wait)
        except FeedUnavailable as error:
            raise FeedError(
                f"cannot reach {self.url}: {error.last_error} "
                f"(gave up after {error.attempts} attempt(s) over {error.elapsed:.1f} s)"
            ) from None
        items = tuple(parse_item(raw, self.url) for raw in page.items)
        return FeedPage(items, page.next_offset, page.prev_offset or None, page.longpoll, page.retry_after)

    def close(self) -> None:
        """Close the HTTP connections."""
        self.http.close()
