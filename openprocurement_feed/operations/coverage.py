"""What the followers have not covered yet, from the data and by the
database's clock: the health view's verdicts need no follower to speak.

A follower may be stuck anywhere: in a thread of the web process, in a
process of its own (``openprocurement-feed sequence``), or nowhere at all,
and a stuck one publishes nothing. So the health view asks the data:

* commit order: the oldest public write the checkpoint does not cover
  (:func:`oldest_uncovered`); once it has waited longer than
  ``feed.checkpoint_threshold_seconds`` the feed is ``at-risk``, whether
  writes go on or not;
* watermark order: the oldest public write stamped after the observer's
  ``seen`` time (:func:`oldest_unseen`; the database's time up to which it
  had read its stream when it was last caught up, see
  :class:`~openprocurement_feed.commit.lag.Publisher`);
* both: a follower's figures that stopped updating (it publishes about
  every second, quiet or not) are a follower that does not follow.

Every age is taken by the database's clock (``$$NOW``), the clock the
documents' stamps and the checkpoint come from.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from bson.timestamp import Timestamp
from pymongo.database import Database

from ..commit.lag import HEALTH_COLLECTION
from ..store.orders import COMMITTED_TS, HISTORY_LOST, PUBLIC_MODIFIED, positions_name
from ..store.positions import read_checkpoint as read_positions_checkpoint

#: The most documents of the checkpoint's own second whose entries are
#: looked up (the writes of that second may or may not be covered).
SECOND_LIMIT = 200


def epoch(moment: datetime) -> float:
    """A database date as seconds since the epoch (naive dates are UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def database_now(db: Database[Any]) -> float:
    """The database's clock, seconds since the epoch (``hello``'s ``localTime``)."""
    local = db.client.admin.command("hello").get("localTime")
    return epoch(local) if isinstance(local, datetime) else datetime.now(timezone.utc).timestamp()


def published_figures(db: Database[Any], collection: str) -> tuple[dict[str, Any], float]:
    """The figures the followers of ``collection`` published (empty when
    none did) and the database's clock, in one round trip when there are
    figures."""
    found = list(db[HEALTH_COLLECTION].aggregate([{"$match": {"_id": collection}}, {"$addFields": {"_now": "$$NOW"}}]))
    if found and isinstance(found[0].get("_now"), datetime):
        figures = found[0]
        return figures, epoch(figures.pop("_now"))
    return {}, database_now(db)


def read_checkpoint(db: Database[Any], collection: str) -> Timestamp | None:
    """The published checkpoint of a commit-ordered collection, if any."""
    return checkpoint_state(db, collection)[0]


def checkpoint_state(db: Database[Any], collection: str) -> tuple[Timestamp | None, float | None, float | None]:
    """The published checkpoint of a commit-ordered collection, if any, when
    it was last published, and since when its follower's stream has skipped
    history not yet recovered (None: it has not; both times by the
    database's clock, seconds)."""
    checkpoint, state = read_positions_checkpoint(db[positions_name(collection)], ("published", HISTORY_LOST))
    published, lost = state.get("published"), state.get(HISTORY_LOST)
    return (
        checkpoint,
        epoch(published) if isinstance(published, datetime) else None,
        epoch(lost) if isinstance(lost, datetime) else None,
    )


def _stamp(doc: Any) -> float | None:
    value = (doc or {}).get(PUBLIC_MODIFIED)
    return float(value) if isinstance(value, (int, float)) else None


def first_stamp_after(db: Database[Any], collection: str, low: float, now: float) -> float | None:
    """The oldest public write's stamp above ``low`` (None: none is).

    Read in windows of stamps that double from one second after ``low``,
    the last one open: a server that examines every match of a sorted range
    before its limit (the embedded one) examines the writes of the first
    window that holds one, not every write since ``low`` (a checkpoint stuck
    for an hour is an hour of writes). A window with none costs an empty
    index range."""
    documents = db[collection]
    start, width = low, 1.0
    while True:
        window: dict[str, float] = {"$gt": start}
        if start + width < now:
            window["$lte"] = start + width
        found = documents.find_one(
            {"is_public": True, PUBLIC_MODIFIED: window}, {PUBLIC_MODIFIED: 1}, sort=[(PUBLIC_MODIFIED, 1)]
        )
        if found is not None or "$lte" not in window:
            return _stamp(found)
        start, width = start + width, width * 2


def oldest_uncovered(
    db: Database[Any], collection: str, checkpoint: Timestamp, now: float, threshold: float
) -> float | None:
    """The stamp of the oldest public write the checkpoint does not cover,
    when one may have waited longer than ``threshold`` (None: none found).

    A write stamped at ``s`` commits at or after ``s``: stamped past the
    checkpoint's second (``s > C.t + 1``), its commit is past the
    checkpoint. A write stamped within that second may be covered or not:
    its document's entry tells (an entry of its version at or below the
    checkpoint), looked up only when those writes are old enough to
    matter. A write stamped before the checkpoint's second and committed
    after it (a transaction held open longer than a second) is not seen
    here; the followers' stale figures show a stuck sequencer anyway.
    """
    documents = db[collection]
    oldest = first_stamp_after(db, collection, checkpoint.time + 1, now)
    if checkpoint.time >= now - threshold:
        return oldest  # the checkpoint's second is too recent to have waited that long
    second = list(
        documents.find(
            {"is_public": True, PUBLIC_MODIFIED: {"$gt": checkpoint.time, "$lte": checkpoint.time + 1}},
            {PUBLIC_MODIFIED: 1},
            sort=[(PUBLIC_MODIFIED, 1)],
            limit=SECOND_LIMIT,
        )
    )
    if not second:
        return oldest
    entries = {
        entry["_id"]: entry
        for entry in db[positions_name(collection)].find(
            {"_id": {"$in": [doc["_id"] for doc in second]}}, {COMMITTED_TS: 1, PUBLIC_MODIFIED: 1}
        )
    }
    for doc in second:
        entry = entries.get(doc["_id"]) or {}
        position = entry.get(COMMITTED_TS)
        stamp, taken = _stamp(doc), _stamp(entry)
        covered = isinstance(position, Timestamp) and position <= checkpoint
        if stamp is not None and not (covered and taken is not None and taken >= stamp):
            return stamp if oldest is None else min(stamp, oldest)
    return oldest


def oldest_unseen(db: Database[Any], collection: str, seen: float, now: float) -> float | None:
    """The stamp of the oldest public write stamped after ``seen`` (the
    time up to which an observer had read its stream), None when none is."""
    return first_stamp_after(db, collection, seen, now)
