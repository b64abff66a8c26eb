"""The feed over HTTP: every row of SPEC A (compatibility) and B (improvements),
through webtest against the demo app on the real server, watermark on."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from bson.timestamp import Timestamp

from openprocurement_feed.testing import wait_visible

FEED = "/api/2.5/tenders"
Put = Callable[..., list[dict[str, Any]]]


def query(link: dict[str, str]) -> dict[str, list[str]]:
    return parse_qs(urlsplit(link["path"]).query, keep_blank_values=True)


def crawl(app: Any, start: str, max_pages: int = 50) -> list[dict[str, Any]]:
    """Follow next_page from ``start`` until an empty page; all items seen."""
    items: list[dict[str, Any]] = []
    url = start
    for _ in range(max_pages):
        body = app.get(url).json
        if not body["data"]:
            return items
        items.extend(body["data"])
        url = body["next_page"]["path"]
    raise AssertionError("the crawl did not end")


# -- shape of a page -------------------------------------------------------


def test_empty_feed(demo_app: Any) -> None:
    body = demo_app.get(FEED).json
    assert body == {
        "data": [],
        "next_page": {
            "offset": "",
            # as upstream's: no empty offset in the query
            "path": FEED,
            "uri": "http://localhost" + FEED,
        },
    }


def test_links_put_the_parameters_in_upstreams_order(demo_app: Any, put_docs: Put) -> None:
    """mode, limit, descending, opt_fields, offset; a prev_page of a forward
    request appends descending after opt_fields (upstream's dict order)."""
    put_docs([1000.0, 1001.0, 1002.0])
    query = "opt_fields=status&limit=2&mode=_all_"
    body = demo_app.get(f"{FEED}?{query}").json
    offset = body["next_page"]["offset"]
    assert body["next_page"]["path"] == f"{FEED}?mode=_all_&limit=2&opt_fields=status&offset={offset}"
    body = demo_app.get(f"{FEED}?{query}&offset={offset}").json
    first = body["prev_page"]["offset"]
    assert body["prev_page"]["path"] == f"{FEED}?mode=_all_&limit=2&opt_fields=status&descending=1&offset={first}"
    body = demo_app.get(f"{FEED}?descending=yes&{query}").json
    offset = body["next_page"]["offset"]
    assert body["next_page"]["path"] == f"{FEED}?mode=_all_&limit=2&descending=1&opt_fields=status&offset={offset}"
    assert body["prev_page"]["path"].startswith(f"{FEED}?mode=_all_&limit=2&opt_fields=status&offset=")


def test_items_carry_id_and_default_fields_only(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([100.0], title="secret", status="active")
    body = demo_app.get(FEED).json
    assert body["data"] == [{"id": docs[0]["_id"], "dateModified": docs[0]["dateModified"]}]
    assert "prev_page" not in body


def test_opt_fields_allowed_only_sorted_and_echoed_without_defaults(demo_app: Any, put_docs: Put) -> None:
    doc = put_docs([100.0], title="A tender", procurementMethodType="belowThreshold")[0]
    body = demo_app.get(
        FEED + "?opt_fields=title,procurementMethodType,public_modified,_rev,is_test,bogus,dateModified"
    ).json
    assert body["data"] == [
        {
            "id": doc["_id"],
            "dateModified": doc["dateModified"],
            "procurementMethodType": "belowThreshold",
            "public_modified": 100.0,
        }
    ]  # title is not one of upstream's listing fields
    assert query(body["next_page"])["opt_fields"] == ["procurementMethodType,public_modified"]


def test_opt_fields_with_only_unknown_names_is_not_echoed(demo_app: Any, put_docs: Put) -> None:
    put_docs([100.0])
    body = demo_app.get(FEED + "?opt_fields=bogus,_id").json
    assert "opt_fields" not in query(body["next_page"])
    assert set(body["data"][0]) == {"id", "dateModified"}


def test_next_page_offset_format(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([100.25, 100.5, 100.5])
    body = demo_app.get(FEED).json
    ids = sorted(d["_id"] for d in docs[1:])
    digest = hashlib.md5("".join(ids).encode()).hexdigest()
    assert body["next_page"]["offset"] == f"100.5.2.{digest}"
    assert body["next_page"]["uri"] == "http://localhost" + body["next_page"]["path"]


# -- limits ------------------------------------------------------------------


@pytest.mark.parametrize("raw, echoed", [("0", "1"), ("-3", "1"), ("2", "2"), ("5000", "1000"), ("9" * 40, "1000")])
def test_limit_is_clamped_and_echoed(demo_app: Any, put_docs: Put, raw: str, echoed: str) -> None:
    put_docs([100.0 + i for i in range(3)])
    body = demo_app.get(FEED + f"?limit={raw}").json
    assert query(body["next_page"])["limit"] == [echoed]
    assert len(body["data"]) == min(int(echoed), 3)


def test_default_limit_is_not_echoed(demo_app: Any) -> None:
    assert "limit" not in query(demo_app.get(FEED).json["next_page"])


@pytest.mark.parametrize("raw", ["x", "1.5", "1e3", "", "١٠"])
def test_invalid_limit_is_400(demo_app: Any, raw: str) -> None:
    if raw == "":
        demo_app.get(FEED + "?limit=")  # empty means the default
        return
    body = demo_app.get(FEED, params={"limit": raw}, status=400).json
    assert body["status"] == "error"
    assert body["errors"][0]["location"] == "querystring"
    assert body["errors"][0]["name"] == "limit"
    assert raw in body["errors"][0]["description"]


def test_invalid_offset_is_404_with_the_spec_body(demo_app: Any) -> None:
    body = demo_app.get(FEED + "?offset=garbage", status=404).json
    assert body == {
        "status": "error",
        "errors": [
            {
                "location": "querystring",
                "name": "offset",
                "description": "Invalid offset provided: garbage",
            }
        ],
    }


# -- paging ----------------------------------------------------------------


def test_forward_paging_then_empty_page_echoes_offset(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([100.0 + i for i in range(5)])
    first = demo_app.get(FEED + "?limit=2").json
    assert [i["id"] for i in first["data"]] == [d["_id"] for d in docs[:2]]
    second = demo_app.get(first["next_page"]["path"]).json
    assert [i["id"] for i in second["data"]] == [d["_id"] for d in docs[2:4]]
    assert query(second["next_page"])["limit"] == ["2"]
    third = demo_app.get(second["next_page"]["path"]).json
    assert [i["id"] for i in third["data"]] == [docs[4]["_id"]]
    end = demo_app.get(third["next_page"]["path"]).json
    assert end["data"] == []
    assert end["next_page"]["offset"] == third["next_page"]["offset"]
    assert end["prev_page"]["offset"] == third["next_page"]["offset"]


def test_descending_newest_first_and_echoed_as_1(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([100.0 + i for i in range(3)])
    body = demo_app.get(FEED + "?descending=yes&limit=2").json
    assert [i["id"] for i in body["data"]] == [docs[2]["_id"], docs[1]["_id"]]
    assert query(body["next_page"])["descending"] == ["1"]
    assert "descending" not in query(body["prev_page"])
    # prev_page carries the offset of the page's first item
    assert body["prev_page"]["offset"].startswith("102.0.1.")
    rest = demo_app.get(body["next_page"]["path"]).json
    assert [i["id"] for i in rest["data"]] == [docs[0]["_id"]]
    assert demo_app.get(rest["next_page"]["path"]).json["data"] == []


def test_prev_page_present_only_with_descending_or_offset(demo_app: Any, put_docs: Put) -> None:
    put_docs([100.0])
    assert "prev_page" not in demo_app.get(FEED).json
    assert "prev_page" in demo_app.get(FEED + "?descending=1").json
    assert "prev_page" in demo_app.get(FEED + "?offset=1.0").json


def test_turnaround_backward_then_forward_sees_new_documents(demo_app: Any, put_docs: Put) -> None:
    """The protocol: read the newest page, then follow its prev_page forward."""
    old = put_docs([100.0 + i for i in range(3)])
    newest = demo_app.get(FEED + "?descending=1&limit=2").json
    forward_path = newest["prev_page"]["path"]
    assert demo_app.get(forward_path).json["data"] == []
    new = put_docs([200.0, 201.0])
    seen = crawl(demo_app, forward_path)
    assert [i["id"] for i in seen] == [d["_id"] for d in new]
    backward = crawl(demo_app, newest["next_page"]["path"])
    assert [i["id"] for i in backward] == [old[0]["_id"]]


def test_prev_page_of_a_forward_page_goes_backward(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([100.0 + i for i in range(4)])
    page = demo_app.get(FEED + "?offset=101.0&limit=2").json
    assert [i["id"] for i in page["data"]] == [d["_id"] for d in docs[2:]]
    back = demo_app.get(page["prev_page"]["path"]).json
    assert [i["id"] for i in back["data"]] == [docs[1]["_id"], docs[0]["_id"]]


# -- ties ------------------------------------------------------------------


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("group", [3, 5, 7])
def test_tie_group_cut_by_pages_is_sent_exactly_once(
    demo_app: Any, put_docs: Put, descending: bool, group: int
) -> None:
    """SPEC B.3: a page boundary inside a tie group re-sends nothing already seen."""
    docs = put_docs([100.0] + [150.0] * group + [200.0])
    start = FEED + "?limit=2" + ("&descending=1" if descending else "")
    seen = [i["id"] for i in crawl(demo_app, start)]
    assert sorted(seen) == sorted(d["_id"] for d in docs)
    assert len(seen) == len(set(seen)), "no duplicates with a matching hash"


def test_the_protocol_pages_tie_example(demo_app: Any, put_docs: Put) -> None:
    """The protocol page's "differences from upstream" example: three
    tenders of one stamp, ``limit=2``. The first page and its offset are
    upstream's (``{pm}.{n}.{md5 of the sorted ids}``); the second page sends
    only the third tender, where upstream's re-sends all three (it hides the
    served ones only when the whole group read at ``pm`` is those ``n``)."""
    a, b, c = (letter * 32 for letter in "abc")
    for doc_id in (c, a, b):
        put_docs([1700000000.5], _id=doc_id)
    first = demo_app.get(FEED + "?limit=2").json
    assert [i["id"] for i in first["data"]] == [a, b]
    digest = hashlib.md5((a + b).encode()).hexdigest()
    assert first["next_page"]["offset"] == f"1700000000.5.2.{digest}"
    second = demo_app.get(first["next_page"]["path"]).json
    assert [i["id"] for i in second["data"]] == [c]


def test_tie_group_larger_than_the_fetch_window(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([150.0] * 12 + [200.0])
    seen = [i["id"] for i in crawl(demo_app, FEED + "?limit=2")]
    assert sorted(seen) == sorted(d["_id"] for d in docs)
    assert len(seen) == len(set(seen))


def test_tie_with_a_non_matching_hash_resends_the_group(demo_app: Any, put_docs: Put) -> None:
    """Duplicates are acceptable, losses are not."""
    docs = put_docs([150.0] * 3 + [200.0])
    body = demo_app.get(FEED + "?offset=150.0.2.0000ffff&limit=10").json
    assert [i["id"] for i in body["data"]] == [*sorted(d["_id"] for d in docs[:3]), docs[3]["_id"]]


def test_tie_offset_with_a_huge_count_is_bounded(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([150.0] * 3)
    body = demo_app.get(FEED + "?offset=150.0.100000.bad&limit=2").json
    assert [i["id"] for i in body["data"]] == sorted(d["_id"] for d in docs)[:2]


def test_tie_offset_of_a_changed_group_never_loses(demo_app: Any, put_docs: Put, store: Any) -> None:
    docs = put_docs([150.0] * 4)
    page = demo_app.get(FEED + "?limit=2").json
    # one of the unseen tie members is rewritten: it leaves the group for a newer stamp
    ordered = sorted(d["_id"] for d in docs)
    moved = store.collection("tenders").find_one({"_id": ordered[3]})
    store.save_data(store.collection("tenders"), dict(moved, public_modified=160.0), modified=False)
    seen = [i["id"] for i in page["data"]] + [i["id"] for i in crawl(demo_app, page["next_page"]["path"])]
    assert set(seen) == set(ordered)


# -- legacy offsets ----------------------------------------------------------


def test_bare_float_offset_is_exclusive(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([100.0, 101.0])
    body = demo_app.get(FEED + "?offset=100.0").json
    assert [i["id"] for i in body["data"]] == [docs[1]["_id"]]


def test_iso_date_offset(demo_app: Any, put_docs: Put) -> None:
    docs = put_docs([1778583600.2, 1778583600.6])
    body = demo_app.get(FEED, params={"offset": "2026-05-12T14:00:00.5+03:00"}).json
    assert [i["id"] for i in body["data"]] == [docs[1]["_id"]]
    # the query decoder turns "+" into " ": read back as "+"
    body = demo_app.get(FEED + "?offset=2026-05-12T14:00:00.5+03:00").json
    assert [i["id"] for i in body["data"]] == [docs[1]["_id"]]


def test_public_ts_offset_never_loses(demo_app: Any, put_docs: Put) -> None:
    """Without stamped public_ts, a legacy cursor is read one second early."""
    docs = put_docs([1778583599.5, 1778583600.5, 1778583601.5])
    body = demo_app.get(FEED + "?offset=1778583600.0000000003").json
    assert [i["id"] for i in body["data"]] == [d["_id"] for d in docs]


# -- modes, visibility, ignored params ---------------------------------------


def test_modes(demo_app: Any, put_docs: Put) -> None:
    real = put_docs([100.0])[0]
    test = put_docs([101.0], mode="test")[0]
    ids = lambda url: [i["id"] for i in demo_app.get(url).json["data"]]  # noqa: E731
    assert ids(FEED) == [real["_id"]]
    assert ids(FEED + "?mode=test") == [test["_id"]]
    assert ids(FEED + "?mode=_all_") == [real["_id"], test["_id"]]
    assert ids(FEED + "?mode=whatever") == [real["_id"]]
    body = demo_app.get(FEED + "?mode=whatever").json
    assert query(body["next_page"])["mode"] == ["whatever"]


def test_draft_and_deleted_are_not_served(demo_app: Any, put_docs: Put) -> None:
    put_docs([100.0], status="draft")
    put_docs([101.0], status="deleted")
    shown = put_docs([102.0], status="cancelled")
    assert [i["id"] for i in demo_app.get(FEED).json["data"]] == [shown[0]["_id"]]


def test_other_params_are_ignored_and_not_echoed(demo_app: Any, put_docs: Put) -> None:
    put_docs([100.0])
    body = demo_app.get(FEED + "?feed=changes&foo=bar&opt_fields=").json
    assert len(body["data"]) == 1
    assert set(query(body["next_page"])) == {"offset"}


def test_repeated_params_last_wins(demo_app: Any, put_docs: Put) -> None:
    put_docs([100.0 + i for i in range(3)])
    body = demo_app.get(FEED + "?limit=1&limit=2").json
    assert len(body["data"]) == 2


# -- the watermark -----------------------------------------------------------


def test_watermark_hides_young_documents(settings: dict[str, str]) -> None:
    """A watermark of 3 s, not the suite's 0.2: the three reads below must
    come within it on a busy machine (two reads of a fresh process took
    longer than 0.2 s once)."""
    from webtest import TestApp

    from openprocurement_feed.demo import main

    app = main({}, **dict(settings, **{"feed.watermark_seconds": "3"}))
    demo_app = TestApp(app)
    try:
        created = demo_app.post_json(FEED, {"data": {"title": "fresh"}}, status=201).json["data"]
        assert demo_app.get(FEED).json["data"] == []
        assert demo_app.get(FEED + "?descending=1").json["data"] == []
        # history (descending with an offset) has no race: served at once
        history = demo_app.get(FEED + "?descending=1&offset=9999999999.0").json
        assert [i["id"] for i in history["data"]] == [created["id"]]
        for path in (FEED, FEED + "?descending=1"):  # then shown, the watermark passed
            wait_visible(lambda path=path: [item["id"] for item in demo_app.get(path).json["data"]], [created["id"]])
    finally:
        app.registry.feed_store.close()


# -- scoped feeds ------------------------------------------------------------


@pytest.fixture
def scoped_app(settings: dict[str, str]) -> Any:
    from pyramid.config import Configurator
    from webtest import TestApp

    config = Configurator(settings=settings)
    config.include("openprocurement_feed")
    config.add_feed(
        "submissions",
        path="frameworks/{frameworkID}/submissions",
        scope="frameworkID",
        allowed_fields=("status",),
    )
    app = config.make_wsgi_app()
    yield TestApp(app)
    app.registry.feed_store.close()


def test_scoped_feed_filters_and_keeps_its_scope_in_links(scoped_app: Any) -> None:
    store = scoped_app.app.registry.feed_store
    collection = store.collection("submissions")
    for number, framework in enumerate(["f1", "f1", "f2"]):
        store.save_data(
            collection,
            {
                "_id": f"s{number}",
                "frameworkID": framework,
                "public_modified": 100.0 + number,
                "dateModified": "2020",
                "status": "active",
            },
            insert=True,
            modified=False,
        )
    path = "/api/2.5/frameworks/f1/submissions"
    body = scoped_app.get(path + "?limit=1").json
    assert [i["id"] for i in body["data"]] == ["s0"]
    assert body["next_page"]["path"].startswith(path + "?")
    second = scoped_app.get(body["next_page"]["path"]).json
    assert [i["id"] for i in second["data"]] == ["s1"]
    assert second["prev_page"]["path"].startswith(path + "?")
    assert scoped_app.get(second["next_page"]["path"]).json["data"] == []
    other = scoped_app.get("/api/2.5/frameworks/f2/submissions").json
    assert [i["id"] for i in other["data"]] == ["s2"]
    names = set(collection.index_information())
    assert {"feed_frameworkID_mode", "feed_frameworkID_all"} <= names


def test_feed_indexes_are_created(demo_app: Any, store: Any) -> None:
    info = store.collection("tenders").index_information()
    assert info["feed_mode"]["key"] == [("is_public", 1), ("is_test", 1), ("public_modified", 1), ("_id", 1)]
    assert info["feed_all"]["key"] == [("is_public", 1), ("public_modified", 1), ("_id", 1)]
    assert "partialFilterExpression" not in info["feed_mode"]


@pytest.mark.parametrize("mode", ["all", "test", "_all_"])
def test_a_page_after_an_offset_walks_the_feed_index(store: Any, mode: str) -> None:
    """The query of a page after an offset (equalities, a range on the key)
    is answered from the feed index, not a collection scan, on the server
    the tests run against (the embedded server walks a compound index only
    when its leading fields are the query's equalities)."""
    from openprocurement_feed.store.orders import COMMITTED_TS, PageReader

    positions = store.db["idx_feed_positions"]
    store.ensure_feed_indexes(positions, key=COMMITTED_TS)
    positions.insert_many(
        [
            {"_id": f"e{n}", COMMITTED_TS: Timestamp(1000 + n, 1), "is_public": True, "is_test": n % 2 == 0}
            for n in range(50)
        ]
    )
    reader = PageReader()
    reader.key = COMMITTED_TS
    query, sort = store.build_query(
        inclusive_filter=True,
        offset_field=COMMITTED_TS,
        offset_value=Timestamp(1045, 1),
        mode=mode,
        reader=reader,
    )
    plan = store.db.command({"explain": {"find": positions.name, "filter": query, "sort": dict(sort)}})
    stages = json.dumps(plan["queryPlanner"]["winningPlan"])
    assert "IXSCAN" in stages and "COLLSCAN" not in stages, stages


def test_query_over_its_time_limit_is_503(settings: dict[str, str]) -> None:
    """``feed.max_time_ms`` bounds the server time of a feed query: past it,
    the client gets a 503 with the JSON body and Retry-After, not a 500."""
    from webtest import TestApp

    from openprocurement_feed.demo import main

    app = main({}, **dict(settings, **{"feed.max_time_ms": "1"}))
    store = app.registry.feed_store
    store.collection("tenders").insert_many(
        [
            {
                "_id": f"{n:032x}",
                "public_modified": 100.0 + n,
                "is_public": True,
                "is_test": False,
                "dateModified": "x",
                "pad": "x" * 2000,
            }
            for n in range(3000)
        ]
    )
    response = TestApp(app).get(FEED + "?opt_fields=public_modified", status=503)
    assert response.json["errors"][0]["description"] == "The query took too long; retry later"
    assert response.headers["Retry-After"] == "1"
    store.close()
