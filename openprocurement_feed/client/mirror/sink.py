"""The crawler's sink and position in the mirror's database.

A :class:`PageSink` is both the handler of :class:`~..sync.FeedSync` and its
:class:`~..state.StateKeeper`: the handler stages a page's rows, and the save
that follows every page writes them with the position after the page in one
transaction (:meth:`~.store.MirrorStore.write_page`).

The writes happen behind the crawl (``behind=True``, the default): a save
hands the page's rows and the position after it to a writer thread and
returns, so the next page's request overlaps this page's transaction (the
database's work and the HTTP wait release the interpreter's lock). At most
:data:`GROUP` pages wait; a further save waits for room. Pages that wait
together are written together: their rows and the position after the last
in one transaction (a writer that falls behind, on a busy machine or a
distant PostgreSQL, commits less often). The transactions commit in the
pages' order, and each holds the rows of every page below the position it
writes, so a ``kill -9`` still loses nothing (a page handed over but not
committed is not in the position either: it is read again) and takes no row
back. A write that fails stops the writer for good: the pages after it are
never written (their position would skip the failed page's rows), and the
error is raised by the next save or :meth:`PageSink.flush`. Whoever reads
the database (a check, the end of a run) calls :meth:`PageSink.flush`
first.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from ..errors import StateMismatch
from ..state import FeedIdentity, SyncState
from ..sync import Batch
from .store import MirrorStore, PageWriter, Row, row_of

log = logging.getLogger(__name__)

__all__ = ["GROUP", "PageSink"]

#: Pages waiting for the writer at most; those waiting are written together.
GROUP = 4


class PageSink:
    """Stage each page's rows, write them with the position (see the module)."""

    def __init__(self, store: MirrorStore, feed: str, objects: bool = False, behind: bool = True) -> None:
        self.store = store
        self.feed = feed
        self.objects = objects
        self.behind = behind
        self.pending: list[Row] = []
        #: rows written (committed) so far, and the transactions that wrote them
        self.rows_written = 0
        self.commits = 0
        self.skipped = 0
        self._pages: queue.Queue[tuple[list[Row], dict[str, Any]] | None] = queue.Queue(maxsize=GROUP)
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None

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
        """The staged rows and ``state``, in one transaction: written now, or
        handed to the writer thread (``behind``; see the module).

        :raises Exception: the database's error (SQLAlchemy's, or behind the
            crawl the driver's): this write failed, or (behind) an earlier
            one did.
        """
        self._raise()
        rows, self.pending = self.pending, []
        values = state_values(state, self.objects)
        if not self.behind:
            self._write(rows, values)
            return
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_pages, name=f"mirror-writer-{self.feed}", daemon=True)
            self._writer.start()
        self._pages.put((rows, values))

    def flush(self) -> None:
        """Wait until every page handed over is committed.

        :raises Exception: the database's error: a write failed (then none
            after it was made).
        """
        if self._writer is not None:
            self._pages.join()
        self._raise()

    def close(self) -> None:
        """Write what was handed over, then end the writer thread (the
        sink writes in the caller's thread after this)."""
        writer, self._writer = self._writer, None
        self.behind = False
        if writer is not None:
            self._pages.put(None)
            writer.join()

    def _write(self, rows: list[Row], values: dict[str, Any], writer: PageWriter | None = None) -> None:
        if writer is not None:
            writer.write(self.feed, rows, values)
        else:
            self.store.write_page(self.feed, rows, values)
        self.rows_written += len(rows)
        self.commits += 1

    def _write_pages(self) -> None:
        """The writer thread: the pages in their order, those waiting
        together (up to :data:`GROUP`: their rows and the position after
        the last in one transaction); after a failure, none (see the
        module)."""
        writer = self.store.page_writer()  # a connection of its own, closed by this thread
        try:
            self._write_groups(writer)
        finally:
            writer.close()

    def _write_groups(self, writer: PageWriter) -> None:
        while True:
            group = [self._pages.get()]
            while group[-1] is not None and len(group) < GROUP:
                try:
                    group.append(self._pages.get_nowait())
                except queue.Empty:
                    break
            pages = [page for page in group if page is not None]
            try:
                if pages and self._error is None:
                    try:
                        self._write([row for rows, _ in pages for row in rows], pages[-1][1], writer)
                    except BaseException as error:  # raised in the crawl's thread
                        log.error("%s: a page could not be written: %s", self.feed, error)
                        self._error = error
            finally:
                for _ in group:
                    self._pages.task_done()
            if group[-1] is None:
                return

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error


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
