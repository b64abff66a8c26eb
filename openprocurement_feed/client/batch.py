"""What a sync hands over and reports: the :class:`Batch` of new items of
each page, in one of two directions, given to the handler, and the
:class:`SyncStats` of the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .http import RetryEvent

#: The direction of the changes since the sync started.
FORWARD = "forward"
#: The direction of history, newest first (the very first page counts as backward).
BACKWARD = "backward"


@dataclass(frozen=True)
class Batch:
    """The new items of one page, handed to the handler.

    :ivar items: the items as the feed served them, minus versions
        (``id``, ``dateModified``) already handled by this client.
    :ivar direction: ``"forward"`` (changes since the sync started) or
        ``"backward"`` (history, newest first; the very first page counts as
        backward).
    :ivar may_repeat: True when some of these items may have reached a
        handler before: the first page in each direction after resuming from
        a state file (the previous run may have handled it and stopped before
        saving), and pages after an offset restart once the de-duplication
        memory has forgotten entries. Delivery is at least once in any case:
        handlers should be idempotent (e.g. upsert by ``id``).
    :ivar objects: with ``fetch_objects``, the whole objects of ``items``
        (``GET {feed}/{id}``), in the same order, minus those gone; else None.
    :ivar missing: with ``fetch_objects``, the ids of ``items`` whose object
        answered ``404`` (deleted or hidden since the page was served).
    """

    items: list[dict[str, Any]]
    direction: str
    may_repeat: bool
    objects: list[dict[str, Any]] | None = None
    missing: tuple[str, ...] = ()


#: What a handler is: called once per page with new items; the page counts
#: as handled when it returns.
Handler = Callable[[Batch], None]


@dataclass
class SyncStats:
    """What a :class:`FeedSync` did so far (this process only).

    ``items`` were handed to the handler, ``duplicates`` filtered out;
    ``pages`` had at least one item, ``polls`` were empty forward requests;
    ``retries`` failed attempts retried, ``restarts`` offsets rejected by
    the server. With ``fetch_objects``, ``objects`` were fetched whole and
    ``objects_missing`` answered ``404``. ``caught_up_at`` is the clock time when the last request that
    found the feed caught up (backward done, forward short) was sent.
    """

    items: int = 0
    duplicates: int = 0
    pages: int = 0
    forward_pages: int = 0
    backward_pages: int = 0
    polls: int = 0
    retries: int = 0
    restarts: int = 0
    objects: int = 0
    objects_missing: int = 0
    backward_done: bool = False
    started_at: float = 0.0
    elapsed: float = 0.0
    caught_up_at: float | None = None
    stopped: bool = False
    last_retry: RetryEvent | None = field(default=None, repr=False)

    @property
    def items_per_second(self) -> float:
        """Items handled per second of :attr:`elapsed` time."""
        return self.items / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def objects_per_second(self) -> float:
        """Whole objects fetched per second of :attr:`elapsed` time."""
        return self.objects / self.elapsed if self.elapsed > 0 else 0.0
