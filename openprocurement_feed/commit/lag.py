"""What a follower measures and publishes: the start-to-commit lag of each
change (the watermark's bet) over a window, and the figures it writes to
``feed_health`` about every second, which the health view and the metrics read."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pymongo.database import Database

from ..store.orders import PUBLIC_MODIFIED

#: The collection of the followers' published figures.
HEALTH_COLLECTION = "feed_health"


class LagWindow:
    """Start-to-commit lags (seconds) of the last ``seconds``, thread-safe."""

    def __init__(self, seconds: float = 300.0, max_samples: int = 200_000) -> None:
        self.seconds = seconds
        self.samples: deque[tuple[float, float]] = deque(maxlen=max_samples)
        self.lock = threading.Lock()

    def add(self, lag: float, at: float | None = None) -> None:
        with self.lock:
            self.samples.append((time.time() if at is None else at, lag))

    def summary(self, now: float | None = None) -> dict[str, Any]:
        """``p50``, ``p99``, ``max`` (ms), ``count`` and ``window_seconds``."""
        now = time.time() if now is None else now
        with self.lock:
            while self.samples and self.samples[0][0] < now - self.seconds:
                self.samples.popleft()
            lags = sorted(lag for _, lag in self.samples)
        result: dict[str, Any] = {
            "p50": None,
            "p99": None,
            "max": None,
            "count": len(lags),
            "window_seconds": self.seconds,
        }
        if lags:
            result.update(
                p50=round(lags[len(lags) // 2] * 1000, 1),
                p99=round(lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000, 1),
                max=round(lags[-1] * 1000, 1),
            )
        return result


def event_lag(event: Mapping[str, Any]) -> float | None:
    """An event's start-to-commit lag in seconds; None when the event lacks
    its commit time or its document's stamp."""
    wall = event.get("wallTime")
    stamp = (event.get("fullDocument") or {}).get(PUBLIC_MODIFIED)
    if not isinstance(wall, datetime) or not isinstance(stamp, (int, float)):
        return None
    if wall.tzinfo is None:
        wall = wall.replace(tzinfo=timezone.utc)
    return max(0.0, wall.timestamp() - float(stamp))


#: Seconds taken off a caught-up follower's ``seen`` time besides the
#: time from its read to its publication: the read's own trip.
SEEN_MARGIN_SECONDS = 0.1


@dataclass
class Publisher:
    """Publishes a follower's figures to ``feed_health`` at most every ``every`` s.

    A follower calls :meth:`maybe_publish` after every read of its stream,
    events or none, so its figures are a heartbeat: about one publication a
    second while it follows, quiet or not, and none while it is stuck (a
    fault, a stopped process), which the health view reads as staleness.
    ``updated`` is the database's clock at the publication (``$$NOW``), and
    ``seen`` the database's time up to which the follower had read its
    stream when that read found nothing (caught up): the publication's
    ``$$NOW`` less the time since that read and :data:`SEEN_MARGIN_SECONDS`.
    A write stamped after ``seen`` that stays unseen longer than the
    threshold tells the health view the follower is not following. (A
    process stopped between a read and its publication's arrival publishes
    a ``seen`` late by the stop once it runs again, a moment before its
    next read: a running follower, which sees those writes at once.)
    """

    db: Database[Any]
    collection: str
    role: str
    every: float = 1.0
    last: float = field(default=0.0)

    def maybe_publish(
        self,
        window: LagWindow,
        extra: Mapping[str, Any] | None = None,
        force: bool = False,
        caught_up_at: float | None = None,
    ) -> None:
        """Publish unless the last publication is younger than ``every``;
        ``caught_up_at`` is when (``time.monotonic()``) the last read that
        found nothing returned, when the stream was caught up there."""
        now = time.monotonic()
        if not force and now - self.last < self.every:
            return
        self.last = now
        stage: dict[str, Any] = {
            "role": {"$literal": self.role},
            "lag_ms": {"$literal": window.summary()},
            "updated": "$$NOW",
        }
        stage.update({name: {"$literal": value} for name, value in (extra or {}).items()})
        if caught_up_at is not None:
            behind_ms = int((max(0.0, now - caught_up_at) + SEEN_MARGIN_SECONDS) * 1000)
            stage["seen"] = {"$subtract": ["$$NOW", behind_ms]}
        self.db[HEALTH_COLLECTION].update_one({"_id": self.collection}, [{"$set": stage}], upsert=True)
