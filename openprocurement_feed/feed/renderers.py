"""The JSON renderer of feed pages: :mod:`orjson` when installed, the standard
library otherwise.

A feed page is the hottest JSON a host application writes, and the standard
library's encoder is a large share of its CPU (see ``python -m benchmarks
cost --profile``). :func:`dumps` encodes with ``orjson`` when the ``fast``
extra is installed (``pip install openprocurement_feed[fast]``) and falls
back to a compact :func:`json.dumps` otherwise; both give the same parsed
JSON (only whitespace, the escaping of non-ASCII characters and the digits
of a decimal differ).

The include registers :class:`FeedJSONRenderer` as the Pyramid renderer
:data:`RENDERER` (``"feed_json"``), which the feed views use.

Values a listed field can hold beyond JSON's own types (BSON dates, values
written by other tools) are rendered the same way by both encoders
(:func:`json_value`), as upstream's renderer writes those it knows:

* a ``datetime`` as ISO 8601 (``isoformat()``). An aware one keeps its
  offset; a naive one is UTC (pymongo returns BSON dates so unless its
  client is ``tz_aware``) and is written in ``feed.timezone``
  (``Europe/Kyiv`` by default, upstream's zone): ``datetime(2024, 12, 15,
  8, 40, 9)`` is ``"2024-12-15T10:40:09+02:00"``;
* a ``date`` as ``"2024-12-15"``;
* an ``ObjectId`` as its hex string, a ``UUID`` as its canonical string;
* a ``Decimal`` or ``Decimal128`` as a JSON number (upstream's store decodes
  ``Decimal128`` to ``Decimal``, which its renderer writes as a number):
  its exact digits with orjson, the nearest double with the standard
  library (the same parsed number); a NaN or infinite one is not rendered;
* a BSON ``Timestamp`` as ``"{time}.{inc:010d}"`` (the form of a legacy
  ``public_ts`` offset);
* an object with ``__json__()`` as what that returns.

Anything else is not rendered: the page is answered with a JSON 500 naming
the feed, the item and the field, and the error is logged.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Callable
from datetime import date, datetime, timezone, tzinfo
from decimal import Decimal
from typing import Any

from bson.decimal128 import Decimal128
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from ..settings import load_timezone as load_timezone  # (it lives with the settings that check it)

log = logging.getLogger("openprocurement_feed.renderers")  # its name from before the package had subpackages

#: The name the feed views' renderer is registered under.
RENDERER = "feed_json"
#: The media type of a rendered page.
CONTENT_TYPE = "application/json"
#: The zone naive datetimes are written in (``feed.timezone``): upstream's,
#: whose renderer writes them in its ``TZ`` (``Europe/Kiev`` when unset).
DEFAULT_TIMEZONE = "Europe/Kyiv"


def decimal_number(value: Decimal) -> float:
    """``value`` as a double (the number the standard library writes);
    :class:`ValueError` for a NaN or a value beyond a double's range."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"Decimal value {value} is not a finite JSON number")
    return number


def json_value(value: Any, zone: tzinfo | None = None) -> Any:
    """The JSON form of a value JSON cannot hold (see the module's text),
    naive datetimes written in ``zone`` (default :data:`DEFAULT_TIMEZONE`);
    :class:`TypeError` for a value that has none."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc).astimezone(zone or load_timezone(DEFAULT_TIMEZONE))
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (ObjectId, uuid.UUID)):
        return str(value)
    if isinstance(value, Decimal128):
        return decimal_number(value.to_decimal())
    if isinstance(value, Decimal):
        return decimal_number(value)
    if isinstance(value, Timestamp):
        return f"{value.time}.{value.inc:010d}"
    method = getattr(value, "__json__", None)
    if method is None:
        raise TypeError(f"{type(value).__name__} value {value!r} is not JSON serializable")
    return method(None)


def stdlib_dumps(value: Any, zone: tzinfo | None = None) -> bytes:
    """``value`` as compact UTF-8 JSON, by the standard library."""

    def default(item: Any) -> Any:
        return json_value(item, zone)

    return json.dumps(value, separators=(",", ":"), default=default).encode("utf-8")


def _orjson_dumps(zone: tzinfo | None = None) -> Callable[[Any], bytes] | None:
    """``orjson.dumps`` with the fallback for other objects, or None when
    orjson is not installed."""
    try:
        import orjson
    except ImportError:
        return None
    encode = orjson.dumps
    fragment = orjson.Fragment
    # datetimes through json_value too: orjson would write a naive one naive
    option = orjson.OPT_PASSTHROUGH_DATETIME

    def default(item: Any) -> Any:
        if isinstance(item, (Decimal, Decimal128)):
            number = item if isinstance(item, Decimal) else item.to_decimal()
            decimal_number(number)  # finite, or not rendered
            return fragment(str(number))
        return json_value(item, zone)

    def dumps(value: Any) -> bytes:
        try:
            return encode(value, default=default, option=option)
        except orjson.JSONEncodeError as error:
            # the reason json_value gave, as the standard library raises it
            cause = error.__cause__
            if isinstance(cause, (TypeError, ValueError)):
                raise cause from None
            raise

    return dumps


def json_encoder(prefer_fast: bool = True, zone: tzinfo | None = None) -> Callable[[Any], bytes]:
    """The fastest JSON encoder available (``prefer_fast=False``: the
    standard library's); naive datetimes written in ``zone`` (default
    :data:`DEFAULT_TIMEZONE`)."""
    fast = _orjson_dumps(zone) if prefer_fast else None
    if fast is not None:
        return fast
    if zone is None:
        return stdlib_dumps

    def dumps(value: Any) -> bytes:
        return stdlib_dumps(value, zone)

    return dumps


class FeedJSONRenderer:
    """A Pyramid renderer factory: the view's value as JSON bytes, with the
    ``application/json`` content type (as Pyramid's ``json`` renderer sets
    it, unless the view chose another); naive datetimes written in ``zone``
    (``feed.timezone``)."""

    def __init__(self, prefer_fast: bool = True, zone: tzinfo | None = None) -> None:
        self.dumps = json_encoder(prefer_fast, zone)

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
