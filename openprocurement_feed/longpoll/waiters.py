"""The waiters of a feed and what the notifier follows for them: a waiting
request's key and wake-up event, a collection's watch in one order, and the
figures the health view shows."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from bson.timestamp import Timestamp

#: What a waiter compares with the bound: a position, a stamp, or None
#: (no comparable offset: woken by every change of its collection).
Key = Timestamp | float | None
Rows = list[dict[str, Any]]


@dataclass
class FeedCounters:
    """One feed's long-poll figures in this process (the health view's)."""

    waiting: int = 0
    wakeups: int = 0
    timeouts: int = 0
    over_cap: int = 0
    answered: int = 0
    #: waiters released because their client went away
    gone: int = 0

    def as_dict(self) -> dict[str, int]:
        """The figures as the health view shows them."""
        return {
            "waiting": self.waiting,
            "wakeups": self.wakeups,
            "timeouts": self.timeouts,
            "over_cap": self.over_cap,
            "answered": self.answered,
            "gone": self.gone,
        }


class Waiter:
    """One waiting request: its offset key and the event that wakes it."""

    __slots__ = ("event", "key")

    def __init__(self, key: Key) -> None:
        self.key = key
        self.event = threading.Event()


@dataclass
class Watch:
    """What the notifier follows for one collection in one order."""

    order: str
    collection: str
    waiters: set[Waiter] = field(default_factory=set)
    #: the bound last seen: a checkpoint, or the newest visible stamp
    head: Key = None
    #: ``time.monotonic()`` when ``head`` last moved (0: never)
    changed_at: float = 0.0
    #: watermark order: the newest stamp seen, and ``(due, stamp)`` pairs
    #: waiting to become visible (``due`` on the monotonic clock)
    newest: float | None = None
    pending: list[tuple[float, float]] = field(default_factory=list)
    #: ``time.monotonic()`` of the next read of the bound
    next_read: float = 0.0
    #: commit order: the thread that follows the checkpoint
    thread: threading.Thread | None = None
    #: what follows the bound (a :class:`~.watchers.Watcher` of the order)
    watcher: Any = None


def passes(bound: Key, key: Key) -> bool:
    """True when the bound ``bound`` is after a waiter's offset ``key``."""
    if bound is None:
        return False
    if key is None:
        return True
    if isinstance(bound, Timestamp) != isinstance(key, Timestamp):
        return True
    return bool(bound > key)
