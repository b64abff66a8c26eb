"""Does a change stream still read every change? The follower's own check
(SPEC I.4).

A server bounds its oplog, and a follower that falls behind it loses the
changes pruned before it read them. MongoDB fails the stream's next read
with ``ChangeStreamHistoryLost`` (286); a server may instead prune entries
under a live stream and go on from the oldest entry it still has, without a
word (the embedded server does). :class:`HistoryGuard` tells the two cases
apart the same way on every server: after a read, it asks the server
whether the stream could still resume at the point it had reached before
that read. The oplog is pruned from its oldest end only, so while that
point is still in it, nothing after it was pruned before the read, and the
read saw every change after it. When the point has left the oplog, the read
may have skipped changes: the guard raises :class:`HistoryLost` (an
:class:`~pymongo.errors.OperationFailure` with code 286, as MongoDB's), and
the follower recovers as it would from MongoDB's error, before it publishes
anything that read covers.

A stream opened at a time rather than after a token is anchored by a token
taken at that time (:func:`present_token`), so its first read is checked
too. The check is one short read of a change stream (an ``aggregate`` and a
``killCursors``), made after reads that brought something to publish, and
about once a second while reads bring nothing but the stream's point moves
(all the changes it follows may have been pruned before it read them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pymongo.change_stream import ChangeStream
from pymongo.database import Database
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern

from .errors import HISTORY_LOST_CODES

#: MongoDB's code for a change stream whose history has left the oplog.
CHANGE_STREAM_HISTORY_LOST = 286
#: Seconds between two checks of a stream whose reads bring nothing to
#: publish while its point moves on (every change it follows may have been
#: pruned before it read them: it would wait for events that never come).
IDLE_CHECK_SECONDS = 1.0


class HistoryLost(OperationFailure):
    """A change stream may have skipped changes pruned from the oplog before
    it read them (the server did not fail the read): the follower recovers
    as from MongoDB's ``ChangeStreamHistoryLost``."""

    def __init__(self, who: str) -> None:
        super().__init__(
            f"{who}: the point its change stream had reached has left the oplog while it read on, "
            "so the read may have skipped changes (the server pruned them without failing the stream)",
            code=CHANGE_STREAM_HISTORY_LOST,
            details={"codeName": "ChangeStreamHistoryLost", "code": CHANGE_STREAM_HISTORY_LOST},
        )


def streams_of(db: Database[Any]) -> Database[Any]:
    """``db`` with the read concern a change stream accepts (the server's
    default: a host may give its database another, ``local`` say)."""
    return db.with_options(read_concern=ReadConcern())


def resumable(db: Database[Any], token: Mapping[str, Any]) -> bool:
    """Whether a change stream of ``db`` can resume after ``token`` (its
    point is still in the oplog): one short read, on any server."""
    try:
        with streams_of(db).watch(resume_after=token, batch_size=1, max_await_time_ms=1):
            return True
    except OperationFailure as error:
        if error.code in HISTORY_LOST_CODES:
            return False
        raise


def present_token(db: Database[Any]) -> Mapping[str, Any] | None:
    """A resume token of ``db``'s change stream at the present (the point a
    stream opened now starts from), or None where the server gives none."""
    with streams_of(db).watch(batch_size=0, max_await_time_ms=1) as stream:
        token = stream.resume_token
    return dict(token) if token else None


#: Seconds a batch that found no event reads on while the stream's point
#: moves, on a server whose reads stop short of the oplog's end
#: (:func:`skip_read_seconds`).
SHORT_READ_SECONDS = 1.0


def skip_read_seconds(db: Database[Any], batch_seconds: float) -> float:
    """How long a batch that found no event reads on while its stream's
    point moves: ``batch_seconds`` where a read that finds nothing has read
    to the oplog's end (MongoDB: its point moves again only with new
    writes), :data:`SHORT_READ_SECONDS` on the embedded server (SecantusDB,
    ``secantusVersion`` in ``buildInfo``), whose read examines a few hundred
    entries of the database and answers nothing when none was the stream's:
    the follower's own writes (positions, a million tenders' aggregates
    build) would otherwise leave its stream behind until its point left the
    oplog. One ``buildInfo``, asked once per follower."""
    try:
        info = db.client.admin.command("buildInfo")
    except OperationFailure:
        return batch_seconds
    return max(batch_seconds, SHORT_READ_SECONDS) if "secantusVersion" in info else batch_seconds


class HistoryGuard:
    """Checks one change stream of ``db`` for skipped history (module doc).

    :param who: names the follower in the error.
    """

    def __init__(self, db: Database[Any], who: str) -> None:
        self.db = db
        self.who = who
        #: the last point known read through with nothing skipped; None:
        #: not known (the next check only takes the stream's point)
        self.point: Mapping[str, Any] | None = None
        #: checks made (for tests and benchmarks)
        self.checks = 0
        #: when (``time.monotonic()``) the last check was made
        self.checked_at = 0.0

    def anchor(self, token: Mapping[str, Any] | None) -> None:
        """The stream was opened at ``token`` (or at the time it was taken):
        the first check verifies that nothing after it was pruned."""
        self.point = dict(token) if token else None

    def check(self, stream: ChangeStream[Any]) -> None:
        """After a read of ``stream`` whose result is about to be published:
        raise :class:`HistoryLost` when the point reached before the reads
        since the last check has left the oplog; else take the stream's
        present point as the next one to verify."""
        self.checked_at = time.monotonic()
        if self.point is not None:
            self.checks += 1
            if not resumable(self.db, self.point):
                self.point = None
                raise HistoryLost(self.who)
        token = stream.resume_token
        if token:
            self.point = dict(token)

    def check_idle(self, stream: ChangeStream[Any]) -> None:
        """After a read that brought nothing to publish: :meth:`check`, at
        most every :data:`IDLE_CHECK_SECONDS`, when the stream's point has
        moved since the last check."""
        token = stream.resume_token
        if token and dict(token) != self.point and time.monotonic() - self.checked_at >= IDLE_CHECK_SECONDS:
            self.check(stream)
