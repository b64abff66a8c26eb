"""Query-plan analysis of the feed: which index serves each query shape.

Used by ``openprocurement-feed explain`` (operators run it against their own
MongoDB) and by the benchmarks. Every shape the store sends is built with the
store's own :meth:`~.database.FeedStoreMixin.build_query` (its keyset query
and its index names too), explained with ``executionStats`` verbosity
(:mod:`.query_plans`) and summarised as: the stages of the winning plan, the
index it scans, and the keys and documents examined per document returned
(:mod:`.explain_report`).

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
from collections.abc import Mapping, Sequence
from typing import Any

from bson.timestamp import Timestamp
from pymongo.collection import Collection

from ..store.database import FeedStoreMixin
from ..store.indexes import feed_index_name
from ..store.orders import (
    COMMITTED_TS,
    PUBLIC_MODIFIED,
    WATERMARK,
    CommitReader,
    FeedNotReady,
    FeedOrder,
    PageReader,
)
from ..store.readers import keyset_filter
from ..store.windows import Run, lowest_key, newest_row, read_windowed
from .explain_report import format_analysis as format_analysis
from .query_plans import COLLECTION_SCAN as COLLECTION_SCAN
from .query_plans import DEFAULT_PROJECTION as DEFAULT_PROJECTION
from .query_plans import Analysis, QueryShape, explain_shape
from .query_plans import PlanReport as PlanReport
from .query_plans import missing_feed_indexes as missing_feed_indexes
from .query_plans import walk_plan as walk_plan

#: The feed modes and the ``mode`` parameter that selects each.
MODES = (("real", ""), ("test", "test"), ("all", "_all_"))
#: What a commit-ordered page reads from the positions (``CommitReader.find``).
POSITIONS_PROJECTION = {"_id": 1, COMMITTED_TS: 1}
#: What it then reads from the page's documents (``CommitReader.finish``).
DOCUMENTS_PROJECTION = {"_id": 1, PUBLIC_MODIFIED: 1, "is_public": 1, "dateModified": 1}
#: The index every collection has on ``_id``.
ID_INDEX = "_id_"


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
    projection = POSITIONS_PROJECTION if bounded else None
    shapes: list[QueryShape] = []
    scopes: list[str | None] = [None] + ([scope_field] if scope_field else [])
    for scope in scopes:
        filters = {scope: scope_value} if scope else None
        label = f"{scope}=…, " if scope else ""
        for mode_name, mode in MODES:
            index = feed_index_name(scope, mode)
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
            # After a tie group larger than a page: the store's keyset query
            # (value, then _id, in feed order).
            keyset = keyset_filter(key, offset_value, "", False, filters)
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


def key_range(collection: Collection[Any], query: Mapping[str, Any], key: str, floor: Any) -> tuple[Any, Any]:
    """The lowest and the highest ``key`` of ``query``'s rows at or above
    ``floor`` (None, None without rows), each read in windows of about a
    page (:func:`~.windows.lowest_key`, :func:`~.windows.newest_row`): a
    sorted read of a whole collection with a limit of one gathers every
    document on the embedded server."""

    def run(order: int) -> Run:
        sort = [(key, order), ("_id", order)]
        return lambda windowed, limit: list(collection.find(windowed, {key: 1}, sort=sort, limit=limit))

    newest = newest_row(run(-1), query, key, floor)
    if newest is None:
        return None, None
    low, density = lowest_key(run(1), run(-1), query, key, floor)
    first, _ = read_windowed(run(1), {**query, key: {"$gte": low}}, key, False, 1, lambda: low, density)
    return (first[0].get(key) if first else newest.get(key)), newest.get(key)


def sample_offset(collection: Collection[Any]) -> float:
    """A ``public_modified`` in the middle of the public documents (now when
    there are none), so offset shapes select about half the feed."""
    first, last = key_range(collection, {"is_public": True}, PUBLIC_MODIFIED, 0.0)
    if not isinstance(first, (int, float)) or not isinstance(last, (int, float)):
        return round(time.time(), 3)
    return round((float(first) + float(last)) / 2, 3)


def _first_position(positions: Collection[Any], direction: int, public: bool) -> Timestamp | None:
    """The lowest (``direction`` 1) or highest (-1) ``committed_ts`` of the entries."""
    found = [
        key_range(positions, {"is_public": shown}, COMMITTED_TS, Timestamp(0, 0))[0 if direction == 1 else 1]
        for shown in ((True,) if public else (True, False))
    ]
    ends = [value for value in found if isinstance(value, Timestamp)]
    if not ends:
        return None
    return min(ends) if direction == 1 else max(ends)


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
    collection: Collection[Any],
    store: FeedStoreMixin,
    order: FeedOrder,
    scope_field: str | None,
    limit: int,
    progress: Any,
) -> Analysis:
    """The shapes of a watermark-ordered feed, on the feed collection."""
    analysis = _new_analysis(collection, order.name)
    analysis.missing_indexes = missing_feed_indexes(collection, [scope_field] if scope_field else [])
    scope_value = sample_scope_value(collection, scope_field) if scope_field else None
    shapes = feed_query_shapes(store, sample_offset(collection), limit, scope_field, scope_value)
    _explain_all(analysis, collection, shapes, progress)
    return analysis


def _analyse_commit(
    collection: Collection[Any],
    store: FeedStoreMixin,
    order: FeedOrder,
    scope_field: str | None,
    limit: int,
    progress: Any,
) -> Analysis:
    """The shapes of a commit-ordered feed: on its positions collection,
    bounded by the checkpoint as a page reads it, then a page's documents."""
    positions = order.page_collection(collection)
    analysis = _new_analysis(positions, order.name)
    analysis.missing_indexes = missing_feed_indexes(positions, [scope_field] if scope_field else [], key=order.key)
    scope_value = sample_scope_value(positions, scope_field) if scope_field else None
    position = sample_position(positions)
    documents = page_documents_shape(collection.name, sample_page_ids(positions, limit), limit)

    def explain_with(reader: PageReader) -> None:
        shapes = feed_query_shapes(store, position, limit, scope_field, scope_value, reader)
        _explain_all(analysis, positions, [*shapes, documents], progress)

    try:
        with order.reader(collection) as reader:
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
    feed_order = store.feed_order(order)
    analyse_order = _analyse_commit if feed_order.sequenced else _analyse_watermark
    analysis = analyse_order(collection, store, feed_order, scope_field, limit, progress)
    analysis.seconds = time.perf_counter() - started
    return analysis
