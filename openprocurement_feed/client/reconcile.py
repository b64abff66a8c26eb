"""Reconcile a crawler's copy against a feed: what is missing, stale, extra.

Any crawler keeps, for each object, the latest ``dateModified`` the feed
served it. :func:`reconcile_feed` takes that store as an iterable of
``(id, dateModified)`` pairs and compares it with the feed's set over the
feed's reconcile endpoint (SPEC G.2), in rounds of Negentropy V1, at a cost
that grows with the differences, not with the feed::

    from openprocurement_feed.client.reconcile import reconcile_feed

    result = reconcile_feed("https://host/api/2.5/tenders", store.items())
    for object_id in result.missing + result.stale:
        store.refresh(object_id)
    for object_id in result.extra:
        store.delete(object_id)

1. ``GET {prefix}/feeds/{feed}/reconcile`` gives the feed's horizon
   ``until``: records below it are compared on both sides (SPEC G.1: a
   record is the object's ``dateModified`` in microseconds and a 32-byte id
   whose first half is the object's id).
2. ``POST ...?until=`` with the initiator's message, until the initiator
   has nothing more to say. The server keeps no state between rounds.
3. The ids the feed has and the copy lacks, and those the copy has and the
   feed lacks, are sorted by object: **missing** (the copy holds no version),
   **stale** (the copy holds another version). An object seen as stale or
   **extra** (the feed no longer shows it) is read once more (``GET
   {feed}/{id}``): if it changed while the check ran it is reported as
   **changed**, not as a difference (SPEC G.5).

Requests go through :class:`~.http.FeedHTTP`: its retry policy (``503`` with
``Retry-After``, dropped connections) and its errors.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import requests

from ..reconcile.endpoint import PROTOCOL, endpoint_path
from ..reconcile.errors import ProtocolError, UnsupportedVersion
from ..reconcile.negentropy import Negentropy
from ..reconcile.records import object_id, record_id, timestamp_us
from ..reconcile.storage import Storage
from .copies import Copy, MemoryCopy, ReconcileResult, RoundReport, read_store
from .errors import FeedError
from .http import (
    FeedHTTP,
    RetryPolicy,
    TransientError,
    error_description,
    parse_retry_after,
    send_request,
    split_feed_url,
)
from .objects import DEFAULT_CONCURRENCY, ObjectFetcher

#: The feed's query parameters that do not choose the feed's set of objects.
PAGE_PARAMS = ("offset", "descending", "limit", "opt_fields", "feed", "timeout", "until")
#: How long the rounds keep trying: a ``503`` (the server's aggregates not
#: ready) is retried as its ``Retry-After`` says, a few times.
RECONCILE_RETRY = RetryPolicy(initial_backoff=0.5, max_backoff=10.0, max_attempts=5, max_time=120.0)
#: Rounds after which a reconciliation is abandoned (a peer that never ends).
MAX_ROUNDS = 200


class ReconcileError(FeedError):
    """The feed cannot be reconciled: no endpoint, a ``400`` / ``501``
    answer, an answer that is not a Negentropy message."""


def reconcile_url(feed_url: str) -> str:
    """The reconcile endpoint of the feed at ``feed_url``:
    ``https://host/api/2.5/tenders`` → ``https://host/api/2.5/feeds/tenders/reconcile``
    (the feed's query parameters are dropped: see :func:`feed_query`).

    :raises FeedError: not an http(s) URL with a path that names a feed.
    """
    parts = urlsplit(feed_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FeedError(f"expected an http:// or https:// feed URL, got {feed_url!r}")
    prefix, _, name = parts.path.rstrip("/").rpartition("/")
    if not name:
        raise FeedError(f"the feed URL {feed_url!r} names no feed (expected e.g. https://host/api/2.5/tenders)")
    return urlunsplit((parts.scheme, parts.netloc, endpoint_path(prefix, name), "", ""))


class FeedReconciler:
    """The rounds against one feed's reconcile endpoint.

    :param url: the feed URL (``mode`` and the feed's other query parameters
        in it are kept), e.g. ``https://host/api/2.5/tenders?mode=test``.
    :param http: a :class:`~.http.FeedHTTP` to use (its session, timeouts,
        retry policy); by default one with :data:`RECONCILE_RETRY`.
    :param endpoint: the reconcile endpoint, when not where
        :func:`reconcile_url` puts it.
    :param concurrency: objects read at once for the second read.
    """

    def __init__(
        self,
        url: str,
        *,
        mode: str | None = None,
        http: FeedHTTP | None = None,
        endpoint: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        timeout: float | tuple[float, float] = (10.0, 60.0),
    ) -> None:
        self.http = http if http is not None else FeedHTTP(url, mode=mode, retry=RECONCILE_RETRY, timeout=timeout)
        self._owns_http = http is None
        self.identity, self._params = split_feed_url(url, mode)
        self.endpoint = endpoint or reconcile_url(url)
        self.concurrency = concurrency
        self._fetcher: ObjectFetcher | None = None
        self.recheck_bytes = 0
        self._lock = threading.Lock()

    # -- requests ----------------------------------------------------------

    def query(self, **extra: str) -> str:
        """The endpoint's URL with the feed's own parameters (``mode``, the
        URL's filters) and ``extra``."""
        params = [(key, value) for key, value in self._params if key not in PAGE_PARAMS]
        if self.identity.mode:
            params.append(("mode", self.identity.mode))
        params.extend(extra.items())
        return f"{self.endpoint}?{urlencode(params)}" if params else self.endpoint

    def horizon(self) -> tuple[dict[str, Any], int]:
        """The ``GET`` answer (``until``, ``protocol``, ``frame_size_limit``,
        ``records``), checked, and its size in bytes."""
        url = self.query()
        body = self.http.retrying(url, lambda: self._send("GET", url))
        try:
            answer = json.loads(body)
        except ValueError:
            raise ReconcileError(f"GET {url} did not return JSON: is it a reconcile endpoint?") from None
        if not isinstance(answer, dict):
            raise ReconcileError(f"GET {url} did not return a JSON object")
        for key in ("until", "protocol", "frame_size_limit"):
            value = answer.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ReconcileError(f'GET {url} returned no "{key}" integer >= 0: {answer!r:.200}')
        if answer["protocol"] != PROTOCOL:
            raise ReconcileError(f"{url} speaks reconcile protocol {answer['protocol']}; this client speaks {PROTOCOL}")
        return answer, len(body)

    def round_trip(self, until: int, message: bytes) -> bytes:
        """``POST ...?until=`` with ``message``; the server's message."""
        url = self.query(until=str(until))
        return self.http.retrying(url, lambda: self._send("POST", url, message))

    def _send(self, method: str, url: str, body: bytes | None = None) -> bytes:
        headers = {"Content-Type": "application/octet-stream"} if body is not None else None
        response = send_request(self.http.session, method, url, self.http.timeout, body, headers)
        with response:
            status = response.status_code
            if status == 200:
                return response.content
            description = error_description(response)
            if status == 503 or status == 429 or status == 408 or status in (502, 504):
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                raise TransientError(f"HTTP {status}: {description}" if description else f"HTTP {status}", retry_after)
            if status == 404:
                raise ReconcileError(f"{method} {url}: HTTP 404: the server has no reconcile endpoint there")
            if status == 501:
                raise ReconcileError(f"{method} {url}: HTTP 501: this feed cannot be reconciled: {description}")
            if status >= 500:
                raise TransientError(f"HTTP {status}: {description}" if description else f"HTTP {status}")
            raise ReconcileError(f"{method} {url}: HTTP {status}: {description}")

    # -- the check ---------------------------------------------------------

    def run(
        self,
        store: Iterable[tuple[str, str]] | Copy,
        *,
        on_round: Callable[[RoundReport], None] | None = None,
        recheck: bool = True,
        max_rounds: int = MAX_ROUNDS,
    ) -> ReconcileResult:
        """Reconcile ``store`` with the feed: ``(id, dateModified)`` pairs,
        or a :class:`~.copies.Copy` that reads its records itself (a
        database's index, streamed).

        :raises ValueError: a pair of the store is not a feed record.
        :raises ReconcileError: the endpoint refused, or answered bytes that
            are not a Negentropy message.
        :raises FeedUnavailable: the endpoint kept failing (``503``...).
        :raises FeedError: any other answer the client cannot follow.
        """
        started = time.monotonic()
        reread_before = self.recheck_bytes
        copy = store if isinstance(store, Copy) else MemoryCopy.of(store)
        answer, horizon_bytes = self.horizon()
        until = answer["until"]
        with copy.snapshot(until) as snapshot:
            storage = snapshot.storage()
            result, have, need = self._rounds(storage, answer, horizon_bytes, on_round, max_rounds, started)
            held = snapshot.versions({object_id(one) for one in have | need})
        self.sort(result, held, have, need, recheck)
        result.recheck_bytes = self.recheck_bytes - reread_before
        result.elapsed = time.monotonic() - started
        return result

    def _rounds(
        self,
        storage: Storage,
        answer: dict[str, Any],
        horizon_bytes: int,
        on_round: Callable[[RoundReport], None] | None,
        max_rounds: int,
        started: float,
    ) -> tuple[ReconcileResult, set[bytes], set[bytes]]:
        """The rounds over ``storage``: the result so far, the ids only the
        copy has and those only the feed has."""
        until = answer["until"]
        limit = answer["frame_size_limit"]
        try:
            negentropy = Negentropy(storage, frame_size_limit=limit)
        except ValueError as error:
            raise ReconcileError(f"the server's frame_size_limit {limit} is unusable: {error}") from None
        result = ReconcileResult(
            endpoint=self.endpoint,
            until=until,
            frame_size_limit=limit,
            feed_records=int(answer.get("records") or 0),
            copy_records=storage.size(),
            bytes_received=horizon_bytes,
        )
        have: set[bytes] = set()
        need: set[bytes] = set()
        message: bytes | None = negentropy.initiate()
        while message is not None:
            if result.rounds >= max_rounds:
                raise ReconcileError(f"no end after {max_rounds} rounds: the server's answers never converge")
            reply = self.round_trip(until, message)
            result.rounds += 1
            result.bytes_sent += len(message)
            result.bytes_received += len(reply)
            try:
                message, new_have, new_need = negentropy.reconcile_initiator(reply)
            except UnsupportedVersion:
                raise ReconcileError(
                    f"the server answered round {result.rounds} in another Negentropy protocol version "
                    f"(first byte 0x{reply[:1].hex() or '??'}); this client speaks V1"
                ) from None
            except ProtocolError as error:
                raise ReconcileError(
                    f"the server's answer to round {result.rounds} is not a valid Negentropy message: {error}"
                ) from None
            have.update(new_have)
            need.update(new_need)
            if on_round is not None:
                on_round(
                    RoundReport(
                        result.rounds,
                        result.bytes_sent,
                        result.bytes_received,
                        len(have),
                        len(need),
                        time.monotonic() - started,
                    )
                )
        return result, have, need

    def sort(
        self, result: ReconcileResult, held: dict[str, int], have: set[bytes], need: set[bytes], recheck: bool
    ) -> None:
        """Fill ``result``'s lists from the ids only the copy (``have``) and
        only the feed (``need``) hold."""
        feed_versions = {object_id(one): one for one in need}
        copy_only = {object_id(one) for one in have}
        missing = sorted(key for key in feed_versions if key not in held)
        stale = sorted(key for key in feed_versions if key in held)
        extra = sorted(key for key in copy_only if key not in feed_versions)
        result.missing = missing
        if not recheck:
            result.stale, result.extra = stale, extra
            return
        objects = self.read_again(stale + extra)
        result.objects = objects
        result.rechecked = len(objects)
        for key in stale:
            current = objects.get(key)
            if _version(current) is not None and record_id(key, _version(current) or 0) in need:
                result.stale.append(key)
            else:
                result.changed.append(key)  # moved or gone since the feed answered
        for key in extra:
            current = objects.get(key)
            version = _version(current)
            if current is None or version == held[key]:
                result.extra.append(key)  # gone, or a version the feed does not show
            else:
                result.changed.append(key)
        result.changed.sort()

    def read_again(self, ids: list[str]) -> dict[str, dict[str, Any] | None]:
        """The current object of each of ``ids`` (None: ``404``)."""
        if not ids:
            return {}
        fetcher = self.fetcher()
        if len(ids) == 1 or self.concurrency == 1:
            return {key: fetcher.fetch(key) for key in ids}
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(ids)), thread_name_prefix="recheck") as pool:
            return dict(zip(ids, pool.map(fetcher.fetch, ids), strict=True))

    def repair_lines(self, result: ReconcileResult, whole: bool = False) -> list[dict[str, Any]]:
        """The lines that bring a JSON-lines copy in line with ``result``:
        the current version of every missing, stale and changed object (the
        whole object with ``whole``, else the feed item ``id`` and
        ``dateModified``), and ``{"id": ..., "removed": true}`` for every
        extra one and every object gone meanwhile (``404``)."""
        wanted = result.missing + result.stale + result.changed
        unread = [key for key in wanted if key not in result.objects]
        objects = {**result.objects, **self.read_again(unread)}
        lines: list[dict[str, Any]] = []
        for key in wanted:
            current = objects.get(key)
            if current is None or _version(current) is None:
                if key not in result.missing:
                    lines.append({"id": key, "removed": True})
            elif whole:
                lines.append(current)
            else:
                lines.append({"id": key, "dateModified": current["dateModified"]})
        lines.extend({"id": key, "removed": True} for key in result.extra)
        return lines

    def fetcher(self) -> ObjectFetcher:
        """The object reader (``GET {feed}/{id}``), its bodies counted."""
        if self._fetcher is None:
            fetcher = ObjectFetcher(self.http, concurrency=self.concurrency)
            fetcher.session.hooks["response"].append(self._count)
            self._fetcher = fetcher
        return self._fetcher

    def _count(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        size = len(response.content)
        with self._lock:
            self.recheck_bytes += size

    def close(self) -> None:
        """Close the object reader and, when this reconciler made it, the feed's HTTP client."""
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher = None
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> FeedReconciler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _version(current: dict[str, Any] | None) -> int | None:
    """The microseconds of an object's ``dateModified``, None if it has none."""
    if current is None:
        return None
    try:
        return timestamp_us(current.get("dateModified"))  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return None


def reconcile_feed(
    url: str,
    store: Iterable[tuple[str, str]],
    *,
    mode: str | None = None,
    on_round: Callable[[RoundReport], None] | None = None,
    recheck: bool = True,
    http: FeedHTTP | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> ReconcileResult:
    """Reconcile a crawler's ``store`` (``(id, dateModified)`` pairs) with
    the feed at ``url``; see :class:`FeedReconciler` and the module's
    docstring. ``recheck=False`` skips the second read of stale and extra
    objects (nothing is then reported as changed)."""
    with FeedReconciler(url, mode=mode, http=http, concurrency=concurrency) as reconciler:
        return reconciler.run(store, on_round=on_round, recheck=recheck)


__all__ = [
    "MAX_ROUNDS",
    "PROTOCOL",
    "RECONCILE_RETRY",
    "Copy",
    "FeedReconciler",
    "MemoryCopy",
    "ReconcileError",
    "ReconcileResult",
    "RoundReport",
    "read_store",
    "reconcile_feed",
    "reconcile_url",
]
