"""A check's records read from a database index, by position, streamed.

The reconcile protocol reads a set by position in the order of its records
(SPEC G.1: the timestamp, then the id). A table with an index on the
timestamp in microseconds and the object id (lower-case hexadecimal,
compared byte by byte) holds its rows in exactly that order: the record id
starts with the object id's bytes. :class:`IndexStorage` answers the
protocol from that index without loading the table: one streamed pass
notes, every :data:`BLOCK` rows, the block's first record and the sum of
the record ids before it; a fingerprint is two such sums plus the rows of at
most two blocks, an item or a range a seek on the index to its block
(``(modified_us, id) >= (first of the block)``, ``LIMIT``). Memory grows
with the rows / :data:`BLOCK` and a few cached blocks, not with the table.

:class:`TableCopy` is the :class:`~openprocurement_feed.client.copies.Copy`
of such a table: the mirror's ``feed_objects`` for one feed, or any
crawler's own table with a microseconds column and that index.
"""

from __future__ import annotations

import bisect
import contextlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, Table, select, tuple_

from ...reconcile.fingerprint import MODULUS, fingerprint_of
from ...reconcile.items import Bound, Item
from ...reconcile.records import record_id

__all__ = ["BLOCK", "IndexStorage", "TableCopy"]

#: Rows per block: the pass keeps one entry per block; a fingerprint reads at
#: most two blocks.
BLOCK = 512
#: Blocks kept in memory between calls (the protocol reads neighbours).
CACHED_BLOCKS = 64
#: Ids looked up per query (the versions of a check's differences).
LOOKUP_CHUNK = 500
_LOWER_HEX = re.compile(r"[0-9a-f]{32}")


def _record(key: str, timestamp: int) -> bytes:
    """The record id (SPEC G.1) of ``key`` at ``timestamp``: the id's bytes
    then SHA-256 of ``"<id>|<timestamp>"``, cut to 16 bytes."""
    if _LOWER_HEX.fullmatch(key) is None:
        raise ValueError(
            f"the id {key!r} is not 32 lower-case hexadecimal digits: it has no reconcile record "
            "(and the index would not hold it in the protocol's order)"
        )
    return record_id(key, timestamp)


class IndexStorage:
    """The rows of ``table`` matching ``where`` below ``until``, as a sealed
    Negentropy storage, read through ``connection`` (keep one transaction
    open over the check: a snapshot, so that positions do not move).

    :raises ValueError: a row whose id has no record, or an index whose order
        is not the protocol's.
    """

    def __init__(
        self,
        connection: Connection,
        table: Table,
        where: ColumnElement[bool],
        until: int,
        *,
        id_column: str = "id",
        timestamp_column: str = "modified_us",
        block: int = BLOCK,
    ) -> None:
        if block < 2:
            raise ValueError(f"block must be >= 2, got {block}")
        self.connection = connection
        self.block = block
        self._id = table.c[id_column]
        self._ts = table.c[timestamp_column]
        self._where = where & (self._ts < until)
        self._starts: list[tuple[int, bytes]] = []
        self._prefix: list[int] = []
        self._cache: OrderedDict[int, tuple[list[Item], list[int]]] = OrderedDict()
        self.reads = 0
        self._size, self._total = self._scan()

    def _query(self) -> Any:
        return select(self._ts, self._id).where(self._where).order_by(self._ts, self._id)

    def _scan(self) -> tuple[int, int]:
        """The streamed pass: each block's first record and the sum before it."""
        rows = self.connection.execution_options(yield_per=2000).execute(self._query())
        total = 0
        count = 0
        previous: tuple[int, bytes] = (-1, b"")
        from_bytes = int.from_bytes
        block = self.block
        for timestamp, key in rows:
            record = _record(key, timestamp)
            current = (timestamp, record)
            if current <= previous:
                raise ValueError(
                    f"the index returned {key} at {timestamp} after {previous[1][:16].hex()} at {previous[0]}: "
                    "its order is not the protocol's (compare the id column byte by byte: collation C)"
                )
            previous = current
            if count % block == 0:
                total %= MODULUS
                self._starts.append(current)
                self._prefix.append(total)
            total += from_bytes(record, "little")
            count += 1
        rows.close()
        return count, total % MODULUS

    # -- blocks ---------------------------------------------------------------

    def _block(self, number: int) -> tuple[list[Item], list[int]]:
        """The items of block ``number`` and the sums of the ids before each
        (relative to the block's start), read by a seek on the index."""
        cached = self._cache.get(number)
        if cached is not None:
            self._cache.move_to_end(number)
            return cached
        timestamp, record = self._starts[number]
        first = (timestamp, record[:16].hex())
        query = self._query().where(tuple_(self._ts, self._id) >= first).limit(self.block)
        self.reads += 1
        items: list[Item] = []
        sums: list[int] = []
        running = 0
        for row_ts, key in self.connection.execute(query):
            item = Item(row_ts, _record(key, row_ts))
            sums.append(running)
            running += int.from_bytes(item.id, "little")
            items.append(item)
        entry = (items, sums)
        self._cache[number] = entry
        if len(self._cache) > CACHED_BLOCKS:
            self._cache.popitem(last=False)
        return entry

    def _sum_before(self, position: int) -> int:
        if position >= self._size:
            return self._total
        number, offset = divmod(position, self.block)
        if offset == 0:
            return self._prefix[number]
        return self._prefix[number] + self._block(number)[1][offset]

    def _check(self, begin: int, end: int) -> None:
        if not 0 <= begin <= end <= self._size:
            raise IndexError(f"bad range {begin}..{end} of a storage of {self._size} items")

    # -- the Storage protocol -------------------------------------------------

    def size(self) -> int:
        """How many records lie below ``until``."""
        return self._size

    def get_item(self, i: int) -> Item:
        """The record at position ``i``."""
        self._check(i, i + 1)
        number, offset = divmod(i, self.block)
        return self._block(number)[0][offset]

    def iterate(self, begin: int, end: int) -> Iterator[Item]:
        """The records at positions ``begin`` .. ``end - 1``, block by block."""
        self._check(begin, end)
        position = begin
        while position < end:
            number, offset = divmod(position, self.block)
            items = self._block(number)[0]
            stop = min(len(items), offset + end - position)
            yield from items[offset:stop]
            position += stop - offset

    def find_lower_bound(self, begin: int, end: int, bound: Bound) -> int:
        """The first position in ``begin`` .. ``end`` whose record is not below ``bound``."""
        self._check(begin, end)
        key = (bound.timestamp, bound.id_prefix)
        number = bisect.bisect_left(self._starts, key) - 1
        if number < 0:
            position = 0
        else:
            items = self._block(number)[0]
            inside = bisect.bisect_left([(item.timestamp, item.id) for item in items], key)
            position = number * self.block + inside
        return min(max(position, begin), end)

    def fingerprint(self, begin: int, end: int) -> bytes:
        """The fingerprint of positions ``begin`` .. ``end - 1``, from the block sums."""
        self._check(begin, end)
        return fingerprint_of(self._sum_before(end) - self._sum_before(begin), end - begin)


class _TableSnapshot:
    def __init__(self, copy: TableCopy, connection: Connection, until: int) -> None:
        self.copy = copy
        self.connection = connection
        self.until = until
        self._storage: IndexStorage | None = None
        #: the versions looked up by the check (what a repair compares with)
        self.looked_up: dict[str, int] = {}

    def storage(self) -> IndexStorage:
        if self._storage is None:
            copy = self.copy
            self._storage = IndexStorage(
                self.connection,
                copy.table,
                copy.where,
                self.until,
                id_column=copy.id_column,
                timestamp_column=copy.timestamp_column,
            )
        return self._storage

    def versions(self, ids: Iterable[str]) -> dict[str, int]:
        found = self.copy.versions(self.connection, ids)
        self.looked_up.update(found)
        return found


class TableCopy:
    """The copy a table holds: the rows matching ``where``, each an object
    with its id (lower-case hexadecimal) in ``id_column`` and its version's
    microseconds in ``timestamp_column``, an index on ``(timestamp, id)``
    (after the columns of ``where``). A check reads it through a snapshot
    (PostgreSQL: ``REPEATABLE READ``; SQLite: a read transaction, WAL)."""

    def __init__(
        self,
        engine: Engine,
        table: Table,
        where: ColumnElement[bool],
        *,
        id_column: str = "id",
        timestamp_column: str = "modified_us",
    ) -> None:
        self.engine = engine
        self.table = table
        self.where = where
        self.id_column = id_column
        self.timestamp_column = timestamp_column
        #: the last snapshot's versions looked up (see :meth:`snapshot`)
        self.looked_up: dict[str, int] = {}

    @contextlib.contextmanager
    def snapshot(self, until: int) -> Iterator[_TableSnapshot]:
        """One transaction over a check's rounds and look-ups."""
        options: dict[str, Any] = {}
        if self.engine.dialect.name == "postgresql":
            options["isolation_level"] = "REPEATABLE READ"
        with self.engine.connect().execution_options(**options) as connection, connection.begin():
            snapshot = _TableSnapshot(self, connection, until)
            yield snapshot
            self.looked_up = snapshot.looked_up

    def versions(self, connection: Connection, ids: Iterable[str]) -> dict[str, int]:
        """Object id → microseconds, for those of ``ids`` the table holds."""
        column_id = self.table.c[self.id_column]
        column_ts = self.table.c[self.timestamp_column]
        wanted = sorted(set(ids))
        found: dict[str, int] = {}
        for start in range(0, len(wanted), LOOKUP_CHUNK):
            chunk = wanted[start : start + LOOKUP_CHUNK]
            query = select(column_id, column_ts).where(self.where, column_id.in_(chunk))
            found.update({key: int(timestamp) for key, timestamp in connection.execute(query)})
        return found
