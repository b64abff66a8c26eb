"""What the server does for the feed's queries: shapes, plans, indexes.

A :class:`QueryShape` is one query a feed page sends; :func:`explain_shape`
explains it with ``executionStats`` verbosity into a :class:`PlanReport` (the
winning plan's stages, the index it scans, the keys and documents examined);
an :class:`Analysis` gathers the reports of one feed collection with the
feed indexes it lacks (:func:`missing_feed_indexes`). :mod:`.explain` builds
the shapes; :mod:`.explain_report` writes the report people read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bson.son import SON
from bson.timestamp import Timestamp
from pymongo.collection import Collection

from ..store.database import FeedStoreMixin
from ..store.orders import PUBLIC_MODIFIED, WATERMARK, order_kind

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
        return order_kind(self.order).key

    @property
    def sequenced(self) -> bool:
        """True for an order whose pages read a sequencer's positions."""
        return order_kind(self.order).sequenced

    @property
    def problems(self) -> list[PlanReport]:
        """Shapes served by a collection scan or an in-memory sort."""
        return [report for report in self.reports if not report.served]

    @property
    def ok(self) -> bool:
        """True when every shape is served by an index and none is missing."""
        return not self.problems and not self.missing_indexes


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
