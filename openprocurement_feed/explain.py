"""Query-plan analysis of the feed: which index serves each query shape.

Used by ``openprocurement-feed explain`` (operators run it against their own
MongoDB) and by the benchmarks. Every shape the store sends is built with the
store's own :meth:`~.database.FeedStoreMixin.build_query`, explained with
``executionStats`` verbosity and summarised as: the stages of the winning
plan, the index it scans, and the keys and documents examined per document
returned.

The watermark predicate (an ``$expr`` on ``$$NOW``) is left out: some servers
cannot evaluate ``$$NOW`` in ``explain``, and it is a residual filter that does
not change which index is chosen.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from bson.son import SON
from pymongo.collection import Collection

from .database import PUBLIC_MODIFIED, FeedStoreMixin

#: The feed modes and the ``mode`` parameter that selects each.
MODES = (("real", ""), ("test", "test"), ("all", "_all_"))
#: Stages that mean the plan reads the whole collection or sorts in memory.
COLLECTION_SCAN = "COLLSCAN"
IN_MEMORY_SORTS = ("SORT", "SORT_KEY_GENERATOR")
#: Plan keys that hold child stages, in the formats MongoDB versions use.
CHILD_KEYS = ("inputStage", "innerStage", "outerStage", "thenStage", "elseStage")
CHILD_LIST_KEYS = ("inputStages",)
DEFAULT_PROJECTION = {"_id": 1, PUBLIC_MODIFIED: 1, "dateModified": 1}


@dataclass(frozen=True)
class QueryShape:
    """One query the feed sends: a name for people, and the query itself.

    ``expected_index`` names the feed index meant to serve it
    (:meth:`FeedStoreMixin.feed_index_specs`).
    """

    name: str
    filter: Mapping[str, Any]
    sort: Sequence[tuple[str, int]]
    limit: int
    expected_index: str


@dataclass(frozen=True)
class PlanReport:
    """What the server did for one :class:`QueryShape`."""

    shape: QueryShape
    stages: tuple[str, ...]
    indexes: tuple[str, ...]
    keys_examined: int
    docs_examined: int
    returned: int

    @property
    def collection_scan(self) -> bool:
        """True when the plan reads the whole collection."""
        return COLLECTION_SCAN in self.stages

    @property
    def in_memory_sort(self) -> bool:
        """True when the plan sorts the matching documents in memory."""
        return any(stage in IN_MEMORY_SORTS for stage in self.stages)

    @property
    def served(self) -> bool:
        """True when an index serves the filter and the sort."""
        return bool(self.indexes) and not self.collection_scan and not self.in_memory_sort

    def per_returned(self, examined: int) -> float | None:
        """``examined`` per document returned (None when none was returned)."""
        return examined / self.returned if self.returned else None


@dataclass
class Analysis:
    """The plans of every shape of one feed collection, and its indexes."""

    namespace: str
    documents: int
    server_version: str
    development_server: bool
    reports: list[PlanReport] = field(default_factory=list)
    missing_indexes: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def problems(self) -> list[PlanReport]:
        """Shapes served by a collection scan or an in-memory sort."""
        return [report for report in self.reports if not report.served]

    @property
    def ok(self) -> bool:
        """True when every shape is served by an index and none is missing."""
        return not self.problems and not self.missing_indexes


def _index_stem(scope_field: str | None) -> str:
    return f"feed_{scope_field}_" if scope_field else "feed_"


def feed_query_shapes(
    store: FeedStoreMixin,
    offset_value: float,
    limit: int = 100,
    scope_field: str | None = None,
    scope_value: Any = None,
) -> list[QueryShape]:
    """Every query shape of a feed, for each mode, without the watermark.

    With ``scope_field`` the shapes of the scoped feed (``scope_field ==
    scope_value``) follow those of the unscoped one.
    """
    shapes: list[QueryShape] = []
    scopes: list[str | None] = [None] + ([scope_field] if scope_field else [])
    for scope in scopes:
        filters = {scope: scope_value} if scope else None
        label = f"{scope}=…, " if scope else ""
        for mode_name, mode in MODES:
            index = _index_stem(scope) + ("all" if mode == "_all_" else "mode")
            variants = (
                ("ascending, first page", dict(descending=False)),
                ("ascending, after offset", dict(descending=False, offset_value=offset_value)),
                ("ascending, tie offset", dict(descending=False, offset_value=offset_value, inclusive_filter=True)),
                ("descending, first page", dict(descending=True)),
                ("descending, after offset", dict(descending=True, offset_value=offset_value)),
            )
            for variant, options in variants:
                query, sort = store.build_query(
                    mode=mode, filters=filters, watermark=False, **options  # type: ignore[arg-type]
                )
                shapes.append(QueryShape(f"{label}{mode_name}, {variant}", query, sort, limit, index))
            # After a tie group larger than a page: the keyset query of
            # FeedStoreMixin._after (value, then _id, in feed order).
            keyset = dict(filters or {})
            keyset["$or"] = [
                {PUBLIC_MODIFIED: {"$gt": offset_value}},
                {PUBLIC_MODIFIED: offset_value, "_id": {"$gt": ""}},
            ]
            query, sort = store.build_query(
                mode=mode, filters=keyset, watermark=False, has_offset=True
            )
            shapes.append(QueryShape(f"{label}{mode_name}, ascending, after a tie group", query, sort, limit, index))
    return shapes


def walk_plan(plan: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every stage of a plan tree, parents first (classic and SBE formats)."""
    if "queryPlan" in plan:  # slot-based engine: winningPlan.queryPlan
        plan = plan["queryPlan"]
    yield plan
    for key in CHILD_KEYS:
        child = plan.get(key)
        if isinstance(child, Mapping):
            yield from walk_plan(child)
    for key in CHILD_LIST_KEYS:
        for child in plan.get(key) or ():
            yield from walk_plan(child)
    for shard in plan.get("shards") or ():  # sharded clusters
        winning = shard.get("winningPlan")
        if isinstance(winning, Mapping):
            yield from walk_plan(winning)


def explain_shape(
    collection: Collection, shape: QueryShape, projection: Mapping[str, Any] | None = None
) -> PlanReport:
    """Explain one shape with ``executionStats`` and run it to count results."""
    projection = dict(projection or DEFAULT_PROJECTION)
    command = SON([
        ("find", collection.name),
        ("filter", dict(shape.filter)),
        ("sort", SON(list(shape.sort))),
        ("projection", projection),
        ("limit", shape.limit),
    ])
    result = collection.database.command("explain", command, verbosity="executionStats")
    winning = result.get("queryPlanner", {}).get("winningPlan", {})
    stages = tuple(stage.get("stage", "?") for stage in walk_plan(winning))
    indexes = tuple(
        dict.fromkeys(stage["indexName"] for stage in walk_plan(winning) if stage.get("indexName"))
    )
    stats = result.get("executionStats", {})
    # Some servers report nReturned before the limit; count the real answer.
    returned = len(list(collection.find(shape.filter, {"_id": 1}, sort=list(shape.sort), limit=shape.limit)))
    return PlanReport(
        shape=shape,
        stages=stages,
        indexes=indexes,
        keys_examined=int(stats.get("totalKeysExamined", 0)),
        docs_examined=int(stats.get("totalDocsExamined", 0)),
        returned=returned,
    )


def _normal_keys(keys: Iterable[Any]) -> tuple[tuple[str, int], ...]:
    return tuple((str(name), int(direction)) for name, direction in keys)


def missing_feed_indexes(
    collection: Collection, scope_fields: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The feed index specs with no matching index on ``collection``.

    An index matches by its keys (names do not matter) and either the same
    partial filter or none (a full index serves the feed too).
    """
    existing = []
    for info in collection.index_information().values():
        partial = info.get("partialFilterExpression")
        existing.append((_normal_keys(info["key"]), dict(partial) if partial else None))
    missing = []
    for spec in FeedStoreMixin.feed_index_specs(scope_fields):
        keys = _normal_keys(spec["keys"])
        wanted = dict(spec["partialFilterExpression"])
        if not any(have == keys and partial in (None, wanted) for have, partial in existing):
            missing.append(spec)
    return missing


def sample_offset(collection: Collection) -> float:
    """A ``public_modified`` in the middle of the public documents (now when
    there are none), so offset shapes select about half the feed."""
    public = {"is_public": True, PUBLIC_MODIFIED: {"$type": "number"}}
    first = collection.find_one(public, {PUBLIC_MODIFIED: 1}, sort=[(PUBLIC_MODIFIED, 1)])
    last = collection.find_one(public, {PUBLIC_MODIFIED: 1}, sort=[(PUBLIC_MODIFIED, -1)])
    if not first or not last:
        return round(time.time(), 3)
    return round((float(first[PUBLIC_MODIFIED]) + float(last[PUBLIC_MODIFIED])) / 2, 3)


def sample_scope_value(collection: Collection, scope_field: str) -> Any:
    """A value of ``scope_field`` found on a public document, or a placeholder."""
    doc = collection.find_one({"is_public": True, scope_field: {"$exists": True}}, {scope_field: 1})
    return doc[scope_field] if doc else "example"


def analyse(
    collection: Collection,
    scope_field: str | None = None,
    limit: int = 100,
    store: FeedStoreMixin | None = None,
    progress: Any = None,
) -> Analysis:
    """Explain every feed query shape on ``collection`` and check its indexes.

    :param progress: called with ``(done, total)`` after each shape.
    """
    started = time.perf_counter()
    store = store or FeedStoreMixin()
    info = collection.database.client.server_info()
    analysis = Analysis(
        namespace=f"{collection.database.name}.{collection.name}",
        documents=collection.estimated_document_count(),
        server_version=str(info.get("version", "?")),
        development_server="secantusVersion" in info,
        missing_indexes=missing_feed_indexes(collection, [scope_field] if scope_field else []),
    )
    scope_value = sample_scope_value(collection, scope_field) if scope_field else None
    shapes = feed_query_shapes(store, sample_offset(collection), limit, scope_field, scope_value)
    for done, shape in enumerate(shapes, 1):
        analysis.reports.append(explain_shape(collection, shape))
        if progress is not None:
            progress(done, len(shapes))
    analysis.seconds = time.perf_counter() - started
    return analysis


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_analysis(analysis: Analysis) -> str:
    """A plain-text report of an :class:`Analysis`, with what it means."""
    lines = [
        f"Feed query plans of {analysis.namespace}: {analysis.documents} documents, "
        f"server {analysis.server_version}, {len(analysis.reports)} shapes "
        f"in {analysis.seconds:.1f} s (watermark $expr left out: it is a residual filter).",
    ]
    if analysis.missing_indexes:
        lines.append("Missing feed indexes (create them with FeedStoreMixin.ensure_feed_indexes):")
        for spec in analysis.missing_indexes:
            keys = ", ".join(f"{name}: {direction}" for name, direction in spec["keys"])
            lines.append(f"  {spec['name']}: {{{keys}}} partial {spec['partialFilterExpression']}")
    else:
        lines.append("Feed indexes: all present.")
    width = max((len(r.shape.name) for r in analysis.reports), default=10)
    lines.append("")
    lines.append(
        f"{'shape':<{width}}  {'plan (top first)':<42} {'index used':<18} {'expected':<18} "
        f"{'keys/doc':>8} {'docs/doc':>8} {'returned':>8}"
    )
    for report in analysis.reports:
        plan = " > ".join(report.stages)
        flag = "" if report.served else "  <-- " + (
            "collection scan" if report.collection_scan else "in-memory sort"
        )
        lines.append(
            f"{report.shape.name:<{width}}  {plan:<42} {', '.join(report.indexes) or '-':<18} "
            f"{report.shape.expected_index:<18} {_ratio(report.per_returned(report.keys_examined)):>8} "
            f"{_ratio(report.per_returned(report.docs_examined)):>8} {report.returned:>8}{flag}"
        )
    lines.append("")
    problems = analysis.problems
    if not problems and not analysis.missing_indexes:
        lines.append("Every shape is served by an index, in index order: no collection scan, no in-memory sort.")
        return "\n".join(lines)
    if problems:
        scans = sum(report.collection_scan for report in problems)
        sorts = sum(report.in_memory_sort for report in problems)
        lines.append(
            f"{len(problems)} of {len(analysis.reports)} shapes are not served by an index "
            f"({scans} collection scans, {sorts} in-memory sorts). A feed page then costs "
            "time in proportion to the whole collection, not to the page."
        )
    if analysis.development_server:
        lines.append(
            "Note: this is the embedded development server. Its planner sorts in memory even "
            "when an index matches the sort, and often scans the collection, so these plans "
            "cannot judge the indexes; run this command against MongoDB to do that."
        )
    elif problems and not analysis.missing_indexes:
        lines.append(
            "The feed indexes exist but are not used for these shapes: check that their "
            "keys start with the equality fields, then (public_modified, _id), and that "
            "queries and indexes agree on the partial filter {is_public: true}."
        )
    return "\n".join(lines)
