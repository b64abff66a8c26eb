"""Query-plan analysis of the feed: which index serves each query shape.

Used by ``openprocurement-feed explain`` (operators run it against their own
MongoDB) and by the benchmarks. Every shape the store sends is built with the
store's own :meth:`~.database.FeedStoreMixin.build_query`, explained with
``executionStats`` verbosity and summarised as: the stages of the winning
plan, the index it scans, and the keys and documents examined per document
returned.

In watermark order the shapes query the feed collection, sorted on
``public_modified``. The watermark predicate (an ``$expr`` on ``$$NOW``) is
left out: some servers cannot evaluate ``$$NOW`` in ``explain``, and it is a
residual filter that does not change which index is chosen.

In commit order (SPEC D) the shapes query the positions collection beside the
feed collection, sorted on ``committed_ts`` and bounded by the sequencer's
checkpoint (``{"committed_ts": {"$lte": <checkpoint>}}``, read as a page reads
it), followed by the read of a page's documents by ``_id``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bson.son import SON
from bson.timestamp import Timestamp
from pymongo.collection import Collection

from ..store.database import FeedStoreMixin
from ..store.orders import (
    COMMIT,
    COMMITTED_TS,
    PUBLIC_MODIFIED,
    WATERMARK,
    CommitReader,
    FeedNotReady,
    PageReader,
    positions_name,
)

#: The feed modes and the ``mode`` parameter that selects each.
MODES = (("real", ""), ("test", "test"), ("all", "_all_"))
#: Stages that mean the plan reads the whole collection or sorts in memory.
COLLECTION_SCAN = "COLLSCAN"
IN_MEMORY_SORTS = ("SORT", "SORT_KEY_GENERATOR")
#: Plan keys that hold child stages, in the formats MongoDB versions use.
CHILD_KEYS = ("inputStage", "innerStage", "outerStage", "thenStage", "elseStage")
CHILD_LIST_KEYS = ("inputStages",)
DEFAULT_PROJECTION = {"_id": 1, PUBLIC_MODIFIED: 1, "dateModified": 1}
#: What a commit-ordered page reads from the positions (``CommitReader.find``).
POSITIONS_PROJECTION = {"_id": 1, COMMITTED_TS: 1}
#: What it then reads from the page's documents (``CommitReader.finish``).
DOCUMENTS_PROJECTION = {"_id": 1, PUBLIC_MODIFIED: 1, "is_public": 1, "dateModified": 1}
#: The index every collection has on ``_id``.
ID_INDEX = "_id_"


@dataclass(frozen=True)
class QueryShape:
    """One query the feed sends: a name for people, and the query itself.

    ``expected_index`` names the feed index meant to serve it
    (:meth:`FeedStoreMixin.feed_index_specs`). ``collection`` names the
    collection of the same database it runs on when that is not the analysed
    one (the documents of a commit-ordered page); ``projection`` is what it
    reads (None: :data:`DEFAULT_PROJECTION`).
    """

    name: str
    filter: Mapping[str, Any]
    sort: Sequence[tuple[str, int]]
    limit: int
    expected_index: str
    collection: str | None = None
    projection: Mapping[str, Any] | None = None


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
    order: str = WATERMARK
    #: commit order: the checkpoint the shapes are bounded by (None: the
    #: sequencer has published none yet)
    checkpoint: Timestamp | None = None

    @property
    def key(self) -> str:
        """The field the feed is sorted on."""
        return COMMITTED_TS if self.order == COMMIT else PUBLIC_MODIFIED

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


class CheckpointBound(PageReader):
    """The commit order's upper bound at a given checkpoint, with no session:
    the shapes of a commit-ordered feed whose sequencer has not published a
    checkpoint yet (its pages answer 503 until then)."""

    key = COMMITTED_TS

    def __init__(self, checkpoint: Timestamp) -> None:
        super().__init__()
        self.checkpoint = checkpoint

    #: the very bound of :class:`~.orders.CommitReader`
    bound = CommitReader.bound


def feed_query_shapes(
    store: FeedStoreMixin,
    offset_value: Any,
    limit: int = 100,
    scope_field: str | None = None,
    scope_value: Any = None,
    reader: PageReader | None = None,
) -> list[QueryShape]:
    """Every query shape of a feed, for each mode.

    Without ``reader``: the watermark order's shapes, without the watermark.
    With a commit-order ``reader`` (a :class:`~.orders.CommitReader` or a
    :class:`CheckpointBound`): the shapes on the positions, sorted on
    ``committed_ts`` and bounded by its checkpoint. With ``scope_field`` the
    shapes of the scoped feed (``scope_field == scope_value``) follow those
    of the unscoped one.
    """
    key = reader.key if reader is not None else PUBLIC_MODIFIED
    bounded = reader is not None  # the checkpoint bound can be explained; $$NOW cannot
    projection = POSITIONS_PROJECTION if key == COMMITTED_TS else None
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
                    offset_field=key,
                    mode=mode,
                    filters=filters,
                    watermark=bounded,
                    reader=reader,
                    **options,
                )
                shapes.append(
                    QueryShape(
                        f"{label}{mode_name}, {variant}",
                        query,
                        sort,
                        limit,
                        index,
                        projection=projection,
                    )
                )
            # After a tie group larger than a page: the keyset query of
            # FeedStoreMixin._after (value, then _id, in feed order).
            keyset = dict(filters or {})
            keyset["$or"] = [
                {key: {"$gt": offset_value}},
                {key: offset_value, "_id": {"$gt": ""}},
            ]
            query, sort = store.build_query(
                offset_field=key,
                mode=mode,
                filters=keyset,
                watermark=bounded,
                has_offset=True,
                reader=reader,
            )
            shapes.append(
                QueryShape(
                    f"{label}{mode_name}, ascending, after a tie group",
                    query,
                    sort,
                    limit,
                    index,
                    projection=projection,
                )
            )
    return shapes


def page_documents_shape(collection_name: str, ids: Sequence[Any], limit: int = 100) -> QueryShape:
    """The second query of a commit-ordered page: its documents by ``_id``
    (:meth:`~.orders.CommitReader.finish`), on the feed collection."""
    return QueryShape(
        "page documents, by _id",
        {"_id": {"$in": list(ids)}},
        (),
        limit,
        ID_INDEX,
        collection=collection_name,
        projection=DOCUMENTS_PROJECTION,
    )


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
    collection: Collection[Any], shape: QueryShape, projection: Mapping[str, Any] | None = None
) -> PlanReport:
    """Explain one shape with ``executionStats`` and run it to count results.

    The shape runs on ``collection``, or on its sibling ``shape.collection``.
    """
    if shape.collection:
        collection = collection.database.get_collection(shape.collection)
    projection = dict(projection or shape.projection or DEFAULT_PROJECTION)
    command = SON(
        [
            ("find", collection.name),
            ("filter", dict(shape.filter)),
            ("sort", SON(list(shape.sort))),
            ("projection", projection),
            ("limit", shape.limit),
        ]
    )
    result = collection.database.command("explain", command, verbosity="executionStats")
    winning = result.get("queryPlanner", {}).get("winningPlan", {})
    stages = tuple(stage.get("stage", "?") for stage in walk_plan(winning))
    indexes = tuple(dict.fromkeys(stage["indexName"] for stage in walk_plan(winning) if stage.get("indexName")))
    stats = result.get("executionStats", {})
    # Some servers report nReturned before the limit; count the real answer.
    returned = len(list(collection.find(shape.filter, {"_id": 1}, sort=list(shape.sort) or None, limit=shape.limit)))
    return PlanReport(
        shape=shape,
        stages=stages,
        indexes=indexes,
        keys_examined=int(stats.get("totalKeysExamined", 0)),
        docs_examined=int(stats.get("totalDocsExamined", 0)),
        returned=returned,
    )


#: The partial filter of a feed index that leaves ``is_public`` out of its keys.
PUBLIC_ONLY = {"is_public": True}


def _normal_keys(keys: Iterable[Any]) -> tuple[tuple[str, int], ...]:
    """The index keys without ``is_public``: every feed query has it as an
    equality, so an index serves the feed on MongoDB with or without it
    (the specs lead with it for the embedded server's planner)."""
    return tuple((str(name), int(direction)) for name, direction in keys if name != "is_public")


def missing_feed_indexes(
    collection: Collection[Any], scope_fields: Iterable[str] = (), key: str = PUBLIC_MODIFIED
) -> list[dict[str, Any]]:
    """The feed index specs (sorted on ``key``) with no matching index on
    ``collection``: pass ``key="committed_ts"`` for a positions collection.

    An index matches by its keys (names do not matter; ``is_public`` may be
    among them, or be its partial filter instead): full, or partial on
    ``{is_public: true}``.
    """
    existing = []
    for info in collection.index_information().values():
        partial = info.get("partialFilterExpression")
        existing.append((_normal_keys(info["key"]), dict(partial) if partial else None))
    missing = []
    for spec in FeedStoreMixin.feed_index_specs(scope_fields, key=key):
        keys = _normal_keys(spec["keys"])
        if not any(have == keys and partial in (None, PUBLIC_ONLY) for have, partial in existing):
            missing.append(spec)
    return missing


def sample_offset(collection: Collection[Any]) -> float:
    """A ``public_modified`` in the middle of the public documents (now when
    there are none), so offset shapes select about half the feed."""
    public = {"is_public": True, PUBLIC_MODIFIED: {"$type": "number"}}
    first = collection.find_one(public, {PUBLIC_MODIFIED: 1}, sort=[(PUBLIC_MODIFIED, 1)])
    last = collection.find_one(public, {PUBLIC_MODIFIED: 1}, sort=[(PUBLIC_MODIFIED, -1)])
    if not first or not last:
        return round(time.time(), 3)
    return round((float(first[PUBLIC_MODIFIED]) + float(last[PUBLIC_MODIFIED])) / 2, 3)


def _first_position(positions: Collection[Any], direction: int, public: bool) -> Timestamp | None:
    """The lowest (``direction`` 1) or highest (-1) ``committed_ts`` of the entries."""
    query: dict[str, Any] = {COMMITTED_TS: {"$type": "timestamp"}}
    if public:
        query["is_public"] = True
    row = positions.find_one(query, {COMMITTED_TS: 1}, sort=[(COMMITTED_TS, direction)])
    return row[COMMITTED_TS] if row else None


def sample_position(positions: Collection[Any]) -> Timestamp:
    """A ``committed_ts`` in the middle of the public entries of a positions
    collection (the cluster time of now, roughly, when there are none), so
    offset shapes select about half the feed: midway in time when the entries
    span a few seconds, else (a few seconds of writes) the middle entry."""
    low = _first_position(positions, 1, public=True)
    high = _first_position(positions, -1, public=True)
    if low is None or high is None:
        return Timestamp(int(time.time()), 0)
    if high.time - low.time >= 2:
        return Timestamp((low.time + high.time) // 2, 0)
    public = {"is_public": True, COMMITTED_TS: {"$type": "timestamp"}}
    middle = positions.count_documents(public) // 2
    row = positions.find_one(public, {COMMITTED_TS: 1}, sort=[(COMMITTED_TS, 1)], skip=middle)
    return row[COMMITTED_TS] if row else low


def newest_position(positions: Collection[Any]) -> Timestamp:
    """The newest ``committed_ts`` of a positions collection (the cluster time
    of now, roughly, when it is empty): the bound of shapes explained before
    the sequencer published a checkpoint."""
    return _first_position(positions, -1, public=False) or Timestamp(int(time.time()), 0)


def sample_page_ids(positions: Collection[Any], limit: int) -> list[Any]:
    """The ids of up to ``limit`` public entries: a page's documents."""
    return [row["_id"] for row in positions.find({"is_public": True}, {"_id": 1}, limit=limit)]


def sample_scope_value(collection: Collection[Any], scope_field: str) -> Any:
    """A value of ``scope_field`` found on a public document, or a placeholder."""
    doc = collection.find_one({"is_public": True, scope_field: {"$exists": True}}, {scope_field: 1})
    return doc[scope_field] if doc else "example"


def _new_analysis(collection: Collection[Any], order: str) -> Analysis:
    """An empty :class:`Analysis` of ``collection`` with the server's identity."""
    info = collection.database.client.server_info()
    return Analysis(
        namespace=f"{collection.database.name}.{collection.name}",
        documents=collection.estimated_document_count(),
        server_version=str(info.get("version", "?")),
        development_server="secantusVersion" in info,
        order=order,
    )


def _explain_all(analysis: Analysis, collection: Collection[Any], shapes: Sequence[QueryShape], progress: Any) -> None:
    """Explain ``shapes`` on ``collection`` into ``analysis``."""
    for done, shape in enumerate(shapes, 1):
        analysis.reports.append(explain_shape(collection, shape))
        if progress is not None:
            progress(done, len(shapes))


def _analyse_watermark(
    collection: Collection[Any], store: FeedStoreMixin, scope_field: str | None, limit: int, progress: Any
) -> Analysis:
    """The shapes of a watermark-ordered feed, on the feed collection."""
    analysis = _new_analysis(collection, WATERMARK)
    analysis.missing_indexes = missing_feed_indexes(collection, [scope_field] if scope_field else [])
    scope_value = sample_scope_value(collection, scope_field) if scope_field else None
    shapes = feed_query_shapes(store, sample_offset(collection), limit, scope_field, scope_value)
    _explain_all(analysis, collection, shapes, progress)
    return analysis


def _analyse_commit(
    collection: Collection[Any], store: FeedStoreMixin, scope_field: str | None, limit: int, progress: Any
) -> Analysis:
    """The shapes of a commit-ordered feed: on its positions collection,
    bounded by the checkpoint as a page reads it, then a page's documents."""
    positions = collection.database.get_collection(positions_name(collection.name))
    analysis = _new_analysis(positions, COMMIT)
    analysis.missing_indexes = missing_feed_indexes(positions, [scope_field] if scope_field else [], key=COMMITTED_TS)
    scope_value = sample_scope_value(positions, scope_field) if scope_field else None
    position = sample_position(positions)
    documents = page_documents_shape(collection.name, sample_page_ids(positions, limit), limit)

    def explain_with(reader: PageReader) -> None:
        shapes = feed_query_shapes(store, position, limit, scope_field, scope_value, reader)
        _explain_all(analysis, positions, [*shapes, documents], progress)

    try:
        with store.feed_order(COMMIT).reader(collection) as reader:
            analysis.checkpoint = getattr(reader, "checkpoint", None)
            explain_with(reader)
    except FeedNotReady:
        explain_with(CheckpointBound(newest_position(positions)))
    return analysis


def analyse(
    collection: Collection[Any],
    scope_field: str | None = None,
    limit: int = 100,
    store: FeedStoreMixin | None = None,
    progress: Any = None,
    order: str = WATERMARK,
) -> Analysis:
    """Explain every query shape of the feed of ``collection`` and check its indexes.

    ``order``: ``"watermark"`` explains ``collection`` itself; ``"commit"``
    its positions collection (sorted on ``committed_ts``, bounded by the
    checkpoint the sequencer published) and the read of a page's documents.

    :param progress: called with ``(done, total)`` after each shape.
    :raises ValueError: for an unknown ``order``.
    """
    started = time.perf_counter()
    store = store or FeedStoreMixin()
    analyse_order = _analyse_commit if store.feed_order(order).name == COMMIT else _analyse_watermark
    analysis = analyse_order(collection, store, scope_field, limit, progress)
    analysis.seconds = time.perf_counter() - started
    return analysis


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _bound_note(analysis: Analysis) -> str:
    """How the shapes of ``analysis`` are bounded, for the report's first line."""
    if analysis.order != COMMIT:
        return "watermark $expr left out: it is a residual filter"
    if analysis.checkpoint is None:
        return (
            "commit order; NO CHECKPOINT YET: the feed answers 503 until its sequencer "
            "runs; bounded here by the newest position"
        )
    stamp = analysis.checkpoint
    return f"commit order, bounded by the checkpoint Timestamp({stamp.time}, {stamp.inc})"


def format_analysis(analysis: Analysis) -> str:
    """A plain-text report of an :class:`Analysis`, with what it means."""
    lines = [
        f"Feed query plans of {analysis.namespace}: {analysis.documents} documents, "
        f"server {analysis.server_version}, {len(analysis.reports)} shapes "
        f"in {analysis.seconds:.1f} s ({_bound_note(analysis)}).",
    ]
    if analysis.missing_indexes:
        create = "FeedStoreMixin.ensure_feed_indexes" + (
            f"(positions, scope_fields, key={COMMITTED_TS!r})" if analysis.order == COMMIT else ""
        )
        lines.append(f"Missing feed indexes (create them with {create}):")
        for spec in analysis.missing_indexes:
            keys = ", ".join(f"{name}: {direction}" for name, direction in spec["keys"])
            lines.append(f"  {spec['name']}: {{{keys}}}")
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
        flag = "" if report.served else "  <-- " + ("collection scan" if report.collection_scan else "in-memory sort")
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
            f"keys start with the equality fields, then ({analysis.key}, _id), and that "
            "queries and indexes agree on the partial filter {is_public: true}."
        )
    return "\n".join(lines)
