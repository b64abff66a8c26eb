"""The JSON renderer of feed pages: :mod:`orjson` when installed, the standard
library otherwise.

A feed page is the hottest JSON a host application writes, and the standard
library's encoder is a large share of its CPU (see ``python -m benchmarks
cost --profile``). :func:`dumps` encodes with ``orjson`` when the ``fast``
extra is installed (``pip install openprocurement_feed[fast]``) and falls
back to a compact :func:`json.dumps` otherwise; both give the same parsed
JSON (only whitespace and the escaping of non-ASCII characters differ).

The include registers :class:`FeedJSONRenderer` as the Pyramid renderer
:data:`RENDERER` (``"feed_json"``), which the feed views use.

Values a listed field can hold beyond JSON's own types (BSON dates, values
written by other tools) are rendered the same way by both encoders
(:func:`json_value`): a ``datetime`` as ISO 8601 (``isoformat()``: a naive
one stays naive, an aware one keeps its offset, as upstream's renderer
writes them), a ``date`` likewise, an ``ObjectId`` as its hex string, a
``Decimal128`` or ``Decimal`` as its exact decimal string, a BSON
``Timestamp`` as ``"{time}.{inc:010d}"`` (the form of a legacy
``public_ts`` offset), a ``UUID`` as its canonical string, an object with
``__json__()`` as what that returns. Anything else is not rendered: the
page is answered with a JSON 500 naming the feed, the item and the field,
and the error is logged.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from bson.decimal128 import Decimal128
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

log = logging.getLogger(__name__)

#: The name the feed views' renderer is registered under.
RENDERER = "feed_json"
#: The media type of a rendered page.
CONTENT_TYPE = "application/json"


def json_value(value: Any) -> Any:
    """The JSON form of a value JSON cannot hold (see the module's text);
    :class:`TypeError` for a value that has none."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (ObjectId, uuid.UUID)):
        return str(value)
    if isinstance(value, Decimal128):
        return str(value.to_decimal())
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Timestamp):
        return f"{value.time}.{value.inc:010d}"
    method = getattr(value, "__json__", None)
    if method is None:
        raise TypeError(f"{type(value).__name__} value {value!r} is not JSON serializable")
    return method(None)


def stdlib_dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, by the standard library."""
    return json.dumps(value, separators=(",", ":"), default=json_value).encode("utf-8")


def _orjson_dumps() -> Callable[[Any], bytes] | None:
    """``orjson.dumps`` with the fallback for other objects, or None when
    orjson is not installed."""
    try:
        import orjson
    except ImportError:
        return None
    encode = orjson.dumps

    def dumps(value: Any) -> bytes:
        return encode(value, default=json_value)

    return dumps


def json_encoder(prefer_fast: bool = True) -> Callable[[Any], bytes]:
    """The fastest JSON encoder available (``prefer_fast=False``: the
    standard library's)."""
    fast = _orjson_dumps() if prefer_fast else None
    return fast or stdlib_dumps


class FeedJSONRenderer:
    """A Pyramid renderer factory: the view's value as JSON bytes, with the
    ``application/json`` content type (as Pyramid's ``json`` renderer sets
    it, unless the view chose another)."""

    def __init__(self, prefer_fast: bool = True) -> None:
        self.dumps = json_encoder(prefer_fast)

    def __call__(self, info: Any) -> Callable[[Any, dict[str, Any]], bytes]:
        dumps = self.dumps

        def render(value: Any, system: dict[str, Any]) -> bytes:
            request = system.get("request")
            if request is not None:
                response = request.response
                if response.content_type == response.default_content_type:
                    response.content_type = CONTENT_TYPE
            try:
                return dumps(value)
            except (TypeError, ValueError) as error:  # orjson's JSONEncodeError is a TypeError
                return self.unrenderable(value, request, error)

        return render

    def unrenderable(self, value: Any, request: Any, error: Exception) -> bytes:
        """The JSON 500 of a page holding a value no encoder renders: it
        names the feed, the item and the field, and the error is logged."""
        route = getattr(getattr(request, "matched_route", None), "name", None) or "feed"
        where, field = "the page", "data"
        items = value.get("data") if isinstance(value, dict) else None
        for item in items if isinstance(items, list) else ():
            for name, field_value in item.items() if isinstance(item, dict) else ():
                try:
                    self.dumps(field_value)
                except (TypeError, ValueError):
                    where, field = f"item {item.get('id')!r}", name
                    break
            else:
                continue
            break
        description = f"{route}: field {field!r} of {where} cannot be rendered as JSON ({error})"
        log.error("Feed page not rendered: %s", description)
        if request is not None:
            request.response.status_int = 500
        body = {"status": "error", "errors": [{"location": "body", "name": field, "description": description}]}
        return stdlib_dumps(body)
