"""A whole collection's documents read a chunk at a time in windows of the
stamp: the scan of the sequencer's backfill, recovery and rematerialize, and
of the aggregates' build.

One read of every match (sorted or not, with a batch size or not) makes a
server without limit pushdown gather and decode the whole collection before
its first batch: the embedded server holds gigabytes for it at a million
documents. :func:`documents_in_windows` reads ``chunk`` documents at a time
in ``public_modified`` order instead (:func:`~.windows.scan_in_order`, which
starts at the key :func:`~.windows.lowest_key` finds): every read gathers
about a chunk, on every server.

A document changed during the scan moves up the stamps: it is read again
later (where versions decide), never skipped. Documents without a stamp are
not read (a range of the stamp does not match them): every public document
of a feed collection carries one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.client_session import ClientSession
from pymongo.collection import Collection

from .readers import PUBLIC_MODIFIED
from .windows import Run, lowest_key, scan_in_order


def documents_in_windows(
    collection: Collection[Any],
    query: Mapping[str, Any],
    projection: Mapping[str, Any],
    chunk: int,
    session: ClientSession | None = None,
) -> Iterator[dict[str, Any]]:
    """The documents of ``query`` (a range of ``public_modified`` in it is
    where the scan starts) in ``(public_modified, _id)`` order, with
    ``projection``'s fields and the stamp, read ``chunk`` at a time."""
    fields = {**projection, PUBLIC_MODIFIED: 1}

    def run(order: int) -> Run:
        sort = [(PUBLIC_MODIFIED, order), ("_id", order)]
        return lambda windowed, limit: list(
            collection.find(windowed, fields, sort=sort, limit=limit, batch_size=limit, session=session)
        )

    def lowest() -> Any:
        unbounded = {name: value for name, value in query.items() if name != PUBLIC_MODIFIED}
        return lowest_key(run(ASCENDING), run(DESCENDING), unbounded, PUBLIC_MODIFIED, 0.0)[0]

    return scan_in_order(run(ASCENDING), query, PUBLIC_MODIFIED, chunk, lowest)
