"""Is the feed's promise kept? Live figures, a verdict per feed, the health view.

The change-stream follower (:mod:`.sequencer`, as a sequencer or observe-only)
measures every write's start-to-commit lag (the event's ``wallTime`` minus
the document's ``public_modified``: the very quantity the watermark bets on)
in a :class:`LagWindow` and publishes a summary about once a second in the
shared ``feed_health`` collection, one document per followed collection.
The health view reads those documents (and, for commit-ordered feeds, the
checkpoint), so every web worker answers the same.

Verdicts (:func:`feed_health`), every age by the database's clock:

* watermark order: ``violated`` when the window's max lag is ``>= W``,
  ``at-risk`` above ``W / 2``, else ``ok``; ``unknown`` without a running
  watcher (its figures older than :data:`STALE_AFTER`), when a public write
  has waited longer than ``feed.checkpoint_threshold_seconds`` for the
  observer to see it, or when the observer could not resume its stream
  (:mod:`.coverage`);
* commit order: ``at-risk`` when a public write has waited longer than
  ``feed.checkpoint_threshold_seconds`` for the checkpoint to cover it,
  with or without later writes, while the sequencer's stream has skipped
  history it has not recovered yet (whatever the missed documents'
  stamps), or when no sequencer has published its figures for
  :data:`STALE_AFTER` (wherever it runs: a stuck or stopped one publishes
  nothing), else ``ok``; ``unknown`` before the first checkpoint.

While the in-process follower (``feed.sequencer = thread`` or ``observe``)
cannot read its change stream or write its positions (an election, a
dropped connection, a lost stream history: it retries), or while a read of
its stream has not returned for :data:`STUCK_READ_SECONDS` (the driver
retrying by itself), the view says so (``watcher.failing``) and the verdict
is at least ``at-risk`` in commit order (the checkpoint stands still) and
``unknown`` in watermark order (the lag is not taken), whatever the
figures published before the fault say.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pymongo.database import Database
from pyramid.request import Request

from ..commit.lag import HEALTH_COLLECTION, LagWindow, event_lag
from ..commit.lag import Publisher as Publisher
from ..commit.plan import feed_plan
from ..store.orders import order_kind
from ..store.state import feed_state
from .coverage import (
    checkpoint_state,
    database_now,
    epoch,
    oldest_uncovered,
    oldest_unseen,
    published_figures,
    read_checkpoint,
)
from .figures import VERDICTS, FeedFigures

log = logging.getLogger("openprocurement_feed.health")  # its name from before the package had subpackages

#: A watcher whose figures are older than this is taken for stopped (s).
STALE_AFTER = 10.0
#: An in-process follower whose read of its change stream has not returned
#: for this long counts as failing (s). A read asks the server for what it
#: holds and waits 1 ms (:mod:`..commit.dbstream`): it takes milliseconds,
#: tens under load. One that hangs is the driver retrying by itself (a
#: resumable error resumed, a server marked unknown after an election's
#: error waited for in server selection, up to its time-out).
STUCK_READ_SECONDS = 2.0
HOW_TO_WATCH = (
    "No watcher runs: start 'openprocurement-feed sequence --observe CONFIG.ini' "
    "(or 'sequence CONFIG.ini' for commit-ordered feeds), or set "
    "feed.sequencer = thread (or observe) in a single-process app."
)


def _worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=VERDICTS.index, default="unknown")


def _age(moment: Any, now: float) -> float | None:
    if not isinstance(moment, datetime):
        return None
    return round(max(0.0, now - epoch(moment)), 1)


def feed_health(
    db: Database[Any], feed: Any, watermark_seconds: float, threshold: float, now: datetime | None = None
) -> dict[str, Any]:
    """The health of one feed (a :class:`~.views.FeedDefinition`), its ages
    by the database's clock (``now`` replaces it)."""
    published, clock = published_figures(db, feed.collection)
    if now is not None:
        clock = now.timestamp()
    age = _age(published.get("updated"), clock)
    running = age is not None and age <= STALE_AFTER
    lag = published.get("lag_ms") if running else None
    lag = lag or {"p50": None, "p99": None, "max": None, "count": 0, "window_seconds": None}
    watcher: dict[str, Any] = {
        "running": running,
        "updated": updated.isoformat() if isinstance(updated := published.get("updated"), datetime) else None,
        "age_seconds": age,
    }
    if published.get("restarts"):
        watcher["restarts"] = published["restarts"]
        watcher["last_error"] = published.get("last_error") or None
    body: dict[str, Any] = {
        "name": feed.name,
        "collection": feed.collection,
        "order": feed.order,
        "watermark_seconds": watermark_seconds,
        "watcher": watcher,
        "checkpoint": None,
        "lag_ms": lag,
    }
    if order_kind(feed.order).sequenced:
        body["verdict"], body["reason"] = _commit_verdict(db, feed, threshold, body, clock)
    else:
        verdicts = [_watermark_verdict(watermark_seconds, running, lag)]
        if running:
            verdicts += _observer_verdicts(db, feed, threshold, body, published, clock)
        body["verdict"], body["reason"] = max(verdicts, key=lambda item: VERDICTS.index(item[0]))
    return body


def follower_failure(registry: Any, collection: str) -> dict[str, Any] | None:
    """How long the in-process follower of ``collection`` has been kept
    from following by database errors, and the last one (or by a read of
    its stream that has not returned for :data:`STUCK_READ_SECONDS`); None
    while it follows (or where it runs in another process)."""
    sequencer = feed_state(registry).sequencer
    now = time.time()
    for follower in getattr(sequencer, "followers", ()):
        failure = follower.stats.failure(STUCK_READ_SECONDS, now) if follower.name == collection else None
        if failure is not None:
            since, error = failure
            return {"seconds": round(max(0.0, now - since), 1), "error": error}
    return None


def with_follower_failure(registry: Any, feed: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (:func:`feed_health`) with the in-process follower's
    failure, if any: ``watcher.failing`` and a verdict at least
    ``at-risk`` (commit order) or ``unknown`` (watermark order)."""
    failure = follower_failure(registry, feed.collection)
    if failure is None:
        return body
    body["watcher"]["failing"] = failure
    # a sequenced feed's pages stop at the checkpoint; a watermark feed's
    # only lose the measure of the lag its bound bets on
    sequenced = order_kind(feed.order).sequenced
    floor = "at-risk" if sequenced else "unknown"
    if VERDICTS.index(body["verdict"]) < VERDICTS.index(floor):
        what = "the checkpoint does not move" if sequenced else "the lag is unknown"
        body["verdict"] = floor
        body["reason"] = (
            f"the in-process follower has failed for {failure['seconds']:g} s ({failure['error']}); it retries, {what}"
        )
    return body


def _watermark_verdict(watermark: float, running: bool, lag: Mapping[str, Any]) -> tuple[str, str]:
    if not running:
        return "unknown", HOW_TO_WATCH
    if not lag.get("count"):
        return "ok", "no write in the window"
    worst_ms = float(lag["max"])
    w_ms = watermark * 1000
    if worst_ms >= w_ms:
        return "violated", (
            f"max start-to-commit lag {worst_ms:.0f} ms >= W ({w_ms:.0f} ms): "
            "a write may have been skipped by crawlers; raise W"
        )
    if worst_ms > w_ms / 2:
        return "at-risk", f"max start-to-commit lag {worst_ms:.0f} ms > W/2 ({w_ms / 2:.0f} ms)"
    return "ok", f"max start-to-commit lag {worst_ms:.0f} ms is below half of W ({w_ms / 2:.0f} ms)"


def _stale_reason(what: str, age: float | None) -> str:
    since = f"for {age:g} s" if age is not None else "ever"
    return f"no {what} has published its figures {since} (it does about every second while it follows)"


def _commit_verdict(
    db: Database[Any], feed: Any, threshold: float, body: dict[str, Any], now: float
) -> tuple[str, str]:
    checkpoint, published, lost = checkpoint_state(db, feed.collection)
    if checkpoint is None:
        return "unknown", "no checkpoint yet: " + HOW_TO_WATCH
    oldest = oldest_uncovered(db, feed.collection, checkpoint, now, threshold)
    waited = max(0.0, now - oldest) if oldest is not None else 0.0
    body["checkpoint"] = {
        "position": f"{checkpoint.time}.{checkpoint.inc:010d}",
        "age_seconds": round(max(0.0, now - checkpoint.time), 1),
        "uncovered_seconds": round(waited, 1),
    }
    if lost is not None:
        body["checkpoint"]["history_lost_seconds"] = round(max(0.0, now - lost), 1)
        return "at-risk", (
            f"the sequencer's change stream skipped changes pruned from the oplog {max(0.0, now - lost):.1f} s ago "
            "(it fell behind the oplog's bound): until its recovery has re-stamped every changed document, "
            "crawlers may miss some"
        )
    if waited > threshold:
        return "at-risk", (
            f"a public write has waited {waited:.1f} s for the checkpoint (threshold {threshold:g} s): "
            "crawlers do not see it; is the sequencer running?"
        )
    watcher = body["watcher"]
    # a checkpoint just published is a sign of life too (a first start
    # publishes it before its first figures)
    alive = published is not None and now - published <= STALE_AFTER
    if not watcher["running"] and not alive:
        return "at-risk", (
            _stale_reason("sequencer", watcher["age_seconds"])
            + ": a write now would not reach the feed; is the sequencer running?"
        )
    return "ok", "the sequencer keeps up"


def _observer_verdicts(
    db: Database[Any], feed: Any, threshold: float, body: dict[str, Any], published: Mapping[str, Any], now: float
) -> list[tuple[str, str]]:
    """A running observer's ``unknown`` verdicts from the data: a write it
    has not seen for longer than ``threshold``, or a stretch of its stream
    it could not measure (its resume point had left the oplog) still in
    its lag window."""
    verdicts = []
    watcher = body["watcher"]
    seen = published.get("seen")
    if isinstance(seen, datetime):
        oldest = oldest_unseen(db, feed.collection, epoch(seen), now)
        waited = max(0.0, now - oldest) if oldest is not None else 0.0
        watcher["unseen_seconds"] = round(waited, 1)
        if waited > threshold:
            verdicts.append(
                (
                    "unknown",
                    f"a public write has waited {waited:.1f} s for the observer (threshold {threshold:g} s): "
                    "the lag is unknown; is the observer running?",
                )
            )
    gap = published.get("unmeasured") or {}
    began, ended = gap.get("from"), gap.get("until")
    window = float((published.get("lag_ms") or {}).get("window_seconds") or 0.0)
    if isinstance(began, datetime) and isinstance(ended, datetime) and epoch(ended) + window > now:
        watcher["unmeasured"] = {"from": began.isoformat(), "until": ended.isoformat()}
        verdicts.append(
            (
                "unknown",
                "the observer could not resume its stream after an error (its resume point had left the oplog): "
                f"the writes committed from {began.isoformat()} to {ended.isoformat()} have no lag figure",
            )
        )
    return verdicts


class VerdictLog:
    """Logs verdict transitions once each (warning at at-risk, error at violated)."""

    def __init__(self) -> None:
        self.last: dict[str, str] = {}
        self.lock = threading.Lock()

    def note(self, name: str, verdict: str, reason: str) -> None:
        with self.lock:
            before = self.last.get(name)
            self.last[name] = verdict
        if before == verdict:
            return
        if verdict == "violated":
            log.error("Feed %r: promise violated: %s", name, reason)
        elif verdict == "at-risk":
            log.warning("Feed %r: at risk: %s", name, reason)
        elif before in ("at-risk", "violated"):
            log.info("Feed %r: %s again: %s", name, verdict, reason)


def checkpoint_ages(registry: Any) -> dict[str, float]:
    """Metrics scrape hook: each commit-ordered collection's checkpoint age (s)."""
    db = feed_state(registry).require_store().db
    ages: dict[str, float] = {}
    names = list(feed_plan(feed_state(registry)).collections)
    now = database_now(db) if names else 0.0
    for name in names:
        checkpoint = read_checkpoint(db, name)
        if checkpoint is not None:
            ages[name] = max(0.0, now - checkpoint.time)
    return ages


def lag_windows(registry: Any) -> dict[str, dict[str, float]]:
    """Metrics scrape hook: each followed collection's lag window (s)."""
    db = feed_state(registry).require_store().db
    windows = {}
    for document in db[HEALTH_COLLECTION].find({"_id": {"$in": list(feed_plan(feed_state(registry)).followed)}}):
        lag = document.get("lag_ms") or {}
        if lag.get("count"):
            windows[document["_id"]] = {key: lag[key] / 1000.0 for key in ("p50", "p99", "max")}
    return windows


def feed_figures(registry: Any) -> list[Any]:
    """Metrics scrape hook: each feed's verdict, watcher age and checkpoint
    distance (:class:`~.figures.FeedFigures`), as the health view sees them
    (without logging the verdicts' transitions)."""
    state = feed_state(registry)
    settings = state.settings
    db = state.require_store().db
    figures = []
    for feed in state.definitions.values():
        body = feed_health(db, feed, settings.watermark_seconds, settings.checkpoint_threshold_seconds)
        body = with_follower_failure(registry, feed, body)
        checkpoint = body["checkpoint"] or {}
        figures.append(
            FeedFigures(
                feed=feed.name,
                collection=feed.collection,
                verdict=body["verdict"],
                watcher_age=body["watcher"]["age_seconds"],
                checkpoint_behind=checkpoint.get("uncovered_seconds"),
            )
        )
    return figures


def health_report(registry: Any) -> dict[str, Any]:
    """The health body of every feed of ``registry``."""
    state = feed_state(registry)
    settings = state.settings
    store = state.require_store()
    feeds = []
    for feed in state.definitions.values():
        item = feed_health(store.db, feed, settings.watermark_seconds, settings.checkpoint_threshold_seconds)
        item = with_follower_failure(registry, feed, item)
        item["path"] = feed.route_path or f"{settings.route_prefix}/{feed.path}"
        notifier = state.longpoll
        if notifier is not None:
            # this process's waiters (feed=longpoll, SPEC E)
            item["longpoll"] = {**notifier.counters(feed.name).as_dict(), "max_waiters": notifier.max_waiters}
        state.verdicts.note(feed.name, item["verdict"], item["reason"])
        feeds.append(item)
    status = _worst(item["verdict"] for item in feeds)
    body: dict[str, Any] = {"status": status, "feeds": feeds}
    if any(not item["watcher"]["running"] for item in feeds):
        body["hint"] = HOW_TO_WATCH
    return body


def health_view(request: Request) -> dict[str, Any]:
    """``GET feed.health_path``: 200 unless a promise is violated (503)."""
    body = health_report(request.registry)
    if body["status"] == "violated":
        request.response.status = 503
    request.response.headers["Cache-Control"] = "no-store"
    return body


def verdict_line(report: Mapping[str, Any]) -> str:
    """A short status for terminals: each feed's verdict and lag."""
    parts = []
    for item in report.get("feeds", ()):
        lag = item["lag_ms"]
        text = f"{item['name']} {item['verdict']}"
        if lag.get("count"):
            text += f" (lag p50 {lag['p50']:.0f} / p99 {lag['p99']:.0f} / max {lag['max']:.0f} ms)"
        parts.append(text)
    return ", ".join(parts)


__all__ = ["LagWindow", "event_lag", "feed_health", "health_report", "health_view", "verdict_line"]
