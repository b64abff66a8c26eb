"""The mirror's store: one interface, SQLite or PostgreSQL behind it.

* :meth:`MirrorStore.write_page`: a page's rows and the crawl's position
  after it in one transaction (a ``kill -9`` at any moment loses nothing and
  takes no row back); a row is replaced only by a newer ``dateModified``
  (a replayed page changes nothing);
* :meth:`MirrorStore.load_state`: the position;
* :meth:`MirrorStore.copy`: the feed's rows as a check reads them, streamed
  from the index ``(feed, modified_us, id)`` (:mod:`.index`);
* :meth:`MirrorStore.repair`: a check's repair, in one transaction.

Opening a database writes nothing (:meth:`MirrorStore.open`): the schema is
made by :meth:`MirrorStore.create_schema`, once the caller knows that its
input is good.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, func, inspect, select, update
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ...reconcile.records import timestamp_us
from .index import TableCopy
from .schema import (
    SCHEMA_NAME,
    SCHEMA_VERSION,
    MirrorError,
    database_url,
    feed_objects,
    feed_schema,
    feed_state,
    make_engine,
    metadata,
)

log = logging.getLogger(__name__)

__all__ = ["MirrorStore", "PageWriter", "Row", "now_text", "row_of"]

#: A row of ``feed_objects`` as the store writes it (without ``feed``).
Row = dict[str, Any]


def _json_encoder() -> Callable[[Any], str]:
    """``data``'s JSON text: :mod:`orjson` when installed (the ``fast``
    extra; several times faster), else the standard library's; the same
    JSON value either way (UTF-8, no spaces)."""

    def standard(data: Any) -> str:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    try:
        import orjson
    except ImportError:  # pragma: no cover - the fast extra not installed
        return standard
    encode = orjson.dumps
    failure = orjson.JSONEncodeError

    def fast(data: Any) -> str:
        try:
            return encode(data).decode()
        except failure:  # an integer over 64 bits, a key that is no string: the standard library's way
            return standard(data)

    return fast


#: The JSON text of a row's ``data``.
json_text = _json_encoder()


def now_text() -> str:
    """The time now, as ``feed_state`` keeps it (ISO 8601, UTC, milliseconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def row_of(data: dict[str, Any]) -> Row:
    """The row of an item or object: its id, ``dateModified`` as served and
    in microseconds, and the data.

    :raises ValueError: no id, or a ``dateModified`` that is no ISO 8601 time.
    """
    key = data.get("id")
    if not isinstance(key, str) or not key:
        raise ValueError(f"an item without an id: {data!r:.200}")
    date_modified = data.get("dateModified")
    return {
        "id": key,
        "date_modified": date_modified,
        "modified_us": timestamp_us(date_modified),  # type: ignore[arg-type]
        "data": data,
    }


def newest_rows(rows: Iterable[Row]) -> list[Row]:
    """One row per id: the newest (one statement may not touch a row twice)."""
    kept: dict[str, Row] = {}
    for row in rows:
        held = kept.get(row["id"])
        if held is None or held["modified_us"] < row["modified_us"]:
            kept[row["id"]] = row
    return list(kept.values())


class MirrorStore:
    """The mirror's database (``url``: ``sqlite:///FILE``, a path, or
    ``postgresql://...``). See the module's docstring."""

    def __init__(self, engine: Engine, where: str) -> None:
        self.engine = engine
        self.where = where
        #: whether the schema is there (checked by :meth:`open`, made by :meth:`create_schema`)
        self.ready = False
        self._compiled: tuple[str, tuple[str, ...] | None] | None = None
        self._state_compiled: dict[tuple[str, ...], tuple[str, tuple[str, ...] | None]] = {}

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @classmethod
    def open(cls, url: str, must_exist: bool = False, synchronous: str = "NORMAL") -> MirrorStore:
        """The database at ``url``, its schema checked; nothing is written.
        ``synchronous``: SQLite's setting (:func:`~.schema.make_engine`).

        :raises MirrorError: another scheme, unreachable (SQLite: no such
            folder, or a file that is not a database), a schema of another
            version or tables of the same names that this package did not make.
        """
        parsed = database_url(url)
        where = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() == "sqlite":
            path = str(parsed.database)
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise MirrorError(f"cannot open the database {where}: the folder {folder} does not exist")
            if not os.path.exists(path):
                if must_exist:
                    raise MirrorError(f"cannot open the database {where}: no such file")
                return cls(make_engine(parsed, synchronous), where)  # made by create_schema
        store = cls(make_engine(parsed, synchronous), where)
        try:
            store.ready = store.check_schema(must_exist)
        except BaseException:
            store.close()
            raise
        return store

    def check_schema(self, must_exist: bool = False) -> bool:
        """Whether the schema is there (of this version).

        :raises MirrorError: unreachable, another version, foreign tables.
        """
        try:
            with self.engine.connect() as connection:
                tables = set(inspect(connection).get_table_names())
                if "feed_schema" not in tables:
                    mine = {"feed_objects", "feed_state"} & tables
                    if mine:
                        raise MirrorError(
                            f"the database {self.where} has tables {', '.join(sorted(mine))} but no feed_schema: "
                            "not a mirror of this package's schema"
                        )
                    if must_exist:
                        raise MirrorError(f"the database {self.where} holds no mirror (no feed_schema table)")
                    return False
                version = connection.execute(
                    select(feed_schema.c.version).where(feed_schema.c.name == SCHEMA_NAME)
                ).scalar()
        except SQLAlchemyError as error:
            raise MirrorError(f"cannot open the database {self.where}: {_reason(error)}") from None
        if version != SCHEMA_VERSION:
            raise MirrorError(
                f"the database {self.where} has a mirror schema of version {version}; "
                f"this package reads version {SCHEMA_VERSION}"
            )
        return True

    def create_schema(self) -> None:
        """Make the tables and the version row (nothing if they are there)."""
        try:
            if self.dialect == "sqlite":
                raw = self.engine.raw_connection()  # outside any transaction
                try:
                    raw.cursor().execute("PRAGMA journal_mode = WAL")  # readers never block the writer
                finally:
                    raw.close()
            with self.engine.begin() as connection:
                metadata.create_all(connection, checkfirst=True)
                held = connection.execute(select(feed_schema.c.version).where(feed_schema.c.name == SCHEMA_NAME))
                if held.first() is None:
                    connection.execute(feed_schema.insert().values(name=SCHEMA_NAME, version=SCHEMA_VERSION))
            self.ready = True
        except SQLAlchemyError as error:
            raise MirrorError(f"cannot write the database {self.where}: {_reason(error)}") from None

    def close(self) -> None:
        """Close the connections."""
        self.engine.dispose()

    def __enter__(self) -> MirrorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --------------------------------------------------------------

    def _upsert(self) -> Any:
        """``INSERT ... ON CONFLICT (feed, id) DO UPDATE ... WHERE`` the row
        is older: the statement of both dialects."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        statement = insert(feed_objects)
        new = statement.excluded
        return statement.on_conflict_do_update(
            index_elements=[feed_objects.c.feed, feed_objects.c.id],
            set_={"date_modified": new.date_modified, "modified_us": new.modified_us, "data": new.data},
            where=feed_objects.c.modified_us < new.modified_us,
        )

    def _upsert_sql(self) -> tuple[str, tuple[str, ...] | None]:
        """The upsert compiled once for the dialect: its SQL text and, for a
        driver of positional parameters, their order (a page's rows then go
        to the driver's ``executemany`` without a per-row Core step)."""
        if self._compiled is None:
            compiled = self._upsert().compile(dialect=self.engine.dialect)
            order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
            self._compiled = (str(compiled), order)
        return self._compiled

    def upsert(self, connection: Connection, feed: str, rows: Sequence[Row]) -> None:
        """Write ``rows`` in ``connection``'s transaction; a row held at the
        same or a newer version is left alone."""
        if rows:
            cursor = connection.connection.cursor()
            try:
                self._upsert_rows(cursor, feed, rows)
            finally:
                cursor.close()

    def _upsert_rows(self, cursor: Any, feed: str, rows: Sequence[Row]) -> None:
        """The upsert of ``rows`` on the driver's ``cursor``: one
        ``executemany`` of the statement compiled once."""
        sql, order = self._upsert_sql()
        params: list[Any] = [
            {
                "feed": feed,
                "id": row["id"],
                "date_modified": row["date_modified"],
                "modified_us": row["modified_us"],
                "data": json_text(row["data"]),
            }
            for row in newest_rows(rows)
        ]
        if order is not None:  # a driver of positional parameters (SQLite)
            params = list(map(itemgetter(*order), params))
        cursor.executemany(sql, params)

    def _state_sql(self, names: tuple[str, ...]) -> tuple[str, tuple[str, ...] | None]:
        """``UPDATE feed_state SET <names> WHERE feed = ...`` compiled once
        per set of columns (as :meth:`_upsert_sql`)."""
        held = self._state_compiled.get(names)
        if held is None:
            statement = (
                update(feed_state)
                .where(feed_state.c.feed == bindparam("key"))
                .values({name: bindparam(name) for name in names})
            )
            compiled = statement.compile(dialect=self.engine.dialect)
            order = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
            held = self._state_compiled[names] = (str(compiled), order)
        return held

    def write_page(self, feed: str, rows: Sequence[Row], state: dict[str, Any]) -> None:
        """A page's ``rows`` and the ``feed_state`` columns ``state``, in one
        transaction: the statements compiled once, handed to the driver's
        cursor (no per-page Core step)."""
        values = {**state, "updated_at": now_text()}
        with self.engine.begin() as connection:
            cursor = connection.connection.cursor()
            try:
                updated = self._page_on(cursor, feed, rows, values)
            finally:
                cursor.close()
            if not updated:
                connection.execute(feed_state.insert().values(feed=feed, **values))

    def _page_on(self, cursor: Any, feed: str, rows: Sequence[Row], values: dict[str, Any]) -> bool:
        """The page's statements on the driver's ``cursor``, in its
        transaction: the rows upserted, the feed's state row updated
        (False: there is none yet)."""
        names = tuple(sorted(values))
        sql, order = self._state_sql(names)
        params: Any = {**values, "key": feed}
        if order is not None:
            params = tuple(params[name] for name in order)
        if rows:
            self._upsert_rows(cursor, feed, rows)
        cursor.execute(sql, params)
        return bool(cursor.rowcount)

    def page_writer(self) -> PageWriter:
        """A writer of pages one after another on a connection of its own
        (:class:`PageWriter`): a crawl's."""
        return PageWriter(self)

    def _put_state(self, connection: Connection, feed: str, values: dict[str, Any]) -> None:
        values = {**values, "updated_at": now_text()}
        done = connection.execute(update(feed_state).where(feed_state.c.feed == feed).values(**values))
        if done.rowcount == 0:
            connection.execute(feed_state.insert().values(feed=feed, **values))

    def put_state(self, feed: str, values: dict[str, Any]) -> None:
        """Update (or make) the feed's ``feed_state`` row."""
        with self.engine.begin() as connection:
            self._put_state(connection, feed, values)

    def put_state_if_any(self, feed: str, values: dict[str, Any]) -> None:
        """Update the feed's ``feed_state`` row where there is one."""
        with self.engine.begin() as connection:
            connection.execute(update(feed_state).where(feed_state.c.feed == feed).values(**values))

    def repair(self, feed: str, rows: Sequence[Row], removed: dict[str, int]) -> int:
        """One transaction: ``rows`` upserted (only where newer), and each
        id of ``removed`` deleted where its row is still at or below the
        version given (a newer one written meanwhile stays). Rows changed."""
        changed = 0
        with self.engine.begin() as connection:
            self.upsert(connection, feed, rows)
            changed += len(rows)
            for key, version in removed.items():
                done = connection.execute(
                    delete(feed_objects).where(
                        feed_objects.c.feed == feed, feed_objects.c.id == key, feed_objects.c.modified_us <= version
                    )
                )
                changed += done.rowcount
        return changed

    # -- reading --------------------------------------------------------------

    def load_state(self, feed: str) -> dict[str, Any] | None:
        """The feed's ``feed_state`` row, or None."""
        if not self._exists():
            return None
        with self.engine.connect() as connection:
            row = connection.execute(select(feed_state).where(feed_state.c.feed == feed)).mappings().first()
        return dict(row) if row is not None else None

    def count(self, feed: str) -> int:
        """How many rows the feed has."""
        if not self._exists():
            return 0
        with self.engine.connect() as connection:
            query = select(func.count()).select_from(feed_objects).where(feed_objects.c.feed == feed)
            return int(connection.execute(query).scalar() or 0)

    def rows(self, feed: str, data: bool = False) -> Iterator[Any]:
        """The feed's rows in the index's order, streamed: ``(id,
        date_modified)`` or ``(id, date_modified, data)``."""
        if not self._exists():
            return
        columns = [feed_objects.c.id, feed_objects.c.date_modified]
        if data:
            columns.append(feed_objects.c.data)
        query = (
            select(*columns).where(feed_objects.c.feed == feed).order_by(feed_objects.c.modified_us, feed_objects.c.id)
        )
        with self.engine.connect() as connection, connection.begin():
            yield from connection.execution_options(yield_per=1000).execute(query)

    def copy(self, feed: str) -> TableCopy:
        """The feed's rows as a check reads them (:class:`~.index.TableCopy`)."""
        return TableCopy(self.engine, feed_objects, feed_objects.c.feed == feed)

    def _exists(self) -> bool:
        return self.ready


class PageWriter:
    """Pages written one after another, as :meth:`MirrorStore.write_page`
    writes them (a page's rows and the position after it in one
    transaction), on one connection kept from the pool, its transactions
    begun and committed on the driver's connection: a crawl's writer spends
    no Core step per page. The first page (the feed's state row may be
    missing) and any page after a failure go through
    :meth:`MirrorStore.write_page`. Used by one thread at a time."""

    def __init__(self, store: MirrorStore) -> None:
        self.store = store
        self._raw: Any = None
        self._state_row = False

    def write(self, feed: str, rows: Sequence[Row], state: dict[str, Any]) -> None:
        """Write the page (see the class)."""
        if not self._state_row:
            self.store.write_page(feed, rows, state)
            self._state_row = True
            return
        if self._raw is None:
            self._raw = self.store.engine.raw_connection()
        raw = self._raw
        values = {**state, "updated_at": now_text()}
        try:
            cursor = raw.cursor()
            try:
                if self.store.dialect == "sqlite":
                    cursor.execute("BEGIN")  # the driver's autocommit mode: the package's own transactions
                updated = self.store._page_on(cursor, feed, rows, values)
            finally:
                cursor.close()
            if not updated:  # the state row deleted meanwhile: the page again, through the store
                raw.rollback()
                self._state_row = False
                self.write(feed, rows, state)
                return
            raw.commit()
        except BaseException:
            self.close()  # its transaction rolled back with the connection
            self._state_row = False
            raise

    def close(self) -> None:
        """Give the connection back to the pool."""
        raw, self._raw = self._raw, None
        if raw is not None:
            try:
                raw.close()
            except Exception as error:  # a connection already broken
                log.debug("closing the page writer's connection: %s", error)


def _reason(error: SQLAlchemyError) -> str:
    """The driver's message, first line."""
    original = error.orig if isinstance(error, DBAPIError) else None
    text = str(original if original is not None else error).strip()
    return text.splitlines()[0] if text else type(error).__name__
