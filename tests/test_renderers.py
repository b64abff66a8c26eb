"""The feed pages' JSON renderer: orjson when installed, the standard library
otherwise, the same parsed JSON (values, float reprs, offsets, links) either
way, through a real app on the test database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import orjson  # noqa: F401  (the 'fast' extra, part of the test extra: both paths run)
import pytest
from bson.codec_options import CodecOptions, TypeCodec, TypeRegistry
from bson.decimal128 import Decimal128

from openprocurement_feed.feed import renderers
from openprocurement_feed.feed.renderers import FeedJSONRenderer, json_encoder, stdlib_dumps

SAMPLE = {
    "data": [
        {
            "id": "a" * 32,
            "dateModified": "2026-05-12T12:00:00.490000+03:00",
            "public_modified": 1778583600.49,
            "title": "Закупівля «ремонт» \u2028 ☃",
        },
        {"id": "b" * 32, "public_modified": 0.1 + 0.2, "value": {"amount": 10**15 + 1, "nested": [None, True, 1.5e-7]}},
    ],
    "next_page": {
        "offset": "1778583600.49.1.0123456789abcdef0123456789abcdef",
        "path": "/api/2.5/tenders?offset=1778583600.49.1.0123",
        "uri": "http://x/?a=b&c=d",
    },
}


class WithJSON:
    def __json__(self, request: Any) -> dict[str, str]:
        return {"custom": "yes"}


def test_both_encoders_give_the_same_parsed_json() -> None:
    fast, slow = json_encoder(), json_encoder(prefer_fast=False)
    assert fast is not stdlib_dumps and slow is stdlib_dumps
    assert json.loads(fast(SAMPLE)) == json.loads(slow(SAMPLE)) == SAMPLE
    for item in json.loads(fast(SAMPLE))["data"]:  # float reprs survive exactly
        original = next(entry for entry in SAMPLE["data"] if entry["id"] == item["id"])
        assert repr(item["public_modified"]) == repr(original["public_modified"])
    assert json.loads(fast({"x": WithJSON()})) == json.loads(slow({"x": WithJSON()})) == {"x": {"custom": "yes"}}
    for encode in (fast, slow):
        with pytest.raises(TypeError, match="not JSON serializable"):
            encode({"x": object()})


def test_without_orjson_the_stdlib_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(renderers, "_orjson_dumps", lambda zone=None: None)
    assert json_encoder() is stdlib_dumps
    assert FeedJSONRenderer().dumps is stdlib_dumps


def _app(settings: dict[str, str], fast: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    from webtest import TestApp

    from openprocurement_feed.demo import main

    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(renderers, "_orjson_dumps", lambda zone=None: None)
        return TestApp(main({}, **settings))


@pytest.fixture
def two_apps(settings: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """The demo app twice on one database: orjson, and the stdlib fallback."""
    fast = _app(settings, True, monkeypatch)
    slow = _app(settings, False, monkeypatch)
    yield fast, slow
    fast.app.registry.feed_store.close()
    slow.app.registry.feed_store.close()


def test_feed_pages_are_the_same_with_either_renderer(two_apps: tuple[Any, Any]) -> None:
    fast, slow = two_apps
    store = fast.app.registry.feed_store
    collection = store.collection("tenders")
    stamps = [1_700_000_000.0 + step / 1000 for step in range(0, 60, 3)] + [1_700_000_000.1] * 4
    for number, stamp in enumerate(stamps):
        store.save_data(
            collection,
            {
                "_id": f"{number:032x}",
                "public_modified": stamp,
                "status": "active",
                "dateModified": f"2026-01-01T00:00:{number:02d}.123456+02:00",
                "title": f"Тендер №{number} — «ремонт»",
            },
            insert=True,
            modified=False,
        )
    paths = [
        "/api/2.5/tenders?limit=7&opt_fields=public_modified,title",
        "/api/2.5/tenders?limit=5&descending=1",
        "/api/2.5/tenders?limit=3&mode=_all_",
    ]
    pages = 0
    for start in paths:
        path: str | None = start
        while path and pages < 40:
            quick, plain = fast.get(path), slow.get(path)
            assert quick.content_type == plain.content_type == "application/json"
            assert quick.json == plain.json
            assert b", " not in quick.body  # compact
            for item in quick.json["data"]:
                if "public_modified" in item:
                    assert repr(item["public_modified"]) in {repr(stamp) for stamp in stamps}
            pages += 1
            path = quick.json["next_page"]["path"] if quick.json["data"] else None
    assert pages >= 8
    # error bodies are not the feed renderer's: unchanged either way
    bad = fast.get("/api/2.5/tenders?limit=abc", status=400).json
    assert bad == slow.get("/api/2.5/tenders?limit=abc", status=400).json
    assert bad["errors"][0]["name"] == "limit"


def _bson_values() -> list[tuple[str, Any, Any]]:
    """(field, stored value, its JSON) for every type a listed field may hold."""
    import uuid
    from datetime import date, datetime, timedelta, timezone

    from bson.decimal128 import Decimal128
    from bson.objectid import ObjectId
    from bson.timestamp import Timestamp

    kyiv = timezone(timedelta(hours=2))
    oid = ObjectId("0123456789abcdef01234567")
    return [
        # naive datetimes are UTC, written in Kyiv's offset as upstream's
        # renderer writes them (winter +02:00, summer +03:00)
        ("naive", datetime(2024, 12, 15, 8, 40, 9), "2024-12-15T10:40:09+02:00"),
        ("summer", datetime(2024, 7, 1, 21, 0, 0, 5), "2024-07-02T00:00:00.000005+03:00"),
        ("aware", datetime(2024, 12, 15, 8, 40, 9, 123456, tzinfo=kyiv), "2024-12-15T08:40:09.123456+02:00"),
        ("utc", datetime(2024, 12, 15, 8, 40, 9, tzinfo=timezone.utc), "2024-12-15T08:40:09+00:00"),
        ("day", date(2024, 12, 15), "2024-12-15"),
        ("oid", oid, "0123456789abcdef01234567"),
        # decimals are numbers, as upstream's renderer writes its Decimal values
        ("amount", Decimal128("12345.6700"), 12345.67),
        ("decimal", Decimal("0.10"), 0.1),
        ("big", Decimal("1E+3"), 1000),
        ("stamp", Timestamp(1778583600, 7), "1778583600.0000000007"),
        ("uid", uuid.UUID(int=5), "00000000-0000-0000-0000-000000000005"),
        ("custom", WithJSON(), {"custom": "yes"}),
    ]


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "stdlib"])
def test_bson_values_render_the_same_with_either_encoder(fast: bool) -> None:
    encode = json_encoder(prefer_fast=fast)
    for name, stored, expected in _bson_values():
        assert json.loads(encode({name: stored})) == {name: expected}, name
    # a decimal is a JSON number, never a string
    assert isinstance(json.loads(encode({"amount": Decimal("0.10")}))["amount"], float)


def test_orjson_writes_a_decimals_own_digits() -> None:
    """orjson writes a decimal's digits as they are (upstream's renderer
    writes ``str(decimal)``); the standard library the nearest double."""
    from bson.decimal128 import Decimal128

    value = {"a": Decimal("1000.50"), "b": Decimal128("1E+3"), "c": Decimal("0.1000000000000000055511151231257827")}
    assert json_encoder()(value) == b'{"a":1000.50,"b":1E+3,"c":0.1000000000000000055511151231257827}'
    assert json_encoder(prefer_fast=False)(value) == b'{"a":1000.5,"b":1000.0,"c":0.1}'


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "stdlib"])
@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1E+400"])
def test_a_decimal_that_is_no_json_number_is_not_rendered(fast: bool, bad: str) -> None:
    from bson.decimal128 import Decimal128

    encode = json_encoder(prefer_fast=fast)
    for value in (Decimal(bad), Decimal128(bad)):
        with pytest.raises((TypeError, ValueError), match="not a finite JSON number"):
            encode({"amount": value})


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "stdlib"])
def test_naive_datetimes_are_written_in_the_configured_zone(fast: bool) -> None:
    from datetime import datetime

    from openprocurement_feed.feed.renderers import load_timezone

    naive = {"at": datetime(2024, 12, 15, 8, 40, 9)}
    assert json.loads(json_encoder(fast, load_timezone("UTC"))(naive)) == {"at": "2024-12-15T08:40:09+00:00"}
    assert json.loads(json_encoder(fast, load_timezone("America/New_York"))(naive)) == {
        "at": "2024-12-15T03:40:09-05:00"
    }


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "stdlib"])
def test_a_feed_page_with_dates_renders_and_an_unrenderable_value_is_a_named_500(
    settings: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fast: bool
) -> None:
    """Dates stored by other tools (BSON dates come back as ``datetime``)
    render as upstream's renderer writes them; a value no encoder renders is
    a JSON 500 that names the feed, the item and the field, never a
    traceback page."""
    from datetime import datetime, timezone

    app = _app(settings, fast, monkeypatch)
    try:
        store = app.app.registry.feed_store
        collection = store.collection("tenders")
        moment = datetime(2024, 12, 15, 8, 40, 9, tzinfo=timezone.utc)
        for number in range(1):
            collection.insert_one(
                {
                    "_id": f"{number:032x}",
                    "public_modified": 1_700_000_000.0 + number,
                    "is_public": True,
                    "is_test": False,
                    "status": "active",
                    "dateModified": moment,
                    "title": "t",
                }
            )
        page = app.get("/api/2.5/tenders?limit=1").json
        # a BSON date, written in Kyiv's offset as upstream's app writes it
        assert page["data"] == [{"id": "0" * 32, "dateModified": "2024-12-15T10:40:09+02:00"}]
        monkeypatch.setattr(
            store, "feed_page", lambda *a, **k: [dict(_id="1" * 32, public_modified=1.0, dateModified=object())]
        )
        response = app.get("/api/2.5/tenders", status=500)
        assert response.content_type == "application/json"
        error = response.json["errors"][0]
        assert response.json["status"] == "error" and error["name"] == "dateModified"
        assert "openprocurement_feed.tenders" in error["description"] and "'" + "1" * 32 + "'" in error["description"]
        assert any("Feed page not rendered" in record.message for record in caplog.records)
    finally:
        app.app.registry.feed_store.close()


class DecimalCodec(TypeCodec):
    """Decimal128 read back as Decimal, as an upstream-shaped store's codec
    options do (its amounts are stored as Decimal128)."""

    python_type = Decimal
    bson_type = Decimal128

    def transform_python(self, value: Decimal) -> Decimal128:
        return Decimal128(value)

    def transform_bson(self, value: Decimal128) -> Decimal:
        return value.to_decimal()


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "stdlib"])
def test_an_upstream_shaped_host_lists_bson_dates_and_decimals_as_upstreams_renderer(
    settings: dict[str, str], monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    """The host's own store as upstream's is made: a client that returns BSON
    dates naive, codec options that decode Decimal128 to Decimal; an
    autocommitting Configurator with upstream's route prefix. The listed
    fields come out as upstream's renderer writes them: naive dates (UTC) in
    Kyiv's offset, decimals as numbers (orjson: their own digits, as
    upstream's ``str(decimal)``)."""
    from datetime import datetime

    from pymongo import MongoClient
    from pyramid.config import Configurator
    from webtest import TestApp

    from openprocurement_feed import FeedStoreMixin, shutdown

    class UpstreamStore(FeedStoreMixin):
        def __init__(self) -> None:
            self.connection: MongoClient[Any] = MongoClient(settings["mongodb.uri"])  # tz_aware=False
            self.database = self.connection.get_database(
                settings["mongodb.db_name"], codec_options=CodecOptions(type_registry=TypeRegistry([DecimalCodec()]))
            )

    store = UpstreamStore()
    try:
        with monkeypatch.context() as patch:
            if not fast:
                patch.setattr(renderers, "_orjson_dumps", lambda zone=None: None)
            config = Configurator(
                settings=dict(settings, **{"feed.route_prefix": ""}), autocommit=True, route_prefix="/api/2.5"
            )
            config.include("openprocurement_feed")
            config.set_feed_store(store)
            config.add_feed("tenders", allowed_fields=("lots", "tenderPeriod", "next_check"))
            app = config.make_wsgi_app()
        store.database.tenders.insert_one(
            {
                "_id": "a" * 32,
                "public_modified": 1_700_000_000.0,
                "is_public": True,
                "is_test": False,
                "dateModified": "2024-12-15T10:40:09.123456+02:00",
                "next_check": datetime(2024, 7, 1, 21, 0),
                "tenderPeriod": {"endDate": datetime(2024, 12, 15, 8, 40, 9)},
                "lots": [{"id": "l1", "value": {"amount": Decimal("1000.50"), "currency": "UAH"}}],
            }
        )
        response = TestApp(app).get("/api/2.5/tenders?opt_fields=lots,tenderPeriod,next_check")
        (item,) = response.json["data"]
        assert item == {
            "id": "a" * 32,
            "dateModified": "2024-12-15T10:40:09.123456+02:00",
            "next_check": "2024-07-02T00:00:00+03:00",
            "tenderPeriod": {"endDate": "2024-12-15T10:40:09+02:00"},
            "lots": [{"id": "l1", "value": {"amount": 1000.5, "currency": "UAH"}}],
        }
        assert (b'"amount":1000.50,' if fast else b'"amount":1000.5,') in response.body
        shutdown(app.registry)
    finally:
        store.connection.close()


def test_a_bson_date_in_a_listed_field_renders_the_same_in_both_orders(settings: dict[str, str]) -> None:
    """The commit order's page reads the positions with the feed
    collection's codec options: a date is decoded, and so written, as the
    watermark order's page writes it (naive UTC, in ``feed.timezone``)."""
    import time
    from datetime import datetime

    from conftest import wait_sequenced
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main
    from openprocurement_feed.testing import wait_watermark

    app = TestApp(
        main({}, **dict(settings, **{"feed.order": "commit", "feed.sequencer": "thread", "demo.both_orders": "true"}))
    )
    store = app.app.registry.feed_store
    try:
        tenders = store.collection("tenders")
        doc = {"_id": "d" * 32, "status": "active", "next_check": datetime(2024, 12, 15, 8, 40, 9)}
        store.save_data(tenders, doc, insert=True)
        wait_sequenced(store.db)
        wait_watermark()
        pages = {}
        deadline = time.monotonic() + 10
        for feed in ("tenders", "tenders-watermark"):
            while not (data := app.get(f"/api/2.5/{feed}?opt_fields=next_check").json["data"]):
                assert time.monotonic() < deadline, feed
                time.sleep(0.05)
            pages[feed] = data
        assert pages["tenders"] == pages["tenders-watermark"]
        assert pages["tenders"][0]["next_check"] == "2024-12-15T10:40:09+02:00"
    finally:
        shutdown(app.app.registry)
