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
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

#: The name the feed views' renderer is registered under.
RENDERER = "feed_json"
#: The media type of a rendered page.
CONTENT_TYPE = "application/json"


def _json_default(value: Any) -> Any:
    """What Pyramid's ``json`` renderer does with an object JSON cannot hold:
    its ``__json__()`` if it has one, else a :class:`TypeError`."""
    method = getattr(value, "__json__", None)
    if method is None:
        raise TypeError(f"{value!r} is not JSON serializable")
    return method(None)


def stdlib_dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, by the standard library."""
    return json.dumps(value, separators=(",", ":"), default=_json_default).encode("utf-8")


def _orjson_dumps() -> Callable[[Any], bytes] | None:
    """``orjson.dumps`` with the fallback for other objects, or None when
    orjson is not installed."""
    try:
        import orjson
    except ImportError:
        return None
    encode = orjson.dumps

    def dumps(value: Any) -> bytes:
        return encode(value, default=_json_default)

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
            return dumps(value)

        return render
