"""The database side of one feed page in each order: the page readers.

A :class:`PageReader` runs the queries of one page: a
:class:`WatermarkReader` reads the documents themselves, a
:class:`CommitReader` the positions collection up to the checkpoint (in one
causally consistent session). The orders (:mod:`.orders`) open them; the
store (:class:`~.database.FeedStoreMixin`) runs one code path over both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from bson.timestamp import Timestamp
from pymongo import ASCENDING, DESCENDING
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.read_concern import ReadConcern

from .db_clock import DatabaseClock
from .listing import ROW_FIELDS, STATE_LISTING, STATE_SEQ, merge, missing, normalize
from .positions import COMMITTED_SEQ, COMMITTED_TS, FeedNotReady, positions_name, read_checkpoint, row_position
from .windows import WindowHints, lowest_key, read_windowed, starts_at_lowest

PUBLIC_MODIFIED = "public_modified"
PUBLIC_TS = "public_ts"


def boundary_ids(rows: Iterable[dict[str, Any]], value_of: Callable[[dict[str, Any]], Any], value: Any) -> list[str]:
    """The ids of the leading run of ``rows`` whose value (``value_of(row)``)
    equals ``value``.

    A page is sorted by ``(key, _id)``, so the rows that share its first (or,
    read backwards, its last) value form one run at that end: reading the
    run alone costs the size of the tie group, not of the page.
    """
    ids = []
    for row in rows:
        if value_of(row) != value:
            break
        ids.append(row["_id"])
    return ids


def mode_filter(mode: str) -> dict[str, Any]:
    """The filter of a feed mode: ``test`` → test objects only, ``_all_`` →
    everything, anything else → real objects only."""
    if mode == "test":
        return {"is_test": True}
    if mode == "_all_":
        return {}
    return {"is_test": False}


def keyset_filter(
    key: str, value: Any, last_id: Any, descending: bool, filters: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``filters`` with the keyset condition of the rows strictly after
    ``(value, last_id)`` in feed order on ``key`` (then ``_id``): the query
    of a page after a tie group larger than a page."""
    beyond = "$lt" if descending else "$gt"
    keyset = dict(filters or {})
    keyset["$or"] = [{key: {beyond: value}}, {key: value, "_id": {beyond: last_id}}]
    return keyset


def exclusive_upper(query: dict[str, Any], key: str) -> None:
    """Turn ``query``'s inclusive upper bound on ``key`` (``$lte: v``) into
    the same exclusive one (``$lt`` the next value after ``v``), in place.

    The two select the same rows on any server. The embedded server walks
    the feed index for a range on ``key`` (the field after the equalities)
    only with an exclusive upper bound: its inclusive bound is compared with
    whole index keys, so the rows whose ``key`` equals the bound (their key
    goes on with ``_id``) fell outside it and a descending page or a
    checkpoint lost its tie group. With a ``$lt`` beside it, the tighter of
    the two is kept (a server that walks an index by one of them must not
    pick the inclusive one). A value with no known successor keeps its
    ``$lte``.
    """
    bounds = query.get(key)
    if not isinstance(bounds, dict) or "$lte" not in bounds:
        return
    value = bounds["$lte"]
    after: Any
    if isinstance(value, Timestamp):
        if value.inc < 2**32 - 1:
            after = Timestamp(value.time, value.inc + 1)
        elif value.time < 2**32 - 1:
            after = Timestamp(value.time + 1, 0)
        else:
            return
    elif isinstance(value, float) and math.isfinite(value):
        after = math.nextafter(value, math.inf)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53:
        # the next double, not value + 1: the field may hold doubles between
        after = math.nextafter(float(value), math.inf)
    else:
        return
    bounds = dict(bounds)
    del bounds["$lte"]
    other = bounds.get("$lt")
    try:
        bounds["$lt"] = after if other is None or after < other else other
    except TypeError:  # bounds of two types: keep both as they were
        return
    query[key] = bounds


def now_seconds() -> dict[str, Any]:
    """``$$NOW`` in seconds with millisecond resolution, evaluated by the server."""
    return {"$divide": [{"$toLong": "$$NOW"}, 1000]}


class PageReader:
    """The database side of one page in one order.

    ``key`` is the row field the page is sorted on; :meth:`find` runs a
    query on the ordered collection and returns the page's rows (``_id``,
    ``key`` and the fields); :meth:`finish` completes them where it must.
    """

    key: str = PUBLIC_MODIFIED
    #: the least value of ``key`` (its kind's zero): where windows down end
    #: when nothing lower is known
    floor: Any = 0.0

    #: what the store learnt of its collections' keys: with them, a sorted
    #: read is made in bounded windows of the key (:mod:`.windows`)
    hints: WindowHints | None = None

    #: the database's clock, for a bound by it as a plain value (None: the
    #: server evaluates ``$$NOW`` in an ``$expr``)
    clock: DatabaseClock | None = None

    def __init__(self, max_time_ms: int = 0, session: ClientSession | None = None) -> None:
        self.max_time_ms = max_time_ms
        self.session = session

    def bound(self, query: dict[str, Any], descending: bool, has_offset: bool) -> None:
        """Add the order's upper bound to ``query`` (in place)."""

    def row_value(self, row: Mapping[str, Any]) -> Any:
        """The value of ``key`` a row of :meth:`find` sorts by."""
        return row.get(self.key)

    def _cursor(
        self,
        collection: Collection[Any],
        query: Mapping[str, Any],
        projection: Mapping[str, Any],
        sort: Sequence[tuple[str, int]] | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        hints = self.hints
        if hints is None or not sort or limit <= 0 or sort[0][0] != self.key:
            return self._read(collection, query, projection, sort, limit)
        # the page's filters without its key's range and without an $expr
        # (the watermark by the server's clock: an index serves no read
        # with one on the embedded server); the lowest key of fewer filters
        # is a lower bound of the page's
        unbounded = {field: value for field, value in query.items() if field not in (self.key, "$expr")}
        name = (collection.full_name, self.key)
        lowest_name = (*name, repr(sorted(unbounded.items())))
        asked: list[bool] = []
        seeded: list[float] = []  # the density the search saw (none known)
        descending = sort[0][1] == DESCENDING
        direction = (*name, str(descending))

        def run(windowed: Mapping[str, Any], wanted: int) -> list[dict[str, Any]]:
            return self._read(collection, windowed, projection, sort, wanted)

        def lowest() -> Any:
            # the page's own filters without its key's range: found in
            # reads of about a page each, then known to this process
            asked.append(True)
            if lowest_name not in hints.lowest_keys:
                value, density = self.lowest_key(collection, unbounded)
                hints.learn_lowest(lowest_name, value)
                if density and not hints.densities.get(direction):
                    seeded.append(density)
            return hints.lowest_keys[lowest_name]

        def floor() -> Any:
            # a descending page's last window ends at the lowest key known,
            # else at the key's least value (empty reads there, no search)
            return hints.lowest_keys.get(lowest_name, self.floor)

        if starts_at_lowest(query, self.key, descending):
            lowest()  # before the windows are sized: a search seeds the density
        density = seeded[0] if seeded else hints.densities.get(direction)
        rows, density = read_windowed(run, query, self.key, descending, limit, lowest, density, self.row_value, floor)
        if density:
            hints.densities[direction] = density
        if asked and rows:
            # a page that started at the lowest key: its first row is the
            # lowest (a hint that had gone stale heals here)
            hints.learn_lowest(lowest_name, self.row_value(rows[0]))
        return rows

    def lowest_key(self, collection: Collection[Any], query: Mapping[str, Any]) -> tuple[Any, float | None]:
        """A key at or below the lowest key of ``query``'s rows, found in
        reads of about a page each, and the density of the newest rows
        (:func:`~.windows.lowest_key`)."""

        def run(order: int) -> Callable[[Mapping[str, Any], int], list[dict[str, Any]]]:
            sort = [(self.key, order), ("_id", order)]
            return lambda windowed, wanted: self._read(collection, windowed, {self.key: 1}, sort, wanted)

        return lowest_key(run(ASCENDING), run(DESCENDING), query, self.key, self.floor)

    def _read(
        self,
        collection: Collection[Any],
        query: Mapping[str, Any],
        projection: Mapping[str, Any],
        sort: Sequence[tuple[str, int]] | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        # A batch as large as the page: one reply, where the first batch
        # would otherwise hold 101 rows and a 1000-item page take a getMore.
        cursor = collection.find(query, projection, sort=sort, limit=limit, batch_size=limit or 0, session=self.session)
        if self.max_time_ms:
            cursor = cursor.max_time_ms(self.max_time_ms)
        # to_list (pymongo >= 4.9) takes each batch whole; iterating pays a
        # Python call per row.
        to_list = getattr(cursor, "to_list", None)
        return to_list() if to_list is not None else list(cursor)

    def find(
        self, query: Mapping[str, Any], fields: Iterable[str], sort: Sequence[tuple[str, int]], limit: int
    ) -> list[dict[str, Any]]:
        raise NotImplementedError

    def finish(self, rows: list[dict[str, Any]], fields: Iterable[str]) -> list[dict[str, Any]]:
        """The page's rows with every one of ``fields`` they have."""
        return rows


class WatermarkReader(PageReader):
    """Pages the documents themselves by ``public_modified`` (or ``public_ts``)."""

    def __init__(self, collection: Collection[Any], watermark_seconds: float, key: str, max_time_ms: int = 0) -> None:
        super().__init__(max_time_ms)
        self.collection = collection
        self.watermark_seconds = watermark_seconds
        self.key = key

    def watermark_expr(self) -> dict[str, Any]:
        """``key <= $$NOW - W``, by the database's own clock."""
        return {"$lte": [f"${self.key}", {"$subtract": [now_seconds(), self.watermark_seconds]}]}

    def bound(self, query: dict[str, Any], descending: bool, has_offset: bool) -> None:
        # Every ascending query, and a descending one without offset (its
        # first page seeds a crawler's forward sync); not history.
        if self.key != PUBLIC_MODIFIED or self.watermark_seconds <= 0 or (descending and has_offset):
            return
        now = self.clock.now(self.collection.database.client) if self.clock and self.collection is not None else None
        if now is None:
            query["$expr"] = self.watermark_expr()  # the server's own clock, evaluated by it
            return
        # a plain bound on the key: an index range on every server
        existing = query.get(self.key)
        bounded = dict(existing) if isinstance(existing, dict) else ({} if existing is None else {"$eq": existing})
        limit = math.floor((now - self.watermark_seconds) * 1000) / 1000  # the stamps' resolution: ms
        upper = bounded.get("$lte")
        bounded["$lte"] = limit if upper is None else min(upper, limit)
        query[self.key] = bounded

    def find(
        self, query: Mapping[str, Any], fields: Iterable[str], sort: Sequence[tuple[str, int]], limit: int
    ) -> list[dict[str, Any]]:
        projection = {name: 1 for name in fields}
        projection[PUBLIC_MODIFIED] = 1
        projection[self.key] = 1
        return self._cursor(self.collection, query, projection, sort, limit)


class CommitReader(PageReader):
    """Pages the positions collection by ``committed_ts`` up to the
    checkpoint and renders the rows from the entries' listing; one causally
    consistent session.

    The state document says which fields every entry carries
    (:data:`~.listing.STATE_LISTING`, read with the checkpoint); fields a
    page needs beyond them are read from the documents (:meth:`finish`).
    """

    key = COMMITTED_TS
    floor = Timestamp(0, 0)
    #: ids per read of documents when fields must be filled from them (the
    #: embedded server's ``$in`` grows faster than its list)
    fill_chunk = 100

    def __init__(self, collection: Collection[Any], session: ClientSession, max_time_ms: int = 0) -> None:
        super().__init__(max_time_ms, session)
        majority = ReadConcern("majority")
        db = collection.database
        self.collection = collection
        # the feed collection's codec options too: a page decodes dates the
        # same way in both orders (the renderer writes naive ones in
        # feed.timezone)
        self.positions = db.get_collection(
            positions_name(collection.name),
            codec_options=collection.codec_options,
            read_preference=collection.read_preference,
            read_concern=majority,
        )
        checkpoint, state = read_checkpoint(self.positions, (STATE_LISTING, STATE_SEQ), session)
        if checkpoint is None:
            raise FeedNotReady(collection.name)
        self.checkpoint: Timestamp = checkpoint
        #: the fields every entry carries (none: positions of an earlier release)
        self.listing: tuple[str, ...] = tuple(state.get(STATE_LISTING) or ())
        #: every entry carries ``committed_seq``: rows project it instead of
        #: the ``Timestamp`` (entries of an earlier release do not, until the
        #: sequencer has added it)
        self.seq = state.get(STATE_SEQ) is True

    def bound(self, query: dict[str, Any], descending: bool, has_offset: bool) -> None:
        existing = query.get(COMMITTED_TS)
        bounded = dict(existing) if isinstance(existing, dict) else {}
        if existing is not None and not isinstance(existing, dict):
            bounded["$eq"] = existing
        upper = bounded.get("$lte")
        bounded["$lte"] = self.checkpoint if upper is None else min(upper, self.checkpoint)
        query[COMMITTED_TS] = bounded

    def row_value(self, row: Mapping[str, Any]) -> Any:
        return row_position(row)

    def find(
        self, query: Mapping[str, Any], fields: Iterable[str], sort: Sequence[tuple[str, int]], limit: int
    ) -> list[dict[str, Any]]:
        """The entries, projected on their position (``committed_seq``, or
        ``committed_ts`` where entries may lack it) and ``fields``: each is
        a page row as it is (:func:`row_position` reads its position)."""
        projection = {COMMITTED_SEQ if self.seq else COMMITTED_TS: 1}
        projection.update({name: 1 for name in fields if name not in ROW_FIELDS})
        rows = self._cursor(self.positions, query, projection, sort, limit)
        if self.seq:
            self._fill_positions(rows)
        return rows

    def _fill_positions(self, rows: list[dict[str, Any]]) -> None:
        """Give ``committed_ts`` to the rows without ``committed_seq``: entries
        an earlier release's sequencer wrote after the flag was set (one
        still running beside this release's)."""
        lacking = [row for row in rows if COMMITTED_SEQ not in row]
        for start in range(0, len(lacking), self.fill_chunk):
            chunk = {row["_id"]: row for row in lacking[start : start + self.fill_chunk]}
            query = {"_id": {"$in": list(chunk)}}
            for entry in self._cursor(self.positions, query, {COMMITTED_TS: 1}, None, 0):
                chunk[entry["_id"]][COMMITTED_TS] = entry.get(COMMITTED_TS)

    def finish(self, rows: list[dict[str, Any]], fields: Iterable[str]) -> list[dict[str, Any]]:
        """Fill the ``fields`` the entries do not carry from the documents
        (their current values: newer is allowed, SPEC D.5; a document gone
        since keeps what its entry has)."""
        lacking = missing(self.listing, fields)
        if not rows or not lacking:
            return rows
        documents = self.collection.with_options(read_concern=ReadConcern("majority"))
        projection = {name: 1 for name in normalize(lacking)}
        by_id = {row["_id"]: row for row in rows}
        ids = list(by_id)
        for start in range(0, len(ids), self.fill_chunk):
            query = {"_id": {"$in": ids[start : start + self.fill_chunk]}}
            for doc in self._cursor(documents, query, projection, None, 0):
                row = by_id.get(doc.pop("_id"))
                if row is not None:
                    merge(row, doc)
        return rows
