"""The feed indexes: the specs that serve every feed query shape, the one
index a commit-ordered feed needs on its documents, and their creation."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pymongo import ASCENDING
from pymongo.collection import Collection
from pymongo.errors import OperationFailure

from .readers import PUBLIC_MODIFIED

log = logging.getLogger("openprocurement_feed.database")  # the store's logger

#: The server's error code for an index that exists under another name.
INDEX_OPTIONS_CONFLICT = 85
#: An index of that name exists with other keys (an earlier build's).
INDEX_KEY_SPECS_CONFLICT = 86


def feed_index_name(scope_field: str | None, mode: str) -> str:
    """The name of the feed index that serves the pages of feed mode
    ``mode`` (``_all_``: every object; else real or test ones), scoped by
    ``scope_field`` or not (:meth:`FeedIndexesMixin.feed_index_specs`)."""
    stem = f"feed_{scope_field}_" if scope_field else "feed_"
    return stem + ("all" if mode == "_all_" else "mode")


class FeedIndexesMixin:
    """The feed indexes of a store (:class:`~.database.FeedStoreMixin` has them)."""

    @staticmethod
    def feed_index_specs(scope_fields: Iterable[str] = (), key: str = PUBLIC_MODIFIED) -> builtins.list[dict[str, Any]]:
        """Index specs that serve every feed query shape.

        Equality fields first (``is_public``, ``is_test``, the scope field),
        then the sort ``(key, _id)``, which also serves the range on the key.
        One index for real/test feeds and one for ``_all_``; the same pair
        per scope field. ``key`` is ``public_modified`` on a feed collection
        and ``committed_ts`` on a positions collection.

        Full indexes with ``is_public`` in the keys (SPEC A.5), not partial
        ones on ``is_public: true``: the embedded server walks a compound
        index for equalities only when its leading fields are the equalities
        the partial filter does not cover, and for a range after equalities
        only when they are all of them, so no partial index serves both a
        first page and a page after an offset there (a page after an offset
        would be a collection scan: docs/operations.rst, "Indexes").
        """
        specs: builtins.list[dict[str, Any]] = []
        for scope in (None, *scope_fields):
            prefix = [(scope, ASCENDING)] if scope else []
            public = ("is_public", ASCENDING)
            tail = [(key, ASCENDING), ("_id", ASCENDING)]
            specs.append({"keys": [*prefix, public, ("is_test", ASCENDING), *tail], "name": feed_index_name(scope, "")})
            specs.append({"keys": [*prefix, public, *tail], "name": feed_index_name(scope, "_all_")})
        return specs

    def ensure_feed_indexes(
        self,
        collection: Collection[Any],
        scope_fields: Iterable[str] = (),
        key: str = PUBLIC_MODIFIED,
    ) -> builtins.list[str]:
        """Create the feed indexes on ``collection`` (sorted on ``key``);
        returns their names."""
        return create_indexes(collection, self.feed_index_specs(scope_fields, key))


def stamp_index_specs() -> builtins.list[dict[str, Any]]:
    """The one index a commit-ordered feed needs on its *documents*:
    ``feed_all``, ``(is_public, public_modified, _id)``.

    Pages of a commit-ordered feed read the positions collection; the
    documents are read in ``(public_modified, _id)`` order of the public ones
    only by a sequencer's backfill and recovery, and past a stamp by the
    health verdict. Every index on the documents is kept up to date by
    every write of the application, so a collection that no watermark feed
    reads gets this one index instead of the whole set: each index spared
    is one update less per write (docs/operations.rst, "Indexes").
    """
    return [spec for spec in FeedIndexesMixin.feed_index_specs() if spec["name"] == "feed_all"]


def create_indexes(collection: Collection[Any], specs: Iterable[Mapping[str, Any]]) -> builtins.list[str]:
    """Create the indexes of ``specs`` (``keys``, ``name``) on ``collection``;
    returns their names. An index of a spec's name with other keys is left
    alone with a warning that says how to drop it; the same keys under
    another name are left alone with a warning."""
    names = []
    for spec in specs:
        options = dict(spec)
        keys = options.pop("keys")
        try:
            names.append(collection.create_index(keys, **options))
        except OperationFailure as error:
            if error.code == INDEX_KEY_SPECS_CONFLICT:
                log.warning(
                    "Feed index %s not created: an index of that name has other keys (%s); "
                    "drop it to have the feed's: db.%s.dropIndex(%r)",
                    options["name"],
                    error,
                    collection.name,
                    options["name"],
                )
                continue
            if error.code != INDEX_OPTIONS_CONFLICT:
                raise
            # The same keys are indexed under another name: keep going.
            log.warning("Feed index %s not created: %s", options["name"], error)
    return names
