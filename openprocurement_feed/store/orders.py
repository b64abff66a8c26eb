"""The two feed orders: what differs between a watermark feed and a commit feed.

A feed pages rows sorted by ``(key, _id)`` after an offset and up to an upper
bound. The two orders differ only in where the key lives, in that bound and
in the offset form, and that difference lives here:

* :class:`WatermarkOrder` (SPEC A/B): the key is the document's own
  ``public_modified`` (``$$NOW`` when the write started); the bound is
  ``$$NOW - W`` by the database's clock.
* :class:`CommitOrder` (SPEC D): the key is ``committed_ts``, the cluster
  time at which the change committed, kept by the sequencer in a positions
  collection beside the documents; the bound is the sequencer's published
  checkpoint. A page is two reads in one causally consistent session: the
  checkpoint, then the positions, whose entries carry the feed's listing
  (:mod:`.listing`): a page never reads the application's documents, but
  for the fields the entries do not carry yet (a field added to a feed,
  until the sequencer has re-materialized the entries).

The store (:class:`~.database.FeedStoreMixin`) opens a
:class:`~.readers.PageReader` of the feed's order for each page
(:mod:`.readers`) and runs one code path for both: the offset range, the tie
handling and the keyset continuation. The positions collection and its
checkpoint are :mod:`.positions`'. The names of those modules are
re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from types import MappingProxyType
from typing import Any, ClassVar

from bson.timestamp import Timestamp
from pymongo.collection import Collection

from .indexes import create_indexes, stamp_index_specs
from .listing import ENTRY_FIELDS
from .offset import Offset, compose_offset, compose_position
from .positions import COMMITTED_SEQ as COMMITTED_SEQ
from .positions import COMMITTED_TS as COMMITTED_TS
from .positions import HISTORY_LOST as HISTORY_LOST
from .positions import POSITIONS_SUFFIX as POSITIONS_SUFFIX
from .positions import STATE_ID as STATE_ID
from .positions import FeedNotReady as FeedNotReady
from .positions import position_seq as position_seq
from .positions import positions_name as positions_name
from .positions import read_checkpoint as read_checkpoint
from .positions import row_position as row_position
from .positions import seq_position as seq_position
from .readers import PUBLIC_MODIFIED as PUBLIC_MODIFIED
from .readers import PUBLIC_TS as PUBLIC_TS
from .readers import CommitReader as CommitReader
from .readers import PageReader as PageReader
from .readers import WatermarkReader as WatermarkReader
from .readers import boundary_ids as boundary_ids
from .readers import exclusive_upper as exclusive_upper
from .readers import now_seconds as now_seconds

WATERMARK = "watermark"
COMMIT = "commit"
#: The feed orders a deployment can choose (``feed.order``).
ORDERS = (WATERMARK, COMMIT)
#: Seconds an offset of the other order is read earlier (on top of ``W``):
#: a few duplicates, never a loss.
CROSS_ORDER_MARGIN = 1.0


class FeedOrder:
    """One feed order: its name, how it reads a page and writes its offsets.

    What differs between the orders is asked of the order, by the rest of
    the package, through the class's attributes and methods (no caller
    compares an order's name): whether a sequencer keeps its pages
    (:attr:`sequenced`), the fields a feed of it cannot list, the collection
    its pages read and the indexes they need, the key a long-poll waiter
    compares with the feed's bound. :func:`order_kind` finds the class of a
    name; :meth:`for_store` makes the order a store reads pages in.
    """

    name: str = ""
    key: str = PUBLIC_MODIFIED
    #: its pages read a sequencer's positions, bounded by its checkpoint:
    #: the sequencer follows its collections (else it only observes them,
    #: to measure the lag the watermark bets on)
    sequenced: ClassVar[bool] = False
    #: the fields a feed of this order cannot list (its rows' own)
    reserved_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def for_store(cls, store: Any) -> FeedOrder:
        """The order a store pages in: with its ``watermark_seconds`` (and
        ``stamp_public_ts``)."""
        raise NotImplementedError

    @classmethod
    def page_collection(cls, collection: Collection[Any]) -> Collection[Any]:
        """The collection the pages of feed collection ``collection`` read
        (beside it, in its database)."""
        return collection

    @classmethod
    def ensure_indexes(cls, store: Any, collection_name: str, scope_fields: Iterable[str]) -> None:
        """Create the indexes the pages of a feed on ``collection_name``
        read through, on ``store`` (a :class:`~.backend.FeedBackend`)."""
        store.ensure_feed_indexes(store.collection(collection_name), list(scope_fields))

    @classmethod
    def waiter_key(cls, offset: Offset | None) -> Any:
        """The value a long-poll waiter at ``offset`` compares with its
        feed's bound (None: none comparable; such a waiter wakes at every
        move)."""
        if offset is None or offset.field != PUBLIC_MODIFIED or offset.is_position:
            return None
        return float(offset.value)  # type: ignore[arg-type]

    def compose(self, value: Any, ids: Iterable[str]) -> str:
        """The offset of a page boundary at ``value`` shared by ``ids``."""
        raise NotImplementedError

    def row_value(self, row: Mapping[str, Any]) -> Any:
        """The value a page row of this order sorts by (its offset's value)."""
        return row[self.key]

    def convert(self, offset: Offset, descending: bool) -> Offset:
        """``offset`` as this order reads it (an offset of the other order is
        read a safe margin earlier, in the direction of travel)."""
        return offset

    def reader(
        self, collection: Collection[Any], max_time_ms: int = 0, key: str | None = None
    ) -> AbstractContextManager[PageReader]:
        """A :class:`PageReader` for one page of ``collection``; ``key`` is
        the offset's field where an order reads more than one."""
        raise NotImplementedError


class WatermarkOrder(FeedOrder):
    """Pages by ``public_modified``, never newer than ``$$NOW - W``.

    ``stamp_public_ts``: the host stamps ``public_ts`` (a cluster time), so
    legacy ``public_ts`` offsets are read natively on that field.
    """

    name = WATERMARK

    def __init__(self, watermark_seconds: float, stamp_public_ts: bool = False) -> None:
        self.watermark_seconds = watermark_seconds
        self.stamp_public_ts = stamp_public_ts

    @classmethod
    def for_store(cls, store: Any) -> FeedOrder:
        return cls(store.watermark_seconds, getattr(store, "stamp_public_ts", False))

    def compose(self, value: Any, ids: Iterable[str]) -> str:
        return compose_offset(value, ids)

    def convert(self, offset: Offset, descending: bool) -> Offset:
        if not offset.is_position or self.stamp_public_ts:
            return offset
        margin = CROSS_ORDER_MARGIN + self.watermark_seconds
        assert isinstance(offset.value, Timestamp)  # is_position
        seconds = float(offset.value.time) + (margin if descending else -margin)
        return Offset(max(seconds, 0.0))

    @contextmanager
    def reader(self, collection: Collection[Any], max_time_ms: int = 0, key: str | None = None) -> Iterator[PageReader]:
        yield WatermarkReader(collection, self.watermark_seconds, key or PUBLIC_MODIFIED, max_time_ms)


class CommitOrder(FeedOrder):
    """Pages by commit position up to the sequencer's checkpoint (SPEC D)."""

    name = COMMIT
    key = COMMITTED_TS
    sequenced = True
    reserved_fields = ENTRY_FIELDS

    def __init__(self, watermark_seconds: float = 0.0) -> None:
        #: offsets written in watermark order are read this much earlier
        self.margin = CROSS_ORDER_MARGIN + watermark_seconds

    @classmethod
    def for_store(cls, store: Any) -> FeedOrder:
        return cls(store.watermark_seconds)

    @classmethod
    def page_collection(cls, collection: Collection[Any]) -> Collection[Any]:
        return collection.database.get_collection(positions_name(collection.name))

    @classmethod
    def ensure_indexes(cls, store: Any, collection_name: str, scope_fields: Iterable[str]) -> None:
        # pages read the positions: the documents need only the index of
        # the sequencer's backfill (each one costs every write)
        create_indexes(store.collection(collection_name), stamp_index_specs())
        store.ensure_feed_indexes(
            # beside the documents, in the store's database (not the host's
            # collection accessor: the package owns that collection)
            store.db.get_collection(positions_name(collection_name)),
            list(scope_fields),
            COMMITTED_TS,
        )

    @classmethod
    def waiter_key(cls, offset: Offset | None) -> Any:
        return offset.value if offset is not None and offset.is_position else None

    def compose(self, value: Any, ids: Iterable[str]) -> str:
        return compose_position(value, ids)

    def row_value(self, row: Mapping[str, Any]) -> Any:
        return row_position(row)

    def convert(self, offset: Offset, descending: bool) -> Offset:
        if offset.is_position:
            return Offset(offset.value, offset.count, offset.digest, COMMITTED_TS)
        assert not isinstance(offset.value, Timestamp)  # not is_position
        seconds = float(offset.value)
        if descending:
            moment = min(math.ceil(seconds + self.margin), 2**32 - 1)
        else:
            moment = max(math.floor(seconds - self.margin), 0)
        return Offset(Timestamp(int(moment), 0), field=COMMITTED_TS)

    @contextmanager
    def reader(self, collection: Collection[Any], max_time_ms: int = 0, key: str | None = None) -> Iterator[PageReader]:
        with collection.database.client.start_session(causal_consistency=True) as session:
            yield CommitReader(collection, session, max_time_ms)


#: The class of each order, by name.
ORDER_KINDS: Mapping[str, type[FeedOrder]] = MappingProxyType({WATERMARK: WatermarkOrder, COMMIT: CommitOrder})


def order_kind(name: str | None) -> type[FeedOrder]:
    """The class of the order called ``name`` (None: watermark); a
    :class:`ValueError` naming the orders for an unknown one."""
    kind = ORDER_KINDS.get(name or WATERMARK)
    if kind is None:
        raise ValueError(f"unknown feed order {name!r}; expected one of {', '.join(ORDERS)}")
    return kind
