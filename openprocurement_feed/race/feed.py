"""Reading an openprocurement-style feed over HTTP, as a client does.

:class:`FeedClient` fetches one page at a time with ``requests`` and checks
that the answer looks like a feed; every failure becomes a :class:`FeedError`
with a one-line message that names the URL.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import requests

PUBLIC_MODIFIED = "public_modified"
#: Query parameters the client sets itself; the rest of the URL's query is kept.
OWN_PARAMS = ("offset", "descending", "limit", "opt_fields")


class FeedError(Exception):
    """The feed could not be read: unreachable, an HTTP error, or not a feed."""


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


def _error_description(response: requests.Response) -> str:
    """The ``description`` of an openprocurement JSON error body, if any."""
    try:
        body = response.json()
        errors = body.get("errors") or []
        return "; ".join(str(error.get("description", error)) for error in errors)[:200]
    except (ValueError, AttributeError):
        return response.reason or ""


def parse_item(raw: Any, url: str, need_stamp: bool = True) -> FeedItem:
    """A :class:`FeedItem` from a JSON item; :class:`FeedError` when it is not one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        raise FeedError(f"{url} did not answer with a feed: an item has no 'id'")
    stamp = raw.get(PUBLIC_MODIFIED)
    if stamp is None and need_stamp:
        raise FeedError(
            f"{url}: feed items lack 'public_modified' "
            "(the feed does not offer opt_fields=public_modified)"
        )
    try:
        value = float(stamp) if stamp is not None else 0.0
    except (TypeError, ValueError):
        raise FeedError(f"{url}: an item's public_modified is not a number: {stamp!r}") from None
    return FeedItem(raw["id"], value, str(raw.get("dateModified", "")))


class FeedClient:
    """Fetches pages of the feed at ``url``.

    The URL's own query parameters (``mode=test`` for instance) are kept on
    every request (``mode`` overrides the URL's); ``offset``, ``descending``, ``limit`` and ``opt_fields``
    are set by the client, ``public_modified`` always among the opt_fields.
    """

    def __init__(
        self, url: str, limit: int = 100, timeout: float = 10.0,
        session: requests.Session | None = None, mode: str | None = None,
    ) -> None:
        parts = urlsplit(url)
        self.url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        fields = {name for name in query.get("opt_fields", "").split(",") if name}
        fields.add(PUBLIC_MODIFIED)
        self.base_params = {key: value for key, value in query.items() if key not in OWN_PARAMS}
        self.base_params["opt_fields"] = ",".join(sorted(fields))
        if mode is not None:
            self.base_params["mode"] = mode
        self.limit = limit
        self.timeout = timeout
        self.http = session or requests.Session()

    def params(self, offset: str | None, descending: bool) -> dict[str, str]:
        """The query parameters of one request."""
        params = dict(self.base_params, limit=str(self.limit))
        if descending:
            params["descending"] = "1"
        if offset:
            params["offset"] = offset
        return params

    def page(self, offset: str | None = None, descending: bool = False) -> FeedPage:
        """The page after ``offset`` (from the start without one)."""
        try:
            response = self.http.get(
                self.url, params=self.params(offset, descending), timeout=self.timeout
            )
        except requests.Timeout:
            raise FeedError(f"cannot reach {self.url}: no answer within {self.timeout:g} s") from None
        except requests.ConnectionError:
            raise FeedError(f"cannot reach {self.url}: the connection failed (refused or unknown host)") from None
        except requests.RequestException as error:
            raise FeedError(f"cannot reach {self.url}: {type(error).__name__}: {error}") from None
        if response.status_code != 200:
            detail = _error_description(response)
            raise FeedError(
                f"{self.url} answered HTTP {response.status_code}" + (f": {detail}" if detail else "")
            )
        try:
            body = response.json()
        except ValueError:
            raise FeedError(f"{self.url} did not answer with a feed: the body is not JSON") from None
        return self.parse_body(body)

    def parse_body(self, body: Mapping[str, Any] | Any) -> FeedPage:
        """Check a JSON body and read it as a :class:`FeedPage`."""
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise FeedError(f"{self.url} did not answer with a feed: no 'data' list")
        next_page = body.get("next_page")
        if not isinstance(next_page, dict) or not isinstance(next_page.get("offset"), (str, int, float)):
            raise FeedError(f"{self.url} did not answer with a feed: no 'next_page' offset")
        prev_page = body.get("prev_page")
        prev_offset = None
        if isinstance(prev_page, dict) and prev_page.get("offset") not in (None, ""):
            prev_offset = str(prev_page["offset"])
        items = tuple(parse_item(raw, self.url) for raw in body["data"])
        return FeedPage(items, str(next_page["offset"]), prev_offset)

    def close(self) -> None:
        """Close the HTTP connections."""
        self.http.close()
