"""Fetching the whole objects a feed page names, concurrently.

A feed item is a pointer (``id``, ``dateModified``, a few fields); a real
databridge then reads every object with ``GET {feed}/{id}``. An
:class:`ObjectFetcher` does that for one page at a time: at most
``concurrency`` requests in flight, each retried by the same
:class:`~.http.RetryPolicy` as the feed pages (``429`` with ``Retry-After``,
``5xx``, ``408``, dropped connections and timeouts), the objects returned in
the page's order. An object that answers ``404`` was deleted (or hidden)
since the page was served: it is skipped with a warning, not fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests
from requests.adapters import HTTPAdapter

from .errors import FeedError
from .http import FeedHTTP, TransientError, error_description, parse_retry_after, send_get

log = logging.getLogger(__name__)

#: Objects fetched at once when the caller does not choose.
DEFAULT_CONCURRENCY = 8


@dataclass(frozen=True)
class FetchedPage:
    """The objects of one page's items, in the page's order.

    ``objects`` holds one object per item that could be read; ``missing``
    the ids that answered ``404`` (deleted or hidden meanwhile).
    """

    objects: list[dict[str, Any]]
    missing: list[str]


class ObjectFetcher:
    """``GET {feed}/{id}`` for the items of a page, ``concurrency`` at a time.

    :param http: the :class:`~.http.FeedHTTP` of the feed: its URL, timeouts,
        retry policy, sleep and retry callback are used for every object.
    :param concurrency: the most object requests in flight (>= 1).
    :param session: a :class:`requests.Session` for the objects (a new one,
        with a connection pool of ``concurrency`` connections, by default).
    """

    def __init__(
        self,
        http: FeedHTTP,
        concurrency: int = DEFAULT_CONCURRENCY,
        session: requests.Session | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.http = http
        self.concurrency = concurrency
        if session is None:
            session = requests.Session()
            adapter = HTTPAdapter(pool_connections=1, pool_maxsize=concurrency)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        self.session = session
        self.session.headers.update(
            {key: value for key, value in http.session.headers.items() if key in ("User-Agent", "Accept")}
        )
        parts = urlsplit(http.identity.url)
        self._base = (parts.scheme, parts.netloc, parts.path.rstrip("/"))
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="feed-object")

    def object_url(self, object_id: str) -> str:
        """The URL of the object ``object_id`` of this feed."""
        scheme, netloc, path = self._base
        return urlunsplit((scheme, netloc, f"{path}/{quote(str(object_id), safe='')}", "", ""))

    def fetch_page(self, items: Sequence[dict[str, Any]]) -> FetchedPage:
        """The objects of ``items``, in their order; returns when every one
        was read or answered ``404``.

        :raises FeedUnavailable: an object kept failing until the retry
            policy gave up.
        :raises FeedError: an object answered something else the client
            cannot follow.
        """
        ids = [item["id"] for item in items]
        if self.concurrency == 1 or len(ids) <= 1:
            results = [self.fetch(object_id) for object_id in ids]
        else:
            results = list(self._pool.map(self.fetch, ids))
        objects = [result for result in results if result is not None]
        missing = [object_id for object_id, result in zip(ids, results, strict=False) if result is None]
        for object_id in missing:
            log.warning("Object %s of %s is gone (404): skipped", object_id, self.http.identity.url)
        return FetchedPage(objects, missing)

    def fetch(self, object_id: str) -> dict[str, Any] | None:
        """One object (the ``data`` of its body), retried by the policy;
        None when it answers ``404``."""
        url = self.object_url(object_id)
        return self.http.retrying(url, lambda: self._get_once(url))

    def _get_once(self, url: str) -> dict[str, Any] | None:
        response = send_get(self.session, url, self.http.timeout)
        with response:
            status = response.status_code
            if status == 200:
                try:
                    body = response.json()
                except ValueError:
                    raise FeedError(f"{url} did not return JSON") from None
                data = body.get("data") if isinstance(body, dict) else None
                if not isinstance(data, dict):
                    raise FeedError(f'{url} did not return an object (no "data" object)')
                return data
            if status == 404:
                return None
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if status == 429 or status == 408 or status >= 500:
                raise TransientError(f"HTTP {status}", retry_after)
            raise FeedError(f"GET {url}: HTTP {status}: {error_description(response)}")

    def close(self) -> None:
        """Stop the worker threads and close the connections."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.session.close()
