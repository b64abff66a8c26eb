"""The store: the watermarked feed query and the ``$$NOW``-stamping write.

:class:`FeedStoreMixin` holds the behaviour and needs only two attributes on
its host (``watermark_seconds`` and ``max_limit``), so an application can mix
it into its own store class. :class:`FeedStore` is the ready-made store that
``config.include("openprocurement_feed")`` creates from the settings.
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from pymongo import ASCENDING, DESCENDING, MongoClient, ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import DuplicateKeyError, PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import make_read_preference, read_pref_mode_from_name
from pymongo.write_concern import WriteConcern

from ..roles import open_client
from ..save_errors import save_error
from ..settings import FeedSettings

# the index helpers live in .indexes; they are still importable from here
from .indexes import INDEX_KEY_SPECS_CONFLICT as INDEX_KEY_SPECS_CONFLICT
from .indexes import INDEX_OPTIONS_CONFLICT as INDEX_OPTIONS_CONFLICT
from .indexes import FeedIndexesMixin
from .indexes import create_indexes as create_indexes
from .indexes import stamp_index_specs as stamp_index_specs
from .offset import Offset, ids_digest
from .orders import (
    COMMIT,
    ORDERS,
    PUBLIC_MODIFIED,
    WATERMARK,
    CommitOrder,
    FeedOrder,
    PageReader,
    WatermarkOrder,
    WatermarkReader,
    boundary_ids,
    exclusive_upper,
    now_seconds,
)

log = logging.getLogger("openprocurement_feed.database")  # its name from before the package had subpackages


HIDDEN_STATUSES = ("draft", "deleted")


class ConflictError(Exception):
    """A write lost an optimistic-concurrency race: its ``_rev`` was stale."""


class MissingRevision(ValueError):
    """An update (``insert=False``) of a document given without its ``_rev``."""


def request_now() -> datetime:
    """The time of the current request (``request.feed_now``, one value per
    request), or now when there is no request."""
    from pyramid.threadlocal import get_current_request

    request = get_current_request()
    now = getattr(request, "feed_now", None) if request is not None else None
    return now if isinstance(now, datetime) else datetime.now(timezone.utc)


def next_rev(rev: str | None) -> str:
    """The revision that follows ``rev``: ``"{n+1}-{uuid4 hex}"``."""
    number = 0
    if rev:
        head = rev.split("-", 1)[0]
        number = int(head) if head.isdigit() else 0
    return f"{number + 1}-{uuid.uuid4().hex}"


def mode_filter(mode: str) -> dict[str, Any]:
    """The filter of a feed mode: ``test`` → test objects only, ``_all_`` →
    everything, anything else → real objects only."""
    if mode == "test":
        return {"is_test": True}
    if mode == "_all_":
        return {}
    return {"is_test": False}


def find_window(ids: Sequence[str], count: int, digest: str) -> int | None:
    """Find the run of ``count`` consecutive ``ids`` whose digest is ``digest``.

    Returns the index just past the run (everything before it was already
    served), or None when no run matches.
    """
    if count <= 0 or count > len(ids):
        return None
    for start in range(len(ids) - count + 1):
        if ids_digest(ids[start : start + count]) == digest:
            return start + count
    return None


class FeedStoreMixin(FeedIndexesMixin):
    """Feed queries and stamped writes on pymongo collections.

    The host class provides ``watermark_seconds`` (float, 0 disables the
    watermark) and ``max_limit`` (the largest page); it may set
    ``max_time_ms`` to bound the server time of every feed query (0: no
    bound; a query over it raises :class:`pymongo.errors.ExecutionTimeout`).
    """

    watermark_seconds: float = 1.0
    max_limit: int = 1000
    max_time_ms: int = 0
    #: statuses whose objects no feed shows (the default :meth:`is_public`)
    hidden_statuses: tuple[str, ...] = HIDDEN_STATUSES

    # -- write policies (hooks: override them in the host's class) -----------

    def is_public(self, doc: Mapping[str, Any]) -> bool:
        """True when feeds show ``doc``: its status is not hidden."""
        return doc.get("status") not in self.hidden_statuses

    def is_test(self, doc: Mapping[str, Any]) -> bool:
        """True when ``doc`` is a test object (``mode == "test"``)."""
        return doc.get("mode") == "test"

    def now(self) -> datetime:
        """The time ``save_data`` stamps ``dateModified``/``dateCreated``
        with: the request's time (:func:`request_now`)."""
        return request_now()

    # -- writes -----------------------------------------------------------

    def save_data(
        self,
        collection: Collection[Any],
        data: Mapping[str, Any],
        insert: bool = False,
        modified: bool = True,
        session: ClientSession | None = None,
    ) -> dict[str, Any]:
        """Replace (or insert) one document and stamp ``public_modified``.

        One write guarded by the document's current ``_rev``; the stamp is
        ``$$NOW`` of the server, in seconds. Inside a transaction
        (``session`` in one) the write is an ``update_one`` by ``_id`` whose
        pipeline replaces the document only when its ``_rev`` is the old one,
        then the stamp is read back by ``_id`` (the transaction holds the
        document, so the read sees this write); otherwise it is one
        ``find_one_and_update`` on ``{_id, _rev}``, which returns the stamp
        whatever else writes meanwhile. The two statements by ``_id`` are
        there for the embedded server: it runs ``findAndModify`` as a scan of
        the whole collection: a save of a 20 KB document cost it 9-13 ms of
        CPU among 140 documents and 130-150 ms among 2000, against 5-6 ms at
        both sizes for the pair (``python -m benchmarks save``). What it sets or
        derives, as upstream's ``save_data``:

        * ``_id`` from ``id`` or ``_id``; the old revision from ``rev`` or
          ``_rev`` (``id``/``rev`` are not stored);
        * ``_rev``: ``"{n+1}-{uuid4 hex}"``;
        * ``is_public`` = :meth:`is_public`, ``is_test`` = :meth:`is_test`;
        * ``is_masked`` is dropped unless it is ``True``;
        * ``dateModified`` = :meth:`now` (ISO 8601) unless ``modified=False``;
        * ``dateCreated`` = :meth:`now` on insert (a given one is kept with
          ``modified=False``: fixtures, migrations);
        * ``public_modified`` = ``$$NOW`` in seconds, unless
          ``modified=False`` (then the given one is kept, and required).

        :returns: the stored document (with its new ``_rev`` and stamp).
        :raises MissingRevision: an update without ``_rev``/``rev``.
        :raises ConflictError: when ``_rev`` is stale (or, with ``insert``,
            when the id is taken).
        :raises ~.save_errors.NotSaved: the database did not write it (no
            server, a refusal such as ``NotWritablePrimary``, a transaction
            aborted): a retry is safe.
        :raises ~.save_errors.SaveOutcomeUnknown: the write may have been
            applied (a write concern error, a connection lost after the
            write was sent): re-read before writing again. Inside a
            transaction, its ``commitTransaction`` is the caller's:
            :func:`~.save_errors.save_error` with ``committing=True`` names
            its errors the same way.
        """
        doc = dict(data)
        uid = doc.pop("id", None) if "id" in doc else doc.get("_id")
        if not uid:
            raise ValueError("save_data needs a document with an '_id' (or 'id')")
        doc["_id"] = uid
        old_rev = doc.pop("rev", None) if "rev" in doc else None
        old_rev = doc.pop("_rev", None) or old_rev
        if not insert and not old_rev:
            raise MissingRevision(
                f"save_data: updating document {uid} needs its current '_rev' (or 'rev'); pass insert=True to create it"
            )
        doc["_rev"] = next_rev(old_rev)
        doc["is_public"] = bool(self.is_public(doc))
        doc["is_test"] = bool(self.is_test(doc))
        if doc.get("is_masked", True) is not True:
            doc.pop("is_masked")
        now = self.now().isoformat()
        if modified:
            doc["dateModified"] = now
        if insert and (modified or "dateCreated" not in doc):
            doc["dateCreated"] = now
        if not modified and PUBLIC_MODIFIED not in doc:
            raise ValueError("save_data(modified=False) needs a 'public_modified'")
        in_transaction = session is not None and session.in_transaction
        try:
            if session is not None and in_transaction:
                stored = self._save_by_id(collection, doc, old_rev, modified, insert, session)
            else:
                pipeline: list[dict[str, Any]] = [{"$replaceWith": {"$literal": doc}}]
                if modified:
                    pipeline.append({"$set": {PUBLIC_MODIFIED: now_seconds()}})
                stored = collection.find_one_and_update(
                    {"_id": uid, "_rev": old_rev},
                    pipeline,
                    projection={PUBLIC_MODIFIED: 1},
                    upsert=insert,
                    return_document=ReturnDocument.AFTER,
                    session=session,
                )
        except DuplicateKeyError:
            raise ConflictError(f"Document {uid} exists already or changed") from None
        except PyMongoError as error:
            failure = save_error(error, in_transaction=in_transaction)
            if failure is error:
                raise
            raise failure from error
        if stored is None:
            raise ConflictError(f"Document {uid} was changed by another request")
        doc[PUBLIC_MODIFIED] = stored[PUBLIC_MODIFIED]
        return doc

    @staticmethod
    def _save_by_id(
        collection: Collection[Any],
        doc: Mapping[str, Any],
        old_rev: str | None,
        modified: bool,
        insert: bool,
        session: ClientSession,
    ) -> dict[str, Any] | None:
        """:meth:`save_data` inside a transaction: the guarded ``update_one``
        by ``_id``, then the stamp read back; None when the guard failed
        (another revision, or no document to update)."""
        current = {"$eq": [{"$ifNull": ["$_rev", None]}, old_rev]}
        pipeline: list[dict[str, Any]] = [{"$replaceWith": {"$cond": [current, {"$literal": doc}, "$$ROOT"]}}]
        if modified:
            ours = {"$eq": ["$_rev", doc["_rev"]]}
            pipeline.append({"$set": {PUBLIC_MODIFIED: {"$cond": [ours, now_seconds(), "$" + PUBLIC_MODIFIED]}}})
        result = collection.update_one({"_id": doc["_id"]}, pipeline, upsert=insert, session=session)
        if result.upserted_id is None and not result.modified_count:
            return None
        return collection.find_one({"_id": doc["_id"]}, {PUBLIC_MODIFIED: 1}, session=session)

    # -- reads ------------------------------------------------------------

    def feed_order(self, name: str | None = None) -> FeedOrder:
        """The :class:`~.orders.FeedOrder` called ``name`` (default: watermark)."""
        if name == COMMIT:
            return CommitOrder(self.watermark_seconds)
        if name not in (None, WATERMARK):
            raise ValueError(f"unknown feed order {name!r}; expected one of {', '.join(ORDERS)}")
        return WatermarkOrder(self.watermark_seconds, getattr(self, "stamp_public_ts", False))

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
        beyond = "$lt" if descending else "$gt"
        keyset = dict(filters or {})
        keyset["$or"] = [
            {reader.key: {beyond: offset.value}},
            {reader.key: offset.value, "_id": {beyond: last_id}},
        ]
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
