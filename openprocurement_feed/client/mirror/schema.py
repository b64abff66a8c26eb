"""The mirror's schema (SPEC H.2) and how a database URL is opened.

One schema, two dialects through SQLAlchemy Core: SQLite (a file; the
default) and PostgreSQL (psycopg 3). The tables:

* ``feed_objects``: one row per object of each feed: ``feed``, ``id``,
  ``date_modified`` (the text the feed served), ``modified_us`` (that instant
  in microseconds since the epoch, the record's timestamp of SPEC G.1),
  ``data`` (the feed item, or the whole object; JSONB on PostgreSQL); primary
  key ``(feed, id)``, index ``(feed, modified_us, id)``: the protocol's order,
  read by a check without loading the table (``id`` compares byte by byte:
  collation ``C`` on PostgreSQL, SQLite's ``BINARY``);
* ``feed_state``: one row per feed: the crawl's position (``next_offset``, the
  history's offset), what it was asked for, and the last check's time,
  result and figures;
* ``feed_schema``: the schema's version (:data:`SCHEMA_VERSION`).
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Engine,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    create_engine,
    event,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

__all__ = [
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "MirrorError",
    "database_url",
    "feed_objects",
    "feed_schema",
    "feed_state",
    "make_engine",
    "metadata",
]

#: The version of the schema this package writes and reads.
SCHEMA_VERSION = 1
#: The ``name`` of the schema's row in ``feed_schema``.
SCHEMA_NAME = "openprocurement-feed-mirror"

#: SQLite: WAL pages between two automatic checkpoints (see :func:`make_engine`).
WAL_AUTOCHECKPOINT = 10_000

metadata = MetaData()
_ID = Text().with_variant(Text(collation="C"), "postgresql")
_DATA = JSON().with_variant(JSONB(), "postgresql")

feed_objects = Table(
    "feed_objects",
    metadata,
    Column("feed", Text, primary_key=True),
    Column("id", _ID, primary_key=True),
    Column("date_modified", Text, nullable=False),
    Column("modified_us", BigInteger, nullable=False),
    Column("data", _DATA, nullable=False),
    Index("feed_objects_order", "feed", "modified_us", "id"),
)

feed_state = Table(
    "feed_state",
    metadata,
    Column("feed", Text, primary_key=True),
    Column("url", Text, nullable=False),
    Column("mode", Text, nullable=False, default=""),
    Column("opt_fields", Text, nullable=False, default=""),
    Column("objects", Boolean, nullable=False, default=False),
    Column("next_offset", Text),
    Column("backward_offset", Text),
    Column("backward_done", Boolean, nullable=False, default=False),
    Column("items", BigInteger, nullable=False, default=0),
    Column("pages", BigInteger, nullable=False, default=0),
    Column("restarts", Integer, nullable=False, default=0),
    Column("updated_at", Text),
    Column("last_check_at", Text),
    Column("last_check_result", Text),
    Column("last_check", _DATA),
)

feed_schema = Table(
    "feed_schema",
    metadata,
    Column("name", Text, primary_key=True),
    Column("version", Integer, nullable=False),
)


class MirrorError(Exception):
    """The database cannot be used as a mirror: another scheme, unreachable,
    a schema of another version (one line for the user)."""


def database_url(text: str) -> URL:
    """The SQLAlchemy URL of ``text``: ``sqlite:///FILE``, ``postgresql://...``
    (driven by psycopg 3) or a plain path (SQLite).

    :raises MirrorError: a URL of another scheme, or one that cannot be read.
    """
    if "://" not in text:
        return URL.create("sqlite", database=os.path.abspath(text))
    scheme = text.split("://", 1)[0].lower()
    if scheme in ("postgres", "postgresql"):
        text = "postgresql+psycopg://" + text.split("://", 1)[1]
    elif scheme not in ("sqlite", "postgresql+psycopg"):
        raise MirrorError(
            f"unsupported database URL scheme {scheme}://: expected sqlite:///FILE, "
            "postgresql://USER@HOST/DB or a file path"
        )
    try:
        url = make_url(text)
    except ArgumentError as error:
        raise MirrorError(f"cannot read the database URL {text!r}: {error}") from None
    if url.get_backend_name() == "sqlite" and not url.database:
        raise MirrorError("an SQLite mirror needs a file: sqlite:///FILE (not an in-memory database)")
    return url


def make_engine(url: URL, synchronous: str = "NORMAL") -> Engine:
    """An engine for ``url``. On SQLite the transactions are the package's
    own (``BEGIN`` sent by SQLAlchemy, not guessed by the driver: a check's
    read sees one snapshot), with a 30 s busy timeout and ``synchronous`` as
    given. ``NORMAL`` (in WAL mode): a commit survives the process's death
    at once; a power loss may take back the last commits, each page's rows
    with the position after them, so the crawl reads those pages again and
    nothing is lost. ``FULL`` syncs every commit to the disk. A checkpoint
    every :data:`WAL_AUTOCHECKPOINT` pages of WAL."""
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    engine = create_engine(url, connect_args={"timeout": 30.0})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # autocommit: BEGIN below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout = 30000")
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.execute("PRAGMA cache_size = -65536")  # 64 MiB of pages: the indexes of a large feed stay cached
        # a checkpoint (the WAL copied into the file, both synced) every 10,000 pages (40 MiB of WAL), not
        # every 1,000: a page of 100 random ids dirties about 100 index pages, so the default checkpoints
        # every ten pages of a crawl; a third less CPU per page, half the wall time (benchmarks/mirror.py)
        cursor.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN")

    return engine
