"""The request-bytes guard: a tween that answers undecodable URLs with a JSON error.

A WSGI server hands the path and the query string to the application as
bytes (native strings holding latin-1). WebOb decodes them as UTF-8 the
first time ``request.path_info`` or ``request.GET`` is read, and a byte
sequence that is not UTF-8 (``?offset=%ff%fe``, a raw ``\\xff`` in the path)
raises ``UnicodeDecodeError`` from deep inside the router or a view: a 500.

:func:`url_bytes_tween_factory` checks both once, before anything reads
them, and answers with the SPEC's JSON error body instead:

* an ``offset`` whose value is not UTF-8 → **404** (an invalid offset:
  crawlers restart their sync on it, SPEC A);
* any other undecodable query parameter → **400**, naming it;
* an undecodable path → **400** (``location: url``, ``name: path``).

It is registered by :func:`openprocurement_feed.includeme` under
``pyramid.tweens.INGRESS``, so it covers every route of the application —
the feeds, the host's own routes and unknown paths alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from pyramid.registry import Registry
from pyramid.request import Request
from pyramid.response import Response

from .errors import error_body

#: The dotted name the tween is registered under.
TWEEN_NAME = "openprocurement_feed.feed.tweens.url_bytes_tween_factory"
#: How many characters of an undecodable value an error message quotes.
QUOTE_LIMIT = 200


@dataclass(frozen=True)
class UrlError:
    """Why a request's URL cannot be decoded: the JSON error's parts."""

    status: int
    location: str
    name: str
    description: str


def _decode(raw: bytes) -> str | None:
    """``raw`` as UTF-8 text, or ``None`` when it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _shown(raw: str) -> str:
    """An undecodable value as the client sent it (percent-escapes kept)."""
    return raw if len(raw) <= QUOTE_LIMIT else raw[:QUOTE_LIMIT] + "..."


def query_error(query_string: str) -> UrlError | None:
    """The first undecodable parameter of a raw ``QUERY_STRING``, or ``None``.

    Splits and unquotes the way WebOb does (``&`` and ``;`` separate pairs,
    ``+`` is a space), so whatever passes here decodes there too. A query
    string of ASCII characters without a percent-escape is decodable as it
    is, and passes without being split.
    """
    if query_string.isascii() and "%" not in query_string:
        return None
    try:
        data = query_string.encode("latin-1")
    except UnicodeEncodeError:  # not what a WSGI server can hand over
        return UrlError(400, "querystring", "querystring", "The query string holds characters that are not bytes")
    for pair in data.replace(b"+", b" ").replace(b";", b"&").split(b"&"):
        if not pair:
            continue
        raw_name, _, raw_value = pair.partition(b"=")
        name = _decode(unquote_to_bytes(raw_name))
        if name is None:
            return UrlError(
                400,
                "querystring",
                "querystring",
                "Invalid parameter name (not UTF-8): " + _shown(raw_name.decode("latin-1")),
            )
        if _decode(unquote_to_bytes(raw_value)) is None:
            shown = _shown(raw_value.decode("latin-1"))
            if name == "offset":
                return UrlError(404, "querystring", "offset", f"Invalid offset provided: {shown}")
            return UrlError(400, "querystring", name, f"Invalid value (not UTF-8): {shown}")
    return None


def path_error(script_name: str, path_info: str) -> UrlError | None:
    """An error when ``SCRIPT_NAME`` or ``PATH_INFO`` is not UTF-8 bytes."""
    if script_name.isascii() and path_info.isascii():
        return None
    for raw in (script_name, path_info):
        try:
            data = raw.encode("latin-1")
        except UnicodeEncodeError:
            data = None
        if data is None or _decode(data) is None:
            return UrlError(400, "url", "path", "The path is not valid UTF-8")
    return None


def url_error(environ: dict[str, object]) -> UrlError | None:
    """The reason the request's URL cannot be decoded, or ``None``."""
    found = path_error(str(environ.get("SCRIPT_NAME", "")), str(environ.get("PATH_INFO", "")))
    return found or query_error(str(environ.get("QUERY_STRING", "")))


def error_response(error: UrlError) -> Response:
    """The JSON error response for ``error``."""
    body = error_body(error.location, error.name, error.description)
    return Response(
        body=json.dumps(body).encode("utf-8"),
        status=error.status,
        content_type="application/json",
        charset="utf-8",
    )


def url_bytes_tween_factory(
    handler: Callable[[Request], Response], registry: Registry
) -> Callable[[Request], Response]:
    """The tween: refuse undecodable URLs with a JSON error, pass the rest on."""

    def url_bytes_tween(request: Request) -> Response:
        error = url_error(request.environ)
        if error is not None:
            return error_response(error)
        return handler(request)

    return url_bytes_tween
