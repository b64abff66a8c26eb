"""The mirror: a crawler's copy in a database that checks and heals itself
(SPEC H).

::

    from openprocurement_feed.client.mirror import Mirror, MirrorStore

    store = MirrorStore.open("sqlite:///feeds.db")
    store.create_schema()
    with Mirror("https://host/api/2.5/tenders", store) as mirror:
        mirror.run()                      # until mirror.stop()

One row per object in ``feed_objects`` (:mod:`.schema`), a page's rows and
the position after it in one transaction (:mod:`.sink`, :mod:`.store`), a
check every ``verify_every`` seconds that reads the rows from the index
``(feed, modified_us, id)`` (:mod:`.index`) and repairs them in place
(:mod:`.check`). SQLite (a file) or PostgreSQL, through SQLAlchemy Core;
needs the ``mirror`` extra (``sqlalchemy``, ``psycopg``).
"""

from __future__ import annotations

from .check import CheckReport, check_feed, repair_rows
from .index import BLOCK, IndexStorage, TableCopy
from .mirror import DEFAULT_VERIFY_EVERY, Mirror, MirrorStats, feed_name, import_lines
from .schema import SCHEMA_VERSION, MirrorError, database_url, feed_objects, feed_schema, feed_state
from .sink import PageSink
from .store import MirrorStore, row_of

__all__ = [
    "BLOCK",
    "DEFAULT_VERIFY_EVERY",
    "SCHEMA_VERSION",
    "CheckReport",
    "IndexStorage",
    "Mirror",
    "MirrorError",
    "MirrorStats",
    "MirrorStore",
    "PageSink",
    "TableCopy",
    "check_feed",
    "database_url",
    "feed_name",
    "feed_objects",
    "feed_schema",
    "feed_state",
    "import_lines",
    "repair_rows",
    "row_of",
]
