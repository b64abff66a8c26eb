"""The store: the watermarked feed query, with the ``$$NOW``-stamping write
(:mod:`.writes`) and the feed indexes (:mod:`.indexes`) mixed in.

:class:`FeedStoreMixin` holds the behaviour and needs only two attributes on
its host (``watermark_seconds`` and ``max_limit``), so an application can mix
it into its own store class. :class:`FeedStore` is the ready-made store that
``config.include("openprocurement_feed")`` creates from the settings.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any

from pymongo import ASCENDING, DESCENDING, MongoClient
from pymongo.collection import Collection
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import make_read_preference, read_pref_mode_from_name
from pymongo.write_concern import WriteConcern

from ..roles import open_client
from ..settings import FeedSettings

# the index helpers live in .indexes; they are still importable from here
from .db_clock import DatabaseClock
from .indexes import INDEX_KEY_SPECS_CONFLICT as INDEX_KEY_SPECS_CONFLICT
from .indexes import INDEX_OPTIONS_CONFLICT as INDEX_OPTIONS_CONFLICT
from .indexes import FeedIndexesMixin
from .indexes import create_indexes as create_indexes
from .indexes import stamp_index_specs as stamp_index_specs
from .offset import Offset
from .offset import find_window as find_window
from .orders import (
    PUBLIC_MODIFIED,
    FeedOrder,
    PageReader,
    WatermarkReader,
    boundary_ids,
    exclusive_upper,
    order_kind,
)
from .readers import keyset_filter
from .readers import mode_filter as mode_filter
from .windows import WindowHints

# the write path lives in .writes; its names are still importable from here
from .writes import HIDDEN_STATUSES as HIDDEN_STATUSES
from .writes import ConflictError as ConflictError
from .writes import MissingRevision as MissingRevision
from .writes import StampedWritesMixin
from .writes import next_rev as next_rev
from .writes import request_now as request_now


class FeedStoreMixin(StampedWritesMixin, FeedIndexesMixin):
    """Feed queries and stamped writes on pymongo collections.

    The host class provides ``watermark_seconds`` (float, 0 disables the
    watermark) and ``max_limit`` (the largest page); it may set
    ``max_time_ms`` to bound the server time of every feed query (0: no
    bound; a query over it raises :class:`pymongo.errors.ExecutionTimeout`).
    """

    watermark_seconds: float = 1.0
    max_limit: int = 1000
    max_time_ms: int = 0
    #: read pages in bounded windows of their key (:mod:`.windows`): a page
    #: costs the database O(limit) on a server that applies a limit only
    #: after it has gathered every match; False reads each range whole
    windowed_reads: bool = True
    #: statuses whose objects no feed shows (the default :meth:`is_public`)

    # -- reads ------------------------------------------------------------

    def window_hints(self) -> WindowHints | None:
        """What this store learnt of its collections' keys (one per store),
        or None when :attr:`windowed_reads` is off."""
        if not self.windowed_reads:
            return None
        hints = self.__dict__.get("_window_hints")
        if hints is None:
            hints = self.__dict__["_window_hints"] = WindowHints()
        return hints

    def database_clock(self) -> DatabaseClock:
        """The database's clock as this store's watermark bounds read it (one per store)."""
        clock: DatabaseClock | None = self.__dict__.get("_database_clock")
        if clock is None:  # made once: a page asks for it every time
            clock = self.__dict__.setdefault("_database_clock", DatabaseClock())
        return clock

    def feed_order(self, name: str | None = None) -> FeedOrder:
        """The :class:`~.orders.FeedOrder` called ``name`` (default: watermark)."""
        return order_kind(name).for_store(self)

    def watermark_expr(self, field: str = PUBLIC_MODIFIED) -> dict[str, Any]:
        """``field <= $$NOW - W``, by the database's own clock."""
        return WatermarkReader(None, self.watermark_seconds, field).watermark_expr()  # type: ignore[arg-type]

    def build_query(
        self,
        inclusive_filter: bool = False,
        offset_field: str = PUBLIC_MODIFIED,
        offset_value: Any = None,
        mode: str = "all",
        descending: bool = False,
        filters: Mapping[str, Any] | None = None,
        watermark: bool = True,
        has_offset: bool | None = None,
        reader: PageReader | None = None,
    ) -> tuple[dict[str, Any], list[tuple[str, int]]]:
        """The filter and sort of one feed query.

        The upper bound comes from ``reader`` (a watermark reader by default):
        in watermark order it applies to every ascending query and to a
        descending query without offset; ``watermark=False`` leaves it out
        (for ``explain``, which cannot evaluate ``$$NOW`` everywhere). In
        commit order it is the checkpoint.
        """
        query: dict[str, Any] = dict(filters or {})
        query["is_public"] = True
        query.update(mode_filter(mode))
        if offset_value is not None:
            operator = ("$lt" if descending else "$gt") + ("e" if inclusive_filter else "")
            query[offset_field] = {operator: offset_value}
        if has_offset is None:
            has_offset = offset_value is not None
        if watermark:
            if reader is None:
                reader = WatermarkReader(None, self.watermark_seconds, offset_field)  # type: ignore[arg-type]
            reader.bound(query, descending, has_offset)
        exclusive_upper(query, offset_field)
        direction = DESCENDING if descending else ASCENDING
        return query, [(offset_field, direction), ("_id", direction)]

    def list(
        self,
        collection: Collection[Any],
        fields: Iterable[str],
        inclusive_filter: bool = False,
        offset_field: str = PUBLIC_MODIFIED,
        offset_value: Any = None,
        mode: str = "all",
        descending: bool = False,
        limit: int = 0,
        filters: Mapping[str, Any] | None = None,
        has_offset: bool | None = None,
        order: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """Public documents in feed order, up to the order's bound.

        In watermark order (the default) sorted by ``(offset_field, _id)``
        and never newer than the watermark; in commit order (``order =
        "commit"``) sorted by ``(committed_ts, _id)`` up to the checkpoint
        (``offset_field`` is then ``committed_ts``). ``fields`` are projected
        together with ``_id`` and ``public_modified``. ``limit=0`` means no
        limit.
        """
        fields = list(fields)
        feed_order = self.feed_order(order)
        with feed_order.reader(collection, self.max_time_ms, key=offset_field) as reader:
            reader.hints = self.window_hints()
            reader.clock = self.database_clock()
            rows = self._rows(
                reader,
                fields,
                inclusive_filter=inclusive_filter,
                offset_value=offset_value,
                mode=mode,
                descending=descending,
                limit=limit,
                filters=filters,
                has_offset=has_offset,
            )
            for row in rows:  # the order's key, as list() has always given it
                if reader.key not in row:
                    row[reader.key] = reader.row_value(row)
            return reader.finish(rows, fields)

    def _rows(
        self,
        reader: PageReader,
        fields: builtins.list[str],
        inclusive_filter: bool = False,
        offset_value: Any = None,
        mode: str = "all",
        descending: bool = False,
        limit: int = 0,
        filters: Mapping[str, Any] | None = None,
        has_offset: bool | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """One query of a page through ``reader`` (rows not yet finished)."""
        query, sort = self.build_query(
            inclusive_filter=inclusive_filter,
            offset_field=reader.key,
            offset_value=offset_value,
            mode=mode,
            descending=descending,
            filters=filters,
            has_offset=has_offset,
            reader=reader,
        )
        return reader.find(query, fields, sort, limit)

    def feed_page(
        self,
        collection: Collection[Any],
        fields: Iterable[str],
        offset: Offset | None = None,
        mode: str = "all",
        descending: bool = False,
        limit: int = 100,
        filters: Mapping[str, Any] | None = None,
        order: str | None = None,
    ) -> builtins.list[dict[str, Any]]:
        """One page of the feed after ``offset``, in watermark or commit order.

        An offset written by the other order is read a safe margin earlier
        (:meth:`~.orders.FeedOrder.convert`). With a tie-aware offset
        (``count > 0``) the query is inclusive; the items of the tie group
        already served (the run of ``count`` ids whose digest matches, and
        everything before it in ``(value, _id)`` order) are dropped. When no
        run matches, the group is sent again: duplicates are acceptable,
        losses are not.

        The run is looked for from the start of the group: when the group
        began on the previous page this is SPEC's "first ``n`` rows" check.
        Looking further serves groups that span more than two pages (one
        command stamping more than ``limit`` documents), where the rows
        before the run were served by earlier pages. In watermark order, a
        row that commits with exactly the boundary stamp later than ``W``
        after its stamp, sorting before the run, would be skipped; that is
        the same premise the watermark rests on (no write takes longer than
        ``W`` to commit). In commit order a tie group is one transaction,
        complete below the checkpoint, so the premise holds by construction.

        In commit order the rows are the positions entries themselves: a
        deleted or hidden document's entry is a tombstone or a hidden entry
        that no page matches, so every row is shown.
        """
        fields = list(fields)
        feed_order = self.feed_order(order)
        if offset is not None:
            offset = feed_order.convert(offset, descending)
        key = offset.field if offset is not None else feed_order.key
        with feed_order.reader(collection, self.max_time_ms, key=key) as reader:
            reader.hints = self.window_hints()
            reader.clock = self.database_clock()
            rows = self._page(reader, fields, offset, mode, descending, limit, filters)
            return reader.finish(rows, fields)

    def _page(
        self,
        reader: PageReader,
        fields: builtins.list[str],
        offset: Offset | None,
        mode: str,
        descending: bool,
        limit: int,
        filters: Mapping[str, Any] | None,
    ) -> builtins.list[dict[str, Any]]:
        common = dict(mode=mode, descending=descending, filters=filters)
        if offset is None:
            return self._rows(reader, fields, limit=limit, **common)  # type: ignore[arg-type]
        if offset.count == 0:
            return self._rows(
                reader,
                fields,
                offset_value=offset.value,
                limit=limit,
                **common,  # type: ignore[arg-type]
            )
        fetch = limit + offset.count
        rows = self._rows(
            reader,
            fields,
            inclusive_filter=True,
            offset_value=offset.value,
            limit=fetch,
            **common,  # type: ignore[arg-type]
        )
        group = boundary_ids(rows, reader.row_value, offset.value)  # rows are sorted: a leading run
        end = find_window(group, offset.count, offset.digest)
        if end is None and group and len(group) == len(rows) == fetch:
            # The tie group fills the whole fetch: the run may lie beyond it.
            group = self._group_ids(reader, offset, mode, descending, filters)
            end = find_window(group, offset.count, offset.digest)
            if end is not None:
                return self._after(reader, fields, offset, group[end - 1], limit, **common)  # type: ignore[arg-type]
        if end is None:
            return rows[:limit]
        rest = rows[end:]
        if len(rest) >= limit or len(rows) < fetch:
            return rest[:limit]
        return self._after(reader, fields, offset, group[end - 1], limit, **common)  # type: ignore[arg-type]

    def _group_ids(
        self,
        reader: PageReader,
        offset: Offset,
        mode: str,
        descending: bool,
        filters: Mapping[str, Any] | None,
    ) -> builtins.list[str]:
        """All ids at exactly ``offset.value``, in feed order."""
        query, _ = self.build_query(
            offset_field=reader.key,
            mode=mode,
            descending=descending,
            filters=filters,
            reader=reader,
        )
        query[reader.key] = offset.value
        reader.bound(query, descending, True)
        direction = DESCENDING if descending else ASCENDING
        return [row["_id"] for row in reader.find(query, ["_id"], [("_id", direction)], 0)]

    def _after(
        self,
        reader: PageReader,
        fields: builtins.list[str],
        offset: Offset,
        last_id: str,
        limit: int,
        mode: str,
        descending: bool,
        filters: Mapping[str, Any] | None,
    ) -> builtins.list[dict[str, Any]]:
        """The page strictly after ``(offset.value, last_id)`` in feed order."""
        keyset = keyset_filter(reader.key, offset.value, last_id, descending, filters)
        return self._rows(
            reader,
            fields,
            mode=mode,
            descending=descending,
            limit=limit,
            filters=keyset,
            has_offset=True,
        )


class FeedStore(FeedStoreMixin):
    """The ready-made store: a pymongo client, a database and the mixin.

    Feed reads go through :meth:`feed_collection` (the configured read
    preference and read concern, primary by default); writes and reads that
    must see the latest state go through :meth:`collection`.
    """

    def __init__(
        self,
        client: MongoClient[Any],
        db_name: str,
        watermark_seconds: float = 1.0,
        max_limit: int = 1000,
        read_preference: str = "primary",
        read_concern: str = "local",
        write_concern: str | int = "majority",
        collections: Mapping[str, str] | None = None,
        max_time_ms: int = 0,
    ) -> None:
        self.client = client
        #: the settings and URI of a store built by :meth:`from_settings`
        self.settings: FeedSettings | None = None
        self.uri: str | None = None
        self.max_time_ms = max_time_ms
        self.db = client[db_name]
        self.watermark_seconds = watermark_seconds
        self.max_limit = max_limit
        self.read_preference = make_read_preference(read_pref_mode_from_name(read_preference), None)
        self.read_concern = ReadConcern(read_concern)
        self.write_concern = WriteConcern(w=write_concern)
        self.collections = dict(collections or {})
        #: feed collections with the read options, made once per name (a
        #: Collection[Any] is immutable and thread-safe)
        self._feed_collections: dict[str, Collection[Any]] = {}

    @classmethod
    def from_settings(
        cls,
        settings: FeedSettings,
        uri: str | None = None,
        app_name: str | None = None,
        connect: bool = True,
    ) -> FeedStore:
        """Build a store from parsed settings (``uri`` overrides the settings' one).

        Its client is named ``mongodb.app_name`` (or the URI's ``appname``);
        ``app_name`` names a role's client instead (:mod:`.roles`), and
        ``connect=False`` defers its connections to its first command.
        """
        uri = uri or settings.uri
        name = app_name or settings.app_name
        client = open_client(
            uri, name, settings.server_selection_timeout_ms, role=app_name is not None, connect=connect
        )
        store = cls(
            client,
            settings.db_name,
            watermark_seconds=settings.watermark_seconds,
            max_limit=settings.max_limit,
            read_preference=settings.read_preference,
            read_concern=settings.read_concern,
            write_concern=settings.write_concern,
            collections=settings.collections,
            max_time_ms=settings.max_time_ms,
        )
        store.settings, store.uri = settings, uri
        return store

    def role_store(self, app_name: str) -> FeedStore:
        """A store like this one on a client of its own named ``app_name``
        (the sequencer's, the long-poll notifier's: :mod:`.roles`), which
        connects at its first command; the caller closes it. A store not
        built by :meth:`from_settings` has no URI to open one: itself."""
        if self.settings is None or self.uri is None:
            return self
        return type(self).from_settings(self.settings, self.uri, app_name=app_name, connect=False)

    def collection(self, name: str) -> Collection[Any]:
        """The collection behind feed ``name`` for writes: primary reads."""
        return self.db.get_collection(self.collections.get(name, name), write_concern=self.write_concern)

    def feed_collection(self, name: str) -> Collection[Any]:
        """The collection behind feed ``name`` with the feed's read options.

        Its BSON dates come back naive (UTC), as upstream's client returns
        them, so that the renderer writes them in ``feed.timezone`` as
        upstream's renderer does (:mod:`.renderers`)."""
        collection = self._feed_collections.get(name)
        if collection is None:
            collection = self._feed_collections[name] = self.db.get_collection(
                self.collections.get(name, name),
                codec_options=self.db.codec_options.with_options(tz_aware=False),
                read_preference=self.read_preference,
                read_concern=self.read_concern,
            )
        return collection

    def ping(self) -> bool:
        """True when the database answers."""
        try:
            self.client.admin.command("ping")
        except PyMongoError:
            return False
        return True

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
