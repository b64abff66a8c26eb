"""The sequencer: gives every committed change a position in commit order (SPEC D).

For each collection of a commit-ordered feed, a :class:`CollectionSequencer`
handles the collection's change events, strictly in order and in batches, and
keeps one *entry* per document in the positions collection beside it
(:func:`~.orders.positions_name`); the events of every sequenced collection
of a database come from one change stream of the database
(:class:`~.dbstream.DatabaseStream`)::

    {_id, committed_ts, rev, is_public, is_test, public_modified, <scope fields>,
     <the listing's fields>}

``committed_ts`` is the change event's ``clusterTime``; the listing
(:mod:`.listing`) is every field a feed of the collection may show, copied
from the version the entry was taken from, so that a page is rendered from
the entries alone. Entries move
**forward only**: one bulk write per batch, each a pipeline upsert that
replaces the entry only when the event is newer, so a stale or repeated event
is a no-op and any number of sequencers can run at once. A deleted document's
entry becomes a tombstone (``is_public: false, deleted: true``) at the
delete's position. The sequencer never writes the application's documents.

Each batch's resume token and **checkpoint** are saved in the same ordered
bulk write, after its entries, with ``w: majority``, in the positions
collection's state document (:data:`~.orders.STATE_ID`; ``$max``: never
backwards): one round trip per batch. The
checkpoint promises that every change with ``clusterTime <= checkpoint`` has
its entry: it is the last event's time when the stream is caught up, else
that time's predecessor (a transaction's events can straddle batches).

On its first start a sequencer reads the cluster time, takes ``T0`` just
after it as the point its events are read from, and *backfills* from a
snapshot that holds every change before ``T0``: every public document
without an entry gets a position below ``T0`` in ``(public_modified, _id)``
order. When its resume token has left the oplog it *recovers*: every
document whose ``_rev`` differs from its entry's (or that has none) gets a
fresh position above the old checkpoint, entries of vanished documents
become tombstones, and it goes on from the present. Both are
:meth:`CollectionSequencer.restamp`.

The state document also records the listing the entries carry. A sequencer
that starts with another listing (a feed gained an allowed field)
*re-materializes* the entries in a background thread
(:meth:`CollectionSequencer.rematerialize`): each entry whose revision is
the document's current one gets the new listing, no position moves; the
others are rewritten by their pending event anyway. Until it has finished,
the state's listing names only the fields every entry carries, and pages
fill the rest from the documents.

What a change costs the database is what this module sends per change: one
event of a stream reply and its share of one bulk write (:meth:`read_batch`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pymongo.database import Database

from .collection import CollectionSequencer
from .dbstream import DatabaseStream
from .entries import SequencerStats, forward_only
from .errors import HISTORY_LOST_CODES, SequencerError
from .plan import SequencerPlan
from .stamps import PositionCounter, cluster_time, predecessor, successor

__all__ = [
    "HISTORY_LOST_CODES",
    "CollectionSequencer",
    "PositionCounter",
    "Sequencer",
    "SequencerError",
    "SequencerStats",
    "cluster_time",
    "forward_only",
    "predecessor",
    "successor",
]

log = logging.getLogger("openprocurement_feed.sequencer")  # its name from before the package had subpackages


class Sequencer:
    """The sequencers of several collections of one database: one thread
    reads the database's change stream for the sequenced ones
    (:class:`~.dbstream.DatabaseStream`), one thread per observed one.

    :param collections: feed collection → the scope fields its feeds filter on.
    :param observed: collections of watermark feeds to follow observe-only
        (their lag taken, no positions written).
    :param listings: feed collection → the fields its feeds may show,
        carried by its entries.
    :param aggregates: feed collection → the scope fields of its feeds:
        the collections whose reconciliation aggregates its followers keep
        (:mod:`.aggregates`).

    :meth:`from_plan` takes the four from the feeds' :class:`~.plan.SequencerPlan`.
    """

    @classmethod
    def from_plan(cls, db: Database[Any], plan: SequencerPlan, **options: Any) -> Sequencer:
        """The sequencer of ``plan`` on ``db`` (``options``: the followers')."""
        return cls(
            db, plan.collections, observed=plan.observed, listings=plan.listings, aggregates=plan.aggregates, **options
        )

    def __init__(
        self,
        db: Database[Any],
        collections: Mapping[str, Iterable[str]],
        observed: Iterable[str] = (),
        listings: Mapping[str, Iterable[str]] | None = None,
        aggregates: Mapping[str, Iterable[str]] | None = None,
        **options: Any,
    ) -> None:
        listings = listings or {}
        aggregates = aggregates or {}
        self.followers = [
            CollectionSequencer(
                db.get_collection(name),
                scope_fields,
                listing=listings.get(name, ()),
                aggregate_scopes=aggregates.get(name),
                **options,
            )
            for name, scope_fields in collections.items()
        ] + [
            CollectionSequencer(db.get_collection(name), observe=True, aggregate_scopes=aggregates.get(name), **options)
            for name in observed
            if name not in collections
        ]
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def _run(self, follower: CollectionSequencer | DatabaseStream) -> None:
        try:
            follower.run(self.stopping)
        except BaseException as error:  # reported by the owner (errors, logs)
            self.errors.append(error)
            name = follower.name if not isinstance(follower, CollectionSequencer) else repr(follower.name)
            log.error("Sequencer of %s stopped: %s", name, error)

    def start(self) -> Sequencer:
        """Start one daemon thread for the sequenced collections (one
        change stream of their database) and one per observed collection."""
        sequenced = [follower for follower in self.followers if not follower.observe]
        runners: list[CollectionSequencer | DatabaseStream] = [DatabaseStream(sequenced)] if sequenced else []
        runners += [follower for follower in self.followers if follower.observe]
        for runner in runners:
            label = "stream" if isinstance(runner, DatabaseStream) else runner.name
            thread = threading.Thread(target=self._run, args=(runner,), name=f"sequencer-{label}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current batches (their token and checkpoint saved) and end."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout)

    @property
    def alive(self) -> bool:
        """True while every follower thread runs."""
        return bool(self.threads) and all(thread.is_alive() for thread in self.threads)

    def wait_ready(self, timeout: float = 30.0, poll: Callable[[float], Any] = time.sleep) -> bool:
        """Wait until every sequenced collection has a checkpoint; False on time-out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(follower.stats.checkpoint is not None for follower in self.followers if not follower.observe):
                return True
            if self.errors:
                return False
            poll(0.02)
        return False
