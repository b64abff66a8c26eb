"""A collection's sequencer: reads its events in batches and writes their
entries and checkpoint (the batch loop); an observer only measures the lag."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from pymongo.change_stream import ChangeStream, CollectionChangeStream
from pymongo.collection import Collection
from pymongo.errors import OperationFailure, PyMongoError

from .aggregates import AggregateKeeper
from .dbstream import DatabaseStream
from .errors import HISTORY_LOST_CODES, REFUSED_POINT_CODES, SequencerError
from .history import HistoryGuard, HistoryLost, skip_read_seconds
from .lag import event_lag
from .recovery import CollectionRecovery
from .stamps import predecessor

log = logging.getLogger("openprocurement_feed.sequencer")  # the sequencer's logger, whichever module logs

#: Events that end a collection's stream.
INVALIDATING = frozenset({"drop", "rename", "dropDatabase", "invalidate"})


class CollectionSequencer(CollectionRecovery):
    """Follows one collection's change stream and keeps its positions.

    Its parameters are :class:`~.entries.CollectionEntries`' (the
    collection, its scope and listing fields, the batch and pacing options)
    and ``aggregate_scopes``: with them, it keeps the collection's
    reconciliation aggregates (:mod:`.aggregates`) by those scope fields.
    """

    def __init__(
        self, collection: Collection[Any], *args: Any, aggregate_scopes: Iterable[str] | None = None, **options: Any
    ) -> None:
        super().__init__(collection, *args, **options)
        #: the keeper of the collection's reconciliation aggregates (None: off)
        self.aggregates: AggregateKeeper | None = (
            AggregateKeeper(self.collection, aggregate_scopes) if aggregate_scopes is not None else None
        )

    @functools.cached_property
    def guard(self) -> HistoryGuard:
        """Tells when an observer's stream skipped history (:mod:`.history`)."""
        return HistoryGuard(self.db, f"Observer of {self.name!r}")

    # -- the stream ---------------------------------------------------------

    def stream_pipeline(self) -> list[dict[str, Any]]:
        """Keep of each event only what an entry needs: the server encodes
        and ships a few fields instead of whole documents, which the
        sequencer would otherwise decode whole (tenders are tens of KB; the
        server runs the stage in its own code)."""
        fields = self.document_fields()
        if self.aggregates is not None:
            fields += self.aggregates.fields
        keep = {f"fullDocument.{name}": 1 for name in ("_id", *fields)}
        keep.update({name: 1 for name in ("operationType", "documentKey", "clusterTime", "wallTime", "ns")})
        return [{"$project": keep}]

    def _watch(self, **options: Any) -> CollectionChangeStream[Any]:
        return self.collection.watch(
            self.stream_pipeline(),
            full_document="updateLookup",
            max_await_time_ms=self.max_await_ms,
            batch_size=self.batch_size,
            **options,
        )

    def open(self) -> CollectionChangeStream[Any]:
        """An observer's stream: after the last batch it took when it
        reopens after an error (what committed meanwhile is taken too), from
        the present (:meth:`_start`) on its first start or when no point
        could resume (the stretch it could not measure is recorded in its
        stats and published). A sequencer of positions reads its database's
        stream: :class:`~.dbstream.DatabaseStream`.

        The points it resumes from, in turn (:meth:`resume_points`): the
        stream's token after the last batch, the last event's own token,
        the time of its start when it has taken no event since. A
        server may refuse the first (the embedded server names a command of
        the database there, another collection created or indexed, and
        refuses it, code 13); a point whose history has left the oplog ends
        the search."""
        if not self.observe:
            raise SequencerError(f"collection {self.name!r}: a sequencer of positions reads its database's stream")
        if self.observed_token is None and self.observed_since is None:
            return self._start()
        refused: OperationFailure | None = None
        for point in self.resume_points():
            try:
                stream = self._watch(**point)
                self.guard.anchor(point.get("resume_after"))
                return stream
            except OperationFailure as error:
                if error.code in HISTORY_LOST_CODES:
                    refused = error
                    break
                if error.code not in REFUSED_POINT_CODES:
                    raise
                refused = error
                log.warning("Observer of %r: its resume point was refused (%s); trying the next", self.name, error)
        if refused is not None:
            why = "has left the oplog" if refused.code in HISTORY_LOST_CODES else "was refused"
            log.warning(
                "Observer of %r: its resume point %s (%s); the lag of the writes committed since its last read is lost",
                self.name,
                why,
                (refused.details or {}).get("codeName"),
            )
        self.stats.history_lost()
        return self._start()

    def _start(self) -> CollectionChangeStream[Any]:
        """An observer's stream from the present: from the database's time
        now (one ``ping``), kept as the point to resume from until it
        measures an event."""
        self.observed_token = self.event_token = None
        self.observed_since = self.collection.database.command("ping").get("operationTime")
        self.guard.anchor(None)
        if self.observed_since is None:  # a server without operation times
            return self._watch()
        return self._watch(start_at_operation_time=self.observed_since)

    def resume_points(self) -> list[dict[str, Any]]:
        """The options of :meth:`_watch` an observer resumes with, in turn."""
        points: list[dict[str, Any]] = []
        if self.observed_token is not None:
            points.append({"resume_after": self.observed_token})
        if self.event_token is not None and self.event_token != self.observed_token:
            points.append({"resume_after": self.event_token})
        if self.event_token is None and self.observed_since is not None:
            points.append({"start_at_operation_time": self.observed_since})
        return points

    def read_batch(self, stream: ChangeStream[Any]) -> tuple[list[dict[str, Any]], bool]:
        """The events of one batch, and whether the stream was caught up at
        its end (a read came back empty and left the stream's point where it
        was: every event committed by then is in the batch; an empty read
        that moved the point is read on from, within ``batch_seconds``).

        A batch is what one reply of the server brings: the reads go on
        while the driver hands out events of the same reply, and the batch
        ends where the stream's resume token moves past the last event (the
        server's post-batch token: its reply ended there), at ``batch_size``
        events or after ``batch_seconds``. Such a batch is not known to be
        caught up (a transaction's events may go on in the next reply), so
        its checkpoint stops short of its last event's time (:meth:`handle`).
        Paced by :meth:`_pace`, a batch costs two short reads (the events
        the server holds, then one that finds nothing) and one bulk write,
        however many events it holds.
        """
        if self.skip_seconds is None:
            self.skip_seconds = skip_read_seconds(self.db, self.batch_seconds)
        events: list[dict[str, Any]] = []
        began = time.monotonic()
        deadline = began + self.batch_seconds
        while len(events) < self.batch_size:
            before = stream.resume_token
            event = stream.try_next()
            if event is None:
                # A read that found nothing yet moved the stream's point went
                # through entries of collections this stream does not follow,
                # not necessarily to the oplog's end: the embedded server
                # examines a few hundred entries a read (the follower's own
                # writes among them), so "caught up" there would leave the
                # stream ever further behind, until its point left the oplog.
                if stream.resume_token == before:
                    return events, True
                if time.monotonic() >= (deadline if events else began + self.skip_seconds):
                    return events, False
                continue
            events.append(event)
            if stream.resume_token != event["_id"] or time.monotonic() >= deadline:
                break
        return events, False

    def handle(self, stream: ChangeStream[Any], events: list[dict[str, Any]], caught_up: bool) -> None:
        """Handle a batch (:meth:`handle_batch`), then keep the
        reconciliation aggregates with it (:mod:`.aggregates`, when on)."""
        self.handle_batch(stream, events, caught_up)
        if self.aggregates is not None:
            self.aggregates.handle(events, caught_up, self.stats.restarts)

    def handle_batch(self, stream: ChangeStream[Any], events: list[dict[str, Any]], caught_up: bool) -> None:
        """Write a batch's entries, then its token and checkpoint. An empty
        read after a batch published mid-stream publishes its last event's
        time (the stream is caught up there)."""
        self.measure(events)
        self.stats.following()
        if self.observe:
            self.stats.events += len(events)
            # taken through here: a stream reopened after an error resumes after it
            self.observed_token = stream.resume_token or self.observed_token
            if events:
                self.event_token = events[-1]["_id"]
            self.heartbeat(caught_up)
            return
        if not events:
            pending = self.pending
            if caught_up and pending is not None:
                self.pending = None
                self.publish(None, None, pending[0])
                self._record_delays(pending[1])
            self.heartbeat(caught_up)
            return
        for event in events:
            if event.get("operationType") in INVALIDATING:
                raise SequencerError(
                    f"collection {self.name!r}: its change stream ended "
                    f"({event['operationType']} event: dropped or renamed)"
                )
        last = events[-1]["clusterTime"]
        checkpoint = last if caught_up else predecessor(last)
        # The last handled event's own token, not the stream's post-batch
        # token: a restart resumes exactly after what was written.
        state = self.state_update(events[-1]["_id"], last, checkpoint)
        stamped = self.write(self.entries_of(events), state)
        self.published(checkpoint)
        stats = self.stats
        stats.batches += 1
        stats.events += len(events)
        stats.stamped += stamped
        covered = [event for event in events if event["clusterTime"] <= checkpoint]
        self._record_delays(covered)
        self.pending = None if caught_up else (last, events[len(covered) :])
        self.heartbeat(caught_up)

    def heartbeat(self, caught_up: bool) -> None:
        """Publish the figures (at most once a second, after every read:
        :class:`~.lag.Publisher`), with the checkpoint, the restarts and the
        last error, and a stretch of the stream an observer could not measure."""
        stats = self.stats
        extra: dict[str, Any] = {"restarts": stats.restarts, "last_error": stats.last_error}
        if not self.observe:
            extra["checkpoint"] = stats.checkpoint
        if stats.unmeasured is not None:
            extra["unmeasured"] = {
                "from": datetime.fromtimestamp(stats.unmeasured[0], timezone.utc),
                "until": datetime.fromtimestamp(stats.unmeasured[1], timezone.utc),
            }
        read_at = stats.read_returned if caught_up else None
        self.publisher.maybe_publish(self.window, extra, caught_up_at=read_at)

    def measure(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Record each write's start-to-commit lag (the watermark's bet)."""
        for event in events:
            lag = event_lag(event)
            if lag is None:
                continue
            self.window.add(lag)
            if self.metrics is not None:
                self.metrics.observe_lag(self.name, lag)

    def _record_delays(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Commit-to-checkpoint delays of events a checkpoint now covers."""
        now = time.time()
        for event in events:
            wall = event.get("wallTime")
            if isinstance(wall, datetime):
                if wall.tzinfo is None:
                    wall = wall.replace(tzinfo=timezone.utc)
                self.stats.delays_ms.append(max(0.0, (now - wall.timestamp()) * 1000.0))

    def run(self, stopping: threading.Event, retry_seconds: float = 1.0) -> None:
        """Follow the stream until ``stopping`` is set; transient database
        errors are logged and retried from the saved state."""
        if not self.observe:
            DatabaseStream([self]).run(stopping, retry_seconds)
            return
        self.stopping = stopping
        self._follow(stopping, retry_seconds)

    def join_rematerializer(self, timeout: float = 10.0) -> None:
        """Wait for a running re-materialization to end (it stops with
        :attr:`stopping`)."""
        if self.rematerializer is not None:
            self.rematerializer.join(timeout)

    def _pace(self, events: int, empty: int, began: float, stopping: threading.Event) -> None:
        """Wait before the next batch: until ``read_interval`` after this
        one's start when it had events; after ``empty`` reads in a row that
        found nothing, ``empty`` times that, at most ``idle_seconds``.

        A read of a stream waits only ``max_await_ms`` (a millisecond) on
        the server, so a batch is what the server holds when it is read
        plus one read that finds nothing (caught up: the checkpoint covers
        the last event at once). Awaited reads cost more than they save: a
        server may wake every waiting stream on each write to the database
        (the embedded server does, its own positions writes included), so
        an awaited stream is read again on about every write and each batch
        ends with a read woken by its own bulk write. A batch has a cost of
        its own whatever it holds (two reads, the state's statement, the
        bulk write's command, the state's oplog entry that every stream of
        the database decodes): ``read_interval`` trades fewer batches under
        load for a little more delay. A quiet stream backs off to
        ``idle_seconds``.
        """
        if events:
            wait = self.read_interval - (time.monotonic() - began)
        else:
            step = max(self.max_await_ms / 1000.0, self.read_interval)
            wait = min(self.idle_seconds, empty * step) - (time.monotonic() - began)
        if wait > 0:
            stopping.wait(wait)

    def _follow(self, stopping: threading.Event, retry_seconds: float) -> None:
        while not stopping.is_set():
            try:
                stream = self.open()
                with stream:  # (the stubs type ``__enter__`` as the base ChangeStream)
                    empty = 0
                    while not stopping.is_set():
                        began = time.monotonic()
                        self.stats.reading()
                        events, caught_up = self.read_batch(stream)
                        self.stats.read()
                        if events:
                            self.guard.check(stream)  # before what this read covers is published
                        else:
                            self.guard.check_idle(stream)
                        self.handle(stream, events, caught_up)
                        empty = 0 if events or not caught_up else empty + 1
                        self._pace(len(events), empty, began, stopping)
            except SequencerError:
                raise
            except HistoryLost as error:
                # what committed since its last check is not seen: resume
                # from the present (the stretch is recorded and published)
                log.warning("Observer of %r: %s", self.name, error)
                self.stats.failed(error)
                self.stats.history_lost()
                self.observed_token = self.event_token = self.observed_since = None
            except PyMongoError as error:
                self.stats.failed(error)
                log.warning(
                    "Sequencer of %r: %s: %s; retrying in %g s", self.name, type(error).__name__, error, retry_seconds
                )
                stopping.wait(retry_seconds)
