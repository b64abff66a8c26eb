"""A feed page as the client reads it: the feed URL split into the feed's
identity and the extra parameters it carries, and a page's body read into a
:class:`Page` (its items, its offsets, the page size and the long-poll the
server echoed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .errors import FeedError
from .state import FeedIdentity

#: Query parameters the client sets itself; taken out of the feed URL.
MANAGED_PARAMS = ("offset", "descending", "limit", "mode", "opt_fields")


@dataclass(frozen=True)
class Page:
    """One feed page as the client needs it.

    ``limit`` is the page size the server echoed in its links (it clamps
    what was asked), None if it echoed none; ``started_at`` is the client
    clock when the request that returned the page was first sent.
    """

    items: list[dict[str, Any]]
    next_offset: str
    prev_offset: str | None
    limit: int | None
    started_at: float
    #: the server echoed ``feed=longpoll`` in ``next_page``: it long-polls
    longpoll: bool = False
    #: the ``Retry-After`` of the answer, in seconds (a long-poll over the
    #: server's cap), or None
    retry_after: float | None = None


def split_feed_url(
    url: str, mode: str | None = None, opt_fields: Iterable[str] | None = None
) -> tuple[FeedIdentity, list[tuple[str, str]]]:
    """The identity of the feed at ``url`` and the extra query parameters
    its URL carries.

    ``mode`` / ``opt_fields`` given in the URL's query are used unless given
    explicitly; ``offset``, ``descending`` and ``limit`` in the URL are
    dropped (the client sets them).

    :raises FeedError: ``url`` is not an http(s) URL with a host.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FeedError(f"expected an http:// or https:// feed URL, got {url!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = dict(query)
    extra = [(key, value) for key, value in query if key not in MANAGED_PARAMS]
    if mode is None:
        mode = given.get("mode", "")
    if opt_fields is None:
        opt_fields = [name for name in given.get("opt_fields", "").split(",")]
    fields = tuple(sorted({name.strip() for name in opt_fields if name.strip()}))
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(extra), ""))
    return FeedIdentity(url=base, mode=mode or "", opt_fields=fields), extra


def _echoed_limit(link: Any) -> int | None:
    if not isinstance(link, dict):
        return None
    for key in ("path", "uri"):
        target = link.get(key)
        if isinstance(target, str) and "?" in target:
            values = dict(parse_qsl(target.split("?", 1)[1]))
            if values.get("limit", "").isdigit():
                return int(values["limit"])
    return None


def _echoes_longpoll(link: Any) -> bool:
    """True when a page link carries ``feed=longpoll``."""
    if not isinstance(link, dict):
        return False
    for key in ("path", "uri"):
        target = link.get(key)
        if isinstance(target, str) and "?" in target:
            return dict(parse_qsl(target.split("?", 1)[1])).get("feed") == "longpoll"
    return False


def read_page(body: Any, url: str, started_at: float) -> Page:
    """A :class:`Page` from a decoded feed response; :class:`FeedError` when
    the body is not a feed page."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise FeedError(f'{url} did not return a feed page (no "data" list)')
    next_page = body.get("next_page")
    if not isinstance(next_page, dict) or not isinstance(next_page.get("offset"), str):
        raise FeedError(f'{url} did not return a feed page (no "next_page" offset)')
    items = body["data"]
    if not all(isinstance(item, dict) for item in items):
        raise FeedError(f"{url} returned feed items that are not objects")
    prev_page = body.get("prev_page")
    prev_offset = prev_page.get("offset") if isinstance(prev_page, dict) else None
    if prev_offset is not None and not isinstance(prev_offset, str):
        raise FeedError(f'{url} returned a "prev_page" offset that is not a string')
    return Page(
        items=items,
        next_offset=next_page["offset"],
        prev_offset=prev_offset,
        limit=_echoed_limit(next_page),
        started_at=started_at,
        longpoll=_echoes_longpoll(next_page),
    )
