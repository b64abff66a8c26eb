"""Query-plan analysis (``openprocurement_feed.explain``) and the ``explain`` command."""
from __future__ import annotations

from typing import Any

import pytest
from pymongo import MongoClient

from openprocurement_feed.cli import main as cli_main
from openprocurement_feed.database import FeedStoreMixin
from openprocurement_feed.explain import (
    PlanReport,
    QueryShape,
    analyse,
    feed_query_shapes,
    format_analysis,
    missing_feed_indexes,
    walk_plan,
)


@pytest.fixture
def tenders(mongo_client: MongoClient, db_name: str) -> Any:
    collection = mongo_client[db_name].tenders
    collection.insert_many([
        {"_id": f"{n:04d}", "public_modified": 1000.0 + n // 2, "is_public": n % 9 != 0,
         "is_test": n % 4 == 0, "owner": f"o{n % 3}", "dateModified": "x"}
        for n in range(120)
    ])
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
        [("public_modified", 1), ("_id", 1)], name="my_own_name",
        partialFilterExpression={"is_public": True},
    )
    assert [spec["name"] for spec in missing_feed_indexes(tenders)] == ["feed_mode"]
    FeedStoreMixin().ensure_feed_indexes(tenders, ["owner"])
    assert missing_feed_indexes(tenders, ["owner"]) == []


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
    served_plan = {"stage": "LIMIT", "inputStage": {"stage": "FETCH", "inputStage": {
        "stage": "IXSCAN", "indexName": "feed_mode"}}}
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
    ],
)
def test_explain_command_errors(
    tenders: Any, mongodb_uri: str, db_name: str, capsys: Any, args: list[str], message: str
) -> None:
    status = cli_main(["explain", "--uri", mongodb_uri, "--db", db_name, *args])
    err = capsys.readouterr().err
    assert status == 2
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("args", [["--scope-field", "$where"], ["--limit", "0"], ["--limit", "5000"]])
def test_explain_command_bad_flags(args: list[str], capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["explain", "--uri", "mongodb://127.0.0.1:1/", *args])
    assert exit_info.value.code == 2
    assert args[0] in capsys.readouterr().err
