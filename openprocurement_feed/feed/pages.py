"""A feed page's body: its items, its offsets and the links to the next pages.

The view (:mod:`.views`) reads the rows of a page from the store; these
functions turn them into the page's JSON (SPEC A, "Response 200"): each
item from its row, the ``next_page`` and ``prev_page`` offsets from the
page's last and first rows in the feed's order, and the links that carry
them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any
from urllib.parse import urlencode

from pyramid.request import Request

from ..store.offset import compose_offset
from ..store.orders import PUBLIC_MODIFIED, FeedOrder, boundary_ids


def page_offsets(rows: Sequence[dict[str, Any]], raw_offset: str, order: FeedOrder | None = None) -> tuple[str, str]:
    """The ``(next, prev)`` offsets of a page (sorted in the feed's order,
    watermark order by default): its last and first rows'.

    An empty page echoes the request's offset in both.
    """
    if not rows:
        return raw_offset, raw_offset
    value_of: Callable[[Mapping[str, Any]], Any] = order.row_value if order is not None else itemgetter(PUBLIC_MODIFIED)
    compose: Callable[[Any, Iterable[str]], str] = order.compose if order is not None else compose_offset
    last = value_of(rows[-1])
    first = value_of(rows[0])
    return (
        compose(last, boundary_ids(reversed(rows), value_of, last)),
        compose(first, boundary_ids(rows, value_of, first)),
    )


#: Characters ``urlencode`` leaves as they are (its ``quote_plus`` safe set).
PLAIN_QUERY_RE = re.compile(r"[A-Za-z0-9_.~-]*", re.ASCII)


def query_string(params: dict[str, str]) -> str:
    """``urlencode(params)``, byte for byte; without its per-character
    quoting when nothing needs quoting (offsets, limits and flags never do)."""
    plain = PLAIN_QUERY_RE.fullmatch
    for key, value in params.items():
        if not (plain(key) and plain(value)):
            return urlencode(params)
    return "&".join(key + "=" + value for key, value in params.items())


def page_link(
    request: Request, params: dict[str, str], path: str | None = None, host_url: str | None = None
) -> dict[str, str]:
    """A ``{"offset", "path", "uri"}`` link to the current route with ``params``
    (``path`` and ``host_url``: the request's, when the caller has them already)."""
    path = request.path if path is None else path
    if params:
        path += "?" + query_string(params)
    return {
        "offset": params.get("offset", ""),
        "path": path,
        "uri": (request.host_url if host_url is None else host_url) + path,
    }


def render_item(row: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """A feed item: ``id`` and the requested fields the document has."""
    item: dict[str, Any] = {"id": row["_id"]}
    for name in fields:
        if name in row:
            item[name] = row[name]
    return item


def render_items(rows: Iterable[dict[str, Any]], fields: Sequence[str]) -> list[dict[str, Any]]:
    """The ``data`` of a page: :func:`render_item` of every row, in order.

    The loop is :func:`render_item` written out, without a Python call per
    row. A feed with an item policy (:mod:`.restricted`) renders through the
    policy instead (:func:`~.views.render_page`).
    """
    items: list[dict[str, Any]] = []
    append = items.append
    for row in rows:
        item = {"id": row["_id"]}
        for name in fields:
            if name in row:
                item[name] = row[name]
        append(item)
    return items
