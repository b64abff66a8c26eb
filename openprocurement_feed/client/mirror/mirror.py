"""The mirror: the reference crawler with the database for a sink, and its
self-check on a schedule.

:class:`Mirror` runs a :class:`~..sync.FeedSync` (its HTTP client, retries,
backoff and long-poll) whose handler and position are a
:class:`~.sink.PageSink`; each time the crawl finds the feed caught up and
``verify_every`` seconds passed since the last check (kept in
``feed_state``, so across restarts), it runs :func:`~.check.check_feed`
before waiting for the next change. ``run(once=True)`` stops at the head
after a check.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from ..errors import FeedError, FeedUnavailable
from ..http import DEFAULT_LIMIT, FeedHTTP, RetryPolicy, split_feed_url
from ..reconcile import RECONCILE_RETRY, FeedReconciler
from ..state import SyncState
from ..sync import DEFAULT_LONGPOLL, FeedSync, SyncStats
from .check import CheckReport, check_feed
from .sink import PageSink, state_values
from .store import MirrorStore, Row, row_of

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_VERIFY_EVERY", "Mirror", "MirrorStats", "feed_name", "import_lines"]

#: Seconds between two checks when the caller does not choose.
DEFAULT_VERIFY_EVERY = 3600.0
#: Lines of an imported file written per transaction.
IMPORT_CHUNK = 1000


def feed_name(url: str) -> str:
    """The name a feed gets in the database by default: the URL's last path
    segment (``.../api/2.5/tenders`` → ``tenders``)."""
    name = urlsplit(url).path.rstrip("/").rpartition("/")[2]
    if not name:
        raise FeedError(f"the feed URL {url!r} names no feed (expected e.g. https://host/api/2.5/tenders)")
    return name


@dataclass
class MirrorStats:
    """What a mirror did in this process: the crawl's stats and its checks."""

    sync: SyncStats
    rows: int = 0
    checks: list[CheckReport] = field(default_factory=list)
    failed_checks: int = 0


class Mirror:
    """Follow the feed at ``url`` into ``store`` under ``name`` (see the module).

    :param fetch: keep whole objects (``GET URL/{id}``), not feed items.
    :param verify_every: seconds between checks (0: never).
    :param on_check: called with each check's :class:`~.check.CheckReport`.
    :param on_check_failed: called with the error of a check that could not
        run (the mirror goes on following).
    The other parameters are :class:`~..sync.FeedSync`'s.

    :raises StateMismatch: the database's feed ``name`` follows another URL.
    """

    def __init__(
        self,
        url: str,
        store: MirrorStore,
        name: str | None = None,
        *,
        fetch: bool = False,
        verify_every: float = DEFAULT_VERIFY_EVERY,
        mode: str | None = None,
        opt_fields: Iterable[str] | None = None,
        limit: int = DEFAULT_LIMIT,
        longpoll: float = DEFAULT_LONGPOLL,
        poll_interval: float = 1.0,
        retry: RetryPolicy = RetryPolicy(),
        timeout: float | tuple[float, float] = (10.0, 60.0),
        fetch_concurrency: int = 8,
        on_progress: Callable[[SyncStats], None] | None = None,
        on_check: Callable[[CheckReport], None] | None = None,
        on_check_failed: Callable[[Exception], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.store = store
        self.name = name or feed_name(url)
        self.fetch = fetch
        self.verify_every = verify_every
        self.on_check = on_check
        self.on_check_failed = on_check_failed
        self.clock = clock
        identity, _ = split_feed_url(url, mode, opt_fields)
        self.fields = identity.opt_fields
        self.sink = PageSink(store, self.name, objects=fetch)
        self.sync = FeedSync(
            url,
            self.sink,
            self.sink,
            mode=mode,
            opt_fields=opt_fields,
            limit=limit,
            longpoll=longpoll,
            poll_interval=poll_interval,
            retry=retry,
            timeout=timeout,
            fetch_objects=fetch,
            fetch_concurrency=fetch_concurrency,
            on_progress=on_progress,
            on_caught_up=self._caught_up,
        )
        check_http = FeedHTTP(url, mode=mode, retry=RECONCILE_RETRY, timeout=timeout)
        self.reconciler = FeedReconciler(url, mode=mode, http=check_http, concurrency=fetch_concurrency)
        self.stats = MirrorStats(self.sync.stats)

    def close(self) -> None:
        """Write the pages in hand, close the HTTP clients (not the store)."""
        self.sink.close()
        self.sync.close()
        self.reconciler.close()
        self.reconciler.http.close()

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the page in hand (thread-safe)."""
        self.sync.stop()

    def run(self, once: bool = False) -> MirrorStats:
        """Follow the feed until :meth:`stop` (``once``: until the head, then
        a check unless ``verify_every`` is 0).

        :raises FeedUnavailable, FeedError: the crawl could not go on.
        """
        try:
            self.sync.run(follow=not once)
        except BaseException:
            try:  # the pages before the failure are good: written, the crawl's error goes on
                self.sink.flush()
            except Exception as error:
                log.debug("a write failed too: %s", error)
            raise
        self.sink.flush()
        if once and not self.sync.stopping and self.verify_every > 0:
            self.check(fail=True)
        self.stats.rows = self.sink.rows_written
        return self.stats

    def check_due(self) -> bool:
        """Whether ``verify_every`` seconds passed since the last check
        (or there was none)."""
        if self.verify_every <= 0:
            return False
        state = self.store.load_state(self.name) or {}
        last = state.get("last_check_at")
        if not last:
            return True
        return self.clock() - datetime.fromisoformat(last).timestamp() >= self.verify_every

    def _caught_up(self) -> None:
        self.sink.flush()
        if self.check_due():
            self.check()

    def check(self, fail: bool = False) -> CheckReport | None:
        """One check now, its repair and its record; None when it could not
        run (``fail``: raise then)."""
        self.sink.flush()  # the rows the check reads are the crawl's, all written
        try:
            report = check_feed(self.reconciler, self.store, self.name, whole=self.fetch, fields=self.fields)
        except (FeedUnavailable, FeedError, ValueError) as error:
            self.stats.failed_checks += 1
            log.warning("check of %s failed: %s", self.name, error)
            if self.on_check_failed is not None:
                self.on_check_failed(error)
            if fail:
                raise
            return None
        self.stats.checks.append(report)
        if self.on_check is not None:
            self.on_check(report)
        return report


def _lines(path: str) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as stream:
        for number, text in enumerate(stream, 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except ValueError:
                if not text.endswith("\n"):
                    return  # a last line cut short by a crash: the writer ends it on reopening
                raise ValueError(f"{path}, line {number}: not JSON") from None
            if not isinstance(line, dict):
                raise ValueError(f"{path}, line {number}: not a JSON object")
            yield line


def import_lines(store: MirrorStore, name: str, path: str, url: str, objects: bool, state: SyncState) -> int:
    """Move the JSON-lines copy at ``path`` (as ``sync --out`` writes it; a
    line ``{"id": ..., "removed": true}`` takes an id out) into the feed
    ``name``: rows upserted (only where newer), in transactions of
    :data:`IMPORT_CHUNK` lines. Where the feed has no position yet, it is
    set so that the crawl starts at the feed's head without reading the
    history again (the first check repairs what the file lacks). Returns the
    lines read.

    :raises ValueError: a line that is not an object with an id and a
        ``dateModified``.
    :raises OSError: the file cannot be read.
    """
    count = 0
    rows: list[Row] = []
    removed: dict[str, int] = {}

    def flush() -> None:
        store.repair(name, rows, removed)
        rows.clear()
        removed.clear()

    for line in _lines(path):
        count += 1
        if line.get("removed") is True and isinstance(line.get("id"), str):
            rows[:] = [row for row in rows if row["id"] != line["id"]]
            removed[line["id"]] = 2**62
        else:
            try:
                rows.append(row_of(line))
            except ValueError as error:
                raise ValueError(f"{path}, line {count}: {error}") from None
            removed.pop(line["id"], None)
        if len(rows) + len(removed) >= IMPORT_CHUNK:
            flush()
    flush()
    if store.load_state(name) is None:
        fresh = dataclasses.replace(state, forward_offset=None, backward_offset=None, backward_done=True)
        store.put_state(name, state_values(fresh, objects))
    return count
