"""Query-plan analysis (``openprocurement_feed.explain``) and the ``explain`` command."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from bson.timestamp import Timestamp
from pymongo import MongoClient

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.commit.sequencer import successor
from openprocurement_feed.operations.explain import (
    CheckpointBound,
    PlanReport,
    QueryShape,
    analyse,
    feed_query_shapes,
    format_analysis,
    missing_feed_indexes,
    walk_plan,
)
from openprocurement_feed.store.database import FeedStoreMixin

#: The feed indexes expected per mode of the unscoped feed.
EXPECTED_INDEX = {"real": "feed_mode", "test": "feed_mode", "all": "feed_all"}


@pytest.fixture
def tenders(mongo_client: MongoClient, db_name: str) -> Any:
    collection = mongo_client[db_name].tenders
    collection.insert_many(
        [
            {
                "_id": f"{n:04d}",
                "public_modified": 1000.0 + n // 2,
                "is_public": n % 9 != 0,
                "is_test": n % 4 == 0,
                "owner": f"o{n % 3}",
                "dateModified": "x",
            }
            for n in range(120)
        ]
    )
    return collection


def test_shapes_cover_directions_modes_and_scope() -> None:
    store = FeedStoreMixin()
    shapes = feed_query_shapes(store, offset_value=1000.5, scope_field="owner", scope_value="o1")
    assert len(shapes) == 2 * 3 * 6
    names = [shape.name for shape in shapes]
    assert "real, ascending, first page" in names
    assert "owner=…, all, descending, after offset" in names
    for shape in shapes:
        assert "$expr" not in shape.filter  # explained without the watermark
        assert shape.filter["is_public"] is True
        assert [key for key, _ in shape.sort] == ["public_modified", "_id"]
    scoped = [shape for shape in shapes if shape.name.startswith("owner=")]
    assert all(shape.filter["owner"] == "o1" for shape in scoped)
    assert {shape.expected_index for shape in scoped} == {"feed_owner_mode", "feed_owner_all"}
    descending = [s for s in shapes if s.name.endswith("descending, after offset")]
    assert all(s.filter["public_modified"] == {"$lt": 1000.5} for s in descending)


def test_missing_indexes_by_keys_not_names(tenders: Any) -> None:
    assert [spec["name"] for spec in missing_feed_indexes(tenders)] == ["feed_mode", "feed_all"]
    tenders.create_index(
        [("public_modified", 1), ("_id", 1)],
        name="my_own_name",
        partialFilterExpression={"is_public": True},
    )
    assert [spec["name"] for spec in missing_feed_indexes(tenders)] == ["feed_mode"]
    FeedStoreMixin().ensure_feed_indexes(tenders, ["owner"])
    assert missing_feed_indexes(tenders, ["owner"]) == []


def test_an_index_of_the_same_name_with_other_keys_is_named_and_the_rest_created(
    tenders: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An earlier build's ``feed_mode`` (other keys) stays, with a warning
    that says how to drop it; the other feed indexes are still created."""
    tenders.create_index([("is_test", 1), ("public_modified", 1), ("_id", 1)], name="feed_mode")
    with caplog.at_level("WARNING", logger="openprocurement_feed.database"):
        names = FeedStoreMixin().ensure_feed_indexes(tenders)
    assert names == ["feed_all"]
    assert "dropIndex('feed_mode')" in caplog.text
    # it serves MongoDB as well: explain does not call it missing
    assert missing_feed_indexes(tenders) == []


def test_analyse_reports_every_shape(tenders: Any) -> None:
    FeedStoreMixin().ensure_feed_indexes(tenders, ["owner"])
    analysis = analyse(tenders, scope_field="owner", limit=10)
    assert len(analysis.reports) == 36
    assert analysis.missing_indexes == []
    first = analysis.reports[0]
    assert first.returned == 10 and first.stages
    text = format_analysis(analysis)
    assert "Feed indexes: all present." in text
    assert "owner=…, test, descending, first page" in text
    if analysis.problems:  # e.g. the embedded server: say why
        assert "not served by an index" in text
    if analysis.development_server:
        assert "embedded development server" in text


def test_plan_summary_of_mongodb_shaped_plans() -> None:
    shape = QueryShape("s", {}, [("public_modified", 1), ("_id", 1)], 100, "feed_mode")
    served_plan = {
        "stage": "LIMIT",
        "inputStage": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN", "indexName": "feed_mode"}},
    }
    stages = tuple(stage["stage"] for stage in walk_plan(served_plan))
    report = PlanReport(shape, stages, ("feed_mode",), 100, 100, 100)
    assert report.served and report.per_returned(report.keys_examined) == 1.0
    sbe = {"queryPlan": {"stage": "SORT", "inputStage": {"stage": "COLLSCAN"}}}
    stages = tuple(stage["stage"] for stage in walk_plan(sbe))
    report = PlanReport(shape, stages, (), 0, 3000, 0)
    assert report.collection_scan and report.in_memory_sort and not report.served
    assert report.per_returned(3000) is None
    sharded = {"stage": "SHARD_MERGE", "shards": [{"winningPlan": {"stage": "IXSCAN", "indexName": "x"}}]}
    assert [s.get("indexName") for s in walk_plan(sharded)] == [None, "x"]


def test_explain_command(tenders: Any, mongodb_uri: str, db_name: str, capsys: Any) -> None:
    status = cli_main(["explain", "--uri", mongodb_uri, "--db", db_name, "--collection", "tenders"])
    out = capsys.readouterr().out
    assert status == 1  # the feed indexes are missing
    assert "Missing feed indexes" in out and "feed_mode" in out
    FeedStoreMixin().ensure_feed_indexes(tenders)
    status = cli_main(["explain", "--uri", mongodb_uri, "--db", db_name])
    out = capsys.readouterr().out
    analysis = analyse(tenders)
    assert status == (0 if analysis.ok else 1)
    assert "real, ascending, after offset" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--collection", "nope"], "no collection 'nope'"),
        (["--uri", "http://example.org"], "expected a mongodb://"),
        (["--uri", "mongodb://127.0.0.1:1/", "--timeout-ms", "200"], "cannot reach the database"),
        (["--db", "bad name"], "--db/--collection"),
        (["--order", "commit"], "no positions collection 'tenders_feed_positions'"),
    ],
)
def test_explain_command_errors(
    tenders: Any, mongodb_uri: str, db_name: str, capsys: Any, args: list[str], message: str
) -> None:
    status = cli_main(["explain", "--uri", mongodb_uri, "--db", db_name, *args])
    err = capsys.readouterr().err
    assert status == 2
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [["--scope-field", "$where"], ["--limit", "0"], ["--limit", "5000"], ["--order", "couch"]],
)
def test_explain_command_bad_flags(args: list[str], capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["explain", "--uri", "mongodb://127.0.0.1:1/", *args])
    assert exit_info.value.code == 2
    assert args[0] in capsys.readouterr().err


@pytest.fixture
def commit_feed(settings: dict[str, str]) -> Iterator[Any]:
    """The demo API with a commit-ordered feed and its sequencer in a thread,
    holding 12 tenders (4 of them test tenders) that its feed already shows."""
    from webtest import TestApp

    from openprocurement_feed import shutdown
    from openprocurement_feed.demo import main

    app = main({}, **settings, **{"feed.order": "commit", "feed.sequencer": "thread"})
    try:
        api = TestApp(app)
        for number in range(12):
            data = {"title": f"tender {number}", **({"mode": "test"} if number % 3 == 0 else {})}
            api.post_json("/api/2.5/tenders", {"data": data})
        assert app.registry.feed_sequencer.wait_ready()
        deadline = time.monotonic() + 10
        while len(api.get("/api/2.5/tenders?mode=_all_").json["data"]) < 12:
            assert time.monotonic() < deadline, "the commit-ordered feed never showed the tenders"
            time.sleep(0.05)
        yield api
    finally:
        shutdown(app.registry)


def test_commit_shapes_are_bounded_by_the_checkpoint() -> None:
    checkpoint, offset = Timestamp(2000, 7), Timestamp(1999, 3)
    shapes = feed_query_shapes(
        FeedStoreMixin(),
        offset,
        scope_field="owner",
        scope_value="o1",
        reader=CheckpointBound(checkpoint),
    )
    assert len(shapes) == 2 * 3 * 6
    for shape in shapes:
        assert "$expr" not in shape.filter
        # never past the checkpoint, as one exclusive bound (orders.exclusive_upper)
        assert set(shape.filter["committed_ts"]) <= {"$lt", "$gt", "$gte"}
        assert shape.filter["committed_ts"]["$lt"] <= successor(checkpoint)
        assert [key for key, _ in shape.sort] == ["committed_ts", "_id"]
        assert shape.projection == {"_id": 1, "committed_ts": 1}
    by_name = {shape.name: shape for shape in shapes}
    assert by_name["owner=…, real, ascending, tie offset"].filter == {
        "owner": "o1",
        "is_public": True,
        "is_test": False,
        "committed_ts": {"$gte": offset, "$lt": successor(checkpoint)},
    }
    # the tighter of the offset and the checkpoint, as one exclusive bound
    assert by_name["all, descending, after offset"].filter["committed_ts"] == {"$lt": offset}
    assert by_name["test, ascending, after a tie group"].filter["$or"] == [
        {"committed_ts": {"$gt": offset}},
        {"committed_ts": offset, "_id": {"$gt": ""}},
    ]
    scoped = {shape.expected_index for shape in shapes if shape.name.startswith("owner=")}
    assert scoped == {"feed_owner_mode", "feed_owner_all"}


def test_explain_commit_ordered_feed(commit_feed: Any, mongodb_uri: str, db_name: str, capsys: Any) -> None:
    store = commit_feed.app.registry.feed_store
    analysis = analyse(store.collection("tenders"), order="commit", limit=5)
    assert analysis.namespace == f"{db_name}.tenders_feed_positions"
    assert analysis.missing_indexes == []
    assert isinstance(analysis.checkpoint, Timestamp)
    *pages, documents = analysis.reports
    assert len(pages) == 3 * 6
    for report in pages:
        # never past the checkpoint, as one exclusive bound (orders.exclusive_upper)
        assert "$lte" not in report.shape.filter["committed_ts"]
        assert report.shape.filter["committed_ts"]["$lt"] <= successor(analysis.checkpoint)
        assert report.shape.expected_index == EXPECTED_INDEX[report.shape.name.split(",")[0]]
    returned = {report.shape.name: report.returned for report in pages}
    assert returned["all, ascending, first page"] == 5
    assert returned["test, ascending, first page"] == 4
    assert 0 < returned["all, descending, after offset"] <= 5
    assert documents.shape.name == "page documents, by _id"
    assert (documents.shape.collection, documents.shape.expected_index) == ("tenders", "_id_")
    assert documents.returned == 5

    status = cli_main(["explain", "--uri", mongodb_uri, "--db", db_name, "--order", "commit", "--limit", "5"])
    out = capsys.readouterr().out
    # The embedded server sorts in memory even with a matching index: judge
    # the plans only where the server can (as test_explain_command does).
    assert status == (0 if analysis.ok else 1)
    assert f"{db_name}.tenders_feed_positions" in out
    assert "commit order, bounded by the checkpoint Timestamp(" in out
    assert "Feed indexes: all present." in out
    lines = {line.split("  ")[0]: line for line in out.splitlines() if "  " in line}
    for mode, index in EXPECTED_INDEX.items():
        for variant in ("ascending, tie offset", "descending, after offset", "ascending, after a tie group"):
            assert f" {index} " in lines[f"{mode}, {variant}"]
    assert " _id_ " in lines["page documents, by _id"]
    if analysis.development_server:
        assert "embedded development server" in out

    store.collection("tenders_feed_positions").drop_index("feed_mode")
    status = cli_main(["explain", "--uri", mongodb_uri, "--db", db_name, "--order", "commit"])
    out = capsys.readouterr().out
    assert status == 1
    assert "Missing feed indexes" in out and "key='committed_ts'" in out
    assert "  feed_mode: {is_public: 1, is_test: 1, committed_ts: 1, _id: 1}" in out
    assert "feed_all:" not in out


def test_explain_commit_order_before_the_first_checkpoint(tenders: Any) -> None:
    positions = tenders.database.tenders_feed_positions
    positions.insert_one({"_id": "0001", "committed_ts": Timestamp(1500, 1), "is_public": True, "is_test": False})
    FeedStoreMixin().ensure_feed_indexes(positions, key="committed_ts")
    analysis = analyse(tenders, order="commit")
    assert analysis.checkpoint is None and analysis.missing_indexes == []
    assert analysis.reports[0].shape.filter["committed_ts"] == {"$lt": Timestamp(1500, 2)}
    assert "NO CHECKPOINT YET" in format_analysis(analysis)


def test_analyse_refuses_an_unknown_order(tenders: Any) -> None:
    with pytest.raises(ValueError, match="unknown feed order"):
        analyse(tenders, order="couch")
