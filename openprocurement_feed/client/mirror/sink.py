"""The crawler's sink and position in the mirror's database.

A :class:`PageSink` is both the handler of :class:`~..sync.FeedSync` and its
:class:`~..state.StateKeeper`: the handler stages a page's rows, and the save
that follows every page writes them with the position after the page in one
transaction (:meth:`~.store.MirrorStore.write_page`).
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import StateMismatch
from ..state import FeedIdentity, SyncState
from ..sync import Batch
from .store import MirrorStore, Row, row_of

log = logging.getLogger(__name__)

__all__ = ["PageSink"]


class PageSink:
    """Stage each page's rows, write them with the position (see the module)."""

    def __init__(self, store: MirrorStore, feed: str, objects: bool = False) -> None:
        self.store = store
        self.feed = feed
        self.objects = objects
        self.pending: list[Row] = []
        self.rows_written = 0
        self.skipped = 0

    def __call__(self, batch: Batch) -> None:
        source = batch.objects if batch.objects is not None else batch.items
        for data in source:
            try:
                self.pending.append(row_of(data))
            except ValueError as error:
                self.skipped += 1
                log.warning("%s: an item the mirror cannot keep, skipped: %s", self.feed, error)

    def load(self, feed: FeedIdentity) -> SyncState:
        """The position kept in ``feed_state`` (a fresh one if none).

        :raises StateMismatch: the database's feed of this name was followed
            from another URL or with other parameters.
        """
        row = self.store.load_state(self.feed)
        if row is None:
            return SyncState(feed=feed)
        held = FeedIdentity(
            url=row["url"],
            mode=row["mode"] or "",
            opt_fields=tuple(name for name in (row["opt_fields"] or "").split(",") if name),
        )
        if held != feed or bool(row["objects"]) != self.objects:
            objects = " (whole objects)" if row["objects"] else ""
            raise StateMismatch(
                f"the feed {self.feed!r} of {self.store.where} follows {held.describe()}{objects}, not "
                f"{feed.describe()}{' (whole objects)' if self.objects else ''}; give another --name"
            )
        return SyncState(
            feed=feed,
            forward_offset=row["next_offset"],
            backward_offset=row["backward_offset"],
            backward_done=bool(row["backward_done"]),
            items_handled=int(row["items"] or 0),
            pages_handled=int(row["pages"] or 0),
            restarts=int(row["restarts"] or 0),
        )

    def save(self, state: SyncState) -> None:
        """The staged rows and ``state``, in one transaction."""
        rows, self.pending = self.pending, []
        self.store.write_page(self.feed, rows, state_values(state, self.objects))
        self.rows_written += len(rows)


def state_values(state: SyncState, objects: bool) -> dict[str, Any]:
    """The ``feed_state`` columns of ``state``."""
    return {
        "url": state.feed.url,
        "mode": state.feed.mode,
        "opt_fields": ",".join(state.feed.opt_fields),
        "objects": objects,
        "next_offset": state.forward_offset,
        "backward_offset": state.backward_offset,
        "backward_done": state.backward_done,
        "items": state.items_handled,
        "pages": state.pages_handled,
        "restarts": state.restarts,
    }
