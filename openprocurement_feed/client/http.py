"""Fetching feed pages over HTTP, with the retry policy of the protocol.

One :class:`FeedHTTP` per feed: it builds every request from the feed URL the
caller gave (never from the ``uri`` the server echoes, whose host may be wrong
behind a proxy), the client's own parameters and the opaque offset, and it
retries what is worth retrying:

* ``429``: wait ``Retry-After`` (seconds or an HTTP date), or back off;
* ``5xx``, ``408``, connection errors and timeouts: exponential backoff with
  jitter, capped (``Retry-After`` honoured when the server sends one);
* ``404`` for a request with an offset: :class:`~.errors.OffsetRejected`, the
  caller starts over;
* anything else: :class:`~.errors.FeedError` at once.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

import requests
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential, wait_random

from .errors import FeedError, FeedUnavailable, OffsetRejected
from .page import Page, read_page, split_feed_url
from .retry import RetryEvent, RetryPolicy, TransientError, parse_retry_after

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The parameters of a long-poll request: they replace the URL's own.
LONGPOLL_PARAMS = ("feed", "timeout")
#: Seconds a long-poll answer may take beyond its ``timeout`` before the
#: client's read timeout gives up on it.
LONGPOLL_READ_MARGIN = 10.0
#: The page size asked for when the caller does not choose one.
DEFAULT_LIMIT = 100


def client_version() -> str:
    """The installed version of openprocurement_feed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openprocurement_feed")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


def user_agent() -> str:
    """``openprocurement-feed-sync/<version> python-requests/<version>``."""
    return f"openprocurement-feed-sync/{client_version()} python-requests/{requests.__version__}"


def error_description(response: requests.Response) -> str:
    """The ``description`` of a JSON error body, else the start of the body."""
    try:
        body = response.json()
        return "; ".join(f"{error.get('name', '?')}: {error.get('description', '')}" for error in body["errors"])
    except (ValueError, KeyError, TypeError, AttributeError):
        text = response.text.strip().replace("\n", " ")
        return text[:200]


def send_get(session: requests.Session, url: str, timeout: float | tuple[float, float]) -> requests.Response:
    """``GET url``, with the failures of the request itself sorted for the
    retry policy: a time-out, a failed connection or a body cut short is a
    :class:`TransientError` (retried); a TLS error or a request that cannot
    be made is a :class:`FeedError` (not retried). Used for feed pages and
    for objects (:mod:`.objects`)."""
    return send_request(session, "GET", url, timeout)


def send_request(
    session: requests.Session,
    method: str,
    url: str,
    timeout: float | tuple[float, float],
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> requests.Response:
    """One request, its failures sorted as :func:`send_get` sorts them
    (the reconcile rounds POST their messages with it)."""
    try:
        return session.request(method, url, data=data, headers=headers, timeout=timeout)
    except requests.exceptions.SSLError as error:
        raise FeedError(f"TLS error for {url}: {error}") from None
    except requests.Timeout:
        raise TransientError(f"no answer within {_seconds(timeout)} s") from None
    except requests.ConnectionError:
        raise TransientError("the connection failed (refused, reset or unknown host)") from None
    except (
        requests.exceptions.ChunkedEncodingError,
        requests.exceptions.ContentDecodingError,
    ) as error:
        raise TransientError(f"{type(error).__name__}: {_short(error)}") from None
    except requests.RequestException as error:
        raise FeedError(f"cannot request {url}: {error}") from None


class FeedHTTP:
    """Requests for the pages of one feed.

    :param url: the feed URL, e.g. ``https://host/api/2.5/tenders`` (extra
        query parameters in it are kept).
    :param mode: the ``mode`` parameter (``test``, ``_all_``), or None to take
        it from the URL.
    :param opt_fields: the ``opt_fields`` to ask for, or None to take them
        from the URL.
    :param limit: the page size to ask for (the server may clamp it).
    :param session: a :class:`requests.Session` to use (the client sets its
        ``User-Agent``); a new one by default.
    :param timeout: ``(connect, read)`` timeouts in seconds.
    :param sleep: how to wait between attempts (may raise to abort).
    :param clock: a monotonic clock in seconds.
    :param on_retry: called with a :class:`RetryEvent` before each wait.
    :param longpoll: seconds a forward request asks the server to wait for
        changes (``feed=longpoll&timeout=...``, SPEC E); 0 asks for none.
        A server that does not long-poll ignores the parameters.
    """

    def __init__(
        self,
        url: str,
        *,
        mode: str | None = None,
        opt_fields: Iterable[str] | None = None,
        limit: int = DEFAULT_LIMIT,
        session: requests.Session | None = None,
        timeout: float | tuple[float, float] = (10.0, 60.0),
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_retry: Callable[[RetryEvent], None] | None = None,
        longpoll: float = 0.0,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if longpoll < 0:
            raise ValueError(f"longpoll must be >= 0, got {longpoll}")
        self.longpoll = longpoll
        self.identity, self._extra = split_feed_url(url, mode, opt_fields)
        self.limit = limit
        self.timeout = timeout
        self.retry = retry
        self.sleep = sleep
        self.clock = clock
        self.on_retry = on_retry
        self.session = session or requests.Session()
        self.session.headers["User-Agent"] = user_agent()
        self.session.headers.setdefault("Accept", "application/json")

    def close(self) -> None:
        """Close the HTTP connections.

        The pools are closed one by one: some urllib3 releases only drop them
        from the session on ``close()``, leaving their sockets open for as
        long as anything (a response in a logged traceback) refers to them.
        """
        for adapter in self.session.adapters.values():
            manager = getattr(adapter, "poolmanager", None)
            pools = getattr(manager, "pools", None)
            if pools is None:
                continue
            for key in list(pools.keys()):
                pool = pools.get(key)
                if pool is not None:
                    pool.close()
        self.session.close()

    def request_url(self, offset: str | None, descending: bool = False, wait: bool = True) -> str:
        """The URL of the page at ``offset`` (None or ``""``: the first page);
        a forward one long-polls when ``longpoll`` is set and ``wait``."""
        waits = bool(self.longpoll and wait and not descending)
        params = [(key, value) for key, value in self._extra if not (waits and key in LONGPOLL_PARAMS)]
        params.append(("limit", str(self.limit)))
        if self.identity.mode:
            params.append(("mode", self.identity.mode))
        if self.identity.opt_fields:
            params.append(("opt_fields", ",".join(self.identity.opt_fields)))
        if descending:
            params.append(("descending", "1"))
        elif waits:
            params.append(("feed", "longpoll"))
            params.append(("timeout", f"{self.longpoll:g}"))
        if offset:
            params.append(("offset", offset))
        parts = urlsplit(self.identity.url)
        return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(params), ""))

    def fetch(self, offset: str | None, descending: bool = False, wait: bool = True) -> Page:
        """The page at ``offset``, retried by the policy (``wait``: a forward
        request may long-poll, see ``longpoll``).

        :raises OffsetRejected: 404 for a request with an offset.
        :raises FeedUnavailable: the retry policy gave up.
        :raises FeedError: any other answer the client cannot follow.
        """
        url = self.request_url(offset, descending, wait)
        started = self.clock()
        waits = wait and not descending
        return self.retrying(url, lambda: self._get_once(url, offset or "", started, not waits), started)

    def retrying(self, url: str, attempt: Callable[[], T], started: float | None = None) -> T:
        """Call ``attempt`` (one request to ``url``) until it returns, under
        this feed's retry policy: it raises :class:`TransientError` for what
        is worth retrying.

        :raises FeedUnavailable: the retry policy gave up.
        """
        if started is None:
            started = self.clock()
        begun = started
        retrying = Retrying(
            sleep=self.sleep,
            retry=retry_if_exception_type(TransientError),
            wait=self._wait,
            stop=lambda state: self._should_stop(state, begun),
            before_sleep=lambda state: self._before_sleep(state, url),
            retry_error_callback=lambda state: self._give_up(state, url, begun),
        )
        return retrying(attempt)

    # -- one attempt -----------------------------------------------------

    def request_timeout(self, no_wait: bool = False) -> float | tuple[float, float]:
        """The HTTP timeouts of a request: a long-poll's read timeout covers
        its wait plus :data:`LONGPOLL_READ_MARGIN`."""
        if no_wait or not self.longpoll:
            return self.timeout
        connect, read = self.timeout if isinstance(self.timeout, tuple) else (self.timeout, self.timeout)
        return (connect, max(read, self.longpoll + LONGPOLL_READ_MARGIN))

    def _get_once(self, url: str, offset: str, started: float, no_wait: bool = False) -> Page:
        response = send_get(self.session, url, self.request_timeout(no_wait))
        with response:  # closed even when an exception keeps this frame alive
            return self._read(response, url, offset, started)

    def _read(self, response: requests.Response, url: str, offset: str, started: float) -> Page:
        status = response.status_code
        if status == 200:
            try:
                body = response.json()
            except ValueError:
                raise FeedError(
                    f"{url} did not return JSON (Content-Type: {response.headers.get('Content-Type', 'none')})"
                ) from None
            page = read_page(body, url, started)
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if retry_after is not None:
                page = dataclasses.replace(page, retry_after=retry_after)
            return page
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if status == 429 or status == 408 or status >= 500:
            raise TransientError(f"HTTP {status}", retry_after)
        description = error_description(response)
        if status == 404 and offset:
            raise OffsetRejected(offset, description)
        raise FeedError(f"GET {url}: HTTP {status}: {description}")

    # -- the retry policy, as tenacity callbacks -------------------------

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        policy = self.retry
        if isinstance(error, TransientError) and error.retry_after is not None:
            return max(policy.initial_backoff, min(error.retry_after, policy.max_retry_after))
        backoff = wait_exponential(multiplier=policy.initial_backoff, max=policy.max_backoff) + wait_random(
            0, policy.initial_backoff
        )
        return float(backoff(state))

    def _should_stop(self, state: RetryCallState, started: float) -> bool:
        policy = self.retry
        if policy.max_attempts is not None and state.attempt_number >= policy.max_attempts:
            return True
        if policy.max_time is not None:
            elapsed = self.clock() - started
            return elapsed + state.upcoming_sleep > policy.max_time
        return False

    def _before_sleep(self, state: RetryCallState, url: str) -> None:
        reason = _reason(state)
        log.info(
            "Retrying %s in %.2f s (attempt %d failed: %s)", url, state.upcoming_sleep, state.attempt_number, reason
        )
        if self.on_retry is not None:
            self.on_retry(RetryEvent(url, state.attempt_number, state.upcoming_sleep, reason))

    def _give_up(self, state: RetryCallState, url: str, started: float) -> Page:
        raise FeedUnavailable(url, state.attempt_number, self.clock() - started, _reason(state))


def _reason(state: RetryCallState) -> str:
    error = state.outcome.exception() if state.outcome else None
    return str(error) if error is not None else "unknown error"


def _seconds(timeout: float | tuple[float, float]) -> str:
    """A timeout as the messages show it: ``10`` or ``10/60`` (connect/read)."""
    if isinstance(timeout, tuple):
        return "/".join(f"{part:g}" for part in timeout)
    return f"{timeout:g}"


def _short(error: BaseException) -> str:
    text = str(error)
    return text if len(text) <= 200 else text[:197] + "..."


__all__ = [
    "DEFAULT_LIMIT",
    "FeedHTTP",
    "Page",
    "RetryEvent",
    "RetryPolicy",
    "TransientError",
    "parse_retry_after",
    "send_request",
    "split_feed_url",
    "user_agent",
]
