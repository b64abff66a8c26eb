"""Hostile input: arbitrary query strings on the feeds, arbitrary bodies on the
demo API.

Properties (hypothesis, bounded):

* the feed answers every query string with valid JSON, 200 or a 4xx with the
  SPEC error body, never a 5xx;
* nothing a client sends reaches the database as anything but a number, a
  ``Timestamp`` or a fixed string: every command the feed sends is inspected
  through pymongo command monitoring (the only user string allowed in a
  filter is the scope value of a scoped feed, taken from the URL path);
* the demo API answers every body with valid JSON, 201/200 or 422, and what
  it acknowledged reads back unchanged (server-owned fields such as ``id``
  and ``tenderID`` are ignored: the server's values are kept); the feed
  still renders afterwards.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote, urlencode

import pytest
from bson.timestamp import Timestamp
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pymongo import MongoClient, monitoring

from openprocurement_feed.demo.resources import TENDERS
from openprocurement_feed.store.database import FeedStore
from openprocurement_feed.store.offset import parse_offset
from openprocurement_feed.store.state import feed_state

PREFIX = "/api/2.5"
FEED = PREFIX + "/tenders"
OWNERS = ("owner-a", "owner-b")
OFFSET_FIELDS = ("public_modified", "public_ts")
RANGE_OPERATORS = ("$gt", "$gte", "$lt", "$lte")
#: Keys a feed filter may contain besides the offset fields.
FILTER_KEYS = {"is_public", "is_test", "_id", "owner", "$expr", "$or", "$and", *OFFSET_FIELDS}
#: Commands the feed may send while serving a page (``hello``: the
#: database's time for the watermark's bound, at most once a second).
FEED_COMMANDS = {"find", "getMore", "killCursors", "endSessions", "hello"}
PROPERTY_SETTINGS = hsettings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class CommandRecorder(monitoring.CommandListener):
    """Keeps every command started on the client it is registered with."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.commands: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self.lock:
            self.commands.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        """The commands recorded since the last call."""
        with self.lock:
            taken, self.commands = self.commands, []
        return taken


class HostileApp:
    """The demo app plus a scoped feed, on a store whose client is monitored."""

    def __init__(self, settings: dict[str, str]) -> None:
        from pyramid.config import Configurator
        from webtest import TestApp

        from openprocurement_feed.demo import includeme

        FEED_FIELDS = TENDERS.feed_fields

        config = Configurator(settings=settings)
        config.include(includeme)
        config.add_feed(
            "owner_tenders",
            path="owners/{owner}/tenders",
            collection="tenders",
            scope="owner",
            allowed_fields=FEED_FIELDS,
        )
        app = config.make_wsgi_app()
        registry = app.registry
        self.original_store = registry.feed_store
        self.recorder = CommandRecorder()
        client: MongoClient = MongoClient(
            settings["mongodb.uri"],
            event_listeners=[self.recorder],
            tz_aware=True,
            serverSelectionTimeoutMS=5000,
        )
        feed_settings = registry.feed_settings
        self.store = FeedStore(
            client,
            feed_settings.db_name,
            watermark_seconds=feed_settings.watermark_seconds,
            max_limit=feed_settings.max_limit,
        )
        feed_state(registry).store = self.store
        self.max_limit = feed_settings.max_limit
        self.test = TestApp(app)
        self.ids: set[str] = set()

    def seed(self) -> None:
        """Public, hidden, test and tied documents under two owners."""
        collection = self.original_store.collection("tenders")
        stamps = [1_600_000_000.0 + step * 0.25 for step in range(12)]
        stamps += [1_600_000_010.5] * 5  # a tie group
        for number, stamp in enumerate(stamps):
            doc = {
                "_id": uuid.uuid4().hex,
                "public_modified": stamp,
                "dateModified": f"2020-09-13T12:26:{number:02d}+00:00",
                "dateCreated": "2020-09-13T12:00:00+00:00",
                "status": "draft" if number % 7 == 3 else "active",
                "owner": OWNERS[number % 2],
                "title": f"tender {number}",
                "tenderID": f"UA-{number}",
            }
            if number % 4 == 1:
                doc["mode"] = "test"
            self.original_store.save_data(collection, doc, insert=True, modified=False)
            self.ids.add(doc["_id"])
        self.recorder.take()

    def close(self) -> None:
        self.store.close()
        self.original_store.close()


@pytest.fixture
def hostile(settings: dict[str, str]) -> Iterator[HostileApp]:
    app = HostileApp(settings)
    app.seed()
    yield app
    app.close()


# -- strategies -------------------------------------------------------------

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
INJECTIONS = st.sampled_from(
    [
        '{"$gt": ""}',
        '{"$where": "sleep(1000)"}',
        "$where",
        "$gt",
        "$ne",
        "$$NOW",
        '{"$regex": ".*"}',
        "'; db.dropDatabase(); '",
        "1' OR '1'='1",
        "this.x == 1",
        "function () { return true; }",
        "\x00",
        "%00",
        "../../etc/passwd",
        "<script>x</script>",
        "[$ne]=1",
        '{"$expr": {"$eq": [1, 1]}}',
        "ObjectId('000000000000000000000000')",
    ]
)
NUMBERS = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "nan",
            "NaN",
            "inf",
            "-inf",
            "Infinity",
            "1e400",
            "-0",
            "0",
            "0x10",
            "1_000",
            "١٢٣",
            "１２３",
            " 5 ",
            "+7",
            "--1",
            "5.",
            ".5",
            "1e3",
            "99999999999999999999",
        ]
    ),
)
HEX = st.text("0123456789abcdef", max_size=40)
OFFSET_PART = st.one_of(NUMBERS, TEXT, INJECTIONS, HEX, st.integers(0, 10**25).map(str))
OFFSETS = st.one_of(
    st.lists(OFFSET_PART, min_size=1, max_size=7).map(".".join),
    st.builds(
        lambda value, count, digest: f"{value!r}.{count}.{digest}",
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-(10**30), 10**30),
        HEX,
    ),
    st.builds(lambda seconds, inc: f"{seconds}.{inc:010d}", st.integers(0, 2**40), st.integers(0, 10**10 - 1)),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones())).map(lambda moment: moment.isoformat()),
    NUMBERS,
    INJECTIONS,
    TEXT,
)
VALUES = st.one_of(TEXT, NUMBERS, INJECTIONS, OFFSETS)
KNOWN_PARAMS = ("offset", "limit", "descending", "opt_fields", "mode", "feed")
PARAM_VALUES = {
    "offset": OFFSETS,
    "limit": st.one_of(NUMBERS, VALUES),
    "descending": VALUES,
    "opt_fields": st.one_of(
        st.lists(
            st.sampled_from(
                [
                    "title",
                    "status",
                    "public_modified",
                    "_id",
                    "_rev",
                    "$where",
                    "owner",
                    "mode",
                    "is_public",
                    "dateCreated",
                    "x.y",
                ]
            ),
            max_size=6,
        ).map(",".join),
        VALUES,
    ),
    "mode": st.one_of(st.sampled_from(["test", "_all_", "all", "TEST", ""]), VALUES),
    "feed": st.one_of(st.just("changes"), VALUES),
}
KNOWN_PAIRS = st.sampled_from(KNOWN_PARAMS).flatmap(lambda name: st.tuples(st.just(name), PARAM_VALUES[name]))
ANY_PAIRS = st.tuples(
    st.one_of(st.sampled_from(["offset[$gt]", "limit[$ne]", "$where", "offset.$gt", "", "OFFSET"]), TEXT),
    VALUES,
)
QUERIES = st.lists(st.one_of(KNOWN_PAIRS, KNOWN_PAIRS, ANY_PAIRS), max_size=8)
SCOPES = st.one_of(
    st.sampled_from((*OWNERS, '{"$gt": ""}', "$where", "$ne", "owner-a\x00", "$$NOW")),
    TEXT.filter(lambda text: text not in ("", ".", "..") and "/" not in text),
)


# -- checks -----------------------------------------------------------------


def strict_json(body: bytes) -> Any:
    """Parse JSON as a strict client would: NaN and Infinity are errors."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(body.decode("utf-8"), parse_constant=refuse)


def check_feed_response(response: Any) -> dict[str, Any]:
    """A feed response is JSON; 200 with a page or 400/404 with the SPEC error."""
    assert response.status_int in (200, 400, 404), response.status
    assert response.content_type == "application/json", response.content_type
    body = strict_json(response.body)
    if response.status_int == 200:
        assert set(body) <= {"data", "next_page", "prev_page"}
        assert isinstance(body["data"], list)
        for item in body["data"]:
            assert isinstance(item.get("id"), str)
        for link in ("next_page", "prev_page"):
            if link in body:
                assert set(body[link]) == {"offset", "path", "uri"}
                if body[link]["offset"]:
                    parse_offset(body[link]["offset"])  # links carry valid offsets
        return body
    assert body["status"] == "error"
    [error] = body["errors"]
    assert error["location"] == "querystring"
    expected = {"offset": 404, "limit": 400}
    assert error["name"] in expected, error
    assert response.status_int == expected[error["name"]]
    return body


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool), or a BSON Timestamp."""
    if isinstance(value, Timestamp):
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def check_filter(query: Any, ids: set[str], scope: str | None, watermark: dict[str, Any]) -> None:
    """Every value of a feed filter is a number, a Timestamp, a fixed value,
    an id read from the database, or the scope from the URL path."""
    assert isinstance(query, dict), query
    for key, value in query.items():
        assert key in FILTER_KEYS, f"unexpected filter key {key!r}"
        if key in OFFSET_FIELDS:
            if isinstance(value, dict):
                assert set(value) <= set(RANGE_OPERATORS), value
                assert all(is_number(bound) for bound in value.values()), value
            else:
                assert is_number(value), value
        elif key == "_id":
            bounds = value.values() if isinstance(value, dict) else [value]
            if isinstance(value, dict):
                assert set(value) <= set(RANGE_OPERATORS), value
            assert all(isinstance(bound, str) and bound in ids for bound in bounds), value
        elif key == "owner":
            assert scope is not None, "a scope filter on an unscoped feed"
            assert value == scope and isinstance(value, str), value
        elif key == "is_public":
            assert value is True
        elif key == "is_test":
            assert value in (True, False)
        elif key == "$expr":
            assert value == watermark, value
        else:  # $or / $and
            assert isinstance(value, list)
            for part in value:
                check_filter(part, ids, scope, watermark)
    if scope is not None:
        assert query.get("owner") == scope or "$or" in query, "the scope was dropped"


def check_commands(app: HostileApp, scope: str | None, response: Any) -> None:
    """Inspect every command the last request sent (a page needs a find)."""
    watermark = app.store.watermark_expr()
    allowed_projection = {
        "_id",
        "public_modified",
        "public_ts",
        *TENDERS.feed_fields,
        # the restricted demo feed's rule fields, never shown
        "config.restricted",
        "owner",
    }
    commands = app.recorder.take()
    if response.status_int == 200:
        assert any(name == "find" for name, _ in commands), "no query was recorded"
    else:
        assert not commands, "a rejected request reached the database"
    for name, command in commands:
        assert name in FEED_COMMANDS, f"the feed sent {name}"
        if name != "find":
            continue
        check_filter(command.get("filter", {}), app.ids, scope, watermark)
        if scope is not None:
            assert command["filter"].get("owner") == scope
        if "limit" in command:
            limit = command["limit"]
            assert isinstance(limit, int) and 1 <= limit <= 2 * app.max_limit, limit
        assert set(command.get("sort", {})) <= {"public_modified", "public_ts", "_id"}
        assert set(command.get("projection", {})) <= allowed_projection


# -- properties -------------------------------------------------------------


@PROPERTY_SETTINGS
@given(pairs=QUERIES)
def test_feed_query_string(hostile: HostileApp, pairs: list[tuple[str, str]]) -> None:
    response = hostile.test.get(FEED + "?" + urlencode(pairs, quote_via=quote), expect_errors=True)
    check_feed_response(response)
    check_commands(hostile, scope=None, response=response)


@PROPERTY_SETTINGS
@given(scope=SCOPES, pairs=QUERIES)
def test_scoped_feed_query_string(hostile: HostileApp, scope: str, pairs: list[tuple[str, str]]) -> None:
    path = f"{PREFIX}/owners/{quote(scope, safe='')}/tenders"
    response = hostile.test.get(path + "?" + urlencode(pairs, quote_via=quote), expect_errors=True)
    body = check_feed_response(response)
    check_commands(hostile, scope=scope, response=response)
    if response.status_int == 200:
        for item in body["data"]:
            assert item["id"] in hostile.ids
        link_path = body["next_page"]["path"].split("?", 1)[0]
        assert unquote(link_path) == f"{PREFIX}/owners/{scope}/tenders"  # the scope is kept


@PROPERTY_SETTINGS
@given(
    offset=OFFSETS,
    limit=st.one_of(st.none(), NUMBERS),
    descending=st.booleans(),
    mode=st.sampled_from(["", "test", "_all_"]),
)
def test_offsets_of_every_shape(
    hostile: HostileApp, offset: str, limit: str | None, descending: bool, mode: str
) -> None:
    pairs = [("offset", offset)]
    if limit is not None:
        pairs.append(("limit", limit))
    if descending:
        pairs.append(("descending", "1"))
    if mode:
        pairs.append(("mode", mode))
    response = hostile.test.get(FEED + "?" + urlencode(pairs, quote_via=quote), expect_errors=True)
    check_feed_response(response)
    check_commands(hostile, scope=None, response=response)


def test_known_hostile_query_strings(hostile: HostileApp) -> None:
    """Named cases: injections, repeated parameters, huge numbers."""
    cases = [
        "offset=%7B%22%24gt%22%3A%20%22%22%7D",
        "offset[$gt]=&limit[$ne]=1",
        "offset=1e400",
        "offset=nan",
        "offset=inf",
        "offset=-inf",
        "offset=1.2.3.4.5.6",
        "offset=1.5.100000000000000000000.abc",
        "offset=1.5.-3.abc",
        "offset=1.5.1e3.abc",
        "offset=%00",
        "offset=" + "9" * 300,
        "limit=-1",
        "limit=0",
        "limit=abc",
        "limit=1e3",
        "limit=" + "9" * 400,
        "limit=%00",
        "limit=5&limit=abc",
        "limit=abc&limit=5",
        "offset=abc&offset=1600000000.5",
        "mode=%24where&opt_fields=%24where,_rev,title",
        "descending=&descending=1",
        "$where=sleep(1000)",
        "feed=changes&feed=%7B%7D",
    ]
    statuses = set()
    for query in cases:
        response = hostile.test.get(FEED + "?" + query, expect_errors=True)
        check_feed_response(response)
        check_commands(hostile, scope=None, response=response)
        statuses.add(response.status_int)
    assert statuses == {200, 400, 404}
    # the last value of a repeated parameter wins
    assert hostile.test.get(FEED + "?limit=abc&limit=5").status_int == 200
    assert hostile.test.get(FEED + "?limit=5&limit=abc", expect_errors=True).status_int == 400


# -- demo API bodies --------------------------------------------------------

KEYS = st.one_of(
    st.sampled_from(
        [
            "title",
            "status",
            "mode",
            "$where",
            "$gt",
            "a.b",
            "",
            "id",
            "_rev",
            "tenderID",
            "public_modified",
            "is_public",
            "owner",
            "items",
            "\x00",
        ]
    ),
    TEXT,
)
JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        TEXT,
        INJECTIONS,
    ),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=4)),
    max_leaves=20,
)
BODIES = st.one_of(
    st.dictionaries(KEYS, JSON_VALUES, max_size=6).map(lambda data: {"data": data}),
    JSON_VALUES.map(lambda value: {"data": value}),
    JSON_VALUES,
)


def check_write_response(response: Any, ok: int) -> Any:
    """A demo API write answers JSON: ``ok`` or 422 with the error body."""
    assert response.status_int in (ok, 422), (response.status, response.text[:300])
    assert response.content_type == "application/json"
    body = strict_json(response.body)
    if response.status_int == 422:
        assert body["status"] == "error" and body["errors"][0]["location"] == "body"
    return body


def encode(body: Any) -> str:
    return json.dumps(body, allow_nan=True)


@PROPERTY_SETTINGS
@given(body=BODIES)
def test_create_bodies(hostile: HostileApp, body: Any) -> None:
    response = hostile.test.post(FEED, encode(body), content_type="application/json", expect_errors=True)
    result = check_write_response(response, 201)
    if response.status_int == 201:
        tender_id = result["data"]["id"]
        stored = hostile.test.get(f"{FEED}/{tender_id}").json["data"]
        for key, value in body["data"].items():
            if key in TENDERS.server_fields:  # ignored: the server's value is kept
                assert stored[key] == result["data"][key]
            else:
                assert stored[key] == value
        hostile.ids.add(tender_id)


@PROPERTY_SETTINGS
@given(body=BODIES, tender_id=st.one_of(st.none(), TEXT.filter(lambda t: t and "/" not in t and t not in (".", ".."))))
def test_patch_bodies(hostile: HostileApp, body: Any, tender_id: str | None) -> None:
    known = sorted(hostile.ids)[0]
    target = known if tender_id is None else tender_id
    response = hostile.test.patch(
        f"{FEED}/{quote(target, safe='')}",
        encode(body),
        content_type="application/json",
        expect_errors=True,
    )
    if response.status_int == 404:
        assert target not in hostile.ids
        assert strict_json(response.body)["status"] == "error"
        return
    check_write_response(response, 200)


def test_bodies_the_database_cannot_hold(hostile: HostileApp) -> None:
    cases = [
        '{"data": {"x": 1180591620717411303424}}',
        '{"data": {"x": NaN}}',
        '{"data": {"x": [Infinity]}}',
        '{"data": {"a\\u0000b": 1}}',
        '{"data": ' + '{"a": ' * 200 + "1" + "}" * 201,
        "[" * 100_000,
        '{"data": {"x": 1}',
        "not json",
        "",
    ]
    for body in cases:
        response = hostile.test.post(FEED, body, content_type="application/json", expect_errors=True)
        assert response.status_int == 422, (body[:60], response.status)
        check_write_response(response, 201)
    response = hostile.test.post(FEED, b"\xff\xfe", content_type="application/json", expect_errors=True)
    assert response.status_int == 422


def test_feed_renders_hostile_documents(hostile: HostileApp) -> None:
    """Documents with hostile contents still render as strict JSON."""
    for data in (
        {"title": "\x00", "x": {"$where": "1"}},
        {"title": {"$gt": ""}},
        {"title": "a" * 10_000},
        {"title": ["\u2028", None, -(2**63)], "status": "active"},
    ):
        hostile.test.post(FEED, encode({"data": data}), content_type="application/json", status=201)
    time.sleep(hostile.store.watermark_seconds + 0.1)
    offset, seen = "", 0
    for _ in range(50):
        query = urlencode({"opt_fields": "title,status,mode,public_modified", "offset": offset, "limit": 3})
        body = check_feed_response(hostile.test.get(FEED + "?" + query))
        if not body["data"]:
            break
        seen += len(body["data"])
        offset = body["next_page"]["offset"]
    assert seen >= 4
