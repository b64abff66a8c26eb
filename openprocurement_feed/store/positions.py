"""The positions collection of a commit-ordered feed: its names and its checkpoint.

The sequencer keeps, beside each commit-ordered feed collection, a positions
collection: one entry per document at the position (``committed_ts``) its
last change committed at, and one state document (``_id`` :data:`STATE_ID`)
with the resume token and the checkpoint every page is bounded by.
:func:`read_checkpoint` is the one read of that checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bson.min_key import MinKey
from bson.timestamp import Timestamp
from pymongo.client_session import ClientSession
from pymongo.collection import Collection

COMMITTED_TS = "committed_ts"
#: An entry's position as 16 hex digits, ``time`` then ``inc`` (:func:`position_seq`).
COMMITTED_SEQ = "committed_seq"
#: The positions collection of feed collection ``name`` is ``name + suffix``.
POSITIONS_SUFFIX = "_feed_positions"
#: The ``_id`` of the sequencer's state document (resume token, checkpoint,
#: start) inside each positions collection: ``MinKey``, which no application
#: uses as an id and every server finds through the ``_id`` index; the
#: document has no ``is_public``, so no feed query ever returns it.
STATE_ID = MinKey()
#: The state document's field holding the published checkpoint.
CHECKPOINT = "checkpoint"
#: The state's field set (to the database's time) when the follower's
#: change stream skipped history, until its recovery has re-stamped what it
#: may have missed: the health view is not ``ok`` meanwhile.
HISTORY_LOST = "history_lost"


def position_seq(position: Timestamp) -> str:
    """``position`` as 16 lowercase hex digits (``time``, then ``inc``, 8
    each): a string that sorts as positions do.

    A string, not a 64-bit integer: the driver decodes a BSON string to a
    ``str`` in C, and a 64-bit integer to ``bson.Int64``, a Python subclass
    of ``int`` made by a call per row.
    """
    return f"{position.time:08x}{position.inc:08x}"


def seq_position(seq: str | int) -> Timestamp:
    """The position of :func:`position_seq`'s ``seq`` (an integer
    ``time << 32 | inc`` is read too)."""
    number = int(seq, 16) if isinstance(seq, str) else int(seq)
    return Timestamp(number >> 32, number & 0xFFFFFFFF)


def row_position(row: Mapping[str, Any]) -> Any:
    """A commit page row's position: its ``committed_seq`` as a
    ``Timestamp``, or its ``committed_ts`` where it has no ``committed_seq``."""
    seq = row.get(COMMITTED_SEQ)
    return seq_position(seq) if seq is not None else row.get(COMMITTED_TS)


def positions_name(collection_name: str) -> str:
    """The positions collection beside feed collection ``collection_name``."""
    return collection_name + POSITIONS_SUFFIX


class FeedNotReady(Exception):
    """A commit-ordered feed has no checkpoint yet: no sequencer has run on it."""

    def __init__(self, collection: str) -> None:
        super().__init__(
            f"The commit-ordered feed of collection {collection!r} has no checkpoint yet: "
            "its sequencer has not run. Start 'openprocurement-feed sequence CONFIG.ini' "
            "or set feed.sequencer = thread."
        )
        self.collection = collection


def checkpoint_of(state: Mapping[str, Any] | None) -> Timestamp | None:
    """The checkpoint a state document holds (None: none published yet)."""
    checkpoint = (state or {}).get(CHECKPOINT)
    return checkpoint if isinstance(checkpoint, Timestamp) else None


def read_checkpoint(
    positions: Collection[Any],
    fields: Iterable[str] | None = (),
    session: ClientSession | None = None,
) -> tuple[Timestamp | None, dict[str, Any]]:
    """The published checkpoint of ``positions`` (None: no sequencer has
    published one yet) and its state document, with ``fields`` beside the
    checkpoint (None: every field), read with ``positions``' own options
    (read concern, read preference) in ``session``."""
    projection = None if fields is None else {CHECKPOINT: 1, **dict.fromkeys(fields, 1)}
    state = positions.find_one({"_id": STATE_ID}, projection, session=session) or {}
    return checkpoint_of(state), state
