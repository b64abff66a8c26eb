"""Is the feed's promise kept? Live figures, a verdict per feed, the health view.

The change-stream follower (:mod:`.sequencer`, as a sequencer or observe-only)
measures every write's start-to-commit lag (the event's ``wallTime`` minus
the document's ``public_modified``: the very quantity the watermark bets on)
in a :class:`LagWindow` and publishes a summary about once a second in the
shared ``feed_health`` collection, one document per followed collection.
The health view reads those documents (and, for commit-ordered feeds, the
checkpoint), so every web worker answers the same.

Verdicts (:func:`feed_health`):

* watermark order: ``violated`` when the window's max lag is ``>= W``,
  ``at-risk`` above ``W / 2``, else ``ok``; ``unknown`` without a watcher;
* commit order: ``at-risk`` when the newest write is more than
  ``feed.checkpoint_threshold_seconds`` past the checkpoint (the sequencer
  is not keeping up), else ``ok``; ``unknown`` before the first checkpoint.

While the in-process follower (``feed.sequencer = thread`` or ``observe``)
cannot read its change stream or write its positions (an election, a
dropped connection, a lost stream history: it retries), or while a read of
its stream has not returned for :data:`STUCK_READ_SECONDS` (the driver
retrying by itself), the view says so (``watcher.failing``) and the verdict
is at least ``at-risk`` in commit order (the checkpoint stands still) and
``unknown`` in watermark order (the lag is not measured), whatever the
figures published before the fault say.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from bson.timestamp import Timestamp
from pymongo.database import Database
from pyramid.request import Request

from ..commit.lag import HEALTH_COLLECTION, LagWindow, event_lag
from ..commit.lag import Publisher as Publisher
from ..store.orders import COMMIT, PUBLIC_MODIFIED, STATE_ID, positions_name
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


def _age(moment: Any, now: datetime) -> float | None:
    if not isinstance(moment, datetime):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    seconds: float = (now - moment).total_seconds()
    return round(max(0.0, seconds), 1)


def feed_health(
    db: Database[Any], feed: Any, watermark_seconds: float, threshold: float, now: datetime | None = None
) -> dict[str, Any]:
    """The health of one feed (a :class:`~.views.FeedDefinition`)."""
    now = now or datetime.now(timezone.utc)
    published = db[HEALTH_COLLECTION].find_one({"_id": feed.collection}) or {}
    age = _age(published.get("updated"), now)
    running = age is not None and age <= STALE_AFTER
    lag = published.get("lag_ms") if running else None
    lag = lag or {"p50": None, "p99": None, "max": None, "count": 0, "window_seconds": None}
    body: dict[str, Any] = {
        "name": feed.name,
        "collection": feed.collection,
        "order": feed.order,
        "watermark_seconds": watermark_seconds,
        "watcher": {
            "running": running,
            "updated": updated.isoformat() if isinstance(updated := published.get("updated"), datetime) else None,
            "age_seconds": age,
        },
        "checkpoint": None,
        "lag_ms": lag,
    }
    if feed.order == COMMIT:
        body["verdict"], body["reason"] = _commit_verdict(db, feed, threshold, body)
    else:
        body["verdict"], body["reason"] = _watermark_verdict(watermark_seconds, running, lag)
    return body


def follower_failure(registry: Any, collection: str) -> dict[str, Any] | None:
    """How long the in-process follower of ``collection`` has been kept
    from following by database errors, and the last one (or by a read of
    its stream that has not returned for :data:`STUCK_READ_SECONDS`); None
    while it follows (or where it runs in another process)."""
    sequencer = getattr(registry, "feed_sequencer", None)
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
    floor = "at-risk" if feed.order == COMMIT else "unknown"
    if VERDICTS.index(body["verdict"]) < VERDICTS.index(floor):
        what = "the checkpoint does not move" if feed.order == COMMIT else "the lag is not measured"
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


def _commit_verdict(db: Database[Any], feed: Any, threshold: float, body: dict[str, Any]) -> tuple[str, str]:
    state = db[positions_name(feed.collection)].find_one({"_id": STATE_ID}, {"checkpoint": 1}) or {}
    checkpoint = state.get("checkpoint")
    if not isinstance(checkpoint, Timestamp):
        return "unknown", "no checkpoint yet: " + HOW_TO_WATCH
    # Only the stamps past the checkpoint's second: a range of the feed
    # index, a handful of rows while a sequencer keeps up, where the newest
    # stamp of the whole collection was a sort of all its documents on the
    # embedded server (it sorts in memory, then applies the limit), once
    # per feed per scrape per worker.
    newest = (
        db[feed.collection].find_one(
            {"is_public": True, PUBLIC_MODIFIED: {"$gt": checkpoint.time + 1}},
            {PUBLIC_MODIFIED: 1},
            sort=[(PUBLIC_MODIFIED, -1)],
        )
        or {}
    )
    body["checkpoint"] = {
        "position": f"{checkpoint.time}.{checkpoint.inc:010d}",
        "age_seconds": round(max(0.0, time.time() - checkpoint.time), 1),
    }
    stamp = newest.get(PUBLIC_MODIFIED)
    behind = float(stamp) - (checkpoint.time + 1) if isinstance(stamp, (int, float)) else 0.0
    body["checkpoint"]["behind_newest_write_seconds"] = round(max(0.0, behind), 1)
    if behind > threshold:
        return "at-risk", (
            f"the checkpoint is {behind:.0f} s behind the newest write "
            f"(threshold {threshold:g} s): is the sequencer running?"
        )
    return "ok", "the sequencer keeps up"


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


def _feed_collections(registry: Any, commit_only: bool = False) -> list[str]:
    feeds = getattr(registry, "feed_definitions", {}).values()
    return list(dict.fromkeys(feed.collection for feed in feeds if not commit_only or feed.order == COMMIT))


def checkpoint_ages(registry: Any) -> dict[str, float]:
    """Metrics scrape hook: each commit-ordered collection's checkpoint age (s)."""
    db = registry.feed_store.db
    ages = {}
    for name in _feed_collections(registry, commit_only=True):
        state = db[positions_name(name)].find_one({"_id": STATE_ID}, {"checkpoint": 1}) or {}
        if isinstance(state.get("checkpoint"), Timestamp):
            ages[name] = max(0.0, time.time() - state["checkpoint"].time)
    return ages


def lag_windows(registry: Any) -> dict[str, dict[str, float]]:
    """Metrics scrape hook: each followed collection's lag window (s)."""
    db = registry.feed_store.db
    windows = {}
    for document in db[HEALTH_COLLECTION].find({"_id": {"$in": _feed_collections(registry)}}):
        lag = document.get("lag_ms") or {}
        if lag.get("count"):
            windows[document["_id"]] = {key: lag[key] / 1000.0 for key in ("p50", "p99", "max")}
    return windows


def feed_figures(registry: Any) -> list[Any]:
    """Metrics scrape hook: each feed's verdict, watcher age and checkpoint
    distance (:class:`~.figures.FeedFigures`), as the health view sees them
    (without logging the verdicts' transitions)."""
    settings = registry.feed_settings
    db = registry.feed_store.db
    figures = []
    for feed in registry.feed_definitions.values():
        body = feed_health(db, feed, settings.watermark_seconds, settings.checkpoint_threshold_seconds)
        body = with_follower_failure(registry, feed, body)
        checkpoint = body["checkpoint"] or {}
        figures.append(
            FeedFigures(
                feed=feed.name,
                collection=feed.collection,
                verdict=body["verdict"],
                watcher_age=body["watcher"]["age_seconds"],
                checkpoint_behind=checkpoint.get("behind_newest_write_seconds"),
            )
        )
    return figures


def health_report(registry: Any) -> dict[str, Any]:
    """The health body of every feed of ``registry``."""
    settings = registry.feed_settings
    store = registry.feed_store
    feeds = []
    for feed in registry.feed_definitions.values():
        item = feed_health(store.db, feed, settings.watermark_seconds, settings.checkpoint_threshold_seconds)
        item = with_follower_failure(registry, feed, item)
        item["path"] = feed.route_path or f"{settings.route_prefix}/{feed.path}"
        notifier = getattr(registry, "feed_longpoll", None)
        if notifier is not None:
            # this process's waiters (feed=longpoll, SPEC E)
            item["longpoll"] = {**notifier.counters(feed.name).as_dict(), "max_waiters": notifier.max_waiters}
        registry.feed_verdicts.note(feed.name, item["verdict"], item["reason"])
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
