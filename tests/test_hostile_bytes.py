"""Hostile bytes: any byte sequence a client can put in the path or the query
string gets a JSON answer, never a 500.

A WSGI server hands ``PATH_INFO`` and ``QUERY_STRING`` over as latin-1
strings holding the raw bytes; the requests here are built the same way (a
WSGI environ, not a URL that a client library would have cleaned up) and
sent to the whole demo application: the feeds, the demo's own routes, the
health view and unknown paths.

Properties (hypothesis, bounded):

* every answer is strict JSON with a status below 500;
* a URL that is not UTF-8 gets the SPEC error body: 404 naming ``offset``
  when only an ``offset`` value is undecodable, 400 otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote_from_bytes

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from webob import Request

from openprocurement_feed.feed.tweens import path_error, query_error

PREFIX = "/api/2.5"
PROPERTY_SETTINGS = hsettings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ROUTES = (
    f"{PREFIX}/tenders",
    f"{PREFIX}/plans",
    f"{PREFIX}/contracts",
    f"{PREFIX}/tenders-watermark",
    f"{PREFIX}/tenders/",
    f"{PREFIX}/plans/",
    f"{PREFIX}/contracts/",
    f"{PREFIX}/feeds/health",
    "/",
    "/nowhere/",
)
#: Bytes that are not UTF-8 on their own, and some that are.
ODD_BYTES = st.sampled_from(
    [
        b"\xff",
        b"\xfe",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xe2\x82",
        b"\x80",
        b"\x00",
        b"%",
        b"%ff",
        b"%c3%28",
        b"\xc3\xa9",
        b"%e2%82%ac",
        b"+",
        b";",
    ]
)
RAW = st.lists(st.one_of(st.binary(max_size=6), ODD_BYTES), max_size=8).map(b"".join)
NAMES = st.one_of(st.sampled_from([b"offset", b"limit", b"descending", b"opt_fields", b"mode", b"feed"]), RAW)
PAIRS = st.tuples(NAMES, st.one_of(RAW, RAW.map(lambda raw: quote_from_bytes(raw).encode("ascii"))))
QUERIES = st.one_of(
    RAW,
    st.lists(PAIRS, max_size=5).map(lambda pairs: b"&".join(name + b"=" + value for name, value in pairs)),
)
PATHS = st.tuples(st.sampled_from(ROUTES), RAW).map(lambda parts: parts[0].encode() + parts[1])


def strict_json(body: bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(body.decode("utf-8"), parse_constant=refuse)


def send(app: Any, method: str, path: bytes, query: bytes) -> Any:
    """A request whose environ carries the raw bytes, as a WSGI server's would."""
    request = Request.blank("/", method=method)
    request.environ["PATH_INFO"] = path.decode("latin-1")
    request.environ["QUERY_STRING"] = query.decode("latin-1")
    if method in ("POST", "PATCH"):
        request.body = b'{"data": {"title": "x"}}'
        request.content_type = "application/json"
    return request.get_response(app)


@pytest.fixture
def app(settings: dict[str, str]) -> Iterator[Any]:
    from openprocurement_feed.demo import main

    application = main({}, **dict(settings, **{"demo.both_orders": "true"}))
    yield application
    application.registry.feed_store.close()


def check(response: Any, path: bytes, query: bytes) -> None:
    assert response.status_int < 500, (path, query, response.status, response.body[:300])
    assert response.content_type == "application/json", (path, query, response.body[:200])
    body = strict_json(response.body)
    path_bad = path_error("", path.decode("latin-1"))
    query_bad = query_error(query.decode("latin-1"))
    if path_bad is not None:
        assert response.status_int == 400
        assert body["errors"] == [{"location": "url", "name": "path", "description": "The path is not valid UTF-8"}]
    elif query_bad is not None:
        assert response.status_int == query_bad.status
        [error] = body["errors"]
        assert error["location"] == "querystring"
        if query_bad.name == "offset":
            assert response.status_int == 404
            assert error["description"].startswith("Invalid offset provided: ")


@PROPERTY_SETTINGS
@given(path=PATHS, query=QUERIES, method=st.sampled_from(["GET", "GET", "POST", "PATCH", "DELETE"]))
def test_any_bytes_in_path_and_query(app: Any, path: bytes, query: bytes, method: str) -> None:
    check(send(app, method, path, query), path, query)


@PROPERTY_SETTINGS
@given(query=QUERIES)
def test_any_bytes_in_a_feed_query(app: Any, query: bytes) -> None:
    path = f"{PREFIX}/tenders".encode()
    check(send(app, "GET", path, query), path, query)


@pytest.mark.parametrize(
    "query, status, name, description",
    [
        (b"offset=%ff%fe", 404, "offset", "Invalid offset provided: %ff%fe"),
        (b"offset=\xff\xfe", 404, "offset", "Invalid offset provided: \xff\xfe"),
        (b"limit=5&offset=1.%c3", 404, "offset", "Invalid offset provided: 1.%c3"),
        (b"limit=%ff", 400, "limit", "Invalid value (not UTF-8): %ff"),
        (b"%ff=1", 400, "querystring", "Invalid parameter name (not UTF-8): %ff"),
        (b"opt_fields=status,%c3%28", 400, "opt_fields", "Invalid value (not UTF-8): status,%c3%28"),
    ],
)
@pytest.mark.parametrize("feed", ["tenders", "plans", "contracts", "tenders-watermark"])
def test_undecodable_query_strings(app: Any, feed: str, query: bytes, status: int, name: str, description: str) -> None:
    response = send(app, "GET", f"{PREFIX}/{feed}".encode(), query)
    assert response.status_int == status
    assert response.json == {
        "status": "error",
        "errors": [{"location": "querystring", "name": name, "description": description}],
    }


@pytest.mark.parametrize("path", [b"/api/2.5/tenders/\xff", b"/api/2.5/\xc3\x28", b"/\xff\xfe", b"/api/2.5/plans\x80"])
def test_undecodable_paths(app: Any, path: bytes) -> None:
    for method in ("GET", "PATCH"):
        response = send(app, method, path, b"")
        assert response.status_int == 400
        assert response.json["errors"][0] == {
            "location": "url",
            "name": "path",
            "description": "The path is not valid UTF-8",
        }


def test_the_fix_is_the_extensions(settings: dict[str, str]) -> None:
    """A host API that only includes the extension gets the same answer."""
    from pyramid.config import Configurator

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_feed("tenders")
    host = config.make_wsgi_app()
    try:
        response = send(host, "GET", f"{PREFIX}/tenders".encode(), b"offset=%ff%fe")
        assert response.status_int == 404 and response.json["errors"][0]["name"] == "offset"
        assert send(host, "GET", b"/host/\xff", b"").status_int == 400
        assert send(host, "GET", f"{PREFIX}/tenders".encode(), b"limit=5").status_int == 200
    finally:
        host.registry.feed_store.close()
